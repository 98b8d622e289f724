"""The run's compile cache: one version-stamped folder, its own hit/miss counters, what a hit
saved, and what happens with an unwritable folder or a cache of other versions.

A second process with the same cache folder, on Inductor and on torch-xla, is tested in
tests/e2e/test_compile_cache_e2e.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config

from tests.fixtures import REPO_ROOT
from workbench.compile_cache.cache import (
    STAMP_FILE,
    STATUS_IN_USE,
    STATUS_OFF,
    STATUS_STAMP_MISMATCH,
    STATUS_UNWRITABLE,
    default_cache_root,
    open_compile_cache,
    stamp_name,
)
from workbench.compile_cache.prewarm import prewarm
from workbench.errors import BadInput
from workbench.runner import RunRequest, run
from workbench.targets import dynamo_counters
from workbench.targets.caching import PrewarmCommand
from workbench.targets.cpu import CpuTarget
from workbench.targets.xla import XlaTarget
from workbench.targets.xla_cache import neuron_cache_url

REPO = REPO_ROOT


@pytest.fixture
def restore_cache_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """open_compile_cache wires the process's caches; put them back after the test."""
    for name in (
        "TORCHINDUCTOR_CACHE_DIR",
        "TORCHINDUCTOR_FX_GRAPH_CACHE",
        "TORCHINDUCTOR_AUTOGRAD_CACHE",
    ):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.setenv(name, "")
            monkeypatch.delenv(name)
    inductor, functorch = inductor_config.save_config(), functorch_config.save_config()
    yield
    inductor_config.load_config(inductor)
    functorch_config.load_config(functorch)


