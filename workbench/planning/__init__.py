"""Will it fit, and how to lay it out: per-rank memory of every TP/PP/DP layout of a model on a
Trainium (or Inferentia) instance, the layout AWS's rule picks, and sharded runs on gloo that
check the predictions and the numerics."""

from typing import TYPE_CHECKING

from workbench.lazy_exports import lazy_exports

__all__ = ["Plan", "make_plan", "plan_data", "plan_for_retuning"]

if TYPE_CHECKING:
    from workbench.planning.planner import Plan, make_plan, plan_data
    from workbench.planning.retuning import plan_for_retuning

__getattr__ = lazy_exports(
    __name__,
    {
        "Plan": "workbench.planning.planner",
        "make_plan": "workbench.planning.planner",
        "plan_data": "workbench.planning.planner",
        "plan_for_retuning": "workbench.planning.retuning",
    },
)
