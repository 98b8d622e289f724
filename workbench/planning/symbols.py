"""Reading a measured tensor's size as a formula of the model's dimensions.

The scaled-down copy a plan measures gives each dimension a distinct prime ("atom"): batch 19,
sequence 29, KV heads 5, and so on. A saved tensor of 19 x 29 x 770 elements then factors into
batch x sequence x (5 x 7 x 2 x 11), that is batch x sequence x kv_heads x groups x 2 x
half_head_dim, with nothing left over; the same tensor of the full-size model has the same
formula with the real dimensions put in. Primes that are no atom stay as constant factors
(the 3 of a fused qkv, the 4 of a GPT-2 MLP).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

BATCH = "batch"
SEQ = "seq"
KV_HEADS = "kv_heads"
GROUPS = "groups"  # attention heads per KV head
HALF_HEAD_DIM = "half_head_dim"  # the probe's head_dim is 2 x 11: rotary halves read right
HIDDEN = "hidden"
INTERMEDIATE = "intermediate"
VOCAB = "vocab"

# Probe values: distinct primes above 3, so a constant 2 or 3 never reads as a dimension.
BATCH_PROBES = (19, 23)
# An hf: config's probes, (batch, sequence): the first is read into formulas; each of the others
# changes one of the two, which is all the check of the formulas and the working-set fit need
# (a fourth, both changed, cost a quarter more of the command's time and added no information).
HF_PROBES = ((19, 29), (23, 29), (19, 31))
WIDTH_ATOMS = {KV_HEADS: 5, GROUPS: 7, HALF_HEAD_DIM: 11, INTERMEDIATE: 13, VOCAB: 17, HIDDEN: 37}


def factorize(number: int) -> dict[int, int]:
    """Prime factors with their powers (trial division: sizes here are small)."""
    factors: dict[int, int] = {}
    remaining, divisor = number, 2
    while divisor * divisor <= remaining:
        while remaining % divisor == 0:
            factors[divisor] = factors.get(divisor, 0) + 1
            remaining //= divisor
        divisor += 1
    if remaining > 1:
        factors[remaining] = factors.get(remaining, 0) + 1
    return factors


@dataclass(frozen=True)
class Formula:
    """constant x product(dimension ** power)."""

    constant: int
    powers: tuple[tuple[str, int], ...]

    def value(self, dims: Mapping[str, float]) -> float:
        total = float(self.constant)
        for name, power in self.powers:
            total *= dims[name] ** power
        return total

    def text(self) -> str:
        parts = [f"{name}^{p}" if p > 1 else name for name, p in self.powers]
        if self.constant != 1 or not parts:
            parts.insert(0, str(self.constant))
        return " x ".join(parts)


def decode(number: int, atoms: Mapping[int, str]) -> Formula:
    """`number` as a formula over `atoms` (prime -> dimension name)."""
    constant = 1
    powers: dict[str, int] = {}
    for prime, power in factorize(number).items():
        name = atoms.get(prime)
        if name is None:
            constant *= prime**power
        else:
            powers[name] = powers.get(name, 0) + power
    return Formula(constant, tuple(sorted(powers.items())))
