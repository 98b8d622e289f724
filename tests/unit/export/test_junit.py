"""The JUnit report, validated against the schema Jenkins' xUnit plugin reads."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from tests.fixtures.export_runs import FINDINGS, OUTSIDE, write_export_run
from tests.fixtures.run_folders import write_run
from workbench.checks import CHECKS, OTHER, Baseline, Coverage
from workbench.export.records import read_run
from workbench.export.to_junit import junit_xml, stable_name, write_junit
from workbench.scorecard import Finding, Verdict

SCHEMA = Path(__file__).resolve().parents[2] / "fixtures" / "junit" / "junit-10.xsd"


@pytest.fixture(scope="module")
def schema():
    return xmlschema.XMLSchema(SCHEMA)


def test_a_case_per_notebook_and_per_finding_blocker_fails_attention_skips(tmp_path, schema):
    run = read_run(write_export_run(tmp_path / "run"))
    path = write_junit([run], tmp_path / "junit.xml")
    schema.validate(str(path))
    suite = ET.parse(path).getroot().find("testsuite")
    cases = {
        c.get("name"): c for c in suite.findall("testcase") if ".checks" not in c.get("classname")
    }
    assert set(cases) == {"01_baseline", "02_op_coverage", OUTSIDE, *(f.reason for f in FINDINGS)}
    assert cases[OUTSIDE].find("failure").get("message") == FINDINGS[0].reason
    assert cases[FINDINGS[0].reason].find("failure") is not None
    assert cases[FINDINGS[1].reason].find("skipped").get("message") == FINDINGS[1].reason
    assert list(cases["01_baseline"]) == [cases["01_baseline"].find("system-out")]  # a pass
    # Each known notebook's checks are tests of their own, passing where nothing was found.
    checks = [c for c in suite.findall("testcase") if c.get("classname").endswith(".checks")]
    assert len(checks) == len(Baseline.ALL) + len(Coverage.ALL) + 2  # and "other findings" each
    assert all(list(c) == [] for c in checks)
    expected_tests = 5 + len(checks)
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == (
        str(expected_tests),
        "2",
        "1",
    )


def test_attention_is_skipped_with_its_reason_and_several_runs_share_one_file(tmp_path, schema):
    runs = [
        read_run(write_run(tmp_path / name, started=f"2026-12-0{i}T00:00:00+00:00", verdict=v))
        for i, (name, v) in enumerate((("a", "attention"), ("b", "pass")), 1)
    ]
    text = junit_xml(runs)
    schema.validate(text)
    root = ET.fromstring(text)
    assert [s.get("name") for s in root] == ["workbench seed-mlp on cpu"] * 2
    folders = [s.find("properties/property[@name='run_folder']").get("value") for s in root]
    assert [Path(f).name for f in folders] == ["a", "b"]
    skipped = root.find("testsuite/testcase[@name='01_baseline']/skipped")
    assert skipped.get("message") == "01_baseline judged attention"
    assert root.get("failures") == "0"


def test_a_notebook_that_did_not_finish_is_an_error(tmp_path, schema):
    run = read_run(write_run(tmp_path / "run", started="2026-12-01T00:00:00+00:00"))
    run.notebooks[0].status = "timeout"
    text = junit_xml([run])
    schema.validate(text)
    error = ET.fromstring(text).find("testsuite/testcase[@name='01_baseline']/error")
    assert error.get("type") == "timeout"


def _names(text: str) -> set[tuple[str, str]]:
    return {(c.get("classname"), c.get("name")) for c in ET.fromstring(text).iter("testcase")}


def test_two_nights_of_one_workload_and_target_have_the_same_test_names(tmp_path, schema):
    """CI follows a test by classname and name: two runs whose folders, times, step times and
    measured numbers differ give the same set, the numbers staying in the messages."""
    nights = []
    for night, (iqr, share) in enumerate(((14.2, 83), (9.5, 7)), 1):
        findings = [
            Finding("blocker", f"batch 8 eager: p99 {iqr * 3:.1f} ms over the 20 ms SLO"),
            Finding(
                "attention", f"training step (eager): noisy steady state (IQR {iqr}% of the median)"
            ),
            Finding(
                "attention", f"timed on a loaded machine (other processes {share}% of the CPU)"
            ),
        ]
        folder = write_export_run(
            tmp_path / f"2026120{night}-run",
            started=f"2026-12-0{night}T02:00:00+00:00",
            findings=findings,
            seed=night,
        )
        nights.append(junit_xml([read_run(folder)]))
    for text in nights:
        schema.validate(text)
    assert _names(nights[0]) == _names(nights[1])
    assert ("workbench.seed-mlp.cpu.01_baseline", "01_baseline") in _names(nights[0])
    assert all("2026120" not in classname for classname, _ in _names(nights[0]))
    # the numbers are in each night's messages
    assert "IQR 14.2% of the median" in nights[0] and "IQR 9.5% of the median" in nights[1]


def test_a_finding_keeps_the_numbers_of_its_subject_and_masks_the_measured_ones():
    assert stable_name("batch 8 eager: p99 42.6 ms over the 20 ms SLO") == (
        "batch 8 eager: p99 N ms over the N ms SLO"
    )
    assert stable_name("batch 1 eager: slow") != stable_name("batch 8 eager: slow")
    assert stable_name("23 op(s) fall back on Trn2") == "N op(s) fall back on Trn2"
    assert stable_name("layer 0.weight: off by 1.5e-05") == "layer 0.weight: off by N"


def test_each_check_is_the_same_testcase_every_night_whatever_the_load_found(tmp_path, schema):
    """Two runs of identical code, one measured beside other load: its warm-up hit the cap and
    its steady state was noisy. The same tests in both; the loaded night skips two of them with
    their reasons, the quiet one passes them; a notebook that did not finish skips its checks."""
    quiet = read_run(write_run(tmp_path / "quiet", started="2026-12-01T02:00:00+00:00"))
    loaded = read_run(write_run(tmp_path / "loaded", started="2026-12-02T02:00:00+00:00"))
    found = [
        Finding("attention", "training step (eager): warm-up hit its cap without settling",
                Baseline.WARMUP),
        Finding("attention", "training step (eager): noisy steady state (IQR 41% of the median)",
                Baseline.STEADY),
        Finding("attention", "workload: its loss stands in for the script's"),
    ]  # fmt: skip
    loaded.notebooks[0].verdict = Verdict("attention", found[0].reason, "rule", found)
    texts = [junit_xml([run]) for run in (quiet, loaded)]
    for text in texts:
        schema.validate(text)
    assert _names(texts[0]) == _names(texts[1])
    classname = "workbench.seed-mlp.cpu.01_baseline.checks"
    assert {(classname, check) for check in (*CHECKS["01_baseline"], OTHER)} <= _names(texts[0])
    root = ET.fromstring(texts[1])
    warmup = root.find(f"testsuite/testcase[@name='{Baseline.WARMUP}']/skipped")
    assert warmup is not None and "warm-up hit its cap" in warmup.get("message")
    other = root.find(f"testsuite/testcase[@name='{OTHER}']/skipped")
    assert other is not None and "stands in" in other.get("message")
    quiet_root = ET.fromstring(texts[0])
    assert list(quiet_root.find(f"testsuite/testcase[@name='{Baseline.WARMUP}']")) == []
    quiet.notebooks[0].status = "timeout"
    failed = ET.fromstring(junit_xml([quiet]))
    skipped = failed.find(f"testsuite/testcase[@name='{Baseline.STEP}']/skipped")
    assert skipped is not None and "did not judge (timeout)" in skipped.get("message")
    assert _names(ET.tostring(failed, encoding="unicode")) == _names(texts[0])
