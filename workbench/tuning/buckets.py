"""Padding buckets for sequence workloads: few distinct shapes, little padding.

On Neuron every distinct input shape is a compile (shapes are static on both torch-neuronx
paths; neuron.md section 0 item 4), so variable-length sequences are padded up to a handful of
bucket lengths. For each bucket count the boundaries minimising padded tokens are found by
dynamic programming over the sorted distinct lengths (an exact 1-D partition); the report shows
the waste of every count so the trade between compiles and padding is visible.
"""

from __future__ import annotations

import bisect
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import BadInput

# Above this many distinct lengths, boundaries are chosen among this many quantiles of them,
# which keeps the O(buckets x candidates^2) search fast; the waste is still exact.
MAX_CANDIDATES = 512


@dataclass
class BucketPlan:
    boundaries: list[int]  # padded lengths, ascending; the last is the longest sequence
    counts: list[int]  # sequences per bucket
    real_tokens: int
    padded_tokens: int

    @property
    def waste(self) -> float:
        """Share of the padded tokens that are padding."""
        return 1 - self.real_tokens / self.padded_tokens if self.padded_tokens else 0.0


@dataclass
class BucketStudy:
    source: str  # where the lengths came from
    sequences: int
    shortest: int
    median: int
    longest: int
    distinct: int
    waste_limit: float
    plans: list[BucketPlan] = field(default_factory=list)  # 1, 2, ... buckets
    chosen: BucketPlan | None = None
    notes: list[str] = field(default_factory=list)


def evaluate(lengths: Sequence[int], boundaries: Sequence[int]) -> BucketPlan:
    """Pad each length up to the smallest boundary that holds it."""
    bounds = sorted(boundaries)
    counts = [0] * len(bounds)
    padded = 0
    for length in lengths:
        index = bisect.bisect_left(bounds, length)
        counts[index] += 1
        padded += bounds[index]
    return BucketPlan(list(bounds), counts, sum(lengths), padded)


def optimal_boundaries(lengths: Sequence[int], buckets: int) -> list[int]:
    """At most `buckets` boundaries minimising padded tokens (the longest length is always
    one: nothing may be cut)."""
    histogram = Counter(lengths)
    values = sorted(histogram)
    candidates = _candidates(values)
    # Sequences per candidate: each length counts at the first candidate that holds it.
    weight = [0] * len(candidates)
    for value, count in histogram.items():
        weight[bisect.bisect_left(candidates, value)] += count
    prefix = [0]
    for w in weight:
        prefix.append(prefix[-1] + w)
    n = len(candidates)
    buckets = min(buckets, n)
    inf = float("inf")
    # cost[j]: least padded tokens covering candidates 0..j-1 with the last boundary at j-1.
    cost = [0.0] + [inf] * n
    choice: list[list[int]] = []
    for _ in range(buckets):
        new_cost = [inf] * (n + 1)
        back = [0] * (n + 1)
        for j in range(1, n + 1):
            top = candidates[j - 1]
            for i in range(j):
                if cost[i] == inf:
                    continue
                padded = cost[i] + top * (prefix[j] - prefix[i])
                if padded < new_cost[j]:
                    new_cost[j], back[j] = padded, i
        choice.append(back)
        cost = new_cost
    boundaries, j = [], n
    for back in reversed(choice):
        if j == 0:
            break
        boundaries.append(candidates[j - 1])
        j = back[j]
    return sorted(set(boundaries))


def _candidates(values: list[int]) -> list[int]:
    if len(values) <= MAX_CANDIDATES:
        return values
    step = (len(values) - 1) / (MAX_CANDIDATES - 1)
    return sorted({values[round(i * step)] for i in range(MAX_CANDIDATES)} | {values[-1]})


def plan_buckets(
    lengths: Sequence[int], max_buckets: int, waste_limit: float, source: str
) -> BucketStudy:
    """Plans for 1..max_buckets buckets; the chosen one is the fewest buckets whose padding
    waste stays within `waste_limit` (else the least waste found)."""
    if not lengths:
        raise BadInput("sequence lengths: the list is empty.")
    if any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in lengths):
        raise BadInput("sequence lengths must be whole numbers of 1 or more.")
    if max_buckets < 1:
        raise BadInput(f"max_buckets {max_buckets} must be 1 or more.")
    if not 0 <= waste_limit < 1:
        raise BadInput(f"max_padding_waste {waste_limit} must lie in [0, 1).")
    ordered = sorted(lengths)
    study = BucketStudy(
        source,
        len(ordered),
        ordered[0],
        ordered[len(ordered) // 2],
        ordered[-1],
        len(set(ordered)),
        waste_limit,
    )
    if study.distinct > MAX_CANDIDATES:
        study.notes.append(
            f"{study.distinct} distinct lengths: boundaries were chosen among "
            f"{MAX_CANDIDATES} quantiles of them (the waste shown is exact)"
        )
    seen: set[tuple[int, ...]] = set()
    for count in range(1, max_buckets + 1):
        plan = evaluate(lengths, optimal_boundaries(lengths, count))
        if tuple(plan.boundaries) in seen:
            break  # no more distinct lengths to split on
        seen.add(tuple(plan.boundaries))
        study.plans.append(plan)
    within = [p for p in study.plans if p.waste <= waste_limit]
    study.chosen = within[0] if within else min(study.plans, key=lambda p: p.waste)
    if not within:
        study.notes.append(
            f"no plan with up to {max_buckets} buckets keeps padding within {waste_limit:.0%}: "
            "the one with the least waste is chosen; raise max_buckets to trade more compiled "
            "shapes for less padding"
        )
    return study


def read_lengths(values: Sequence[int], path: str) -> tuple[list[int], str]:
    """Lengths from the parameter list, or from a file (a JSON list, or whitespace-separated
    numbers such as one per line), and where they came from."""
    if values and path:
        raise BadInput("give sequence_lengths or sequence_lengths_file, not both.")
    if not path:
        return [int(v) for v in values], f"sequence_lengths parameter ({len(values)} values)"
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"sequence_lengths_file {path!r}: {exc.strerror or exc}.") from None
    try:
        parsed = json.loads(text) if text.lstrip().startswith("[") else text.split()
        lengths = [int(v) for v in parsed]
    except (ValueError, TypeError):
        raise BadInput(
            f"sequence_lengths_file {path!r}: expected a JSON list of integers or one integer "
            "per line."
        ) from None
    return lengths, f"{file.name} ({len(lengths)} values)"
