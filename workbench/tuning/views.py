"""What notebook 04 shows of a retuning result, and the data its result file keeps."""

from __future__ import annotations

from typing import Any

from IPython.display import display

from workbench import markup as show
from workbench.baseline.views import ledger_row
from workbench.planning import retuning as planning_retuning
from workbench.planning import views as plan_views
from workbench.planning.instances import human_bytes
from workbench.timing import Measurement, format_seconds
from workbench.tuning.dataloader import LoaderResult, LoaderStudy
from workbench.tuning.parallel import FAILED, TIMEOUT, ScalingRun, world_size_rule
from workbench.tuning.plan import GlobalBatchPlan
from workbench.tuning.records import RetuneResult, retuning_verdict
from workbench.tuning.trials import OVER_BUDGET, Trial
from workbench.tuning.wording import plan_reason, steady_recompiles, sweep_caveat


def _mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**20:,.1f} MiB"


def _gib(value: int) -> str:
    return f"{value / 2**30:,.2f} GiB"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else format_seconds(value)


def _rate(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,.0f} {unit}".strip()


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _first_line(text: str | None, limit: int = 200) -> str:
    return (text or "").strip().splitlines()[0][:limit] if (text or "").strip() else ""


def _tail(measurement: Measurement | None) -> str:
    """The p99 step where the sample count supports it (timing.Measurement.tail: MLPerf
    LoadGen's early-stopping estimate), else the slowest step, labelled as what it is."""
    if measurement is None:
        return "n/a"
    label, value = measurement.tail(0.99)
    return f"{label}: {format_seconds(value)}"


def _machine(measurement: Measurement | None) -> str:
    """The machine's state while the steps were timed."""
    if measurement is None:
        return "n/a"
    if measurement.host is None:
        return "not read"
    return measurement.host.sentence()


TAIL = "tail step (p99 where the samples support it)"
MACHINE = "machine while timed"


# Each table times a batch its own way, so each throughput column says which it is.
SEARCH_THROUGHPUT = "throughput (search: 3 steps, fit check only)"
SWEEP_THROUGHPUT = "throughput (sweep: steady state, the one to compare)"
LAUNCH_THROUGHPUT = "throughput (all workers of the launch)"


def _trial_row(trial: Trial, unit: str, throughput_label: str) -> dict[str, Any]:
    steady = trial.steady
    return {
        "batch": trial.batch_size,
        "status": trial.status,
        "peak memory": _mib(trial.peak_memory_bytes),
        "median step": _seconds(steady.median if steady else None),
        TAIL: _tail(steady),
        "IQR": f"{steady.relative_iqr:.0%}" if steady else "n/a",
        MACHINE: _machine(steady),
        "re-measured": trial.remeasure_note,
        throughput_label: _rate(trial.throughput, unit),
        "compiles": trial.compile_summary(),
        "trial time": format_seconds(trial.seconds),
        "why": trial.diagnosis or trial.oom_evidence or _first_line(trial.error),
    }


def _not_run(result: RetuneResult, stage: str, what: str, kind: str = "warn") -> None:
    """The banner of a stage that did not run, with why (RetuneResult.skipped)."""
    display(show.banner(f"No {what}: {result.skipped.get(stage, '')}", kind))


def _measured_table(result: RetuneResult, rows: list[dict[str, Any]], caption: str) -> None:
    """A table of this run's measurements, its caption saying where they were measured."""
    display(show.table(rows, caption=f"{caption} ({result.measured_label})"))


def compiles(result: RetuneResult) -> None:
    """Every trial's compiles, with 01's ledger columns: on Neuron, each batch size is a graph
    of its own, and its compile is part of what a batch size costs."""
    rows = [
        {"stage": t.stage, "batch": t.batch_size, **ledger_row(entry)}
        for t in result.trials
        for entry in t.compiles
    ]
    if not rows:
        display(show.banner("The compiler recorded no compile in any trial.", "info"))
        return
    recompiled = steady_recompiles(result.trials)
    if recompiled:
        display(show.banner(f"{recompiled}: their step times include compile time.", "warn"))
    display(show.table(rows, caption="Compile ledger of every trial, in the order they ran"))


def _headline_banner(result: RetuneResult) -> show.Rich:
    """The headline in the verdict's colour, so the two never disagree."""
    kind = show.VERDICT_BANNER[retuning_verdict(result).status]
    return show.banner(result.headline(), kind)


