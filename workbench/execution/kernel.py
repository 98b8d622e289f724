"""A kernelspec for the interpreter that runs `workbench`, so a run never fails with NoSuchKernel.

Notebooks saved on a Neuron DLAMI carry kernelspecs such as `aws_neuron_venv_pytorch` that CI and
containers lack; the runner always names this one instead.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

KERNEL_NAME = "workbench-python"


@contextmanager
def private_kernelspec(extra_pythonpath: list[str]) -> Iterator[str]:
    """Register a kernelspec pointing at sys.executable for the duration of a run.

    It lives in a temporary JUPYTER_PATH entry, so nothing is written to the user's Jupyter
    folders and a read-only environment works too. `extra_pythonpath` lets kernels import the
    user's workload module from the folder `workbench run` was started in.
    """
    root = Path(tempfile.mkdtemp(prefix="workbench-kernel-"))
    spec_dir = root / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    pythonpath = os.pathsep.join([*extra_pythonpath, os.environ.get("PYTHONPATH", "")]).strip(
        os.pathsep
    )
    spec = {
        # ipykernel through kernel_launcher, which skips the collections at exit (1.2 s each).
        # ERROR level: ipykernel warns on every start that local TCP is unencrypted, which
        # buries the run's own progress lines; real kernel errors still show.
        "argv": [
            sys.executable,
            "-m",
            "workbench.execution.kernel_launcher",
            "-f",
            "{connection_file}",
            "--IPKernelApp.log_level=ERROR",
        ],
        "display_name": f"Python (workbench, {Path(sys.executable).parent.parent.name})",
        "language": "python",
        "env": {"PYTHONPATH": pythonpath},
        "metadata": {"debugger": False},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    previous = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(root), previous]))
    try:
        yield KERNEL_NAME
    finally:
        if previous is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = previous
        shutil.rmtree(root, ignore_errors=True)


def kernel_manager_writing_stderr_to(path: Path) -> type:
    """A kernel manager class (papermill passes it to nbclient) whose kernel process writes its
    own stderr to `path` instead of the console it would inherit.

    Cell output never goes there (ipykernel sends it to the notebook); what does is the
    kernel's own logging, such as the "KeyboardInterrupt caught in kernel" line ipykernel logs
    when jupyter_client's shutdown interrupts it (it always sends SIGINT first), and a dying
    interpreter's last words. The runner puts both in run.log, scrubbed.
    """
    from jupyter_client import AsyncKernelManager

    class KernelManagerWithStderrFile(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            with open(path, "ab") as stderr:  # the kernel process keeps its own descriptor
                await super()._async_launch_kernel(kernel_cmd, stderr=stderr, **kw)

    return KernelManagerWithStderrFile
