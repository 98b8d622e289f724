"""A run's scorecard as JUnit XML, the test report every CI system reads (the shape of Jenkins
xUnit's junit-10.xsd, which pytest's xunit2 and GitLab also follow).

One <testsuite> per run; in it one <testcase> per notebook and one per check its verdict's rule
makes (workbench.checks), whether or not the check found anything, plus one for findings outside
them. A blocker is a <failure>, an attention a <skipped> with its reason, a notebook that did not
finish an <error> and its checks <skipped> with that reason; a check that found nothing has no
child. So the workbook's gate shows as tests: red where the move is blocked, yellow (skipped)
where a person should look, and the same tests every night whatever the machine's load made the
findings.

CI systems (Jenkins, GitLab, GitHub's test reporters) follow a test from build to build by its
classname and name, so both stay the same from one night's run of a workload on a target to the
next: the classname is `workbench.<workload>.<target>.<notebook>`, never the run folder, and a
finding's test name is its sentence with the measured numbers masked (`IQR N% of the median`),
keeping the numbers of its subject, the part before its first colon (`batch 8 eager`), for a
result file written before checks were named. The numbers themselves are in the message, the
system-out and the suite's properties.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from pathlib import Path

from workbench.checks import CHECKS, OTHER
from workbench.errors import BadInput
from workbench.export.records import NotebookRecord, RunRecord
from workbench.markup import cut_at_word
from workbench.redact import tracker_text
from workbench.results import write_text_atomic
from workbench.scorecard import ATTENTION, BLOCKER, Finding, worst

DEFAULT_NAME = "junit.xml"
NAME_MAX = 200  # a finding's sentence as a test name, cut at a word
# A number standing alone (not part of a word such as Trn2 or a name such as 0.weight).
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?(?![\w.])")
# Characters a dotted classname keeps; a workload spec's dots and colons would split it into
# packages in a CI's test tree.
_CLASS_PART = re.compile(r"[^A-Za-z0-9_-]")


def _text(value: object) -> str:
    """XML 1.0 has no place for control characters, lone surrogates or U+FFFE; secrets never
    leave the run."""
    return tracker_text(str(value))


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=_text(classname), name=_text(name))


def _judged(case: ET.Element, status: str, reason: str) -> None:
    if status == BLOCKER:
        ET.SubElement(case, "failure", type="blocker", message=_text(reason)).text = _text(reason)
    elif status == ATTENTION:
        ET.SubElement(case, "skipped", type="attention", message=_text(reason))


def stable_name(sentence: str) -> str:
    """A finding's sentence as a name that holds from run to run: the numbers after its subject
    masked as N, the whole cut at a word."""
    subject, colon, rest = sentence.partition(": ")
    if not colon:
        subject, rest = "", sentence
    return cut_at_word(subject + colon + _NUMBER.sub("N", rest), NAME_MAX)


def classname(run: RunRecord, notebook: str) -> str:
    parts = ("workbench", run.workload or "workload", run.target or "target", notebook)
    # Scrubbed before the dots and colons go: a password in a workload path is then still one.
    return ".".join(_CLASS_PART.sub("_", tracker_text(part)) for part in parts)


def _notebook_cases(suite: ET.Element, run: RunRecord, notebook: NotebookRecord) -> None:
    classname_ = classname(run, notebook.notebook)
    case = _case(suite, classname_, notebook.notebook)
    if notebook.seconds is not None:
        case.set("time", f"{notebook.seconds:.3f}")
    verdict = notebook.verdict
    if notebook.status != "ok":
        message = f"{notebook.notebook} did not finish ({notebook.status})"
        ET.SubElement(case, "error", type=notebook.status, message=_text(message))
    elif verdict is not None:
        _judged(case, verdict.status, verdict.reason)
    lines = [notebook.headline or "no headline"]
    if verdict is not None:
        lines += [f"verdict: {verdict.status}: {verdict.reason}", f"rule: {verdict.rule}"]
    ET.SubElement(case, "system-out").text = _text("\n".join(lines))
    checks = CHECKS.get(notebook.notebook)
    if checks is not None:
        _check_cases(suite, f"{classname_}.checks", notebook, checks)
    elif verdict is not None:
        _finding_cases(suite, f"{classname_}.findings", verdict.findings)


def _check_cases(
    suite: ET.Element, classname_: str, notebook: NotebookRecord, checks: tuple[str, ...]
) -> None:
    """One testcase per check, in every run: failed or skipped by its findings, passed without
    any, skipped with the reason where the notebook did not judge."""
    found: dict[str, list[Finding]] = {check: [] for check in (*checks, OTHER)}
    verdict = notebook.verdict
    for finding in verdict.findings if verdict else []:
        found[finding.check if finding.check in found else OTHER].append(finding)
    for check, findings in found.items():
        case = _case(suite, classname_, check)
        if verdict is None or notebook.status != "ok":
            why = f"{notebook.notebook} did not judge ({notebook.status})"
            ET.SubElement(case, "skipped", type="not judged", message=_text(why))
            continue
        if not findings:
            continue
        reasons = "; ".join(f.reason for f in findings)
        _judged(case, worst(f.status for f in findings), reasons)
        ET.SubElement(case, "system-out").text = _text("\n".join(f.reason for f in findings))


def _finding_cases(suite: ET.Element, classname_: str, findings: list[Finding]) -> None:
    """A result file from before checks were named: one testcase per finding."""
    names: set[str] = set()
    for finding in findings:
        name = stable_name(finding.reason)
        while name in names:  # two findings in the same words are still two tests
            name += " (again)"
        names.add(name)
        case = _case(suite, classname_, name)
        _judged(case, finding.status, finding.reason)
        ET.SubElement(case, "system-out").text = _text(finding.reason)


def suite_element(run: RunRecord) -> ET.Element:
    suite = ET.Element("testsuite", name=_text(f"workbench {run.workload} on {run.target}"))
    suite.set("timestamp", _text(run.started_at))
    suite.set("hostname", socket.gethostname())
    properties = ET.SubElement(suite, "properties")
    shown = {
        "workload": run.workload,
        "target": run.target,
        "verdict": run.verdict or "none",
        "run_folder": str(run.path),
        "started_at": run.started_at,
        **{f"version.{k}": v for k, v in run.versions.items()},
    }
    for name, value in shown.items():
        ET.SubElement(properties, "property", name=_text(name), value=_text(value))
    for notebook in run.notebooks:
        _notebook_cases(suite, run, notebook)
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    return suite


def junit_xml(runs: list[RunRecord]) -> str:
    """The runs as one JUnit document: <testsuites> with a <testsuite> per run."""
    root = ET.Element("testsuites", name="workbench")
    for run in runs:
        root.append(suite_element(run))
    for key in ("tests", "failures", "errors"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in root)))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(runs: list[RunRecord], path: Path) -> Path:
    document = junit_xml(runs)
    try:
        ET.fromstring(document)  # parsed back: what is written is well-formed XML
    except ET.ParseError as exc:
        raise BadInput(
            f"the JUnit report would not be valid XML ({exc}); nothing was written."
        ) from None
    try:
        return write_text_atomic(path, document)
    except OSError as exc:
        raise BadInput(
            f"cannot write the JUnit report to {path}: {exc.strerror or exc}; choose another --out."
        ) from None