def headline(result: RetuneResult) -> None:
    failed = [t for t in result.trials if not t.fits]
    # The report opens with this headline, read from the result file: here for the live view.
    display(_headline_banner(result), metadata=show.LIVE_ONLY)
    if failed and result.search.largest_fit is not None:
        display(
            show.banner(
                f"{len(failed)} trial(s) did not fit or failed; each is in the tables below with "
                "its reason, and every other trial ran on.",
                "info",
            )
        )


def search(result: RetuneResult) -> None:
    """The budget, then every search trial in the order it ran."""
    budget, found = result.budget, result.search
    display(
        show.key_values(
            {
                "memory budget": f"{_gib(budget.total_bytes)} ({budget.source})",
                "safety margin": f"{budget.margin:.0%} kept free: a trial fits up to "
                f"{_gib(budget.usable)}",
                "memory measured as": _memory_sources(result),
                "range searched": f"{found.low} to {found.high}",
                "trials": f"{len(found.trials)} of at most {found.bound} (ceil(log2(range)) + 2)",
                "result": found.stopped,
                "each trial": "a fresh child process with its own deadline "
                f"({format_seconds(result.settings.trial_timeout_s)}): first call, "
                "4 warm-up steps and 3 steady steps",
            },
            caption="Largest batch that fits",
        )
    )
    rows = [
        {"#": i, **_trial_row(t, result.throughput_unit, SEARCH_THROUGHPUT)}
        for i, t in enumerate(found.trials, 1)
    ]
    _measured_table(result, rows, "Search trials, in order")


def plan(result: RetuneResult) -> None:
    """The memory-fit plan beside the measured trials: the whole plan where the report did not
    open with it, then the planner's prediction for each trial's batch on this machine."""
    made = result.plan
    if made is None:
        return
    if not made.fits_one_rank:
        display(
            show.banner(
                "The plan opens this report: one core cannot hold the model (predicted).", "info"
            )
        )
    else:
        if result.search.largest_fit is None:
            display(
                show.banner(
                    f"No batch of the range fit this machine's budget, while the plan predicts "
                    f"that one core of {made.instance.name} holds the model: the budget here "
                    "is not the target's memory.",
                    "warn",
                )
            )
        plan_views.details(made)
    rows = planning_retuning.beside_trials(
        made, [(t.batch_size, t.peak_memory_bytes) for t in result.trials if t.fits]
    )
    if not rows:
        return
    display(
        show.table(
            [
                {
                    "batch": row.batch,
                    "measured peak": human_bytes(row.measured_bytes),
                    "predicted tensors": human_bytes(row.predicted_bytes),
                    "measured - predicted": human_bytes(row.measured_bytes - row.predicted_bytes),
                }
                for row in rows
            ],
            caption=f"The planner beside the trials: one process, fp32, {result.measured_label} "
            f"(measured as {_memory_sources(result)})",
        )
    )
    slopes = planning_retuning.per_sample(rows)
    if slopes:
        predicted, measured = slopes
        display(
            show.banner(
                f"Each extra sample adds {human_bytes(predicted)} predicted and "
                f"{human_bytes(measured)} measured (batch {rows[0].batch} to "
                f"{rows[-1].batch}); the rest of the measured peak is what the process holds "
                "besides the model's tensors (the interpreter, torch's libraries), which the "
                "plan for a NeuronCore does not count.",
                "info",
            )
        )


def _memory_sources(result: RetuneResult) -> str:
    sources = sorted({t.memory_source for t in result.trials if t.memory_source})
    return "; ".join(sources) or "no trial reported memory"


def sweep(result: RetuneResult) -> None:
    if not result.sweep:
        _not_run(result, "sweep", "batch-size sweep")
        return
    rows = [_trial_row(t, result.throughput_unit, SWEEP_THROUGHPUT) for t in result.sweep]
    _measured_table(
        result,
        rows,
        f"Batch-size sweep: training step, {result.settings.mode}, steady state after an "
        "adaptive warm-up",
    )
    if result.choice:
        display(show.banner(sweep_choice(result), "info"))
    display(show.banner(f"Re-measuring: {result.remeasure.rule()}.", "info"))


def sweep_choice(result: RetuneResult) -> str:
    """The per-core batch the plan uses (the figure rings the same one), then what the sweep
    measured and its rule, with the noise or load that may explain a faster batch."""
    choice = result.choice
    assert choice is not None
    unit = result.throughput_unit
    chosen = result.chosen_batch
    lead = (
        f"The plan's per-core batch: {chosen}{plan_reason(result)}. "
        if chosen is not None
        else "No plan was made. "
    )
    caveat = sweep_caveat(result, choice.best_batch_size)
    return (
        f"{lead}The sweep's pick by its rule: {choice.batch_size} "
        f"({_rate(choice.throughput, unit)}); the fastest measured was {choice.best_batch_size} "
        f"at {_rate(choice.best_throughput)}"
        + (f" ({caveat}: provisional)" if caveat else "")
        + f"; indistinguishable from it: {', '.join(map(str, choice.within_noise))}. "
        f"Rule: {choice.rule}."
    )


