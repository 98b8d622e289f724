"""The layouts AWS and Hugging Face publish as running (or reports show failing), from
workbench/data/published_layouts.json, each with its source.

A plan is compared only with rows for the same model, recognized by its sizes (hidden width,
layers, attention and KV heads, FFN width, vocabulary, experts), on the same instance type and
count, in the same mode, at the same sequence length. A model no row describes gets "no
published layout for this model"; a model with rows elsewhere gets those rows named, never
another model's layout borrowed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from workbench.planning.layouts import NONE, ZERO1, Layout

Outcome = Literal["running", "failing"]
RUNNING: Outcome = "running"
FAILING: Outcome = "failing"
TABLE = "workbench/data/published_layouts.json"
SIZE_KEYS = ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "experts")


@dataclass(frozen=True)
class PublishedLayout:
    """One published configuration, as its source states it."""

    model: str
    seq: int
    instance: str
    instances: int
    mode: str
    tp: int
    pp: int
    zero1: bool
    sequence_parallel: bool
    recompute: str  # "none", "selective" or "full"
    ep: int
    micro_batch: int  # per rank in training; sequences served at once in inference
    global_batch: int
    precision: str
    outcome: Outcome
    source: str
    note: str

    def layout(self, ranks: int) -> Layout:
        """The row's layout over `ranks` (the instances' cores)."""
        dp = ranks // (self.tp * self.pp)
        return Layout(
            self.tp,
            self.pp,
            dp,
            ZERO1 if self.zero1 and dp > 1 else NONE,
            self.recompute == "full",
            self.recompute == "selective",
            self.sequence_parallel,
            self.ep,
        )

    def describe(self) -> str:
        where = f"{self.instances} x {self.instance}" if self.instances > 1 else self.instance
        parts = [f"TP{self.tp}"] + ([f"PP{self.pp}"] if self.pp > 1 else [])
        extras = [
            "ZeRO-1" if self.zero1 else "",
            "SP" if self.sequence_parallel else "",
            {"selective": "selective recomputation", "full": "full recomputation"}.get(
                self.recompute, ""
            ),
            f"EP{self.ep}" if self.ep > 1 else "",
        ]
        layout = " x ".join(parts) + "".join(f" + {e}" for e in extras if e)
        batch = "sequences at once" if self.mode == "inference" else "micro-batch"
        return (
            f"{self.model} {self.mode} on {where} at sequence {self.seq}: {layout}, {batch} "
            f"{self.micro_batch}, {self.precision} ({self.outcome}; {self.source})"
        )


@dataclass(frozen=True)
class PublishedTable:
    models: dict[str, dict[str, Any]]  # name -> sizes (SIZE_KEYS) and model_type
    rows: tuple[PublishedLayout, ...]
    retrieved: str


@cache
def published_table() -> PublishedTable:
    data = json.loads(
        resources.files("workbench").joinpath("data/published_layouts.json").read_text("utf-8")
    )
    rows = tuple(PublishedLayout(**row) for row in data["layouts"])
    return PublishedTable(data["models"], rows, data["retrieved"])


def model_named(sizes: dict[str, int], model_type: str, experts: int) -> str:
    """The table's name for a model with these sizes, or "" where no row describes it."""
    mine = {**{k: sizes.get(k, 0) for k in SIZE_KEYS}, "experts": experts}
    for name, known in published_table().models.items():
        if known.get("model_type") != model_type:
            continue
        if all(known.get(k, 0) == mine[k] for k in SIZE_KEYS):
            return name
    return ""


@dataclass(frozen=True)
class Match:
    """How a plan stands against the table."""

    model: str  # the table's name for the plan's model; "" where none
    exact: tuple[PublishedLayout, ...]  # rows for this model, instance(s), mode and sequence
    elsewhere: tuple[PublishedLayout, ...]  # rows for this model and mode at other settings


def match(model: str, instance: str, instances: int, mode: str, seq: int | None) -> Match:
    if not model:
        return Match("", (), ())
    # Serving is never compared with a training script, nor training with a serving config.
    rows = [r for r in published_table().rows if r.model == model and r.mode == mode]
    exact = tuple(
        r
        for r in rows
        if r.instance == instance and r.instances == instances and r.mode == mode and r.seq == seq
    )
    return Match(model, exact, tuple(r for r in rows if r not in exact))
