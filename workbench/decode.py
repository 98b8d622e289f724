"""Typed reading of result files: JSON data back into the dataclasses that wrote it.

Every question package writes its result file from its own dataclasses (`result_data`) and reads
it back with `decode` into a dataclass of what its readers use. The fields come from the
dataclass's own annotations, so a renamed field is renamed for the writer and every reader at
once, and a reader that still uses the old name is a type error, not a silent None.

Rules: a key the dataclass does not name is ignored (a result file also keeps derived values and
fields for people); a field with a default may be missing (a file from before it existed); a
required field that is missing, or a value of the wrong type, is one sentence naming the path.
Floats accept the "nan", "inf" and "-inf" spellings results.write_json_atomic gives them.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from functools import cache
from itertools import repeat
from operator import is_
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from workbench.errors import BadInput
from workbench.safe_load import shown

T = TypeVar("T")
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class DecodeError(BadInput, ValueError):
    """Data that does not have the shape of the record it is read into."""


def decode(cls: type[T], value: Any, where: str, root: str = "") -> T:
    """`value` (parsed JSON) as an instance of the dataclass `cls`; DecodeError says, as
    "<where>: <field path> ...", which field is missing or of the wrong type. `root` names the
    value itself inside the file (e.g. "data"); "" for the file's top level."""
    try:
        result: T = _decode(cls, value, root)
    except DecodeError as exc:
        raise DecodeError(f"{where}: {exc}") from None
    return result


def _at(path: str) -> str:
    return path or "the top level"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(kind: Any, value: Any, path: str) -> Any:
    if kind is Any or kind is object:
        return value
    origin = get_origin(kind)
    if origin is Union or origin is types.UnionType:
        return _decode_union(get_args(kind), value, path)
    if origin is Literal:
        if value not in get_args(kind):
            choices = ", ".join(repr(a) for a in get_args(kind))
            raise DecodeError(f"{_at(path)} is {shown(value)}; expected one of {choices}.")
        return value
    if origin in (list, tuple, dict) or origin is Mapping:
        return _decode_container(kind, origin, value, path)
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return _decode_dataclass(kind, value, path)
    return _decode_scalar(kind, value, path)


def _decode_union(options: tuple[Any, ...], value: Any, path: str) -> Any:
    if value is None and type(None) in options:
        return None
    errors = []
    for option in options:
        if option is type(None):
            continue
        try:
            return _decode(option, value, path)
        except DecodeError as exc:
            errors.append(str(exc))
    raise DecodeError(
        errors[0] if len(errors) == 1 else f"{_at(path)} is {shown(value)}: {errors[0]}"
    )


def _decode_container(kind: Any, origin: Any, value: Any, path: str) -> Any:
    args = get_args(kind)
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            raise DecodeError(f"{_at(path)} is {shown(value)}; expected an object.")
        value_kind = args[1] if args else Any
        return {str(k): _decode(value_kind, v, _join(path, str(k))) for k, v in value.items()}
    if not isinstance(value, (list, tuple)):  # a tuple: data that never went through JSON
        raise DecodeError(f"{_at(path)} is {shown(value)}; expected a list.")
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(args) != len(value):
            raise DecodeError(f"{_at(path)} has {len(value)} items; expected {len(args)}.")
        return tuple(
            _decode(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    item_kind = args[0] if args else Any
    if item_kind is float and all(map(is_, map(type, value), repeat(float))):
        # Raw timing samples: tens of thousands of floats, already what they must decode to.
        return tuple(value) if origin is tuple else list(value)
    items = [_decode(item_kind, v, f"{path}[{i}]") for i, v in enumerate(value)]
    return tuple(items) if origin is tuple else items


def _decode_dataclass(cls: type, value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise DecodeError(f"{_at(path)} is {shown(value)}; expected an object.")
    hints = _hints(cls)
    kwargs = {}
    for field in dataclasses.fields(cls):
        if not field.init:
            continue  # derived on construction (Measurement's statistics)
        if field.name in value:
            where = _join(path, field.name)
            kwargs[field.name] = _decode(hints[field.name], value[field.name], where)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise DecodeError(
                f"{_at(path)} has no field {field.name!r}, which {cls.__name__} needs."
            )
    try:
        return cls(**kwargs)
    # A __post_init__ that checks its values, or derives statistics from hand-edited ones.
    except (TypeError, ValueError, ArithmeticError, IndexError) as exc:
        raise DecodeError(f"{_at(path)} does not make a {cls.__name__}: {exc}") from None


def _decode_scalar(kind: Any, value: Any, path: str) -> Any:
    if kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif kind is bool or kind is str:
        if isinstance(value, kind):
            return value
    elif kind is type(None):
        if value is None:
            return None
    else:
        raise TypeError(f"decode does not know how to read {kind!r} (at {path})")
    expected = {float: "a number", int: "an integer", bool: "true or false", str: "a string"}
    raise DecodeError(f"{_at(path)} is {shown(value)}; expected {expected.get(kind, 'null')}.")
