"""`workbench collect ROOT`: one row per matrix item with its latest verdict and its change
against that item's earlier runs. Failed, half-written and missing items are shown, never dropped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from workbench.compare import compare_runs
from workbench.compare.report import write_comparison
from workbench.compare.runs import UnreadableRun, load_run
from workbench.errors import BadInput
from workbench.fleet.root import read_claim
from workbench.summary import RunStatus

COMPLETE = "complete"
INCOMPLETE = "incomplete"  # folders without summary.json: still running, or killed
MISSING = "missing"  # in the matrix, but no run folder yet


@dataclass
class ItemRow:
    name: str
    workload: str
    target: str
    state: str  # COMPLETE, INCOMPLETE or MISSING
    index: int | None = None
    run: str | None = None  # the newest complete run folder, relative to ROOT
    started_at: str | None = None
    exit_code: int | None = None
    verdict: RunStatus | None = None  # the newest run's verdict (summary.json)
    reasons: list[str] = field(default_factory=list)
    headlines: list[str] = field(default_factory=list)  # "01_baseline: ..." per notebook
    runs: int = 0
    regressions: int = 0
    inconclusive: int = 0  # timings beyond their gate that no measured noise level could judge
    change: str = ""  # the comparison headline, or why there is none
    comparison: str | None = None  # compare.html, relative to ROOT
    incomplete: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)  # why a run with a summary was skipped


def _item_row(root: Path, folder: Path, name: str, workload: str, target: str) -> ItemRow:
    row = ItemRow(name, workload, target, MISSING)
    if not folder.is_dir():
        return row
    runs, broken = [], []
    for child in sorted(p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()):
        try:
            runs.append(load_run(child))
        except UnreadableRun as exc:
            broken.append(child.name)
            # A folder without summary.json is still running or was killed; one with a summary
            # that cannot be read was damaged, and the reason names the file and field.
            if (child / "summary.json").exists():
                row.damaged.append(str(exc))
    row.incomplete = broken
    if not runs:
        row.state = INCOMPLETE if broken else MISSING
        return row
    runs.sort(key=lambda r: (r.started_at, r.label))
    newest = runs[-1]
    verdict = newest.summary.verdict
    row.state = COMPLETE
    row.workload = newest.workload or workload
    row.target = newest.target or target
    row.run = os.path.relpath(newest.path, root)
    row.started_at = newest.started_at
    row.exit_code = newest.summary.exit_code
    row.verdict = verdict.status if verdict else None
    row.reasons = list(verdict.reasons) if verdict else []
    row.headlines = [
        f"{entry.notebook}: {entry.headline}"
        for entry in newest.summary.notebooks
        if entry.headline
    ]
    row.runs = len(runs)
    if len(runs) < 2:
        row.change = "first run: nothing to compare with yet"
        return row
    try:
        comparison = compare_runs([r.path for r in runs])
    except BadInput as exc:
        row.change = f"not compared: {exc}"
        return row
    out = write_comparison(comparison, newest.path / "compare").parent
    row.regressions = len(comparison.regressions)
    row.inconclusive = len(comparison.inconclusive)
    row.change = comparison.headline()
    row.comparison = os.path.relpath(out / "compare.html", root)
    return row


def collect(root: str | Path) -> list[ItemRow]:
    """Every item of the matrix that claimed ROOT, and any other item folder found there."""
    root = Path(root)
    if not root.is_dir():
        raise BadInput(f"{root} is not a folder of matrix runs (no such folder).")
    claim = read_claim(root)
    rows: list[ItemRow] = []
    seen = set()
    for item in claim.get("items", []):
        row = _item_row(root, root / item["name"], item["name"], item["workload"], item["target"])
        row.index = item.get("index")
        rows.append(row)
        seen.add(item["name"])
    # A symlinked folder may lead out of ROOT: only real folders inside it are items.
    extra = (p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and p.name not in seen)
    for folder in sorted(extra):
        rows.append(_item_row(root, folder, folder.name, "", ""))
    if not rows:
        raise BadInput(f"{root} holds no matrix items: run `workbench run --matrix` into it first.")
    return rows
