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
SMOKE = REPO_ROOT / "tests" / "fixtures" / "scripts" / "smoke_train.py"


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
def script_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """01, 02 and 03 of the smoke script, small steps; the script path given relative."""
    cwd = tmp_path_factory.mktemp("script")
    out = cwd / "run"
    relative = os.path.relpath(SMOKE, cwd)
    result = _workbench(
        "run", "--workload", f"script:{relative}", "--only", "01,02,03", "--out", str(out),
        "-p", "precisions=[fp32]", "-p", "compiled_precisions=[]",
        "-p", "steps=2", "-p", "convergence_steps=4",
        "-p", "modes=[eager]", "-p", "kinds=[train]", "-p", "steady_steps=3",
        "-p", "warmup_window=4", "-p", "warmup_max_steps=6",
        cwd=cwd,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return out


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
