"""`workbench plan` as a user runs it, and the planner checked against real sharded runs:
FSDP2, DTensor TP and ZeRO-1 on gloo at 2 and 4 ranks (one torchrun launch per world size,
shared by every test here), rank by rank against one process, and a planted wrong sharding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.errors import EXIT_BAD_INPUT
from workbench.planning.sharded import FSDP2, TP, WRONG_TP, ZERO, CheckRuns, run_checks

pytestmark = pytest.mark.serial
LLAMA_8B = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs" / "llama-3-8b"


@pytest.fixture(scope="module")
def checks() -> CheckRuns:
    return run_checks((2, 4))


@pytest.mark.parametrize("kind", [FSDP2, TP, ZERO])
@pytest.mark.parametrize("world", [2, 4])
def test_sharded_run_matches_one_process_and_the_prediction(
    checks: CheckRuns, kind: str, world: int
) -> None:
    check = next(c for c in checks.checks if c.kind == kind and c.world == world)
    assert check.numerics_pass, (check, checks.logs.get(world))
    assert check.memory_within_aim, [(r.rank, r.ratio) for r in check.ranks]


def test_planted_wrong_sharding_fails_the_check(checks: CheckRuns) -> None:
    wrong = next(c for c in checks.checks if c.kind == WRONG_TP)
    assert not wrong.failure
    assert not wrong.numerics_pass
    assert wrong.gradient_error > 100 * 1e-4


def _plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", "plan", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_llama_8b_on_trn1_takes_aws_tp32_layout_as_json_and_nothing_else() -> None:
    done = _plan(
        "--workload",
        f"hf:{LLAMA_8B}",
        "--instance",
        "trn1.32xlarge",
        "--seq-len",
        "8192",
        "--global-batch",
        "1024",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)  # stdout is the plan's record and nothing else
    assert "cannot hold" in plan["headline"] and plan["fits"] and plan["complete"]
    # AWS's tp_zero1_llama3_8B_hf_pretrain.sh: TP32, kv_replicator 4, SP, selective recompute.
    assert plan["chosen"]["layout"]["tp"] == 32
    assert plan["chosen"]["layout"]["sequence_parallel"] and plan["chosen"]["layout"]["selective"]
    assert plan["published"].startswith("Agrees with running Llama-3-8B")
    assert plan["batch"]["data_parallel"] == 1 and plan["batch"]["global_batch"] == 1024
    assert "USDT" not in done.stderr and "profiler_start" not in done.stderr


def test_bad_instance_and_indivisible_global_batch_are_one_sentence() -> None:
    done = _plan("--instance", "trn1.32xlarg")
    assert done.returncode == EXIT_BAD_INPUT
    assert "did you mean trn1.32xlarge?" in done.stderr
    done = _plan("--workload", f"hf:{LLAMA_8B}", "--global-batch", "1023")
    assert done.returncode == EXIT_BAD_INPUT
    assert "not divisible by DP x micro-batch" in done.stderr
