"""A notebook's typed result record as a tracker sees it: scalar metrics, per-step series and
verdicts, each under a stable slash-separated key.

The walk knows no notebook: it reads whatever dataclass the notebook's ResultFile returns, by
that dataclass's own annotations. A number is a metric; a field declared `list[float]` is a
series of per-step values (raw step times, losses), logged one value per step; a Verdict is a
verdict. A list of records is keyed by each record's leading string fields (a configuration's
kind and mode, a phase's name, an op), so the same measurement keeps the same key from one run to
the next and a tracker can chart it across runs.
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
# `_ - . : / space`; TensorBoard takes the same. Anything else in a label becomes `_`.
_UNSAFE_KEY = re.compile(r"[^\w\-.:/ ]")
# MLflow's longest key.
KEY_MAX = 250


@dataclass
class Flattened:
    """What a tracker takes of one record."""

    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)  # key -> one value per step
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # "verdict" is the notebook's


def flatten(record: object) -> Flattened:
    """Every metric, series and verdict of a dataclass record, keyed by where it sits."""
    found = Flattened()
    _walk(record, "", found)
    return found


def safe_key(text: str) -> str:
    """`text` as a key every tracker accepts."""
    return _UNSAFE_KEY.sub("_", text).strip("/")[:KEY_MAX] or "_"


def _join(path: str, name: str) -> str:
    return f"{path}/{safe_key(name)}" if path else safe_key(name)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_float_list(annotation: Any) -> bool:
    """Whether a field is declared as per-step values: list[float] (or list[float] | None)."""
    if _is_union(annotation):
        return any(_is_float_list(option) for option in get_args(annotation))
    return get_origin(annotation) is list and get_args(annotation) == (float,)


def _walk(value: Any, path: str, found: Flattened, hint: Any = None, tally: str = "") -> None:
    """`tally` is the path with list labels left out, set inside lists: a Literal-typed string
    there (an op's verdict on a flavour, a run's status) is counted under it."""
    if isinstance(value, Verdict):
        found.verdicts[path or "verdict"] = value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        _walk_record(value, path, found, tally)
    elif _is_number(value):
        if path:
            found.metrics[path] = float(value)
    elif isinstance(value, str):
        if tally and _is_literal(hint):
            key = _join(tally, value)
            found.metrics[key] = found.metrics.get(key, 0.0) + 1
    elif isinstance(value, Mapping):
        item_hint = _arguments(hint, 2)[1]
        for key, item in value.items():
            name = str(key)
            _walk(item, _join(path, name), found, item_hint, tally and _join(tally, name))
    elif isinstance(value, (list, tuple)):
        item_hint = _arguments(hint, 1)[0]
        for label, item in zip(_labels(value), value, strict=True):
            _walk(item, _join(path, label), found, item_hint, path)


def _walk_record(record: Any, path: str, found: Flattened, tally: str) -> None:
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
        _walk(value, where, found, hint, tally and _join(tally, spec.name))
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


def _labels(items: list[Any] | tuple[Any, ...]) -> list[str]:
    """One label per item: its leading string fields joined ("train_eager"), else its position;
    a label two items share gets the position appended, so no key is written twice."""
    labels = [_identity(item) or str(index) for index, item in enumerate(items)]
    repeated = {label for label in labels if labels.count(label) > 1}
    return [f"{label}_{i}" if label in repeated else label for i, label in enumerate(labels)]


def _identity(item: Any) -> str:
    """The values of the fields declared plain `str` that open the record (a kind and a mode, a
    phase, an op's name); a status (a Literal) or any other field ends them."""
    if not dataclasses.is_dataclass(item) or isinstance(item, type):
        return ""
    hints = typing.get_type_hints(type(item))
    words = []
    for spec in dataclasses.fields(item):
        value = getattr(item, spec.name)
        if hints.get(spec.name) is not str or not value:
            break
        words.append(value)
    return "_".join(words)
