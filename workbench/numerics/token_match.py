"""Greedy token match and teacher-forced logit agreement on held-out prompts (AWS autoport's
token gate, equivalence stages 5 and 6), or top-1 agreement for models that are not generative.

The acceptance set: for a language model with `generate`, the first `prompts` held-out sequences
cut to `prompt_tokens`, continued greedily for `generated_tokens` by the fp32 reference; every
run is then fed the reference's sequences (teacher forcing) and its arg-max at each generated
position is its greedy token there. Up to the first divergence this is the run's own greedy
generation; after it, the run is judged on the reference's prefix, as NxD Inference's logit
matching continues past a divergence, so one flip does not count every later token. For a
language model without `generate`, the held-out sequences themselves are fed; for any other
model, the held-out batches, one position per sample.

At each position: the arg-max, KL(P_reference || P_run) and the cosine of the logits, all in
float64 from the model's own outputs at its initial weights, in eval mode. A mismatch where the
reference's own margin between the two tokens is within twice the logit error that the run's
precision makes on the CPU at that position is a near tie, counted as a match: the precision
cannot decide it (the near-tie tolerance of NxD Inference's divergence_difference_tol).
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


@dataclass
class AcceptanceSet:
    """What every run is fed for the agreement gates, and the reference's logits on it."""

    kind: str  # token match | top-1 agreement
    inputs: list[Inputs]  # batches of model inputs on the CPU
    start: int  # first kept position along the sequence (0 for samples)
    count: int | None  # positions kept per sequence (None: every one; samples: one each)
    description: str
    reference_tokens: torch.Tensor | None = None  # per kept position, the reference's arg-max
    reference_logits: torch.Tensor | None = None  # (positions, vocabulary), float64
    exact_error: torch.Tensor | None = None  # per position, max |fp32 - fp64| logit

    @property
    def positions(self) -> int:
        return 0 if self.reference_tokens is None else int(self.reference_tokens.numel())


@dataclass
class PositionStats:
    """One run's logits against the reference's at every kept position."""

    tokens: torch.Tensor  # arg-max
    kl: torch.Tensor  # KL(reference || run), nats
    cosine: torch.Tensor
    error: torch.Tensor  # max |run - reference| logit: a CPU run's is a near-tie tolerance
    margin: torch.Tensor  # reference logit of its token minus of the run's token


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


def _generate(model: torch.nn.Module, template: Inputs, prompts: torch.Tensor, new: int) -> Any:
    if isinstance(template, Mapping):
        config = getattr(model, "config", None)
        pad = getattr(config, "pad_token_id", None)
        if pad is None:
            pad = getattr(config, "eos_token_id", None)
        if isinstance(pad, list):
            pad = pad[0]
        return model.generate(  # type: ignore[operator]
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0 if pad is None else pad,
        )
    return model.generate(prompts, max_new_tokens=new)  # type: ignore[operator]


def build_acceptance_set(
    workload: Workload,
    reference_model: torch.nn.Module,
    held_out: HeldOutBatches,
    prompts: int,
    prompt_tokens: int,
    generated_tokens: int,
) -> tuple[AcceptanceSet, list[str]]:
    """The acceptance set (see module docs) and one sentence per thing that could not be
    judged; `reference_model` is the fp32 reference on the CPU at its initial weights."""
    notes: list[str] = []
    first_inputs = held_out.batches[0][0]
    ids = _token_ids(first_inputs)
    if workload.task != TASK_LANGUAGE_MODEL or ids is None or ids.ndim != 2:
        return AcceptanceSet(
            TOP1,
            [inputs for inputs, _ in held_out.batches],
            0,
            None,
            f"top-1 agreement on the held-out data ({held_out.samples} samples)",
        ), notes
    sequences = torch.cat([_token_ids(inputs) for inputs, _ in held_out.batches])[:prompts]  # type: ignore[misc]
    generate = getattr(reference_model, "generate", None)
    length = sequences.shape[1]
    if not callable(generate):
        notes.append(
            f"The model of workload {workload.name!r} has no generate(), so greedy token match "
            f"is not judged; top-1 agreement, KL and cosine are, teacher-forced on "
            f"{len(sequences)} held-out sequences."
        )
    elif prompt_tokens >= length:
        notes.append(
            f"prompt_tokens {prompt_tokens} leaves no room in the workload's {length}-token "
            "held-out sequences, so greedy token match is not judged; top-1 agreement, KL and "
            "cosine are, teacher-forced on the held-out sequences."
        )
    else:
        prompt = sequences[:, :prompt_tokens]
        try:
            reference_model.eval()
            with torch.no_grad():
                produced = _generate(reference_model, first_inputs, prompt, generated_tokens)
            produced = produced if isinstance(produced, torch.Tensor) else produced.sequences
            new = int(produced.shape[1]) - prompt_tokens
            if new < 1:
                raise ValueError("it generated no token")
        except Exception as exc:  # one sentence; every other gate is still judged
            notes.append(
                f"generate() of workload {workload.name!r} failed on the reference ({exc}), so "
                "greedy token match is not judged; top-1 agreement, KL and cosine are, "
                "teacher-forced on the held-out sequences."
            )
        else:
            return AcceptanceSet(
                TOKEN_MATCH,
                [_sequence_inputs(first_inputs, produced.to(torch.long))],
                prompt_tokens - 1,
                new,
                f"{len(prompt)} held-out prompts of {prompt_tokens} tokens, {new} tokens "
                "generated greedily by the reference, teacher-forced into every run",
            ), notes
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
    ), notes


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


