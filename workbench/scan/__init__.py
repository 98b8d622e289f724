"""Static scan of a workload's sources for CUDA-specific code, with the Neuron replacement.

Python files (and notebooks' code cells) are read as syntax trees, so a "cuda" in a comment or
a docstring is never a finding; names are resolved through the file's imports (`from torch.cuda
import amp`, `import torch_xla.core.xla_model as xm`). Files that are not Python (shell scripts,
requirements, YAML, Dockerfiles) and Python files that do not parse are read line by line with
regular expressions, comment lines skipped. CUDA sources (.cu, .cuh) are findings by existing.

Each finding names the file and line, the pattern, its severity for each Neuron flavour, and the
replacement the Neuron documentation gives for that flavour (reference neuron.md section 5):
- blocking: fails, or silently keeps the work off the NeuronCores;
- change: runs, but costs a recompile, a fallback, a sync or different numerics;
- info: no effect on Neuron; delete or tidy.

`workbench scan PATH... [--flavour native|xla]` prints the findings and exits 0, or 4 when a
blocking finding exists for the chosen flavours (2: bad input, nothing scanned).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from workbench.errors import BadInput
from workbench.scan.python import python_hits
from workbench.scan.report import ScanFinding, ScanReport
from workbench.scan.rules import FLAVOURS, RULES, SEVERITIES, severity_for
from workbench.scan.sources import workload_source_files
from workbench.targets.detect import FLAVOUR_NATIVE, FLAVOUR_XLA
from workbench.workload import Workload

_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "venv", "build", "dist"}


_TEXT_FILES = re.compile(
    r"(\.(sh|bash|ya?ml|toml|cfg|ini)|^requirements.*\.txt|^Dockerfile.*|^Makefile)$"
)


_CUDA_SOURCES = (".cu", ".cuh")


_LINE_RULES = (
    (re.compile(r"\bCUDA_VISIBLE_DEVICES\b|nvidia-smi|\bpynvml\b|nvidia-ml-py"), "nvidia-tools"),
    (re.compile(r"\b(flash[-_]attn|xformers|apex|bitsandbytes)\b"), "cuda-library"),
    (re.compile(r"\btriton\b"), "triton"),
    (re.compile(r"\bnccl\b", re.I), "nccl"),
    (re.compile(r"\bXLA_(USE|DOWNCAST)_BF16\b"), "legacy-xla-bf16"),
    (re.compile(r"\btorch[-_]xla\b"), "legacy-xla"),
)


# For Python that does not parse: the call patterns, on lines that are not comments.
_PYTHON_LINE_RULES = (
    (re.compile(r"\.cuda\("), "cuda-call"),
    (re.compile(r"""["']cuda(:\d+)?["']"""), "cuda-device"),
    (re.compile(r"\btorch\.cuda\.\w+"), "cuda-api"),
    *_LINE_RULES,
)


def _line_hits(text: str, rules: tuple) -> list[tuple[int, str]]:
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith(("#", "//")):
            continue
        for pattern, rule in rules:
            if pattern.search(line):
                hits.append((number, rule))
    return hits


