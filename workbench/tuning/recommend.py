"""What to use, and why: the recommendation read from the trials, launches and plans."""

from __future__ import annotations

from workbench.tuning.dataloader import (
    LoaderStudy,
)
from workbench.tuning.plan import (
    GlobalBatchPlan,
)
from workbench.tuning.records import Recommendation, RecommendationItem, RetuneResult


def recommend(result: RetuneResult) -> Recommendation:
    """The settings to use, each with the evidence it rests on."""
    rec = Recommendation()
    items = rec.items
    label = result.measured_label
    search = result.search
    if search.largest_fit is None:
        items.append(RecommendationItem("per-core batch", "none fits", search.stopped))
    if result.plans and result.choice:
        plan, choice = result.plans[0], result.choice
        rec.per_core_batch = plan.per_core_batch
        rec.accumulation_steps = plan.accumulation_steps
        rec.world_size = plan.world_size
        rec.global_batch = plan.global_batch
        rec.learning_rate = plan.suggested_lr
        items.append(
            RecommendationItem(
                "per-core batch",
                str(plan.per_core_batch),
                f"{search.stopped}; throughput-best {choice.batch_size} "
                f"({choice.throughput:,.0f} {result.throughput_unit}, {choice.rule}); "
                f"{plan.target_global_batch} split over {plan.world_size} worker(s) ({label})",
            )
        )
        items.append(
            RecommendationItem(
                "accumulation steps", str(plan.accumulation_steps), _accumulation_evidence(result)
            )
        )
        items.append(
            RecommendationItem("world size", str(plan.world_size), _world_evidence(result))
        )
        items.append(
            RecommendationItem(
                "global batch",
                str(plan.global_batch),
                plan.equation() + ("" if plan.exact else f"; {'; '.join(plan.notes[:1])}"),
            )
        )
        items.append(RecommendationItem("learning rate", _lr_text(plan), plan.lr_rule_reason))
        if len(result.plans) > 1:
            other = result.plans[1]
            items.append(
                RecommendationItem(
                    "alternative",
                    f"{other.equation()}, learning rate {_lr_text(other)}",
                    f"{other.name}: the fastest steps measured, at the price of a new global "
                    "batch (re-validate convergence)",
                )
            )
    if result.loader is not None:
        chosen = result.loader.recommended
        if chosen is not None:
            rec.dataloader_workers = chosen.setting.num_workers
            rec.pin_memory = chosen.setting.pin_memory
            rec.prefetch_factor = chosen.setting.prefetch_factor
            items.append(
                RecommendationItem(
                    "DataLoader",
                    chosen.setting.label(),
                    f"waits {chosen.wait_share:.1%} of the step (limit "
                    f"{result.loader.limit:.0%}) at per-core batch {result.loader.batch_size} "
                    f"with {result.loader.work.cost_ms:g} ms of CPU work per sample ({label})",
                )
            )
        else:
            items.append(
                RecommendationItem(
                    "DataLoader",
                    "no setting tried is enough",
                    _loader_shortfall(result.loader),
                )
            )
    if result.buckets is not None and result.buckets.chosen is not None:
        chosen_plan = result.buckets.chosen
        rec.buckets = chosen_plan.boundaries
        items.append(
            RecommendationItem(
                "padding buckets",
                ", ".join(map(str, chosen_plan.boundaries)),
                f"{len(chosen_plan.boundaries)} shape(s), so {len(chosen_plan.boundaries)} "
                f"compile(s) per step kind on Neuron; {chosen_plan.waste:.1%} of padded tokens "
                f"are padding (limit {result.buckets.waste_limit:.0%}); lengths from "
                f"{result.buckets.source}",
            )
        )
    return rec


def _lr_text(plan: GlobalBatchPlan) -> str:
    if plan.reference_lr is None:
        return "as in the recipe"
    if plan.lr_factor is None:
        return f"re-tune (from {plan.reference_lr:g})"
    if plan.lr_factor == 1:
        return f"keep {plan.reference_lr:g}"
    return f"{plan.suggested_lr:.3g} ({plan.reference_lr:g} x {plan.lr_factor:.3g})"


def _accumulation_evidence(result: RetuneResult) -> str:
    plan = result.plans[0]
    check = result.accumulation
    text = plan.equation()
    if check is not None:
        text += f"; check: {check.explanation()}"
    return text


def _world_evidence(result: RetuneResult) -> str:
    scaling = result.scaling
    if scaling is None:
        return "no scaling sweep ran"
    if scaling.skipped_reason:
        return f"data-parallel sweep skipped: {scaling.skipped_reason}"
    floor = result.settings.min_scaling_efficiency
    if result.world is None:
        return (
            f"no measured world size kept {floor:.0%} efficiency ({result.measured_label}, "
            f"{scaling.backend}): one worker"
        )
    measured = ", ".join(
        f"{r.efficiency:.0%} at {r.world_size}"
        for r in scaling.measured()
        if r.efficiency is not None
    )
    return (
        f"weak-scaling efficiency {measured}; {result.world.world_size} is the widest at or "
        f"above {floor:.0%} ({result.measured_label}, {scaling.backend}, per-worker batch "
        f"{scaling.batch_size}); on Trainium a worker is a NeuronCore"
    )


def _loader_shortfall(study: LoaderStudy) -> str:
    measured = [r for r in study.results if r.wait_share is not None]
    if not measured:
        return "no DataLoader setting ran"
    best = min(measured, key=lambda r: r.wait_share or 0.0)
    return (
        f"every setting waits more than {study.limit:.0%} of the step; the least, "
        f"{best.setting.label()}, waits {best.wait_share:.0%}: data loading bounds this step, "
        "so cheapen the per-sample work or give the loader more cores"
    )
