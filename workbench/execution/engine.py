"""The papermill engine `workbench run` executes notebooks with: nbclient's, writing once.

papermill writes the whole executed notebook when it starts and at the end of every cell: for 02,
about 60 writes of 7 to 10 ms each, growing with the notebook's figures. The start write also
puts the notebook with its raw parameters (a password in a `-p` URL) on disk for the whole run,
where a SIGKILL of the command line would leave it. The runner reads the file only after the
kernel is done, and papermill writes it once more when the notebook completes, whether it passed,
failed, timed out or lost its kernel (its `finally`), so this engine keeps only that write, and
creates the file owner-only first: the runner scrubs it into the final notebook and deletes it
the moment it is done.
"""

from __future__ import annotations

import os
from typing import Any

from papermill.engines import NBClientEngine, papermill_engines

ENGINE_NAME = "workbench"


class WriteAtEndEngine(NBClientEngine):
    @classmethod
    def execute_notebook(
        cls, nb: Any, kernel_name: str, output_path: str | None = None, **kwargs: Any
    ) -> Any:
        # The manager is built without the path, so its start and per-cell saves write nothing;
        # execute_managed_notebook hands it the path back for the save in papermill's `finally`.
        return super().execute_notebook(
            nb, kernel_name, output_path=None, final_output_path=output_path, **kwargs
        )

    @classmethod
    def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, **kwargs: Any) -> Any:
        final_output_path = kwargs.pop("final_output_path", None)
        try:
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)
        finally:
            if final_output_path:
                create_owner_only(final_output_path)
                nb_man.output_path = final_output_path


def create_owner_only(path: str) -> None:
    """An empty file only its owner can read, unless it exists: writes that follow keep the mode."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        os.chmod(path, 0o600)


papermill_engines.register(ENGINE_NAME, WriteAtEndEngine)
