"""A notebook's typed result record as a tracker sees it: scalar metrics, per-step series, sweeps
along a load or size axis, and verdicts, each under a stable slash-separated key.

The walk knows no notebook: it reads whatever dataclass the notebook's ResultFile returns, by
that dataclass's own annotations. A number is a metric; a field declared `list[float]` is a
series of per-step values (raw step times, losses), logged one value per step; a Verdict is a
verdict. A list of records is keyed by what each record says it is, never by its position: its
leading string fields (a configuration's kind and mode, a phase, an op), or its `label`, and the
axis fields it sits at (`batch_size_64`, `streams_4`). Records that sit on an axis also make a
sweep: each measurement of theirs as a curve over that axis (latency over batch size, over
offered load), where there is more than one point. A list of records that name nothing (a
serving point's stability windows) is a sequence: each of their numbers becomes a series in list
order. Lists of plain numbers that are not declared per-step values (indices of discarded
samples, shapes, bucket edges) and lists of lists stay in the result file.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

from workbench.scorecard import Verdict

# MLflow's rule for metric, param and tag keys (mlflow.utils.validation): letters, digits and
# `_ - . : / space`; TensorBoard and W&B take the same. Anything else in a label becomes `_`.
_UNSAFE_KEY = re.compile(r"[^\w\-.:/ ]")
# MLflow's longest key.
KEY_MAX = 250
# Fields that place a record on an axis a chart is drawn along: a batch size (01's configs, 05's
# batch sweep), a closed loop's concurrent streams and an open loop's offered rate (05's load),
# prompt and output lengths (05's token timings), a world size (04's scaling runs).
AXES = ("batch_size", "streams", "rate", "prompt", "output", "world_size")


@dataclass
class Sweep:
    """One measurement taken at several points of an axis."""

    axis: str  # the field the points sit at (one of AXES)
    points: dict[int, float] = field(default_factory=dict)  # axis value -> measured value


@dataclass
class Flattened:
    """What a tracker takes of one record."""

    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)  # key -> one value per step
    sweeps: dict[str, Sweep] = field(default_factory=dict)  # key -> values along an axis
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # "verdict" is the notebook's


def flatten(record: object) -> Flattened:
    """Every metric, series, sweep and verdict of a dataclass record, keyed by where it sits."""
    found = Flattened()
    _walk(record, "", found, found.metrics)
    # One point is no curve: a measurement taken at one batch size is its metric alone.
    found.sweeps = {k: s for k, s in found.sweeps.items() if len(s.points) > 1}
    return found


def safe_key(text: str) -> str:
    """`text` as a key every tracker accepts."""
    return _UNSAFE_KEY.sub("_", text).strip("/")[:KEY_MAX] or "_"


def _join(*parts: str) -> str:
    return "/".join(safe_key(part) for part in parts if part)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_float_list(annotation: Any) -> bool:
    """Whether a field is declared as per-step values: list[float] (or list[float] | None)."""
    if _is_union(annotation):
        return any(_is_float_list(option) for option in get_args(annotation))
    return get_origin(annotation) is list and get_args(annotation) == (float,)


def _walk(
    value: Any,
    path: str,
    found: Flattened,
    counts: dict[str, float],
    hint: Any = None,
    tally: str = "",
) -> None:
    """`tally` is the path with list labels left out, set inside lists: a Literal-typed string
    there (an op's verdict on a flavour, a run's status) is counted under it, into `counts`."""
    if isinstance(value, Verdict):
        found.verdicts[path or "verdict"] = value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _walk_record(value, path, found, counts, tally)
    elif _is_number(value):
        if path:
            found.metrics[path] = float(value)
    elif isinstance(value, str):
        if tally and _is_literal(hint):
            key = _join(tally, value)
            counts[key] = counts.get(key, 0.0) + 1
    elif isinstance(value, Mapping):
        item_hint = _arguments(hint, 2)[1]
        for key, item in value.items():
            name = str(key)
            _walk(item, _join(path, name), found, counts, item_hint, tally and _join(tally, name))
    elif isinstance(value, (list, tuple)):
        _walk_list(list(value), path, found, counts, _arguments(hint, 1)[0])


def _walk_list(
    items: list[Any], path: str, found: Flattened, counts: dict[str, float], hint: Any
) -> None:
    records = [i for i in items if dataclasses.is_dataclass(i) and not isinstance(i, type)]
    if not records:
        # Plain strings are counted where they are statuses; numbers and nested lists that are
        # not declared per-step values have no name a chart could keep.
        for item in items:
            if isinstance(item, str):
                _walk(item, "", found, counts, hint, path)
        return
    names = [_identity(item) for item in records]
    if not any(words or axes for words, axes in names):
        _walk_sequence(records, path, found, counts)
        return
    for item, label, (words, axes) in zip(records, _labels(names), names, strict=True):
        where = _join(path, label)
        before = set(found.metrics)
        _walk(item, where, found, counts, hint, path)
        if axes:
            # The last axis is the one drawn along; words and any other axis name the curve.
            axis, at = axes[-1]
            curve = _join(path, "_".join(words), *(f"{n}_{_shown(v)}" for n, v in axes[:-1]))
            for key in sorted(set(found.metrics) - before):
                if key.startswith(f"{where}/"):
                    leaf = key[len(where) + 1 :]
                    sweep = found.sweeps.setdefault(_join(curve, f"by_{axis}", leaf), Sweep(axis))
                    sweep.points[round(at)] = found.metrics[key]


def _walk_sequence(
    records: list[Any], path: str, found: Flattened, counts: dict[str, float]
) -> None:
    """Records that name nothing, in order (windows of one measurement): each number they share
    is a series, step 1 first."""
    walked = []
    for item in records:
        own = Flattened()
        _walk(item, "", own, counts, None, path)
        walked.append(own.metrics)
    shared = [k for k in walked[0] if all(k in metrics for metrics in walked)]
    for key in shared:
        found.series[_join(path, key)] = [metrics[key] for metrics in walked]


def _walk_record(
    record: Any, path: str, found: Flattened, counts: dict[str, float], tally: str
) -> None:
    hints = typing.get_type_hints(type(record))
    for spec in dataclasses.fields(record):
        value = getattr(record, spec.name)
        hint = hints.get(spec.name)
        where = _join(path, spec.name)
        if _is_float_list(hint) and isinstance(value, list):
            values = [float(v) for v in value if _is_number(v)]
            if values:
                found.series[where] = values
            continue
        _walk(value, where, found, counts, hint, tally and _join(tally, spec.name))
    # Derived numbers a record computes from its fields (a configuration's throughput) are
    # metrics too: they are what a chart across runs wants, and no stored field holds them.
    for name, member in vars(type(record)).items():
        if isinstance(member, property) and not name.startswith("_"):
            derived = getattr(record, name)
            if _is_number(derived):
                found.metrics[_join(path, name)] = float(derived)


def _is_literal(hint: Any) -> bool:
    if _is_union(hint):
        return any(_is_literal(option) for option in get_args(hint))
    return get_origin(hint) is Literal


def _is_union(hint: Any) -> bool:
    return get_origin(hint) is typing.Union or get_origin(hint) is types.UnionType


def _arguments(hint: Any, count: int) -> tuple[Any, ...]:
    """A container annotation's arguments (list[X] -> (X,)), or Nones where it has none."""
    if _is_union(hint):
        hint = next((o for o in get_args(hint) if o is not type(None)), None)
    found = get_args(hint)
    return found if len(found) == count else (None,) * count


