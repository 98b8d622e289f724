"""The kernel process `workbench run` starts: ipykernel, with a shutdown that is quick and clean.

- The exit-time garbage collections are skipped (execution.fast_exit): with torch, Dynamo and
  matplotlib loaded, a kernel's exit took 1.2 to 1.4 s here, and 0.15 s without them.
- multiprocessing's forkserver and resource tracker (tuning trials start them) live in the
  kernel's process group. On a shutdown request ipykernel sends SIGTERM to every such process
  for up to 14 s, the resource tracker ignores SIGTERM, and jupyter_client killed the kernel after
  its 2.5 s wait, before the kernel's exit handlers ran. Closing their pipes, which is how
  multiprocessing itself stops them, ends both first; the tracker cleans up what leaked. Should a
  child of the forkserver still be running, the tracker waits for it (it holds the tracker's
  pipe too), and jupyter_client ends the whole process group after its wait, as it did before.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import workbench.execution.fast_exit  # noqa: F401 - imported for its effect


def stop_multiprocessing_helpers() -> None:
    """Stop this process's forkserver and resource tracker, if it started them."""
    if "multiprocessing" not in sys.modules:
        return
    from multiprocessing import forkserver, resource_tracker

    # `_stop` closes the helper's pipe and waits for it; present since Python 3.8 on both, and
    # looked up rather than assumed, so another Python only loses the speed-up.
    for helper in (forkserver._forkserver, resource_tracker._resource_tracker):
        stop = getattr(helper, "_stop", None)
        if stop is not None:
            stop()


def main() -> None:
    # As ipykernel's own launcher does: the working directory is no import location while the
    # kernel loads (IPython puts it back for the notebook's code).
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    from ipykernel.ipkernel import IPythonKernel
    from ipykernel.kernelapp import IPKernelApp

    class WorkbenchKernel(IPythonKernel):
        def do_shutdown(self, restart: bool) -> Any:
            # ipykernel's documented hook, called before it signals the process group.
            stop_multiprocessing_helpers()
            return super().do_shutdown(restart)

    IPKernelApp.launch_instance(kernel_class=WorkbenchKernel)


if __name__ == "__main__":
    main()