def test_an_unwritable_cache_folder_is_one_sentence_and_the_run_goes_on_uncached(
    tmp_path: Path, restore_cache_settings: None
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    cache = open_compile_cache(str(blocker / "cache"), CpuTarget())
    assert cache.status == STATUS_UNWRITABLE and cache.folder is None
    assert cache.sentence.count(". ") == 0 and "goes on uncached" in cache.sentence
    assert str(blocker / "cache") in cache.sentence
    assert inductor_config.fx_graph_cache is False, "uncached means Inductor's cache is off"
    assert "every graph compiles" in cache.miss_explanation()


def test_caches_of_other_versions_are_not_reused_and_the_miss_is_explained(
    tmp_path: Path, restore_cache_settings: None
) -> None:
    old = tmp_path / stamp_name({"torch": "2.12.0+cpu"})
    old.mkdir()
    (old / STAMP_FILE).write_text(json.dumps({"versions": {"torch": "2.12.0+cpu"}}))
    (old / "inductor").mkdir()
    cache = open_compile_cache(str(tmp_path), CpuTarget())
    assert cache.status == STATUS_IN_USE and Path(cache.folder or "") != old
    assert cache.other_versions == [old.name]
    assert "not reused" in cache.sentence
    assert (
        old.name in cache.miss_explanation() and "every graph compiles" in cache.miss_explanation()
    )
    # Once this version's folder has entries of its own, nothing needs explaining.
    (Path(cache.folder or "") / "inductor").mkdir()
    assert cache.miss_explanation() == ""


def test_a_folder_stamped_for_other_versions_is_never_read(
    tmp_path: Path, restore_cache_settings: None
) -> None:
    folder = tmp_path / stamp_name(CpuTarget().compiler_versions())
    folder.mkdir()
    (folder / STAMP_FILE).write_text(json.dumps({"versions": {"torch": "9.9.9"}}))
    cache = open_compile_cache(str(tmp_path), CpuTarget())
    assert cache.status == STATUS_STAMP_MISMATCH and cache.folder is None
    assert "9.9.9" in cache.sentence and "not reused" in cache.sentence


def test_an_unreadable_stamp_is_not_trusted(tmp_path: Path, restore_cache_settings: None) -> None:
    folder = tmp_path / stamp_name(CpuTarget().compiler_versions())
    folder.mkdir()
    (folder / STAMP_FILE).write_text("{half a stamp")
    cache = open_compile_cache(str(tmp_path), CpuTarget())
    assert cache.status == STATUS_STAMP_MISMATCH and "unreadable versions" in cache.sentence


def test_off_turns_the_caches_off(restore_cache_settings: None) -> None:
    cache = open_compile_cache("off", CpuTarget())
    assert cache.status == STATUS_OFF and not cache.in_use
    assert inductor_config.fx_graph_cache is False


def test_the_default_cache_lives_under_the_users_cache_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_root() == tmp_path / "workbench" / "compile-cache"


def test_compile_cache_is_the_runners_to_set(tmp_path: Path) -> None:
    request = RunRequest(only=["01"], out=tmp_path / "run", parameters={"compile_cache": "x"})
    with pytest.raises(BadInput, match="--compile-cache"):
        run(request, progress=lambda _: None)


# --- pre-warming --------------------------------------------------------------------------------

# A stand-in for neuron_parallel_compile that follows its documented contract (neuron.md 2.5):
# it runs the given command with NEURON_EXTRACT_GRAPHS_ONLY set, then compiles what it saw into
# NEURON_COMPILE_CACHE_URL. This fake records the command, the cache URL and the command's
# output instead of compiling; the real tool and neuronx-cc cannot run here.
FAKE_PARALLEL_COMPILE = """#!/bin/sh
record="$(dirname "$0")/record.txt"
echo "cache=$NEURON_COMPILE_CACHE_URL" > "$record"
echo "argv=$*" >> "$record"
NEURON_EXTRACT_GRAPHS_ONLY=1 "$@" >> "$record" 2>&1
"""


def fake_tool(folder: Path) -> Path:
    tool = folder / "neuron_parallel_compile"
    tool.write_text(FAKE_PARALLEL_COMPILE)
    tool.chmod(0o755)
    return tool


def test_prewarm_without_a_compile_tool_is_one_sentence_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert prewarm("seed-mlp", "cpu", str(tmp_path), 2, []) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no ahead-of-time compile tool" in err


def test_xla_prewarm_names_neuron_parallel_compile_when_it_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    plan = XlaTarget.prewarm_command(["python", "step"], str(tmp_path / "stamp"))
    assert isinstance(plan, str)
    assert "neuron_parallel_compile is not installed" in plan
    assert str(tmp_path / "stamp" / "neuron") in plan


def test_xla_prewarm_fills_the_runs_own_neuron_cache_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake that follows the documented contract: on PATH as neuron_parallel_compile."""
    tool = fake_tool(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    plan = XlaTarget.prewarm_command(["python", "step"], str(tmp_path / "stamp"))
    assert isinstance(plan, PrewarmCommand)
    assert plan.argv == [str(tool), "python", "step"]
    # The folder a run on a Trn1 points NEURON_COMPILE_CACHE_URL at, so its lookups hit.
    assert plan.env == {"NEURON_COMPILE_CACHE_URL": neuron_cache_url(str(tmp_path / "stamp"))}


@pytest.mark.xla
def test_xla_prewarm_runs_the_workloads_graphs_through_the_tool(tmp_path: Path) -> None:
    """torch-xla 2.9 on XLA:CPU runs the step command for real, under a fake
    neuron_parallel_compile that follows its documented contract (see FAKE_PARALLEL_COMPILE);
    the real tool and neuronx-cc are not exercised here."""
    pytest.importorskip("torch_xla")
    tools = tmp_path / "bin"
    tools.mkdir()
    fake_tool(tools)
    done = subprocess.run(
        [str(Path(sys.executable).parent / "workbench"), "prewarm", "--target", "xla"]
        + ["--compile-cache", str(tmp_path / "cache"), "--steps", "1"],
        cwd=REPO,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PJRT_DEVICE": "CPU",
            "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        },
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    record = (tools / "record.txt").read_text()
    stamped = next((tmp_path / "cache").iterdir())
    assert f"cache={stamped / 'neuron'}" in record and "torch-xla-2.9" in stamped.name
    for config in ("train/eager", "train/compiled", "infer/eager", "infer/compiled"):
        assert f"prewarm step: {config} ran 1 step(s)" in record, record[-2000:]


def _dynamo_record(duration_s: float, stored_s: float) -> SimpleNamespace:
    """A frame's record with the fields of torch._dynamo's CompilationMetrics that the ledger
    reads: a first compile whose FX graph and AOT autograd lookups all hit."""
    return SimpleNamespace(
        duration_us=int(duration_s * 1e6),
        co_name="forward",
        co_filename="/user/model.py",
        co_firstlineno=10,
        compile_id="0/0",
        is_forward=True,
        recompile_reason=None,
        num_graph_breaks=0,
        inductor_fx_local_cache_hit_count=1,
        inductor_fx_local_cache_miss_count=0,
        aotautograd_local_cache_hit_count=1,
        aotautograd_local_cache_miss_count=0,
        distributed_ephemeral_timeout_us=int(stored_s * 1e6),
        start_time_us=0,
    )


def test_a_hit_is_credited_with_what_it_saved_not_with_what_its_entry_once_cost() -> None:
    # A hit that loads in 2 s what took 14 s to compile saved 12 s.
    quick = dynamo_counters._event(_dynamo_record(2.0, 14.0), "")
    assert quick.cache == "hit" and quick.saved_seconds == pytest.approx(12.0)
    assert quick.detail == ""
    # Found in the cache, yet nearly as slow as compiling (part of its work redone): the
    # ledger says so and credits it with what it saved, not with the stored 15.9 s.
    slow = dynamo_counters._event(_dynamo_record(14.0, 15.9), "")
    assert slow.cache == "hit" and slow.saved_seconds == pytest.approx(1.9)
    assert "found in the cache, yet this compile took 14.0 s against the 15.9 s" in slow.detail
    slower = dynamo_counters._event(_dynamo_record(16.0, 15.9), "")
    assert slower.saved_seconds == 0.0
