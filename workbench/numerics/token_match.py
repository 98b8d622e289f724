"""Token match and logit matching on held-out prompts, as NxD Inference checks a port
(`utils/accuracy.py`: `check_accuracy`, `check_accuracy_logits`) and AWS's autoport gate counts
it, or top-1 agreement for models that are not generative.

The acceptance set: for a language model with `generate`, the first `prompts` held-out sequences
cut to `prompt_tokens`. Each run, the fp32 reference included, continues them greedily for
`generated_tokens` through its own forward (device, precision, compiler), and its tokens are
compared with the reference's position by position, with exact equality (NxD Inference
`check_accuracy`); the share equal is the exact rate, AWS's greedy token match. Greedy decoding
here is the arg-max of the logits at the last filled position of a fixed-length buffer (the
prompt, the tokens so far, then padding): a causal model's logits there do not depend on the
padding, and one shape means a compiled run compiles once, as Neuron's fixed buckets do. A
generation config's logits processors are not applied.

Logit matching (NxD Inference `check_accuracy_logits`, which calls torch-neuronx's
`logit_validation`): the run is fed the reference's sequence (teacher forcing), which is what
`logit_validation` does when it restarts generation from the reference's prefix after a
divergence, so one flip does not make every later token differ. At every generated position the
run's logits, less the constant shift a least-squares fit finds, must lie within the top-k
tolerances of `NXD_TOLERANCE_MAP` of the reference's; where the run's arg-max differs (a
divergence), the run's own logit of its token may exceed its logit of the reference's token by
less than the divergence tolerance (NxD's default 0.001). A divergence beyond that tolerance is
still excused as a tie when the reference's own margin between the two tokens is within twice
the logit error that the run's precision makes on the CPU at that position AND the run's own
logit error there is within twice that error too: the precision cannot decide such a tie, while
a run whose logits moved further (a miscompile) has no such excuse.

For a language model without `generate`, the held-out sequences themselves are fed, teacher
forced, and for any other model the held-out batches, one position per sample: top-1 agreement,
with ties excused by the same rule (a workbook gate: AWS's is for generating models).

At each position also KL(P_reference || P_run) and the cosine of the logits, all in float64 from
the model's own outputs at its initial weights, in eval mode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from workbench.numerics.acceptance_records import TOKEN_MATCH, TOP1, Agreement
from workbench.numerics.capture import RunSpec, as_fp32_cpu
from workbench.numerics.validation import HeldOutBatches
from workbench.workload import TASK_LANGUAGE_MODEL, Inputs, Workload, primary_output

LABEL_KEYS = ("labels",)  # inputs that only feed a model's own loss: not given when teacher forcing
# torch-neuronx `testing/validation.py` DEFAULT_TOLERANCE_MAP, which NxD Inference's
# check_accuracy_logits uses unless given another: top k of the reference's logits (None: all)
# -> (atol, rtol), the error being (|run - reference| - atol) / max |reference logit|.
NXD_TOLERANCE_MAP: dict[int | None, tuple[float, float]] = {
    None: (1e-5, 0.05),
    1000: (1e-5, 0.03),
    50: (1e-5, 0.02),
    5: (1e-5, 0.01),
}
# Ties: within this many times the precision's own CPU logit error (see module docs).
TIE_FACTOR = 2.0


@dataclass
class AcceptanceSet:
    """What every run is fed for the agreement gates, and the reference's logits on it."""

    kind: str  # token match | top-1 agreement
    inputs: list[Inputs]  # batches of model inputs on the CPU (token match: the reference's
    # prompts and generated tokens, teacher-forced into every run)
    start: int  # first kept position along the sequence (0 for samples)
    count: int | None  # positions kept per sequence (None: every one; samples: one each)
    description: str
    reference_tokens: torch.Tensor | None = None  # per kept position, the reference's arg-max
    reference_logits: torch.Tensor | None = None  # (positions, vocabulary), float64
    exact_error: torch.Tensor | None = None  # per position, max |fp32 - fp64| logit
    template: Inputs | None = None  # token match: the workload's inputs, for their shape
    prompts: torch.Tensor | None = None  # token match: (prompts, prompt tokens)
    reference_generated: torch.Tensor | None = None  # token match: (prompts, generated tokens)

    @property
    def positions(self) -> int:
        return 0 if self.reference_tokens is None else int(self.reference_tokens.numel())


@dataclass
class PositionStats:
    """One run's logits against the reference's at every kept position."""

    tokens: torch.Tensor  # arg-max, teacher-forced
    kl: torch.Tensor  # KL(reference || run), nats
    cosine: torch.Tensor
    error: torch.Tensor  # max |run - reference| logit: a CPU run's is a tie tolerance
    margin: torch.Tensor  # reference logit of its token minus of the run's token
    divergence_difference: torch.Tensor  # run's logit of its token minus of the reference's
    topk_errors: torch.Tensor  # (positions, len(NXD_TOLERANCE_MAP)), NxD's relative errors
    generated: torch.Tensor | None = None  # token match: the run's free-running tokens, flat


