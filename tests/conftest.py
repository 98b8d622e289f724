"""Shared test setup: tests import fixture workloads as `tests.fixtures...` from the repo root."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture
def item_warning_again():
    """Dynamo warns about a graph break at Tensor.item() once per process (the warning function
    is functools-cached); clear it so a test sees the warning whatever ran before it."""
    from torch._dynamo.variables.tensor import TensorVariable

    TensorVariable._warn_capture_scalar_outputs.cache_clear()


@pytest.fixture(autouse=True)
def no_imported_op_tables(monkeypatch, tmp_path_factory):
    """Verdicts never read the TorchNeuron op tables a developer imported into their own cache:
    every test starts with an op-tables folder that does not exist (a test sets its own)."""
    monkeypatch.setenv("WORKBENCH_OP_TABLES", str(tmp_path_factory.getbasetemp() / "no-op-tables"))
