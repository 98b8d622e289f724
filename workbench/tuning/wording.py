"""The sentences of notebook 04's report: the headline, why the plan's batch is not the fastest,
what may explain a faster batch, and the verdict's rule. They are worded from the records
(records.py); nothing here judges a run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.markup import named_list
from workbench.timing import FLUCTUATION_SEVERE, HOST_LOAD_RULE
from workbench.tuning.trials import COMPILER_HOST_RAM, Trial

if TYPE_CHECKING:  # the records import this module to word their headline
    from workbench.tuning.records import RetuneMeasurements, RetuneResult


RETUNING_RULE = (
    "blocker: no batch size of the range fits, unless the memory-fit plan predicts that one core "
    "cannot hold the model and lays it out over several (then attention, naming the layout); "
    "attention: a trial or a data-parallel launch "
    "broke for a reason other than memory (an error, a crash, a timeout), the compiler ran out "
    "of host RAM in a trial (the search stops there), a trial compiled during its timed steps "
    "(its throughput includes compile time), accumulated micro-batches do not reproduce one "
    "big batch's gradients, a measurement a choice is read from (a sweep trial, a DataLoader "
    "setting, a launch) stayed noisy after its re-measures (relative IQR above "
    f"{FLUCTUATION_SEVERE:.0%}), or one ran while the machine was loaded ({HOST_LOAD_RULE}); "
    "pass otherwise"
)


def count(names: list[str]) -> str:
    """ "1 measurement", "3 measurements"."""
    return f"{len(names)} measurement{'s' if len(names) > 1 else ''}"


def steady_recompiles(trials: list[Trial]) -> str | None:
    """The trials that compiled during their timed steps, in one sentence; None if none did."""
    unsteady = [t for t in trials if t.steady_compiles]
    if not unsteady:
        return None
    first = unsteady[0]
    return (
        f"{len(unsteady)} trial(s) recompiled during steady state, first at batch "
        f"{first.batch_size}: {first.steady_compiles[0].sentence()}"
    )


def headline(result: RetuneResult) -> str:
    """The measured result in a sentence, after the plan's where the plan leads."""
    measured = _measured_headline(result)
    if result.plan is not None and result.plan_leads:
        return f"{result.plan.headline()} {measured}"
    return measured


def _measured_headline(result: RetuneResult) -> str:
    rec, search = result.recommendation, result.search
    fit = search.largest_fit
    lead = result.measured_label[0].upper() + result.measured_label[1:]
    cut = search.compiler_host_ram is not None
    if fit is None:
        if cut:
            return f"{lead}: {COMPILER_HOST_RAM}: {search.stopped}."
        return f"{lead}: no batch size from {search.low} fits: {search.stopped}."
    text = (
        f"{lead}: batches up to {fit} fit the "
        f"{result.budget.total_bytes / 2**30:.3g} GiB budget ({len(search.trials)} search "
        "trials)"
    )
    if cut:
        text += f"; {COMPILER_HOST_RAM}: {search.stopped}"
    if result.choice:
        text += "; " + _choice_clause(result)
    if result.plans:
        text += f"; the plan is {result.plans[0].equation()}{plan_reason(result)}"
    if rec.dataloader_workers is not None:
        text += f" with {rec.dataloader_workers} DataLoader worker(s)"
    if rec.buckets:
        text += f" and padding buckets {rec.buckets}"
    return text + "." + _unsettled_sentence(result)


def unsettled_clauses(result: RetuneMeasurements, noisy_says: str, loaded_says: str) -> list[str]:
    """One clause per kind of unsettled measurement a choice is read from (still noisy, timed
    on a loaded machine), each a template filled with {count} and up to three {names}."""
    clauses = []
    for names, says in ((result.noisy(), noisy_says), (result.loaded(), loaded_says)):
        if names:
            clauses.append(says.format(count=count(names), names=named_list(names, 3)))
    return clauses


def _unsettled_sentence(result: RetuneMeasurements) -> str:
    """That the choices above are provisional, and what to do; which measurements did not
    settle, and how, is the verdict's to say (it names them), so it is not said twice."""
    limit = result.remeasure.limit
    unsettled = sum(
        1
        for _, m, _ in result.decision_measurements()
        if m.relative_iqr > limit or (m.loaded and m.host is not None)
    )
    if not unsettled:
        return ""
    return (
        f" The choices read from the {unsettled} measurement{'s' if unsettled > 1 else ''} "
        "the verdict names as unsettled are provisional: re-run on a quiet machine."
    )


def _choice_clause(result: RetuneMeasurements) -> str:
    """The sweep's chosen batch, and the fastest one where its noise made them a tie."""
    choice = result.choice
    assert choice is not None
    unit = result.throughput_unit
    chosen = f"{choice.batch_size}, {choice.throughput:,.0f} {unit} in its steady state"
    timing = "the search's short fit checks and the launches time batches their own way"
    if choice.batch_size == choice.best_batch_size:
        return f"the batch-size sweep's throughput-best per-core batch is {chosen} ({timing})"
    return (
        f"the batch-size sweep's chosen per-core batch is {chosen}, the smallest that its "
        f"noise cannot tell from the fastest, {choice.best_batch_size} at "
        f"{choice.best_throughput:,.0f} {unit} ({timing})"
    )


def sweep_caveat(result: RetuneMeasurements, batch: int) -> str:
    """Why the sweep's figure at `batch` may be noise or load rather than the batch: its IQR
    above the re-measuring limit, the machine loaded while timed; empty when neither."""
    trial = next((t for t in result.sweep if t.batch_size == batch and t.steady), None)
    if trial is None or trial.steady is None:
        return ""
    measurement, parts = trial.steady, []
    if measurement.relative_iqr > result.remeasure.limit:
        parts.append(f"IQR {measurement.relative_iqr:.0%}")
    if measurement.loaded and measurement.host is not None:
        parts.append(f"timed on a loaded machine: {measurement.host.shares()}")
    return "; ".join(parts)


def plan_reason(result: RetuneMeasurements) -> str:
    """Why the plan's per-core batch is not the fastest one, when it is not."""
    plan, choice = result.plans[0], result.choice
    if choice is None or plan.per_core_batch == choice.batch_size:
        return ""
    if plan.global_batch == plan.reference_global_batch:
        return (
            f", not {choice.batch_size} per core, because it keeps the recipe's global "
            f"batch of {plan.reference_global_batch}, so the training dynamics stay as they "
            "are (the faster batch is the alternative in the plans, with its learning rate)"
        )
    return (
        f", not {choice.batch_size} per core, to reach the global batch of "
        f"{plan.target_global_batch}"
    )
