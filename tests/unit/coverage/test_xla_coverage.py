"""Measured coverage on the real XLA target: torch-xla 2.9 on XLA:CPU, as `make xla-venv` builds.

Runs only where torch_xla imports (`PJRT_DEVICE=CPU .venv-xla/bin/python -m pytest -m xla`); it
skips anywhere else. torch-xla decides between lowering and CPU fallback the same way on
XLA:CPU as on a Trn1 (reference/xla_cpu.md 2.3), so these are real fallback measurements.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT

os.environ.setdefault("PJRT_DEVICE", "CPU")
pytest.importorskip("torch_xla")

import torch  # noqa: E402
from torch import nn  # noqa: E402

from tests.fixtures.user_workloads import LinearHead, classifier_workload  # noqa: E402
from workbench.coverage.analyze import analyze_coverage  # noqa: E402
from workbench.coverage.support import FALLS_BACK  # noqa: E402
from workbench.targets.detect import FLAVOUR_XLA  # noqa: E402
from workbench.targets.xla import XlaTarget  # noqa: E402
from workbench.workload import Workload  # noqa: E402

pytestmark = pytest.mark.xla

REPO = REPO_ROOT
THIS_FILE = str(Path(__file__).resolve())


class Head(LinearHead):
    """Linear(8, 4): the classes _workload's labels have."""

    classes = 4


class Histogram(Head):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        counts = torch.histc(y.detach(), bins=4)  # MARK-histc
        return y + counts.sum() * 0


class Positive(Head):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        kept = torch.nonzero(y > 0)  # MARK-nonzero
        return y + kept.sum() * 0


def _line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if text.endswith(f"# {marker}"))


def _workload(model: type[nn.Module]) -> Workload:
    return classifier_workload(model, model.__name__, classes=4, batch_size=8)


@pytest.mark.parametrize(
    ("model", "op", "marker"),
    [(Histogram, "aten::histc", "MARK-histc"), (Positive, "aten::nonzero", "MARK-nonzero")],
)
def test_fallback_is_measured_with_the_user_line(model: type, op: str, marker: str) -> None:
    report = analyze_coverage(_workload(model), XlaTarget())
    assert report.measurement is not None and report.measurement.flavour == FLAVOUR_XLA
    assert report.measurement.fallbacks[op] >= 1
    row = next(r for r in report.rows if r.op == op)
    result = row.verdicts[FLAVOUR_XLA]
    assert (result.status, result.measured) == (FALLS_BACK, True)
    assert result.evidence[0].startswith("measured on xla: fell back to the CPU")
    assert (row.first_site.path, row.first_site.line) == (THIS_FILE, _line_of(marker))
    assert row.first_site.in_user_code
    blockers = report.blockers(FLAVOUR_XLA)
    assert blockers[0].op == op
    # The linear layer ran on the device without a fallback.
    addmm = next(r for r in report.rows if r.op == "aten::addmm").verdicts[FLAVOUR_XLA]
    assert addmm.measured and addmm.status != FALLS_BACK


def test_committed_table_matches_this_torch_xla() -> None:
    """tools/xla_support_table.py, run here, reproduces the committed table (dates aside).

    It runs in a fresh interpreter: ops that other tests register in this process (custom ops)
    are not torch-xla's and must not enter the table.
    """
    tool_path = str(REPO / "tools" / "xla_support_table.py")
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('t', {tool_path!r})\n"
        "tool = importlib.util.module_from_spec(spec); spec.loader.exec_module(tool)\n"
        "json.dump(tool.build_table(), sys.stdout)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    fresh = json.loads(done.stdout)
    committed = json.loads(
        (
            REPO / "workbench" / "data" / f"xla_support_torch_xla_{fresh['torch_xla_version']}.json"
        ).read_text(encoding="utf-8")
    )
    for key in ("torch_xla_version", "torch_version", "counts", "ops", "autograd_overrides"):
        assert fresh[key] == committed[key], key