def accumulation(result: RetuneResult) -> None:
    check = result.accumulation
    if check is None:
        _not_run(result, "accumulation", "accumulation check")
        return
    kind = "ok" if check.passed else ("warn" if check.error is None else "fail")
    display(show.banner(check.explanation(), kind))
    display(
        show.key_values(
            {
                "how": check.method,
                "worst relative gradient difference": "n/a"
                if check.max_relative_error is None
                else f"{check.max_relative_error:.2e} ({check.worst_parameter})",
                "tolerance": f"{check.tolerance:.0e} relative, float64",
                "batch-statistics layers": ", ".join(check.batch_statistics_layers) or "none",
                "dropout (off for the check)": ", ".join(check.dropout_layers) or "none",
            },
            caption="Gradient accumulation against one big batch (CPU, float64: a property of "
            "the model and loss, not of the device)",
        )
    )


def _loader_row(item: LoaderResult, unit: str, study: LoaderStudy) -> dict[str, Any]:
    steps = item.steps
    return {
        "setting": item.setting.label(),
        "status": item.status,
        "throughput": _rate(item.throughput, unit),
        "median step": _seconds(steps.median if steps else None),
        "IQR": f"{steps.relative_iqr:.0%}" if steps else "n/a",
        MACHINE: _machine(steps),
        "re-measured": item.remeasure_note,
        "waiting for data": _share(item.wait_share),
        "median wait": _seconds(item.waits.median if item.waits else None),
        "fastest": "yes" if item is study.fastest else "",
        "recommended": "yes" if item is study.recommended else "",
        "error": _first_line(item.error),
    }


def dataloader(result: RetuneResult) -> None:
    study = result.loader
    if study is None:
        _not_run(result, "dataloader", "DataLoader sweep")
        return
    rows = [_loader_row(r, result.throughput_unit, study) for r in study.results]
    _measured_table(
        result,
        rows,
        f"DataLoader settings at per-core batch {study.batch_size}, {study.work.cost_ms:g} ms "
        f"of CPU work per sample ({study.work.calibration}); {study.steps} steps measured after "
        f"{study.warmup_steps}",
    )
    display(show.banner(f"Recommended by throughput: {study.rule}.", "info"))
    for note in study.notes:
        display(show.banner(note, "info"))


def _scaling_row(run: ScalingRun, unit: str) -> dict[str, Any]:
    return {
        "world size": run.world_size,
        "status": run.status,
        "median step (slowest rank)": _seconds(run.step.median if run.step else None),
        "IQR": f"{run.step.relative_iqr:.0%}" if run.step else "n/a",
        MACHINE: _machine(run.step),
        "re-measured": run.remeasure_note,
        LAUNCH_THROUGHPUT: _rate(run.throughput, unit),
        "per worker": _rate(run.per_worker, unit),
        "efficiency": _share(run.efficiency),
        "launch time": _seconds(run.seconds or None),
        "note": run.reason,
    }


def scaling(result: RetuneResult) -> None:
    study = result.scaling
    if study is None:
        _not_run(result, "scaling", "scaling sweep")
        return
    if study.skipped_reason:
        display(show.banner(f"Data-parallel sweep skipped: {study.skipped_reason}.", "warn"))
        return
    rows = [_scaling_row(r, result.throughput_unit) for r in study.runs]
    _measured_table(
        result,
        rows,
        f"torchrun, backend {study.backend}, per-worker batch {study.batch_size}, "
        f"{study.threads_per_rank} intra-op thread(s) per rank, {study.steps} steps after "
        f"{study.warmup_steps}; efficiency = throughput(N) / (N x throughput(1))",
    )
    chosen = result.world.world_size if result.world else "none"
    floor = result.settings.min_scaling_efficiency
    display(show.banner(f"Chosen world size: {chosen}. Rule: {world_size_rule(floor)}.", "info"))
    if not result.target.get("is_trainium"):
        display(
            show.banner(
                f"These ranks share {result.target['name']} cores and talk over "
                f"{study.backend}: the curve shows how this step scales here, not how "
                "NeuronCores and their collectives scale.",
                "info",
            )
        )