def _notebook_cells(path: Path) -> Iterator[tuple[str, str]]:
    """(label, source) per code cell; IPython magics and shell lines become blank lines, so
    line numbers still match the cell."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for index, cell in enumerate(notebook.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in text.split("\n")]
        yield f"{path} cell {index}", "\n".join(lines)


def _files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if any(p.startswith(".") or p in _SKIP_DIRS for p in parts[:-1]):
            continue
        if path.is_file():
            yield path


def _findings(
    label: str, text: str, hits: list[tuple[int, str]], flavours: list[str], how: str
) -> list[ScanFinding]:
    lines = text.splitlines()
    found, seen = [], set()
    for line, rule_id in hits:
        rule = RULES[rule_id]
        severity = severity_for(rule, flavours)
        if severity is None or (line, rule_id) in seen:
            continue
        seen.add((line, rule_id))
        found.append(
            ScanFinding(
                path=label,
                line=line,
                rule=rule_id,
                pattern=rule.pattern,
                code=lines[line - 1].strip() if 0 < line <= len(lines) else "",
                severity=severity,
                native_severity=rule.native_severity if FLAVOUR_NATIVE in flavours else None,
                xla_severity=rule.xla_severity if FLAVOUR_XLA in flavours else None,
                native=rule.native if FLAVOUR_NATIVE in flavours else "",
                xla=rule.xla if FLAVOUR_XLA in flavours else "",
                how=how,
            )
        )
    return found


def _scan_file(path: Path, report: ScanReport) -> None:
    name = path.name
    label = str(path)
    flavours = report.flavours
    if name.endswith(_CUDA_SOURCES):
        report.files += 1
        text = f"{name}: CUDA source"
        report.findings += _findings(label, text, [(1, "cuda-extension")], flavours, "file")
        return
    is_python = name.endswith(".py")
    if not (is_python or name.endswith(".ipynb") or _TEXT_FILES.search(name)):
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        report.unreadable.append(f"{label}: {exc}")
        return
    report.files += 1
    if name.endswith(".ipynb"):
        try:
            cells = list(_notebook_cells(path))
        except (ValueError, AttributeError) as exc:
            report.unreadable.append(f"{label}: not a notebook ({exc})")
            return
        for cell_label, source in cells:
            try:
                report.findings += _findings(
                    cell_label, source, python_hits(source), flavours, "ast"
                )
            except SyntaxError:
                hits = _line_hits(source, _PYTHON_LINE_RULES)
                report.findings += _findings(cell_label, source, hits, flavours, "regex")
        return
    if is_python:
        try:
            report.findings += _findings(label, text, python_hits(text), flavours, "ast")
        except SyntaxError:
            hits = _line_hits(text, _PYTHON_LINE_RULES)
            report.findings += _findings(label, text, hits, flavours, "regex")
        return
    report.findings += _findings(label, text, _line_hits(text, _LINE_RULES), flavours, "regex")


def scan_paths(paths: Iterable[str | Path], flavours: Iterable[str] = FLAVOURS) -> ScanReport:
    """Scan files and folders (recursively; hidden folders, virtualenvs and build output
    skipped) for CUDA-specific code, judged for the given Neuron flavours."""
    flavours = list(flavours)
    unknown = [f for f in flavours if f not in FLAVOURS]
    if unknown or not flavours:
        raise BadInput(f"Neuron flavours {flavours!r}: choose from {', '.join(FLAVOURS)}.")
    roots = [Path(p) for p in paths]
    missing = [str(p) for p in roots if not p.exists()]
    if missing:
        raise BadInput(f"Scan path {missing[0]!r} does not exist.")
    report = ScanReport([str(p) for p in roots], flavours)
    for root in roots:
        for path in _files(root):
            _scan_file(path, report)
    report.findings.sort(key=lambda f: (SEVERITIES.index(f.severity), f.path, f.line))
    return report


def workload_sources(workload: Workload) -> list[Path]:
    """The workload's own source files (its factory's, its model classes', its batch, loss and
    optimizer code's), never installed libraries or workbench's machinery."""
    return [source.path for source in workload_source_files(workload)]


def scan_workload(
    workload: Workload, flavours: Iterable[str] = FLAVOURS, extra_paths: Iterable[str | Path] = ()
) -> ScanReport:
    """Scan the workload's own code, plus any files or folders the user names (scanned whole).

    In the workload's files, definitions the workload never reaches (another model in the same
    module) are left out, and the report lists them.
    """
    sources = workload_source_files(workload)
    extra = [Path(p) for p in extra_paths]
    report = scan_paths([*(s.path for s in sources), *extra], flavours)
    named = {p.resolve() for p in extra}
    scoped = {str(s.path): s for s in sources if s.left_out and s.path not in named}
    report.findings = [
        f for f in report.findings if f.path not in scoped or scoped[f.path].keeps(f.line)
    ]
    report.left_out = [
        f"{path}: {', '.join(sorted(source.left_out))}" for path, source in scoped.items()
    ]
    return report