def _token_ids(inputs: Inputs) -> torch.Tensor | None:
    if isinstance(inputs, Mapping):
        value = inputs.get("input_ids")
        return value if isinstance(value, torch.Tensor) else None
    first = inputs[0] if inputs else None
    return first if isinstance(first, torch.Tensor) and not first.is_floating_point() else None


def _first_samples(inputs: Inputs, count: int) -> Inputs:
    if isinstance(inputs, Mapping):
        return {
            k: v[:count] if isinstance(v, torch.Tensor) else v
            for k, v in inputs.items()
            if k not in LABEL_KEYS
        }
    return tuple(v[:count] if isinstance(v, torch.Tensor) else v for v in inputs)


def _sequence_inputs(template: Inputs, ids: torch.Tensor) -> Inputs:
    """The model inputs for token ids `ids`, shaped as the workload's own (a dict with an
    all-ones attention mask where the workload gives one, or one positional tensor)."""
    if isinstance(template, Mapping):
        inputs: dict[str, torch.Tensor] = {"input_ids": ids}
        if "attention_mask" in template:
            inputs["attention_mask"] = torch.ones_like(ids)
        return inputs
    return (ids,)


def greedy_generate(
    forward: Callable[..., Any],
    spec: RunSpec,
    workload: Workload,
    template: Inputs,
    prompts: torch.Tensor,
    new: int,
) -> torch.Tensor:
    """`new` tokens per prompt, each the arg-max of the run's logits at the last filled position
    of a fixed-length buffer (see module docs): (prompts, new) on the CPU."""
    length = prompts.shape[1]
    buffer = torch.zeros(prompts.shape[0], length + new, dtype=torch.long)
    buffer[:, :length] = prompts
    with torch.no_grad(), spec.autocast():
        for step in range(new):
            position = length - 1 + step
            outputs = as_fp32_cpu(
                workload.forward(forward, spec.place(_sequence_inputs(template, buffer.clone())))
            )
            logits = primary_output(outputs)[:, position].double()
            buffer[:, position + 1] = logits.nan_to_num(nan=-torch.inf).argmax(dim=-1)
    return buffer[:, length:]


def build_acceptance_set(
    workload: Workload,
    reference_model: torch.nn.Module,
    held_out: HeldOutBatches,
    prompts: int,
    prompt_tokens: int,
    generated_tokens: int,
    spec: RunSpec,
) -> tuple[AcceptanceSet, list[str]]:
    """The acceptance set (see module docs) and one sentence per thing that could not be
    judged; `reference_model` is the fp32 reference on the CPU at its initial weights, run with
    `spec`."""
    first_inputs = held_out.batches[0][0]
    ids = _token_ids(first_inputs)
    if workload.task != TASK_LANGUAGE_MODEL or ids is None or ids.ndim != 2:
        return AcceptanceSet(
            TOP1,
            [inputs for inputs, _ in held_out.batches],
            0,
            None,
            f"top-1 agreement on the held-out data ({held_out.samples} samples)",
        ), []
    sequences = torch.cat([_token_ids(inputs) for inputs, _ in held_out.batches])[:prompts]  # type: ignore[misc]
    no_greedy = _why_no_greedy(workload, reference_model, sequences, prompt_tokens)
    if no_greedy is not None:
        return _teacher_forced(first_inputs, sequences, prompts), [no_greedy]
    prompt = sequences[:, :prompt_tokens].to(torch.long)
    try:
        reference_model.eval()
        generated = greedy_generate(
            reference_model, spec, workload, first_inputs, prompt, generated_tokens
        )
    except Exception as exc:  # one sentence; every other gate is still judged
        return _teacher_forced(first_inputs, sequences, prompts), [
            f"Greedy generation of workload {workload.name!r} failed on the reference "
            f"({exc}), so greedy token match is not judged; top-1 agreement, KL and cosine "
            "are, teacher-forced on the held-out sequences."
        ]
    return AcceptanceSet(
        TOKEN_MATCH,
        [_sequence_inputs(first_inputs, torch.cat([prompt, generated], dim=1))],
        prompt_tokens - 1,
        generated_tokens,
        f"{len(prompt)} held-out prompts of {prompt_tokens} tokens, {generated_tokens} "
        "tokens generated greedily by every run and compared with the reference's "
        "(exact), the reference's sequence teacher-forced for logit matching",
        template=first_inputs,
        prompts=prompt,
        reference_generated=generated,
    ), []