def _plan_row(plan: GlobalBatchPlan) -> dict[str, Any]:
    return {
        "plan": plan.name,
        "per core": plan.per_core_batch,
        "workers": plan.world_size,
        "accumulation": plan.accumulation_steps,
        "global batch": plan.global_batch,
        "wanted": plan.target_global_batch,
        "reference": plan.reference_global_batch,
        "optimizer": plan.optimizer,
        "LR rule": plan.lr_rule,
        "LR": "n/a"
        if plan.reference_lr is None
        else f"{plan.reference_lr:g} -> "
        + ("re-tune" if plan.suggested_lr is None else f"{plan.suggested_lr:.3g}"),
        "notes": "; ".join(plan.notes),
    }


def plans(result: RetuneResult) -> None:
    if not result.plans:
        _not_run(result, "plan", "global batch plan")
        return
    rows = [_plan_row(plan) for plan in result.plans]
    display(show.table(rows, caption="Per-core batch x workers x accumulation = global batch"))


def buckets(result: RetuneResult) -> None:
    study = result.buckets
    if study is None:
        _not_run(result, "buckets", "padding buckets", "info")
        return
    display(
        show.key_values(
            {
                "lengths from": study.source,
                "sequences": study.sequences,
                "shortest / median / longest": f"{study.shortest} / {study.median} / "
                f"{study.longest}",
                "distinct lengths": study.distinct,
                "waste limit": f"{study.waste_limit:.0%} of padded tokens",
            },
            caption="Observed sequence lengths",
        )
    )
    rows = [
        {
            "buckets (compiled shapes)": len(plan.boundaries),
            "boundaries": ", ".join(map(str, plan.boundaries)),
            "sequences per bucket": ", ".join(map(str, plan.counts)),
            "padding waste": _share(plan.waste),
            "chosen": "yes" if plan is study.chosen else "",
        }
        for plan in study.plans
    ]
    display(show.table(rows, caption="Padding buckets: each bucket is one shape to compile"))
    for note in study.notes:
        display(show.banner(note, "info"))


def cost(result: RetuneResult) -> None:
    study = result.cost
    if study is None:
        _not_run(result, "cost", "cost table")
        return
    items = f"{study.items:,} {study.unit}"
    rows = [
        {
            "instance": row.instance,
            "pricing": row.pricing,
            "workers": row.workers,
            "$/h": "unknown" if row.usd_per_hour is None else f"{row.usd_per_hour:g}",
            "basis": row.basis,
            f"{study.unit}/s": _rate(row.items_per_second),
            f"{study.unit} per $": _rate(row.items_per_dollar),
            f"hours for {items}": f"{row.hours_for_items:,.2f}",
            f"$ for {items}": "n/a"
            if row.dollars_for_items is None
            else f"{row.dollars_for_items:,.2f}",
            "how": row.how,
            "caveat": row.caveat,
        }
        for row in study.rows
    ]
    display(
        show.table(
            rows,
            caption=f"Cost per {study.unit[:-1]} ({study.prices.currency}) at world size "
            f"{study.world_size}, the data-parallel width recommended above",
        )
    )
    display(show.banner(f"Price: {study.price_note}.", "info"))
    if not result.target.get("is_trainium"):
        display(
            show.banner(
                f"Measured on {result.target['name']}: this says nothing about what a sample "
                "costs on Trainium. Run this notebook on the Trainium instance, then compare the "
                "two runs (`workbench compare`) for a migration's cost.",
                "warn",
            )
        )


def recommendation(result: RetuneResult) -> None:
    rec = result.recommendation
    display(_headline_banner(result), metadata=show.LIVE_ONLY)  # as above
    rows = [{"knob": i.knob, "use": i.value, "evidence": i.evidence} for i in rec.items]
    display(show.table(rows, caption="Recommendation, with the evidence beside each setting"))


def problems(result: RetuneResult) -> None:
    """Failed trials and launches with the end of their output, and stages that did not run."""
    shown = False
    for trial in result.trials:
        if trial.fits or trial.status == OVER_BUDGET:
            continue
        shown = True
        text = f"{trial.stage} trial at batch {trial.batch_size}: {trial.status}"
        detail = trial.diagnosis or trial.oom_evidence or _first_line(trial.error)
        if trial.location:
            detail += f" at {trial.location}"
        display(show.banner(f"{text}: {detail}", "warn"))
    for run in result.scaling.runs if result.scaling else []:
        if run.status in (FAILED, TIMEOUT):
            shown = True
            display(show.banner(f"world size {run.world_size}: {run.reason}", "warn"))
    for stage, reason in result.skipped.items():
        shown = True
        display(show.banner(f"{stage}: not run ({reason})", "info"))
    if not shown:
        display(show.banner("Every trial and launch ran; no stage was skipped.", "ok"))
