"""Notebook 05: what latency at batch 1, which batch under a latency SLO and what throughput
there, how it holds under load, and, for a generating model, time to first token and per token?"""

from typing import TYPE_CHECKING

from workbench.lazy_exports import lazy_exports

__all__ = ["ServingResult", "ServingSettings", "run_serving"]

if TYPE_CHECKING:
    from workbench.serving.records import ServingResult, ServingSettings
    from workbench.serving.serve import run_serving

__getattr__ = lazy_exports(
    __name__,
    {
        "ServingResult": "workbench.serving.records",
        "ServingSettings": "workbench.serving.records",
        "run_serving": "workbench.serving.serve",
    },
)