def _why_no_greedy(
    workload: Workload,
    reference_model: torch.nn.Module,
    sequences: torch.Tensor,
    prompt_tokens: int,
) -> str | None:
    """Why greedy token match cannot be judged before generating anything, or None."""
    if not callable(getattr(reference_model, "generate", None)):
        return (
            f"The model of workload {workload.name!r} has no generate(), so greedy token match "
            f"is not judged; top-1 agreement, KL and cosine are, teacher-forced on "
            f"{len(sequences)} held-out sequences."
        )
    length = sequences.shape[1]
    if prompt_tokens >= length:
        return (
            f"prompt_tokens {prompt_tokens} leaves no room in the workload's {length}-token "
            "held-out sequences, so greedy token match is not judged; top-1 agreement, KL and "
            "cosine are, teacher-forced on the held-out sequences."
        )
    return None


def _teacher_forced(first_inputs: Inputs, sequences: torch.Tensor, prompts: int) -> AcceptanceSet:
    """Top-1 agreement at every position of the held-out sequences, fed whole."""
    return AcceptanceSet(
        TOP1,
        [
            _sequence_inputs(first_inputs, sequences)
            if isinstance(first_inputs, Mapping)
            else _first_samples(first_inputs, prompts)
        ],
        0,
        None,
        f"top-1 agreement at every position of {len(sequences)} held-out sequences "
        "(teacher-forced)",
    )


def logits_on(
    forward: Callable[..., Any], spec: RunSpec, workload: Workload, aset: AcceptanceSet
) -> torch.Tensor:
    """The run's logits at the kept positions, (positions, vocabulary) in float64 on the CPU."""
    kept = []
    with torch.no_grad(), spec.autocast():
        for inputs in aset.inputs:
            outputs = as_fp32_cpu(workload.forward(forward, spec.place(inputs)))
            logits = primary_output(outputs).double()
            if logits.ndim == 3:
                stop = None if aset.count is None else aset.start + aset.count
                logits = logits[:, aset.start : stop]
            kept.append(logits.reshape(-1, logits.shape[-1]))
    return torch.cat(kept)


def generated_by(
    forward: Callable[..., Any], spec: RunSpec, workload: Workload, aset: AcceptanceSet
) -> torch.Tensor | None:
    """A token-match run's own greedy tokens, flat in the order of the kept positions."""
    if aset.prompts is None or aset.template is None or aset.count is None:
        return None
    return greedy_generate(
        forward, spec, workload, aset.template, aset.prompts, aset.count
    ).reshape(-1)


def set_reference(aset: AcceptanceSet, reference: torch.Tensor, fp64: torch.Tensor | None) -> None:
    aset.reference_logits = reference
    aset.reference_tokens = reference.argmax(dim=-1)
    if fp64 is not None:
        aset.exact_error = (reference - fp64).abs().amax(dim=-1)


def _decimals(value: float) -> int:
    """Digits after the decimal point of `value` as Python writes it (NxD rounds its relative
    error to the tolerance's own digits before comparing)."""
    text = repr(value)
    exponent = 0
    if "e" in text:
        text, power = text.split("e")
        exponent = int(power)
    digits = max(-exponent, 0)
    if "." in text:
        digits += len(text.split(".")[1].rstrip("0") or "")
    return digits


