"""A plan as text: the lines `workbench plan` prints and the rows of the layout tables (no
IPython, no matplotlib: the command answers in seconds)."""

from __future__ import annotations

from typing import Any

from workbench import markup as show
from workbench.planning.instances import human_bytes
from workbench.planning.planner import Plan
from workbench.planning.recommend import Candidate
from workbench.planning.recommend import ranked as rank_candidates

SHOWN = 8  # candidates listed unless every one is asked for


def _gib(value: float) -> str:
    return human_bytes(value)


def ranked(plan: Plan) -> list[Candidate]:
    """The plan's candidates in the order the rule reads them (recommend.ranked)."""
    return rank_candidates(plan.candidates, plan.chosen)


def candidate_row(c: Candidate) -> dict[str, Any]:
    m = c.memory
    return {
        "layout": c.layout.name,
        "parameters": _gib(m.parameters),
        "gradients": _gib(m.gradients),
        "optimizer": _gib(m.optimizer),
        "activations": _gib(m.activations),
        "FSDP gathered": _gib(m.gathered),
        "KV cache": _gib(m.kv_cache),
        "step temporaries": _gib(m.step_temporaries),
        "peak per rank": _gib(m.peak),
        "fits": "yes" if c.fits else "no" if c.complete else "unknown",
        "free": f"{c.headroom:.0%}",
        "largest micro-batch": c.largest_micro_batch,
        "note": c.note,
    }


def plan_lines(plan: Plan, every: bool = False) -> list[str]:
    """The plan as the command prints it."""
    lines = [plan.headline()]
    if plan.published:
        lines.append(plan.published)
    lines.append(
        f"model: {plan.parameters:,} parameters, {plan.layers} layers, heads "
        f"{plan.heads}/{plan.kv_heads} KV ({plan.model_source}); {plan.mode}, "
        f"{plan.precision.description}; sequence {plan.seq}; optimizer {plan.optimizer}"
    )
    fit = (
        f"fit error {plan.activation_fit_error:.1%}, backward working set {plan.kappa:.2f} x the "
        "largest saved tensor"
        if plan.activation_fit_error is not None
        else "not measured"
    )
    lines.append(f"activations: {plan.activation_source} ({fit})")
    lines.append(f"instance: {plan.instance.describe()} ({plan.instance.source})")
    if plan.instance_reason:
        lines.append(f"instance chosen: {plan.instance_reason}")
    lines.append(f"host: {plan.host.sentence()}")
    reserve = human_bytes(plan.single_rank.reserve)
    lines.append(f"runtime reserve per rank: {reserve} ({plan.reserve_source})")
    if plan.chosen is not None:
        collectives = "; ".join(plan.chosen.layout.collectives(plan.mode == "training"))
        lines.append(f"collectives of {plan.chosen.layout.name}: {collectives or 'none'}")
    if plan.kv_budget:
        lines.append(f"{plan.kv_budget.sentence()} ({plan.kv_budget.source})")
    for item in plan.unsized:
        lines.append(f"could not size: {item}")
    lines.extend(f"note: {note}" for note in plan.notes)
    rows = ranked(plan)
    shown = rows if every else rows[:SHOWN]
    lines.append(
        f"layouts ({len(shown)} of {len(rows)}; rule: the least TP x PP whose peak fits a "
        "rank's memory less the runtime's reserve; --all lists every one):"
    )
    table = show.table([candidate_row(c) for c in shown])
    lines.extend("  " + line for line in table.plain.splitlines())
    lines.append(
        "every number is predicted from the model's shapes and CPU probes, not measured on "
        f"Trainium ({plan.seconds:.1f} s)"
    )
    return lines
