"""`workbench rehearse` for real with the two environments the project builds: the torch-xla
lane's venv (torch 2.9) pinned, .venv (torch 2.13) the candidate, both on cpu; and an interpreter
without the workbench refused with how to install it there.

Runs in the XLA lane (`make test-xla`, which points that venv's editable install at this
checkout), where both interpreters exist; elsewhere it skips.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT

pytest.importorskip("torch_xla")

pytestmark = [pytest.mark.xla, pytest.mark.e2e]

PINNED = Path(sys.executable)  # this lane's interpreter: torch 2.9 with torch-xla
CANDIDATE = REPO_ROOT / ".venv"  # `make setup`'s: torch 2.13
WORKBENCH = str(PINNED.with_name("workbench"))


def _text(page: str) -> str:
    return html.unescape(
        re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", page, flags=re.S))
    )


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    if not (CANDIDATE / "bin" / "python").exists():
        pytest.skip(f"{CANDIDATE} is not built (make setup)")
    out = tmp_path_factory.mktemp("rehearse") / "r"
    done = subprocess.run(
        [WORKBENCH, "rehearse", "--pinned", str(PINNED), "--candidate", str(CANDIDATE),
         "--target", "cpu", "--only", "00,01", "-p", "steady_steps=5", "-p", "modes=eager",
         "-p", "kinds=infer", "-p", "warmup_max_steps=10", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT,
    )  # fmt: skip
    return done, out


def test_both_environments_run_and_the_report_names_the_stack_change(rehearsal):
    done, out = rehearsal
    assert done.returncode in (0, 5), done.stderr  # 5: hold the pin (a regression)
    assert (out / "pinned" / "summary.json").exists()
    assert (out / "candidate" / "summary.json").exists()
    text = _text((out / "rehearse.html").read_text())
    assert "Moving the pin from torch 2.9.0" in text and "to torch 2.13.0" in text
    assert re.search(r"critical\s+packages\.torch\s+2\.9\.0\S*\s+2\.13\.0", text)
    decision = done.stdout.splitlines()[0].split(":")[0]
    assert decision in ("move the pin", "hold the pin", "not judged")
    assert decision.upper() in text  # the console and the page say the same
    assert "infer/eager steady median" in text  # speed, from compare_runs
    assert (out / "compare" / "compare.json").exists()


def test_an_interpreter_without_the_workbench_says_how_to_install_it(tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    done = subprocess.run(
        [WORKBENCH, "rehearse", "--pinned", str(PINNED), "--candidate", str(bare), "--out",
         str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2
    assert "cannot run the workbench" in done.stderr
    assert f"{bare / 'bin' / 'python'} -m pip install -e" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_rollback_rehearsal_judges_the_pinned_environment_against_the_current(tmp_path):
    """`--reverse`: the environment in use now (the candidate, after an upgrade) runs first and
    the pinned one is judged against it, with the same notebooks."""
    if not (CANDIDATE / "bin" / "python").exists():
        pytest.skip(f"{CANDIDATE} is not built (make setup)")
    out = tmp_path / "rollback"
    done = subprocess.run(
        [WORKBENCH, "rehearse", "--reverse", "--pinned", str(PINNED), "--candidate",
         str(CANDIDATE), "--target", "cpu", "--only", "00,01", "-p", "steady_steps=5", "-p",
         "modes=eager", "-p", "kinds=infer", "-p", "warmup_max_steps=10", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT,
    )  # fmt: skip
    assert done.returncode in (0, 5), done.stderr
    assert (out / "current" / "summary.json").exists() and (
        out / "pinned" / "summary.json"
    ).exists()
    assert done.stdout.startswith("rollback rehearsal (moving back to the pinned environment): ")
    text = _text((out / "rehearse.html").read_text())
    assert "Rolling back from torch 2.13.0" in text and "to the pinned torch 2.9.0" in text
    assert re.search(r"critical\s+packages\.torch\s+2\.13\.0\S*\s+2\.9\.0", text)
