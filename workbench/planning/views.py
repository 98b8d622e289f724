"""What a plan shows in notebook 04: banners, tables and the figure of per-rank memory."""

from __future__ import annotations

from IPython.display import display

from workbench import markup as show
from workbench.planning.lines import SHOWN, candidate_row, ranked
from workbench.planning.planner import Plan


def headline(plan: Plan) -> None:
    """The plan's headline: a warning when a single rank cannot hold the model."""
    kind = "ok" if plan.fits else "fail"
    if plan.fits and not plan.fits_one_rank:
        kind = "warn"
    if not plan.complete:
        kind = "warn"  # nothing is said to fit or not: a term could not be sized
    display(show.banner(plan.headline(), kind))
    if plan.published:
        display(show.banner(plan.published, "info"))


def details(plan: Plan) -> None:
    """What the plan was made from, every candidate with its memory by kind, and the figure."""
    display(
        show.key_values(
            {
                "model": f"{plan.model} ({plan.parameters:,} parameters, {plan.model_source})",
                "instance": f"{plan.instance.describe()} ({plan.instance.source})",
                "instance chosen": plan.instance_reason or "named by the caller",
                "mode": plan.mode,
                "precision": plan.precision.description,
                "sequence": "none" if plan.seq is None else f"{plan.seq} tokens",
                "activations": plan.activation_source,
                "fit error": "n/a"
                if plan.activation_fit_error is None
                else f"{plan.activation_fit_error:.1%}",
                "batch": plan.batch.equation() if plan.batch else "no split (see notes)",
                "host": plan.host.sentence(),
                "KV cache": plan.kv_budget.sentence() if plan.kv_budget else "not counted",
                "could not size": "; ".join(plan.unsized) or "nothing",
                "notes": "; ".join(plan.notes) or "none",
                "runtime reserve": f"{plan.single_rank.reserve / 2**30:.3g} GiB per rank "
                f"({plan.reserve_source})",
                "rule": "the least TP x PP whose peak fits a rank's memory less the reserve",
            },
            caption="Memory-fit plan (predicted from shapes and CPU probes, not measured on "
            "Trainium)",
        )
    )
    # matplotlib (half a second) is loaded here, by the one view that draws, not by every import
    # of these views (notebook 04's first cell imports them through tuning.views).
    from workbench.planning.plots import memory_by_layout

    display(memory_by_layout(plan))
    display(
        show.table(
            [candidate_row(c) for c in ranked(plan)[: 3 * SHOWN]],
            caption="Per-rank memory by layout, at micro-batch 1",
        )
    )


def opening(plan: Plan) -> None:
    """Notebook 04's plan, before its trials: the whole plan where one core cannot hold the
    model (then it is the answer), else its headline and where the rest is shown."""
    headline(plan)
    if not plan.fits_one_rank:
        details(plan)
        return
    display(
        show.banner(
            "One core holds the model (predicted): the trials below measure it on this machine, "
            "and the plan's layouts are shown beside them.",
            "info",
        )
    )