def set_reference(aset: AcceptanceSet, reference: torch.Tensor, fp64: torch.Tensor | None) -> None:
    aset.reference_logits = reference
    aset.reference_tokens = reference.argmax(dim=-1)
    if fp64 is not None:
        aset.exact_error = (reference - fp64).abs().amax(dim=-1)


def position_stats(aset: AcceptanceSet, logits: torch.Tensor) -> PositionStats:
    assert aset.reference_logits is not None and aset.reference_tokens is not None
    reference = aset.reference_logits
    if logits.shape != reference.shape:
        raise ValueError(
            f"the run's logits have shape {tuple(logits.shape)}, the reference's "
            f"{tuple(reference.shape)}"
        )
    finite = torch.isfinite(logits).all(dim=-1)
    p_log = torch.log_softmax(reference, dim=-1)
    q_log = torch.log_softmax(logits.nan_to_num(), dim=-1)
    kl = (p_log.exp() * (p_log - q_log)).sum(dim=-1).clamp_min(0.0)
    cosine = torch.nn.functional.cosine_similarity(reference, logits.nan_to_num(), dim=-1)
    tokens = logits.nan_to_num(nan=-torch.inf).argmax(dim=-1)
    rows = torch.arange(len(tokens))
    margin = reference[rows, aset.reference_tokens] - reference[rows, tokens]
    error = (logits - reference).abs().amax(dim=-1)
    # A position with NaN/Inf logits agrees with nothing.
    return PositionStats(
        tokens=torch.where(finite, tokens, -1),
        kl=torch.where(finite, kl, torch.inf),
        cosine=torch.where(finite, cosine, -1.0),
        error=torch.where(finite, error, torch.inf),
        margin=torch.where(finite, margin, torch.inf),
    )


def _where(aset: AcceptanceSet, index: int) -> str:
    if aset.count is None:
        return f"position {index + 1}"
    return f"prompt {index // aset.count + 1}, generated token {index % aset.count + 1}"


def agreement(
    aset: AcceptanceSet,
    stats: PositionStats,
    tolerance: torch.Tensor | None,
    cosine_gate: float,
    baseline: str | None,
) -> Agreement:
    """The agreement of one run; `tolerance` is the per-position logit error of the CPU run at
    the run's precision (None: no near ties)."""
    assert aset.reference_tokens is not None
    exact = stats.tokens == aset.reference_tokens
    near = torch.zeros_like(exact)
    if tolerance is not None:
        near = ~exact & (stats.margin <= 2 * tolerance)
    matched = exact | near
    misses = (~matched).nonzero().flatten()
    compared = int(exact.numel())
    return Agreement(
        kind=aset.kind,
        compared=compared,
        exact_matches=int(exact.sum()),
        near_ties=int(near.sum()),
        rate=float(matched.double().mean()) if compared else 0.0,
        first_mismatch=_where(aset, int(misses[0])) if len(misses) else None,
        kl_p95=float(torch.quantile(stats.kl, 0.95, interpolation="higher")),
        kl_max=float(stats.kl.max()),
        cosine_p5=float(torch.quantile(stats.cosine, 0.05, interpolation="lower")),
        cosine_below_share=float((stats.cosine < cosine_gate).double().mean()),
        baseline=baseline,
    )
