"""The kernel process `workbench run` starts: ipykernel, without the collections at exit.

A kernel that has imported torch, Dynamo and matplotlib holds millions of objects, and the
garbage collections the interpreter runs while it shuts down walked them all: 1.2 to 1.4 s per
notebook here, against 0.15 s with them frozen first (`gc.freeze`). Frozen at the very end, by
the first exit handler registered (so the last to run): every other exit handler has run, and
objects freed by their reference counts still are; only objects in reference cycles are left
for the operating system, which takes back the whole process's memory anyway.
"""

from __future__ import annotations

import atexit
import gc
import sys
from pathlib import Path


def main() -> None:
    # As ipykernel's own launcher does: the working directory is no import location while the
    # kernel loads (IPython puts it back for the notebook's code).
    if sys.path and (sys.path[0] == "" or Path(sys.path[0]) == Path.cwd()):
        del sys.path[0]
    atexit.register(gc.freeze)

    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main()
