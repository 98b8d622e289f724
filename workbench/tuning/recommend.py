"""What to use, and why: the recommendation read from the trials, launches and plans."""

from __future__ import annotations

from workbench.timing import Measurement
from workbench.tuning.dataloader import LoaderStudy
from workbench.tuning.noise import unsettled
from workbench.tuning.plan import GlobalBatchPlan
from workbench.tuning.records import Recommendation, RecommendationItem, RetuneMeasurements


def recommend(measured: RetuneMeasurements) -> Recommendation:
    """The settings to use, each with the evidence it rests on."""
    plan = measured.plans[0] if measured.plans and measured.choice else None
    loader = measured.loader.recommended if measured.loader else None
    buckets = measured.buckets.chosen if measured.buckets else None
    items = []
    if measured.search.largest_fit is None:
        items.append(RecommendationItem("per-core batch", "none fits", measured.search.stopped))
    if plan is not None:
        items += _plan_items(measured, plan)
    if measured.loader is not None:
        items.append(_loader_item(measured, measured.loader))
    if measured.buckets is not None and buckets is not None:
        items.append(
            RecommendationItem(
                "padding buckets",
                ", ".join(map(str, buckets.boundaries)),
                f"{len(buckets.boundaries)} shape(s), so {len(buckets.boundaries)} "
                f"compile(s) per step kind on Neuron; {buckets.waste:.1%} of padded tokens "
                f"are padding (limit {measured.buckets.waste_limit:.0%}); lengths from "
                f"{measured.buckets.source}",
            )
        )
    return Recommendation(
        per_core_batch=plan.per_core_batch if plan else None,
        accumulation_steps=plan.accumulation_steps if plan else None,
        world_size=plan.world_size if plan else None,
        global_batch=plan.global_batch if plan else None,
        learning_rate=plan.suggested_lr if plan else None,
        dataloader_workers=loader.setting.num_workers if loader else None,
        pin_memory=loader.setting.pin_memory if loader else None,
        prefetch_factor=loader.setting.prefetch_factor if loader else None,
        buckets=buckets.boundaries if buckets else None,
        items=items,
    )


def _plan_items(measured: RetuneMeasurements, plan: GlobalBatchPlan) -> list[RecommendationItem]:
    """The per-core batch, accumulation, world size, global batch and learning rate of the
    plan, then the throughput-best alternative where there is one."""
    items = [
        RecommendationItem(
            "per-core batch",
            str(plan.per_core_batch),
            f"{measured.search.stopped}; {_batch_evidence(measured)}; "
            f"{plan.target_global_batch} split over {plan.world_size} worker(s) "
            f"({measured.measured_label})",
        ),
        RecommendationItem(
            "accumulation steps", str(plan.accumulation_steps), _accumulation_evidence(measured)
        ),
        RecommendationItem("world size", str(plan.world_size), _world_evidence(measured)),
        RecommendationItem(
            "global batch",
            str(plan.global_batch),
            plan.equation() + ("" if plan.exact else f"; {'; '.join(plan.notes[:1])}"),
        ),
        RecommendationItem("learning rate", _lr_text(plan), plan.lr_rule_reason),
    ]
    if len(measured.plans) > 1:
        other = measured.plans[1]
        items.append(
            RecommendationItem(
                "alternative",
                f"{other.equation()}, learning rate {_lr_text(other)}",
                f"{other.name}: the fastest steps measured, at the price of a new global "
                "batch (re-validate convergence)",
            )
        )
    return items


def _loader_item(measured: RetuneMeasurements, study: LoaderStudy) -> RecommendationItem:
    if study.recommended is None:
        return RecommendationItem("DataLoader", "none measured", "no DataLoader setting ran")
    return RecommendationItem(
        "DataLoader", study.recommended.setting.label(), _loader_evidence(measured, study)
    )


def _lr_text(plan: GlobalBatchPlan) -> str:
    if plan.reference_lr is None:
        return "as in the recipe"
    if plan.lr_factor is None:
        return f"re-tune (from {plan.reference_lr:g})"
    if plan.lr_factor == 1:
        return f"keep {plan.reference_lr:g}"
    return f"{plan.suggested_lr:.3g} ({plan.reference_lr:g} x {plan.lr_factor:.3g})"


def _accumulation_evidence(measured: RetuneMeasurements) -> str:
    plan = measured.plans[0]
    check = measured.accumulation
    text = plan.equation()
    if check is not None:
        text += f"; check: {check.explanation()}"
    return text


def _world_evidence(measured: RetuneMeasurements) -> str:
    scaling = measured.scaling
    if scaling is None:
        return "no scaling sweep ran"
    if scaling.skipped_reason:
        return f"data-parallel sweep skipped: {scaling.skipped_reason}"
    floor = measured.settings.min_scaling_efficiency
    if measured.world is None:
        return (
            f"no measured world size kept {floor:.0%} efficiency ({measured.measured_label}, "
            f"{scaling.backend}): one worker"
        )
    efficiencies = ", ".join(
        f"{r.efficiency:.0%} at {r.world_size}"
        for r in scaling.measured()
        if r.efficiency is not None
    )
    world = measured.world
    return (
        f"weak-scaling efficiency {efficiencies}; {world.world_size} ({world.throughput or 0:,.0f} "
        f"{measured.throughput_unit}) is the fastest of the sizes at or above {floor:.0%}, or the "
        f"narrowest its noise cannot tell apart from the fastest ({measured.measured_label}, "
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


def _batch_evidence(measured: RetuneMeasurements) -> str:
    choice = measured.choice
    assert choice is not None
    unit = measured.throughput_unit
    by_batch = {t.batch_size: t.steady for t in measured.sweep if t.fits}
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


def _loader_evidence(measured: RetuneMeasurements, study: LoaderStudy) -> str:
    chosen, fastest = study.recommended, study.fastest
    assert chosen is not None and fastest is not None
    unit = measured.throughput_unit
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
        f"({measured.measured_label})"
    )
    if (chosen.wait_share or 0.0) > study.limit:
        text += (
            f"; above {study.limit:.0%}: data loading still bounds this step, so cheapen the "
            "per-sample work or give the loader more cores"
        )
    return text + _provisional(
        {r.setting.label(): r.steps for r in (chosen, fastest)}  # one entry when they agree
    )
