"""`workbench env pin --python` and `workbench env restore` on a real throwaway virtualenv whose
only package index is a folder of wheels made here: pin, drift (one version changed, one package
added), restore, and the re-pin matches; every refusal is one sentence, exit 2, and changes
nothing; a restore stopped half way is completed by the next one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.wheels import make_wheel
from workbench.cli import main
from workbench.environment.manifest import interpreter_facts

OURS = ("wbdemo-alpha", "wbdemo-beta", "wbdemo-gamma")


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of wheels as the only index pip may use (no network, no other index)."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "wbdemo-alpha", "1.0")
    make_wheel(wheels, "wbdemo-alpha", "2.0")
    make_wheel(wheels, "wbdemo-beta", "1.0")
    make_wheel(wheels, "wbdemo-gamma", "1.0")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    return wheels


@pytest.fixture
def venv(tmp_path: Path, index: Path) -> Path:
    folder = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    _pip(folder, "install", "wbdemo-alpha==1.0", "wbdemo-beta==1.0")
    return folder


def _pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "-q", *args], check=True)


def _ours(venv: Path) -> dict[str, str]:
    packages = interpreter_facts(venv / "bin" / "python")["packages"]
    return {name: version for name, version in packages.items() if name in OURS}


def _drift(venv: Path) -> None:
    _pip(venv, "install", "wbdemo-alpha==2.0", "wbdemo-gamma==1.0")


def test_pin_drift_restore_and_the_re_pin_matches(
    tmp_path: Path, venv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "pins" / "env.json"
    assert main(["env", "pin", "--python", str(venv), "--out", str(manifest)]) == 0
    pinned = json.loads(manifest.read_text())
    assert pinned["python"]["executable"].startswith(str(venv))
    assert len(pinned["hashes"]["wbdemo-alpha"]) == 1 and pinned["torch"] is None
    lock = (tmp_path / "pins" / "env.lock.txt").read_text()
    assert "wbdemo-alpha==1.0 \\\n    --hash=sha256:" in lock
    # pip itself is not in this index: its line says why it has no hash.
    assert "# pip==" in lock and "no hash: the index serves no wheel of pip" in lock
    _drift(venv)
    assert _ours(venv) == {"wbdemo-alpha": "2.0", "wbdemo-beta": "1.0", "wbdemo-gamma": "1.0"}
    capsys.readouterr()
    assert main(["env", "restore", str(manifest), "--python", str(venv), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "install wbdemo-alpha==1.0 (now 2.0)" in out and "remove wbdemo-gamma 1.0" in out
    assert _ours(venv)["wbdemo-alpha"] == "2.0", "a dry run changes nothing"
    assert main(["env", "restore", str(manifest), "--python", str(venv)]) == 0
    assert "restored: 1 installed (hash verified), 1 removed" in capsys.readouterr().out
    assert _ours(venv) == {"wbdemo-alpha": "1.0", "wbdemo-beta": "1.0"}
    again = tmp_path / "pins" / "again.json"
    assert main(["env", "pin", "--python", str(venv), "--out", str(again), "--no-hashes"]) == 0
    assert main(["env", "diff", str(manifest), str(again)]) == 0
    assert json.loads(again.read_text())["packages"] == pinned["packages"]


def _refused(manifest: Path, venv: Path, capsys: pytest.CaptureFixture[str]) -> str:
    before = _ours(venv)
    capsys.readouterr()
    assert main(["env", "restore", str(manifest), "--python", str(venv)]) == 2
    assert _ours(venv) == before, "a refusal changes nothing"
    errors = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
    assert len(errors) == 1, errors  # one sentence (the other lines are progress)
    return errors[0]


def test_an_unrestorable_pin_is_one_sentence_and_changes_nothing(
    tmp_path: Path, venv: Path, index: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "env.json"
    assert main(["env", "pin", "--python", str(venv), "--out", str(manifest)]) == 0
    _drift(venv)
    # The index no longer serves the pinned version.
    gone = index / "wbdemo_alpha-1.0-py3-none-any.whl"
    gone.rename(tmp_path / gone.name)
    assert "serves no wheel of wbdemo-alpha==1.0" in _refused(manifest, venv, capsys)
    # It serves a file of that name that is not the one pinned.
    make_wheel(index, "wbdemo-alpha", "1.0", body="tampered = True\n")
    assert "does not match the pinned hash" in _refused(manifest, venv, capsys)
    # Another Python.
    record = json.loads(manifest.read_text())
    record["python"]["version"] = "3.8.18"
    other = tmp_path / "other-python.json"
    other.write_text(json.dumps(record))
    assert "pins CPython 3.8.18" in _refused(other, venv, capsys)
    # A manifest pinned without hashes cannot be verified.
    plain = tmp_path / "plain.json"
    assert main(["env", "pin", "--python", str(venv), "--out", str(plain), "--no-hashes"]) == 0
    assert "pinned without hashes" in _refused(plain, venv, capsys)


def test_a_restore_stopped_half_way_is_completed_by_the_next(
    tmp_path: Path, venv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "env.json"
    assert main(["env", "pin", "--python", str(venv), "--out", str(manifest)]) == 0
    _drift(venv)
    # What a restore stopped after its install step leaves: alpha back, gamma not yet removed.
    _pip(venv, "install", "wbdemo-alpha==1.0")
    assert main(["env", "restore", str(manifest), "--python", str(venv)]) == 0
    assert "0 installed (hash verified), 1 removed" in capsys.readouterr().out
    assert _ours(venv) == {"wbdemo-alpha": "1.0", "wbdemo-beta": "1.0"}
