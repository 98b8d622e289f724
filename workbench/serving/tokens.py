"""Language models that generate: time to first token and time per output token, prefill and
decode measured apart, over a small grid of prompt and output lengths, at batch 1.

Greedy decoding by hand with the model's KV cache (what `generate` does, step by step), so each
forward is timed on its own and synchronized: the prefill call, each decode call, and between
two decode calls the host's sampling and cache update. A first, warm-up repeat of each cell
compiles whatever shapes it brings; the compile counters say how many.

On Neuron every distinct input shape is a compile (neuron.md section 0 item 4): one graph per
prompt length for the prefill and one per KV-cache length for the decode steps, unless lengths
are padded to buckets, as NxD Inference does. The bucket lengths come from tuning/buckets.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from time import perf_counter
from typing import Any

import torch
from torch import nn

from workbench.errors import describe_error
from workbench.serving.records import COMPILED, ServingSettings, TokenCell, TokenStudy
from workbench.targets.base import Target
from workbench.timing import Measurement
from workbench.tuning.buckets import optimal_boundaries
from workbench.workload import Workload

# The most buckets the statement plans for, as NxD Inference's default bucketing keeps a few.
MAX_BUCKETS = 4


def generates(model: nn.Module) -> bool:
    """Whether the model is a generating language model (Hugging Face's GenerationMixin)."""
    can_generate = getattr(model, "can_generate", None)
    return callable(getattr(model, "generate", None)) and callable(can_generate) and can_generate()


def _graphs(target: Target) -> int | None:
    return target.compile_counters().graphs


def cache_keyword(model: nn.Module) -> str:
    """The forward's KV-cache argument: `cache` from transformers 5.x, `past_key_values`
    before (5.x still takes the old name, with a deprecation warning)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _cache_of(output: Any, keyword: str) -> Any:
    """The KV cache a forward returned, under the name its release uses."""
    return output[keyword] if keyword in output else output.past_key_values


class _Decoder:
    """One greedy generation, every forward timed and synchronized."""

    def __init__(self, forward: Callable[..., Any], target: Target, keyword: str) -> None:
        self.forward = forward
        self.target = target
        self.keyword = keyword

    def run(self, prompt: torch.Tensor, output: int) -> dict[str, list[float]]:
        timings: dict[str, list[float]] = {"decode_call": [], "decode_gap": [], "tpot": []}
        with torch.no_grad():
            start = perf_counter()
            result = self.forward(input_ids=prompt, use_cache=True)
            self.target.synchronize()
            prefill_end = perf_counter()
            token = result.logits[:, -1].argmax(-1, keepdim=True)
            self.target.synchronize()
            emitted = perf_counter()
            timings["prefill"] = [prefill_end - start]
            timings["ttft"] = [emitted - start]
            cache = _cache_of(result, self.keyword)
            call_end = emitted
            for _ in range(output - 1):
                call_start = perf_counter()
                timings["decode_gap"].append(call_start - call_end)
                result = self.forward(input_ids=token, use_cache=True, **{self.keyword: cache})
                self.target.synchronize()
                call_end = perf_counter()
                timings["decode_call"].append(call_end - call_start)
                token = result.logits[:, -1].argmax(-1, keepdim=True)
                cache = _cache_of(result, self.keyword)
                self.target.synchronize()
                now = perf_counter()
                timings["tpot"].append(now - emitted)
                emitted = now
        return timings


def _prompt(vocab: int, length: int, device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(length)
    return torch.randint(vocab, (1, length), generator=generator).to(device)


def measure_cell(
    decoder: _Decoder, vocab: int, prompt: int, output: int, repeats: int, target: Target
) -> tuple[TokenCell, float]:
    """One (prompt, output) cell: a warm-up repeat, then `repeats` measured ones."""
    cell = TokenCell(prompt, output)
    ids = _prompt(vocab, prompt, target.device)
    before = _graphs(target)
    try:
        decoder.run(ids, output)
        middle = _graphs(target)
        pooled: dict[str, list[float]] = {}
        for _ in range(repeats):
            for key, values in decoder.run(ids, output).items():
                pooled.setdefault(key, []).extend(values)
    except Exception as exc:
        cell.error = (
            f"prompt {prompt}, output {output} failed on {target.name}: "
            f"{describe_error(exc).text.splitlines()[0]}"
        )
        return cell, 0.0
    after = _graphs(target)
    if before is not None and middle is not None and after is not None:
        cell.warmup_compiles, cell.measured_compiles = middle - before, after - middle
    cell.ttft = Measurement(pooled["ttft"])
    cell.prefill = Measurement(pooled["prefill"])
    if pooled["tpot"]:
        cell.tpot = Measurement(pooled["tpot"])
        cell.decode_call = Measurement(pooled["decode_call"])
        cell.decode_gap = Measurement(pooled["decode_gap"])
    measured = sum(pooled["ttft"]) + sum(pooled["tpot"])
    return cell, measured


def _statement(
    target: Target,
    mode: str,
    prefill: list[int],
    decode: list[int],
    buckets: tuple[list[int], list[int]],
) -> str:
    return (
        f"On Neuron every distinct shape is one compile: this grid's prompts need {len(prefill)} "
        f"prefill graph(s) and its decode steps {len(decode)} (one per KV-cache length, "
        f"{min(decode, default=0)} to {max(decode, default=0)}); padded to buckets "
        f"({', '.join(map(str, buckets[0]))} for prompts, {', '.join(map(str, buckets[1]))} "
        f"for the cache) they need {len(buckets[0])} + {len(buckets[1])}. Measured here on "
        f"{target.name} ({mode}): the compiles column counts what this target compiled."
    )


def token_study(
    workload: Workload, target: Target, model: nn.Module, settings: ServingSettings
) -> tuple[TokenStudy, list[str], float]:
    """Every cell of the grid that fits the model's positions (`model`: the workload's, on the
    target, in eval mode); the sentences of cells left out; the seconds of timed calls."""
    forward: Callable[..., Any] = model
    if settings.token_mode == COMPILED:
        torch._dynamo.reset()
        forward = target.compile(model)
    decoder = _Decoder(forward, target, cache_keyword(model))
    config: Any = model.config  # a generating Hugging Face model has one
    vocab = int(config.vocab_size)
    limit = workload.max_sequence_length
    cells, skipped = [], []
    measured = 0.0
    for prompt in settings.prompt_lengths:
        for output in settings.output_lengths:
            if limit is not None and prompt + output > limit:
                skipped.append(
                    f"prompt {prompt} + output {output} tokens exceed the model's {limit} "
                    "positions: not measured"
                )
                continue
            cell, seconds = measure_cell(
                decoder, vocab, prompt, output, settings.token_repeats, target
            )
            cells.append(cell)
            measured += seconds
            if cell.error:
                skipped.append(cell.error)
    prefill = sorted({c.prompt for c in cells})
    decode = sorted({c.prompt + step for c in cells for step in range(1, c.output)})
    buckets = (
        optimal_boundaries(prefill, MAX_BUCKETS) if prefill else [],
        optimal_boundaries(decode, MAX_BUCKETS) if decode else [],
    )
    study = TokenStudy(
        settings.token_mode,
        cells,
        len(prefill),
        len(decode),
        buckets[0],
        buckets[1],
        _statement(target, settings.token_mode, prefill, decode, buckets),
    )
    return study, skipped, measured
