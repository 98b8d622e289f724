"""`workbench env pin | diff` and the drift gate of notebook 00, run as a user runs them."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT

REPO = REPO_ROOT
WORKBENCH = str(Path(sys.executable).parent / "workbench")


def workbench(*args, cwd):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [WORKBENCH, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pins")
    result = workbench("env", "pin", "--out", "env.json", cwd=folder)
    assert result.returncode == 0, result.stderr
    return folder


def test_pin_writes_manifest_and_lock(pinned):
    manifest = json.loads((pinned / "env.json").read_text())
    assert manifest["packages"]["torch"].startswith("2.")
    lock = (pinned / "env.lock.txt").read_text().splitlines()
    # Hash-pinned, in pip's --require-hashes format: the file the index serves for torch.
    at = lock.index(f"torch=={manifest['packages']['torch']} \\")
    assert lock[at + 1].strip().startswith("--hash=sha256:")
    assert manifest["hashes"]["torch"] and not manifest["unhashed"]


def test_diff_exit_codes_follow_the_worst_severity(pinned):
    same = workbench("env", "diff", "env.json", "env.json", cwd=pinned)
    assert same.returncode == 0 and "worst: none" in same.stdout

    manifest = json.loads((pinned / "env.json").read_text())
    manifest["packages"]["papermill"] = "0.0.1"
    (pinned / "warn.json").write_text(json.dumps(manifest))
    warn = workbench("env", "diff", "env.json", "warn.json", cwd=pinned)
    assert warn.returncode == 0 and "warning" in warn.stdout

    manifest["packages"]["torch"] = "1.13.1"  # differs from any torch this suite runs on
    (pinned / "critical.json").write_text(json.dumps(manifest))
    critical = workbench("env", "diff", "env.json", "critical.json", cwd=pinned)
    assert critical.returncode == 3
    assert critical.stdout.splitlines()[0].startswith("critical")

    # The same environment, except that torchvision no longer imports: critical, though no
    # version changed.
    broken = json.loads((pinned / "env.json").read_text())
    broken["packages"]["torchvision"] = "0.28.0+cu128"
    broken["imports"] = {"torchvision": "RuntimeError: operator torchvision::nms does not exist"}
    (pinned / "broken.json").write_text(json.dumps(broken))
    (pinned / "broken-pin.json").write_text(json.dumps(broken))
    fails = workbench("env", "diff", "broken-pin.json", "broken.json", cwd=pinned)
    assert fails.returncode == 3
    assert fails.stdout.splitlines()[0].startswith("critical imports.torchvision")
    assert "operator torchvision::nms does not exist" in fails.stdout

    missing = workbench("env", "diff", "env.json", "nope.json", cwd=pinned)
    assert missing.returncode == 2 and "nope.json does not exist" in missing.stderr


def test_fail_on_drift_fails_notebook_00_after_showing_the_drift(pinned, tmp_path):
    manifest = json.loads((pinned / "env.json").read_text())
    manifest["packages"]["torch"] = "1.13.1"  # differs from any torch this suite runs on
    (pinned / "old-torch.json").write_text(json.dumps(manifest))
    pin = str(pinned / "old-torch.json")

    shown = workbench(
        "run", "--only", "00", "--out", "shown", "-p", f"pinned_manifest={pin}", cwd=tmp_path
    )
    assert shown.returncode == 0, "drift is reported, not fatal, unless fail_on_drift is set"
    # The way back: the restore command, what it can verify, what pip cannot restore.
    page = (tmp_path / "shown" / "00_environment.html").read_text()
    assert "How does this environment go back to the pinned one?" in page
    assert f"workbench env restore {pin} --python" in page
    assert "pinned versions has the hash of its file" in page
    assert "machine image (AMI) or Deep Learning Container" in page
    record = json.loads((tmp_path / "shown" / "00_environment.json").read_text())
    assert any(
        d["key"] == "packages.torch" and d["severity"] == "critical"
        for d in record["data"]["drift"]
    )

    gated = workbench(
        "run",
        "--only",
        "00",
        "--out",
        "gated",
        "-p",
        f"pinned_manifest={pin}",
        "-p",
        "fail_on_drift=true",
        cwd=tmp_path,
    )
    assert gated.returncode == 1
    assert "critical change" in gated.stderr
    html = (tmp_path / "gated" / "00_environment.html").read_text()
    assert "packages.torch" in html and "DriftError" in html
    assert (tmp_path / "gated" / "00_environment.json").exists(), "the result is saved first"


def test_diff_output_is_scrubbed(pinned):
    """A manifest from elsewhere may carry secrets or control sequences; `env diff` prints
    neither."""
    manifest = json.loads((pinned / "env.json").read_text())
    manifest["environment"]["NEURON_CC_FLAGS"] = "--password hunter2diff \x1b]0;title\x07"
    manifest["packages"]["papermill"] = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e"
    # By content (a credentials line, a JSON pair) and under a key that names a secret.
    manifest["environment"]["XLA_FLAGS"] = 'aws_secret_access_key = wJalrXUtnF {"api_key": "k9x"}'
    manifest["environment"]["NEURON_DB_PASSWORD"] = "plainword"
    (pinned / "secret.json").write_text(json.dumps(manifest))
    result = workbench("env", "diff", "env.json", "secret.json", cwd=pinned)
    assert "NEURON_CC_FLAGS" in result.stdout and "papermill" in result.stdout
    assert "NEURON_DB_PASSWORD" in result.stdout and "XLA_FLAGS" in result.stdout
    for secret in ("hunter2diff", "sk-live-4f9a", "wJalrXUtnF", "k9x", "plainword"):
        assert secret not in result.stdout
    assert "\x1b" not in result.stdout and "--password [redacted]" in result.stdout
