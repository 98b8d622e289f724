"""The two environments of a rehearsal: each an interpreter of its own (a virtualenv folder or a
python path), so a second torch or Neuron stack is really imported, and each with the workbench
installed, checked before anything runs."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import BadInput
from workbench.redact import console_line

CHECK_TIMEOUT_S = 120  # importing torch in a cold venv takes seconds, never minutes
# Importing the CLI is what `run` needs; torch's version is what the rehearsal is about.
_CHECK = "import workbench.cli, torch; print(torch.__version__)"


# The roles of a rollback rehearsal (`--reverse`): the environment in use now first, then the
# pinned one it would go back to.
CURRENT, ROLLBACK = "current", "pinned"


@dataclass(frozen=True)
class Environment:
    role: str  # "pinned" or "candidate"; CURRENT or ROLLBACK in a rollback rehearsal
    given: str  # as the user named it
    python: Path
    torch: str


def interpreter(role: str, given: str) -> Path:
    """The interpreter a virtualenv folder, a path or a name on PATH gives; BadInput otherwise."""
    path = Path(given).expanduser()
    if path.is_dir():
        found = next(
            (path / sub for sub in ("bin/python", "Scripts/python.exe") if (path / sub).exists()),
            None,
        )
        if found is None:
            raise BadInput(
                f"--{role} {given} is a folder without bin/python: name a virtualenv folder or "
                "a python interpreter."
            )
        return found
    if path.is_file() and os.access(path, os.X_OK):
        return path
    on_path = shutil.which(given)
    if on_path:
        return Path(on_path)
    raise BadInput(f"--{role} {given}: no such virtualenv folder or python interpreter.")


def _install_hint(python: Path) -> str:
    """How to install this workbench into another interpreter: from this checkout where it is
    one (editable, no dependency changes), else by name."""
    import workbench

    source = Path(workbench.__file__).resolve().parent.parent
    if (source / "pyproject.toml").exists():
        return shlex.join([str(python), "-m", "pip", "install", "-e", str(source)])
    return shlex.join([str(python), "-m", "pip", "install", "workbench"])


def resolve(role: str, given: str) -> Environment:
    """The interpreter `given` names, checked to run the workbench; BadInput says how to
    install it there where it cannot."""
    python = interpreter(role, given)
    try:
        done = subprocess.run(
            [str(python), "-c", _CHECK],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except OSError as exc:
        raise BadInput(f"--{role} {python} cannot be started: {exc.strerror or exc}.") from None
    except subprocess.TimeoutExpired:
        raise BadInput(
            f"--{role} {python} did not import workbench within {CHECK_TIMEOUT_S} s."
        ) from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        last = console_line(lines[-1]) if lines else f"exit {done.returncode}"
        raise BadInput(
            f"--{role} {python} cannot run the workbench ({last}); install it there with "
            f"`{_install_hint(python)}`."
        )
    return Environment(role, given, python, done.stdout.strip().splitlines()[-1])