def _shown(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


Identity = tuple[list[str], list[tuple[str, float]]]  # words, then (axis, value) pairs


def _labels(names: list[Identity]) -> list[str]:
    """One label per record: its words joined ("train_eager"), then its axes as their own key
    parts ("train_eager/batch_size_64"). A label two records share is told apart by a count
    ("_2"): the result file holds them in the same order every run."""
    labels = []
    for words, axes in names:
        parts = ["_".join(words)] if words else []
        parts += [f"{name}_{_shown(value)}" for name, value in axes]
        labels.append("/".join(parts))
    seen: dict[str, int] = {}
    unique = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        unique.append(label if seen[label] == 1 else f"{label}_{seen[label]}")
    return unique


def _identity(item: Any) -> Identity:
    """What a record says it is: its `label` where it has one, else the fields declared plain
    `str` that open it (a kind and a mode, a phase, an op's name; a status, a Literal, ends
    them), or the identity of a record it opens with (a tensor's metrics) or the `label` of a
    mapping it opens with (a numerics run's spec); and the AXES fields it holds a number in."""
    hints = typing.get_type_hints(type(item))
    specs = dataclasses.fields(item)
    words: list[str] = []
    label = getattr(item, "label", None)
    if hints.get("label") is str and isinstance(label, str) and label:
        words = [label]
    elif specs and _is_record(getattr(item, specs[0].name)):
        words = _identity(getattr(item, specs[0].name))[0]
    elif specs and isinstance(getattr(item, specs[0].name), Mapping):
        opening = getattr(item, specs[0].name).get("label")  # a spec as a record describes it
        words = [opening] if isinstance(opening, str) and opening else []
    else:
        for spec in specs:
            value = getattr(item, spec.name)
            if hints.get(spec.name) is not str or not value:
                break
            words.append(value)
    axes = [(name, float(getattr(item, name))) for name in AXES if _has_number(item, name)]
    return words, axes


def _is_record(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _has_number(item: Any, name: str) -> bool:
    return name in {f.name for f in dataclasses.fields(item)} and _is_number(getattr(item, name))
