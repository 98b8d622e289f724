"""Notebook 05: what latency at batch 1, which batch under a latency SLO and what throughput
there, how it holds under load, and, for a generating model, time to first token and per token?"""

from workbench.serving.records import ServingResult, ServingSettings
from workbench.serving.serve import run_serving

__all__ = ["ServingResult", "ServingSettings", "run_serving"]
