"""The run's compile cache across processes: real Inductor on the CPU, where a second process
with the same cache folder must take every graph it compiled from the cache; the XLA-marked test
does the same on torch-xla 2.9 with PJRT_DEVICE=CPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT
from workbench.compile_cache.cache import (
    STAMP_FILE,
    STATUS_IN_USE,
    stamp_name,
)
from workbench.targets.compiling import CAUSE_BACKWARD, CAUSE_FIRST, CAUSE_NEW_XLA_GRAPH

REPO = REPO_ROOT

# One compiled training configuration (first call, a short warm-up and steady state) in a fresh
# process, with the compile cache opened the way a notebook opens it; prints what it recorded.
ONE_RUN = """
import json, sys, torch
from dataclasses import asdict
from tests.fixtures.user_workloads import classifier_workload
from workbench.baseline.measure import run_config
from workbench.baseline.records import COMPILED, TRAIN, BaselineSettings
from workbench.compile_cache.cache import open_compile_cache
from workbench.targets import get_target
from workbench.timing import WarmupRule

target = get_target(sys.argv[1])
cache = open_compile_cache(sys.argv[2], target)
workload = classifier_workload(lambda: torch.nn.Linear(8, 3), "cache-probe", batch_size=8)
settings = BaselineSettings(steady_steps=3, warmup=WarmupRule(4, 0.9, 4))
result = run_config(workload, target, TRAIN, COMPILED, settings, log=lambda _: None)
assert result.failure is None, result.failure
cache.counters = target.cache_counters()
print(json.dumps({
    "cache": asdict(cache),
    "explained": cache.miss_explanation(),
    "ledger": [asdict(e) for e in result.ledger],
}))
"""


def one_run(target: str, cache: Path, **env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", ONE_RUN, target, str(cache)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_run_with_the_same_cache_compiles_nothing_it_compiled_before(
    tmp_path: Path,
) -> None:
    cold = one_run("cpu", tmp_path)
    warm = one_run("cpu", tmp_path)
    assert cold["cache"]["status"] == STATUS_IN_USE
    assert cold["cache"]["counters"]["misses"] >= 1, "the cold run compiles into the cache"
    assert warm["cache"]["counters"]["misses"] == 0, warm["cache"]["counters"]
    assert warm["cache"]["counters"]["hits"] == cold["cache"]["counters"]["misses"]
    # What the hits saved: the compile time the cache stored with each entry, less what the
    # warm compile took.
    assert warm["cache"]["counters"]["saved_seconds"] > 0
    forward = [e for e in warm["ledger"] if e["cause"] == "first compile"]
    assert forward and all(e["cache"] == "hit" for e in forward), warm["ledger"]
    assert forward[0]["saved_seconds"] > 0
    assert [e["cache"] for e in cold["ledger"] if e["cause"] == "first compile"] == ["miss"]
    folder = Path(warm["cache"]["folder"])
    assert folder.parent == tmp_path and folder.name == stamp_name({"torch": torch_version()})
    assert json.loads((folder / STAMP_FILE).read_text())["versions"] == {"torch": torch_version()}


def torch_version() -> str:
    import torch

    return torch.__version__


@pytest.mark.xla
def test_xla_a_second_run_with_the_same_cache_is_served_or_its_misses_explained(
    tmp_path: Path,
) -> None:
    """torch-xla 2.9 on XLA:CPU: torch_xla.runtime.initialize_cache writes every graph, and
    the second process looks each one up. XLA:CPU cannot deserialize its own entries
    (xla_cpu.md: PersistentCacheDeserializeFailure), so there the second run compiles again;
    the record must say so for each graph rather than claim a warm cache. On a Trn1 the cache
    is the Neuron compile cache (NEURON_COMPILE_CACHE_URL), not exercised here."""
    pytest.importorskip("torch_xla")
    cold = one_run("xla", tmp_path, PJRT_DEVICE="CPU")
    warm = one_run("xla", tmp_path, PJRT_DEVICE="CPU")
    stored = cold["cache"]["counters"]["misses"]
    assert stored >= 1 and cold["cache"]["counters"]["hits"] == 0
    assert "xla" in cold["cache"]["versions"] or "torch-xla" in cold["cache"]["versions"]
    counters = warm["cache"]["counters"]
    failures = counters["extra"]["deserialize_failures"]
    # Every graph the cold run stored is looked up again: served, or named as unreadable.
    assert counters["hits"] + failures == stored, counters
    assert counters["misses"] == failures, "nothing compiled that was not looked up first"
    if failures:
        assert f"{failures} cached graph(s)" in warm["explained"], warm["explained"]
        assert "PersistentCacheDeserializeFailure" in warm["explained"]
    # A new process traces again: Dynamo's own first compiles (forward, then backward) of the
    # compiled configuration, and XLA graphs the cache could not serve. Nothing recompiles.
    expected = {CAUSE_FIRST, CAUSE_BACKWARD, CAUSE_NEW_XLA_GRAPH}
    assert {e["cause"] for e in warm["ledger"]} <= expected, warm["ledger"]
    assert any(e["cause"] == CAUSE_NEW_XLA_GRAPH for e in warm["ledger"])
