"""`workbench run` end to end: real papermill, real kernels, real nbconvert, as a user runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT
from workbench.report import network_references

pytestmark = pytest.mark.e2e

REPO = REPO_ROOT
WORKBENCH = str(Path(sys.executable).parent / "workbench")
PLANTED = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzPLANTED",
    "HF_TOKEN": "hf_PlantedTokenValue1234567890abcdefXYZ",
    "PIP_INDEX_URL": "https://builder:s3cr3tPassw0rdPlanted@pypi.internal.example/simple",
    "NEURON_CC_FLAGS": "--auto-cast=none",
}
SECRET_STRINGS = [
    PLANTED["AWS_SECRET_ACCESS_KEY"],
    PLANTED["HF_TOKEN"],
    "s3cr3tPassw0rdPlanted",
]


def workbench(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [WORKBENCH, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=600
    )


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


@pytest.fixture(scope="module")
def env_run(tmp_path_factory):
    """One real run of notebook 00 with secrets planted in the environment."""
    cwd = tmp_path_factory.mktemp("user")
    result = workbench("run", "--only", "00", cwd=cwd, env=PLANTED)
    return cwd, result


def only_run_folder(cwd: Path) -> Path:
    """The one run folder an --only run left under reports/ (it does not move `latest`)."""
    (run_dir,) = [p for p in (cwd / "reports").iterdir() if not p.is_symlink()]
    return run_dir


def test_run_00_writes_report_json_index_and_leaves_latest(env_run):
    cwd, result = env_run
    assert result.returncode == 0, result.stderr
    # Only a run of every notebook moves `latest`: an --only run says so and leaves it.
    assert not (cwd / "reports" / "latest").exists()
    assert "reports/latest was not moved" in result.stderr
    run_dir = only_run_folder(cwd)
    for name in (
        "00_environment.ipynb",
        "00_environment.html",
        "00_environment.json",
        "index.html",
        "summary.json",
        "run.log",
    ):
        assert (run_dir / name).is_file(), name
    record = json.loads((run_dir / "00_environment.json").read_text())
    assert record["schema_version"] == 1 and record["notebook"] == "00_environment"
    assert record["target"]["name"] == "cpu"
    assert "not a Trainium validation" in record["validation"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 0 and summary["notebooks"][0]["status"] == "ok"
    # The scorecard: 00's verdict in its result, summary and index, the run's verdict on top.
    assert record["data"]["verdict"]["status"] == "pass" and record["data"]["verdict"]["rule"]
    assert summary["notebooks"][0]["verdict"]["status"] == "pass"
    # The other notebooks did not run: the run has no migration verdict, only what 00 found.
    verdict = summary["verdict"]
    assert verdict["status"] == "not run" and verdict["of_the_notebooks_run"] == "pass"
    assert verdict["not_run"] == [
        "01_baseline", "02_op_coverage", "03_numerics", "04_retuning", "05_serving"
    ]  # fmt: skip
    index = (run_dir / "index.html").read_text()
    assert index.index('class="verdict verdict-not-run"') < index.index("<table>")
    # One progress line per notebook on the console, each line the notebook prints indented
    # under it, and every cell's output in the run log.
    assert "[1/1] 00_environment ok in" in result.stderr
    assert "    result saved: " in result.stderr
    assert "Executing" in (run_dir / "run.log").read_text() or (run_dir / "run.log").stat().st_size


def test_reports_are_offline_and_say_what_was_validated(env_run):
    cwd, _ = env_run
    run_dir = only_run_folder(cwd)
    for page in ("00_environment.html", "index.html"):
        text = (run_dir / page).read_text()
        assert network_references(text) == [], page
        assert "<script" not in text.lower()
        assert "this is not a Trainium validation" in text


def test_planted_secrets_reach_no_file_of_the_run(env_run):
    cwd, result = env_run
    checked = files_under(cwd)
    assert len(checked) >= 6
    for path in checked:
        data = path.read_bytes().decode("utf-8", errors="replace")
        for secret in SECRET_STRINGS:
            assert secret not in data, f"{secret[:6]}... leaked into {path.name}"
    for secret in SECRET_STRINGS:
        assert secret not in result.stdout + result.stderr
    # The behaviour-changing variable itself is kept: it is not a secret.
    record = (only_run_folder(cwd) / "00_environment.json").read_text()
    assert "--auto-cast=none" in record


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in files_under(path)}


def test_failed_notebook_keeps_report_and_latest(env_run):
    cwd, _ = env_run
    before = only_run_folder(cwd)
    result = workbench(
        "run", "--only", "00", "-p", "pinned_manifest=missing-manifest.json", cwd=cwd
    )
    assert result.returncode == 1
    assert not (cwd / "reports" / "latest").exists(), "a failed run never moves latest"
    failed_dir = max(
        (p for p in (cwd / "reports").iterdir() if not p.is_symlink()),
        key=lambda p: p.stat().st_mtime,
    )
    assert failed_dir != before
    summary = json.loads((failed_dir / "summary.json").read_text())
    assert summary["notebooks"][0]["status"] == "failed"
    assert "missing-manifest.json" in summary["notebooks"][0]["error"]
    assert summary["notebooks"][0]["failed_cell"] is not None
    index = (failed_dir / "index.html").read_text()
    assert "failed" in index and "missing-manifest.json" in index
    html = (failed_dir / "00_environment.html").read_text()
    assert "missing-manifest.json" in html, "the error is visible in the report"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "no_such_pkg.mod:make"], "Workload 'no_such_pkg.mod:make': module"),
        (["-p", "warmup_stepz=3"], "Unknown parameter 'warmup_stepz'"),
        (
            ["-p", "fail_on_drift=perhaps"],
            "Parameter 'fail_on_drift' (00_environment) expects bool",
        ),
        (["--target", "tpu"], "Unknown target 'tpu'"),
        (["--target", "neuron"], "Target 'neuron' is not available here"),
        (["--only", "42"], "--only '42' names no notebook"),
        (["-p", "target=cpu"], "set by the runner"),
        (["--config", "missing.yaml"], "Config missing.yaml cannot be read"),
    ],
)
def test_bad_input_is_one_sentence_exit_2_and_writes_nothing(tmp_path, args, message):
    result = workbench("run", "--only", "00", *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("workbench: error: ")
    assert message in lines[0]
    assert list(tmp_path.iterdir()) == [], "nothing is written on bad input"


def test_bad_config_file(tmp_path):
    (tmp_path / "run.yaml").write_text("workload: seed-mlp\nbatch: [1, 2\n")
    result = workbench("run", "--config", "run.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "is not valid YAML" in result.stderr
    (tmp_path / "run.yaml").write_text("workload: seed-mlp\ncolour: blue\n")
    result = workbench("run", "--config", "run.yaml", cwd=tmp_path)
    assert result.returncode == 2 and "unknown key 'colour'" in result.stderr


def test_unwritable_or_occupied_output_loses_nothing(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me")
    result = workbench("run", "--only", "00", "--out", "a-file/run", cwd=tmp_path)
    assert result.returncode == 2 and "cannot be used" in result.stderr
    assert blocker.read_text() == "keep me"

    earlier = tmp_path / "earlier-run"
    earlier.mkdir()
    (earlier / "index.html").write_text("earlier report")
    before = _snapshot(earlier)
    result = workbench("run", "--only", "00", "--out", "earlier-run", cwd=tmp_path)
    assert result.returncode == 2 and "already holds files" in result.stderr
    assert _snapshot(earlier) == before


def test_a_failing_notebook_does_not_stop_the_next_one(tmp_path):
    result = workbench(
        "run", "--only", "00,01", "--out", "run",
        "-p", "pinned_manifest=missing.json", "-p", "steady_steps=3", "-p", "modes=eager",
        "-p", "warmup_max_steps=8", "-p", "warmup_window=4",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [n["status"] for n in summary["notebooks"]] == ["failed", "ok"]
    assert (tmp_path / "run" / "01_baseline.json").is_file()


def test_a_killed_kernel_is_reported_and_the_run_goes_on(tmp_path):
    result = workbench(
        "run", "--only", "01,00", "--out", "run",
        "--workload", "tests.fixtures.user_workloads:kills_kernel",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    statuses = {n["notebook"]: n for n in summary["notebooks"]}
    assert statuses["01_baseline"]["status"] == "kernel-died"
    assert "kernel died" in statuses["01_baseline"]["error"]
    assert statuses["00_environment"]["status"] == "ok"
    # A notebook that died judged nothing: of the notebooks run, that blocks; the run as a
    # whole (02-04 not run) has no migration verdict.
    assert summary["verdict"]["status"] == "not run"
    assert summary["verdict"]["of_the_notebooks_run"] == "blocker"
    assert "01_baseline: did not finish (kernel-died)" in summary["verdict"]["reasons"]
    assert (tmp_path / "run" / "01_baseline.html").is_file(), "the partial report is kept"
    cell = statuses["01_baseline"]["failed_cell"]
    assert cell is not None, "the index names the cell the kernel died in"
    assert f"cell {cell}: the kernel died" in (tmp_path / "run" / "index.html").read_text()


def test_a_cell_timeout_names_the_cell(tmp_path):
    result = workbench(
        "run", "--only", "01", "--out", "run", "--cell-timeout", "5",
        "--workload", "tests.fixtures.user_workloads:sleeps_in_kernel",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    outcome = json.loads((tmp_path / "run" / "summary.json").read_text())["notebooks"][0]
    assert outcome["status"] == "timeout" and outcome["failed_cell"] is not None
    index = (tmp_path / "run" / "index.html").read_text()
    assert f"cell {outcome['failed_cell']}: a cell ran past the 5 s cell timeout" in index


SECRETS_BY_CONTENT = {
    "NEURON_CC_FLAGS": "--auto-cast=none --password hunter2planted",
    "PIP_EXTRA_INDEX_URL": "https://pypi.example/simple?token=tokplanted123&x=1",
    "TORCH_HOME": "/home/bob:pw4planted@cache",
}
PARAMETER_SECRET = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9eplanted"


def test_secrets_by_content_and_in_parameters_reach_no_file(tmp_path):
    result = workbench(
        "run", "--only", "00", "-p", f"pinned_manifest=/tmp/{PARAMETER_SECRET}.json",
        cwd=tmp_path, env=SECRETS_BY_CONTENT,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # the manifest does not exist
    checked = files_under(tmp_path)
    assert len(checked) >= 5  # notebook, report, index, summary, log (it failed before its .json)
    for secret in ("hunter2planted", "tokplanted123", "pw4planted", PARAMETER_SECRET):
        for path in checked:
            assert secret not in path.read_bytes().decode("utf-8", "replace"), (secret, path.name)
        assert secret not in result.stdout + result.stderr
    report = next(tmp_path.rglob("00_environment.html")).read_text()
    assert "--password [redacted]" in report, "the flag stays, its value goes"


def test_secrets_a_workload_prints_or_raises_reach_no_file(tmp_path):
    """The eleven formats credentials are pasted in, printed in the kernel and two raised from
    the model: scrubbed from the notebook, report, log, summary, index and console."""
    from tests.fixtures.user_workloads import SECRET_LINES

    result = workbench(
        "run", "--only", "01", "--out", "run",
        "--workload", "tests.fixtures.user_workloads:prints_and_raises_secrets",
        "-p", "kinds=train", "-p", "modes=eager", "-p", "steady_steps=3",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    written = files_under(tmp_path / "run")
    names = {p.name for p in written}
    assert {"01_baseline.ipynb", "01_baseline.html", "summary.json", "index.html"} <= names
    assert "run.log" in names
    secrets = ["wJalrPlantedAwsSecret", "plantedJsonKey123", "plantedYamlPass", "plantedShellPass"]
    secrets += ["plantedDictToken", "plantedHeaderToken", "plantedNetrcPass", "cGxhbnRlZERvY2tl"]
    secrets += ["plantedAzureKey", "plantedCurlPass", "plantedNpmToken"]
    assert len(secrets) == len(SECRET_LINES)
    for path in written:
        text = path.read_bytes().decode("utf-8", "replace")
        for secret in secrets:
            assert secret not in text, (secret, path.name)
    for secret in secrets:
        assert secret not in result.stdout + result.stderr
    summary = (tmp_path / "run" / "summary.json").read_text()
    assert "PGPASSWORD=" in summary and "curl -u bob:" in summary, "the raise is shown"


def _mount_small_tmpfs(path: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)])
    return mounted.returncode == 0


def test_a_disk_that_fills_mid_run_loses_nothing_already_written(tmp_path):
    disk = tmp_path / "small-disk"
    # Room for notebook 00 (about 50 KB of files) but not for 01's notebook, figures and report.
    if not _mount_small_tmpfs(disk, "384k"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        result = workbench(
            "run", "--only", "00,01", "-p", "steady_steps=3", "-p", "modes=eager",
            "-p", "warmup_max_steps=8", "-p", "warmup_window=4", cwd=disk,
        )  # fmt: skip
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr and "Logging error" not in result.stderr
        assert not (disk / "reports" / "latest").exists(), "latest never moves to a broken run"
        run_dir = next((disk / "reports").iterdir())
        for path in [*run_dir.glob("*.ipynb"), *run_dir.glob("*.json")]:
            json.loads(path.read_text())  # nothing half-written under a final name
        summary = json.loads((run_dir / "summary.json").read_text())
        statuses = {n["notebook"]: n for n in summary["notebooks"]}
        assert statuses["00_environment"]["status"] == "ok"
        broken = statuses["01_baseline"]
        assert broken["status"] != "ok" and "No space left on device" in broken["error"]
        assert "No space left on device" in (run_dir / "index.html").read_text()
    finally:
        subprocess.run(["umount", str(disk)])


def test_an_index_that_cannot_be_written_is_said_in_one_sentence(tmp_path, monkeypatch):
    """An injected write failure, in-process: summary.json still records the run."""
    import errno

    from workbench import runner

    def full_disk(out, summary):
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "index.html"))

    monkeypatch.setattr(runner, "write_index", full_disk)
    monkeypatch.chdir(tmp_path)
    lines = []
    code = runner.run(
        runner.RunRequest(only=["00"], reports_root=tmp_path / "reports"), lines.append
    )
    assert code == 1
    assert lines[-1].startswith("workbench: error: index.html could not be written")
    assert "reports/latest was not moved" in lines[-1]
    assert not (tmp_path / "reports" / "latest").exists()
    run_dir = next((tmp_path / "reports").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 1 and "index.html" in summary["unwritten"]
    assert summary["notebooks"][0]["status"] == "ok"


def test_a_sigkilled_command_line_leaves_no_raw_parameter_on_disk(tmp_path):
    """papermill's copy of the notebook, with the raw `-p` values, is written only when the
    notebook ends, owner-only, and scrubbed away at once: killing the command line mid-cell
    (nothing of it can run then) leaves no file holding the parameter's secret."""
    import signal
    import time

    secret = "hunter2killed"
    process = subprocess.Popen(
        [
            WORKBENCH, "run", "--only", "01", "--out", "run",
            "--workload", "tests.fixtures.user_workloads:sleeps_in_kernel",
            "-p", f"input_dtype=https://bob:{secret}@cache.example",
        ],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    log = tmp_path / "run" / "run.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and "Executing notebook with kernel" not in (
        log.read_text() if log.exists() else ""
    ):
        time.sleep(0.2)
    time.sleep(3)  # inside the workload's sleeping cell
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    written = files_under(tmp_path / "run")
    assert written, "the run had started"
    for path in written:
        assert secret not in path.read_bytes().decode("utf-8", "replace"), path.name
        if path.name.endswith(".partial.ipynb"):
            assert path.stat().st_mode & 0o077 == 0, "papermill's copy is owner-only"
