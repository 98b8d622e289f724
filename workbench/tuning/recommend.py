"""What to use, and why: the recommendation read from the trials, launches and plans."""

from __future__ import annotations

from workbench.timing import Measurement
from workbench.tuning.dataloader import (
    LoaderStudy,
)
from workbench.tuning.noise import unsettled
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
        plan = result.plans[0]
        rec.per_core_batch = plan.per_core_batch
        rec.accumulation_steps = plan.accumulation_steps
        rec.world_size = plan.world_size
        rec.global_batch = plan.global_batch
        rec.learning_rate = plan.suggested_lr
        items.append(
            RecommendationItem(
                "per-core batch",
                str(plan.per_core_batch),
                f"{search.stopped}; {_batch_evidence(result)}; "
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
                    "DataLoader", chosen.setting.label(), _loader_evidence(result, result.loader)
                )
            )
        else:
            items.append(
                RecommendationItem("DataLoader", "none measured", "no DataLoader setting ran")
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
    world = result.world
    return (
        f"weak-scaling efficiency {measured}; {world.world_size} ({world.throughput or 0:,.0f} "
        f"{result.throughput_unit}) is the fastest of the sizes at or above {floor:.0%}, or the "
        f"narrowest its noise cannot tell apart from the fastest ({result.measured_label}, "
        f"{scaling.backend}, per-worker batch {scaling.batch_size}); on Trainium a worker is a "
        f"NeuronCore" + _provisional({f"world size {world.world_size}": world.step})
    )


def _provisional(named: dict[str, Measurement | None]) -> str:
    """The caveat a choice carries when a measurement it was read from (by name) is noisy or
    loaded."""
    reasons = [f"{name}: {why}" for name, m in named.items() if (why := unsettled(m))]
    if not reasons:
        return ""
    return f"; PROVISIONAL, read from noisy or loaded steps ({'; '.join(reasons)})"


def _batch_evidence(result: RetuneResult) -> str:
    choice = result.choice
    assert choice is not None
    unit = result.throughput_unit
    by_batch = {t.batch_size: t.steady for t in result.sweep if t.fits}
    text = f"fastest {choice.best_batch_size} at {choice.best_throughput:,.0f} {unit}"
    if choice.batch_size != choice.best_batch_size:
        text += (
            f"; {choice.batch_size} ({choice.throughput:,.0f} {unit}) is the smallest of "
            f"{list(choice.within_noise)}, which its noise cannot tell apart from it"
        )
    return text + _provisional(
        {
            f"batch {batch}": by_batch.get(batch)
            for batch in (choice.batch_size, choice.best_batch_size)  # one entry when they agree
        }
    )


def _loader_evidence(result: RetuneResult, study: LoaderStudy) -> str:
    chosen, fastest = study.recommended, study.fastest
    assert chosen is not None and fastest is not None
    unit = result.throughput_unit
    text = f"{chosen.throughput or 0:,.0f} {unit}"
    if fastest is not chosen:
        text += (
            f"; the fastest, {fastest.setting.label()}, at {fastest.throughput or 0:,.0f} {unit} "
            "is not faster beyond the noise of the two, and this one is cheaper"
        )
    else:
        text += ", the fastest setting"
    text += (
        f"; it waits {chosen.wait_share or 0:.1%} of the step for data, at per-core batch "
        f"{study.batch_size} with {study.work.cost_ms:g} ms of CPU work per sample "
        f"({result.measured_label})"
    )
    if (chosen.wait_share or 0.0) > study.limit:
        text += (
            f"; above {study.limit:.0%}: data loading still bounds this step, so cheapen the "
            "per-sample work or give the loader more cores"
        )
    return text + _provisional(
        {r.setting.label(): r.steps for r in (chosen, fastest)}  # one entry when they agree
    )
