"""Do torch's companion packages import? A wheel built for another torch (a CUDA torchvision
beside a CPU torch) installs cleanly and lists a version, then fails at `import` with
`operator torchvision::nms does not exist`, taking transformers and timm with it.

Each installed companion is imported in its own child process, with this interpreter and this
process's sys.path (what a notebook kernel imports from) and a timeout, so a hanging or crashing
import cannot take the notebook down; a failure keeps its first error line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

# Distribution name -> import name, for the packages built against a particular torch.
COMPANIONS = {
    "torchvision": "torchvision",
    "torchaudio": "torchaudio",
    "torch-xla": "torch_xla",
    "torch-neuronx": "torch_neuronx",
    "transformers": "transformers",
    "timm": "timm",
}

IMPORT_TIMEOUT_S = 120  # a cold import of torch plus a companion on a slow disk

OK = "ok"


# The child prints its outcome as its last line, so warnings printed on import do not matter.
_CHILD = """
import importlib, sys
try:
    importlib.import_module(sys.argv[1])
except BaseException as exc:
    message = str(exc).strip().splitlines()
    print(f"{type(exc).__name__}: {message[0] if message else ''}".rstrip(": "))
    sys.exit(1)
print("ok")
"""


@dataclass(frozen=True)
class ImportCheck:
    package: str  # distribution name, as in the manifest's packages
    module: str
    status: str  # "ok", or the first error line ("RuntimeError: operator ... does not exist")


def _outcome(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode == 0 and lines[-1:] == [OK]:
        return OK
    if done.returncode != 0 and lines:
        return lines[-1]
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode < 0:
        return f"the import was killed by signal {-done.returncode}"
    return errors[-1] if errors else f"the import exited {done.returncode} without a message"


def check_imports(
    installed: dict[str, str], timeout_s: float = IMPORT_TIMEOUT_S
) -> list[ImportCheck]:
    """Import each installed companion in a fresh child process (all at once, then wait)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    children = {
        name: subprocess.Popen(
            [sys.executable, "-c", _CHILD, module],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name, module in COMPANIONS.items()
        if name in installed
    }
    deadline = time.monotonic() + timeout_s
    checks = []
    for name, child in children.items():
        try:
            stdout, stderr = child.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            status = f"the import did not finish within {timeout_s:g} s"
        else:
            finished = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
            status = _outcome(finished)
        checks.append(ImportCheck(name, COMPANIONS[name], status))
    return checks
