"""The papermill engine `workbench run` executes notebooks with: nbclient's, writing less.

papermill writes the whole executed notebook at the start and at the end of every cell: for 02,
about 60 writes of 7 to 10 ms each, growing with the notebook's figures. The runner reads that
file only after the kernel is done, and papermill writes it once more when the notebook
completes, whether it passed, failed, timed out or lost its kernel (its `finally`), so the
per-cell writes buy nothing here.
"""

from __future__ import annotations

from typing import Any

from papermill.engines import NBClientEngine, papermill_engines

ENGINE_NAME = "workbench"


class WriteAtEndEngine(NBClientEngine):
    @classmethod
    def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, **kwargs: Any) -> Any:
        # The manager writes only while it knows where to; it knows again for its final write.
        output_path, nb_man.output_path = nb_man.output_path, None
        try:
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)
        finally:
            nb_man.output_path = output_path


papermill_engines.register(ENGINE_NAME, WriteAtEndEngine)
