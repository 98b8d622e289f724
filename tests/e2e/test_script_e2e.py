"""`workbench run --workload script:train.py` on the plain smoke-test script, unmodified: real
papermill, kernels and nbconvert; the script is run, watched and redirected in each kernel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT

WORKBENCH = str(Path(sys.executable).with_name("workbench"))
SCRIPTS = REPO_ROOT / "tests" / "fixtures" / "scripts"
SMOKE = SCRIPTS / "smoke_train.py"


def _workbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WORKBENCH, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def script_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """01, 02 and 03 of the smoke script (its path given relative), and 04 and 05 of the messy
    script (its --batch-size given through --script-args), each with small settings."""
    cwd = tmp_path_factory.mktemp("script")
    relative = os.path.relpath(SMOKE, cwd)
    result = _workbench(
        "run", "--workload", f"script:{relative}", "--only", "01,02,03", "--out", "smoke",
        "-p", "precisions=[fp32]", "-p", "compiled_precisions=[]",
        "-p", "steps=2", "-p", "convergence_steps=4",
        "-p", "modes=[eager]", "-p", "kinds=[train]", "-p", "steady_steps=3",
        "-p", "warmup_window=4", "-p", "warmup_max_steps=6",
        cwd=cwd,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    result = _workbench(
        "run", "--workload", f"script:{SCRIPTS / 'messy_train.py'}",
        "--script-args", "--batch-size 16", "--target", "cpu", "--only", "04,05", "--out", "messy",
        # 04: two swept sizes, one worker count, one world size, no re-measuring.
        "-p", "batch_sizes=[8,32]", "-p", "max_batch=32", "-p", "steady_steps=3",
        "-p", "dataloader_workers=[0]", "-p", "loader_steps=3", "-p", "world_sizes=[1]",
        "-p", "scaling_steps=3", "-p", "per_sample_cost_ms=0", "-p", "max_remeasures=0",
        # 05: two eager batch sizes, short windows, one stream.
        "-p", "serving_batch_sizes=[1,4]", "-p", "modes=[eager]", "-p", "window_requests=40",
        "-p", "window_seconds=0.05", "-p", "window_budget_s=2", "-p", "concurrency=[1]",
        "-p", "arrival_requests=40", "-p", "load_budget_s=1", "-p", "gap_requests=20",
        cwd=cwd,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return {"smoke": cwd / "smoke", "messy": cwd / "messy"}


@pytest.fixture(scope="module")
def script_run(script_runs: dict[str, Path]) -> Path:
    return script_runs["smoke"]


def test_the_messy_scripts_retuning_drives_its_batch_size_option(script_runs) -> None:
    record = json.loads((script_runs["messy"] / "04_retuning.json").read_text())
    assert record["workload"]["script"]["args"] == ["--batch-size", "16"]
    assert (
        "another batch size runs the script with --batch-size"
        in (record["workload"]["description"])
    )
    # Each swept size is a batch the script made when run with --batch-size at that size.
    trials = record["data"]["sweep"]["trials"]
    assert [(t["batch_size"], t["status"], t["items_per_step"]) for t in trials] == [
        (8, "ok", 8),
        (32, "ok", 32),
    ]


def test_the_messy_scripts_serving_times_the_captured_model(script_runs) -> None:
    record = json.loads((script_runs["messy"] / "05_serving.json").read_text())
    workload = record["workload"]
    # The script's Sequential(20 -> 64 -> 3) at the batch its --batch-size 16 gave.
    assert workload["parameters"] == 20 * 64 + 64 + 64 * 3 + 3
    assert workload["inputs"][0]["shape"] == [16, 20]
    points = record["data"]["points"]
    assert [(p["batch_size"], p["mode"], p["status"]) for p in points] == [
        (1, "eager", "ok"),
        (4, "eager", "ok"),
    ]


def test_the_smoke_scripts_op_list_equals_seed_mlps(script_run: Path) -> None:
    from workbench.coverage.capture import capture_training_step, is_profiler_marker
    from workbench.workload import load_workload

    record = json.loads((script_run / "02_op_coverage.json").read_text())
    ops = {op["op"]: op["calls"] for op in record["data"]["ops"]}
    reference = capture_training_step(load_workload("seed-mlp")).ops
    # 02 lists ops, not the profiler's markers (which are not ops), for any workload.
    assert ops == {n: rec.calls for n, rec in reference.items() if not is_profiler_marker(n)}
    script = record["workload"]["script"]
    assert script["stopped_by_workbook"] and script["steps_run"] == 5
    calls = {(row["call"], row["where"].rsplit("/", 1)[-1]) for row in script["device_calls"]}
    assert calls == {
        ("torch.cuda.is_available()", "smoke_train.py:9"),
        ("torch.device('cuda')", "smoke_train.py:9"),
    }


def test_the_smoke_scripts_numerics_pass_in_fp32(script_run: Path) -> None:
    data = json.loads((script_run / "03_numerics.json").read_text())["data"]
    assert data["verdict"]["status"] == "pass", data["headline"]
    assert data["runs"][0]["run"]["label"] == "cpu fp32 eager"
    # The script's own loop, run on the reference and the target from the same seed.
    loop = data["script_loop"]
    assert loop["passed"] and len(loop["reference_losses"]) == 2, loop["sentence"]
    assert loop["reference_losses"] == loop["target_losses"]  # the same CPU, the same seed


def test_the_smoke_scripts_baseline_times_its_own_loop(script_run: Path) -> None:
    data = json.loads((script_run / "01_baseline.json").read_text())["data"]
    steps = data["script_steps"]
    # Stopped once its first step, a warm-up by the rule (cap 6) and 3 steady steps were in.
    assert steps["stopped_by_workbook"] and len(steps["steady"]) == 3
    assert len(steps["step_seconds"]) == 1 + steps["warmup_steps"] + 3 <= 1 + 6 + 3
    assert steps["compile_called_at"] == ["smoke_train.py:16"]
    assert steps["first_step_excess"] == steps["first"] - steps["steady_robust_median"]
    # The script's torch.compile ran Inductor for real: its compiles fall in the timed steps.
    assert not steps["compile_not_timed"] and steps["compiles"] >= 1
    assert 0 < steps["compile_seconds"] <= sum(steps["step_seconds"])
    assert any("so its first step holds the compile" in s for s in steps["sentences"])
    # Beside the captured model's own measured phases, not instead of them.
    assert [c["kind"] + "/" + c["mode"] for c in data["configs"]] == ["train/eager"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, "there is no file"),
        ("import sys\nsys.exit(3)\n", "it exited with status 3, before any optimizer was made"),
    ],
)
def test_a_bad_script_is_one_sentence_exit_2_and_writes_nothing(tmp_path, body, message):
    if body is not None:
        (tmp_path / "train.py").write_text(body)
    result = _workbench(
        "run", "--workload", "script:train.py", "--only", "00", "--out", "run", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not (tmp_path / "run").exists()