def topk_errors(reference: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """NxD's relative logit error per position and top-k of `NXD_TOLERANCE_MAP`: the run's
    logits less their least-squares constant shift against the reference's, then
    max over the reference's top k of (|run - reference| - atol) / max |reference|."""
    mean_ref = reference.mean(dim=-1, keepdim=True)
    mean_run = logits.mean(dim=-1, keepdim=True)
    centred = reference - mean_ref
    variance = (centred * centred).sum(dim=-1, keepdim=True)
    covariance = (centred * (logits - mean_run)).sum(dim=-1, keepdim=True)
    slope = torch.where(variance > 0, covariance / variance.clamp_min(1e-300), 0.0)
    shifted = logits - (mean_run - slope * mean_ref)
    scale = reference.abs().amax(dim=-1, keepdim=True)
    columns = []
    for k, (atol, _) in NXD_TOLERANCE_MAP.items():
        error = (shifted - reference).abs() - atol
        if k is not None and k < reference.shape[-1]:
            top = reference.topk(k, dim=-1).indices
            error = error.gather(-1, top)
        columns.append(error.amax(dim=-1) / scale.squeeze(-1))
    return torch.stack(columns, dim=-1)


def position_stats(
    aset: AcceptanceSet, logits: torch.Tensor, generated: torch.Tensor | None = None
) -> PositionStats:
    assert aset.reference_logits is not None and aset.reference_tokens is not None
    reference = aset.reference_logits
    if logits.shape != reference.shape:
        raise ValueError(
            f"the run's logits have shape {tuple(logits.shape)}, the reference's "
            f"{tuple(reference.shape)}"
        )
    finite = torch.isfinite(logits).all(dim=-1)
    clean = logits.nan_to_num()
    p_log = torch.log_softmax(reference, dim=-1)
    q_log = torch.log_softmax(clean, dim=-1)
    kl = (p_log.exp() * (p_log - q_log)).sum(dim=-1).clamp_min(0.0)
    cosine = torch.nn.functional.cosine_similarity(reference, clean, dim=-1)
    tokens = logits.nan_to_num(nan=-torch.inf).argmax(dim=-1)
    rows = torch.arange(len(tokens))
    margin = reference[rows, aset.reference_tokens] - reference[rows, tokens]
    difference = clean[rows, tokens] - clean[rows, aset.reference_tokens]
    error = (logits - reference).abs().amax(dim=-1)
    errors = topk_errors(reference, clean)
    # A position with NaN/Inf logits agrees with nothing.
    return PositionStats(
        tokens=torch.where(finite, tokens, -1),
        kl=torch.where(finite, kl, torch.inf),
        cosine=torch.where(finite, cosine, -1.0),
        error=torch.where(finite, error, torch.inf),
        margin=torch.where(finite, margin, torch.inf),
        divergence_difference=torch.where(finite, difference, torch.inf),
        topk_errors=torch.where(finite.unsqueeze(-1), errors, torch.inf),
        generated=generated,
    )


def _where(aset: AcceptanceSet, index: int) -> str:
    if aset.count is None:
        return f"position {index + 1}"
    return f"prompt {index // aset.count + 1}, generated token {index % aset.count + 1}"


def _within_nxd_tolerances(errors: torch.Tensor) -> torch.Tensor:
    """Per position: every top-k error, rounded as NxD rounds it, within its rtol."""
    within = torch.ones(errors.shape[0], dtype=torch.bool)
    for column, (_, rtol) in enumerate(NXD_TOLERANCE_MAP.values()):
        rounded = torch.round(errors[:, column], decimals=_decimals(rtol))
        within &= rounded <= rtol
    return within


def agreement(
    aset: AcceptanceSet,
    stats: PositionStats,
    tolerance: torch.Tensor | None,
    cosine_gate: float,
    baseline: str | None,
    divergence_tolerance: float = 0.001,
) -> Agreement:
    """The agreement of one run (see module docs); `tolerance` is the per-position logit error
    of the CPU run at the run's precision (None: no tie is excused)."""
    assert aset.reference_tokens is not None
    forced_exact = stats.tokens == aset.reference_tokens
    tie = torch.zeros_like(forced_exact)
    if tolerance is not None:
        bound = TIE_FACTOR * tolerance
        tie = ~forced_exact & (stats.margin <= bound) & (stats.error <= bound)
    free_running = stats.generated is not None and aset.reference_generated is not None
    if free_running:
        assert stats.generated is not None and aset.reference_generated is not None
        exact = stats.generated == aset.reference_generated.reshape(-1)
        rate_matched = exact  # AWS's and NxD's token match: exact equality only
    else:
        exact = forced_exact
        rate_matched = exact | tie
    misses = (~exact).nonzero().flatten()
    compared = int(exact.numel())
    found = Agreement(
        kind=aset.kind,
        compared=compared,
        exact_matches=int(exact.sum()),
        near_ties=int(tie.sum()),
        rate=float(rate_matched.double().mean()) if compared else 0.0,
        first_mismatch=_where(aset, int(misses[0])) if len(misses) else None,
        kl_p95=float(torch.quantile(stats.kl, 0.95, interpolation="higher")),
        kl_max=float(stats.kl.max()),
        cosine_p5=float(torch.quantile(stats.cosine, 0.05, interpolation="lower")),
        cosine_below_share=float((stats.cosine < cosine_gate).double().mean()),
        baseline=baseline,
        free_running=free_running,
    )
    if aset.kind == TOKEN_MATCH:
        within = _within_nxd_tolerances(stats.topk_errors)
        diverged = ~forced_exact
        accepted = stats.divergence_difference < divergence_tolerance
        bad_divergence = diverged & ~accepted & ~tie
        failing = (~within | bad_divergence).nonzero().flatten()
        found.divergences = int(diverged.sum())
        found.divergence_tolerance = divergence_tolerance
        found.divergence_difference_max = (
            float(stats.divergence_difference[diverged].max()) if bool(diverged.any()) else 0.0
        )
        # Below zero means within atol; shown as 0.
        found.topk_errors = {
            "all" if k is None else f"top {k}": max(0.0, float(stats.topk_errors[:, column].max()))
            for column, k in enumerate(NXD_TOLERANCE_MAP)
        }
        found.positions_outside_tolerance = int((~within).sum())
        found.logits_matched = len(failing) == 0
        found.first_logit_failure = _where(aset, int(failing[0])) if len(failing) else None
    return found
