"""Parsing of files and values the workbook did not write itself, within stated bounds.

A config, a matrix, a `-p` value, a result file from another run or a hand-edited summary can be
crafted: a YAML alias bomb expands a kilobyte into billions of values, JSON nested 100,000 deep
exhausts the parser's recursion, and an error message that shows such a value in full never
finishes building. Everything here answers within the bounds below, with one sentence.

Bounds: files over `max_bytes` (1 MiB for configs and matrices, 64 MiB for result files) are
refused unread; a document may nest `MAX_DEPTH` levels, hold `MAX_VALUES` values once its aliases
are expanded, and use `MAX_YAML_ALIASES` aliases.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import reprlib
import stat
from dataclasses import dataclass
from functools import cache
from itertools import compress, repeat
from operator import is_
from pathlib import Path
from typing import Any

from workbench.errors import BadInput

CONFIG_MAX_BYTES = 1 << 20
RESULT_MAX_BYTES = 64 << 20
MAX_DEPTH = 64
MAX_VALUES = 200_000
# JSON has no aliases, so its values are bounded by its bytes; a result file may hold the raw
# samples of seconds-long measurement windows (05 keeps tens of thousands per batch point).
RESULT_MAX_VALUES = 8_000_000
MAX_YAML_ALIASES = 64
MAX_INT_DIGITS = 19  # every 64-bit integer


def not_a_link(folder: Path, what: str) -> Path:
    """`folder`, refused where it is a symbolic link: a folder the workbook writes into by
    default (a run's compare/, reports/tensorboard, reports/wandb) may sit in a run folder a
    teammate shared, and a planted link there would send the writes elsewhere."""
    if folder.is_symlink():
        raise BadInput(
            f"{what} {folder} is a symbolic link; the workbook does not write through a link it "
            "did not make (remove it, or name another folder)."
        )
    return folder


def read_bounded(path: Path, what: str, max_bytes: int, *, follow_links: bool = True) -> str:
    """The file's UTF-8 text; one sentence for a missing, unreadable, oversized or binary file.
    With follow_links=False, a symbolic link (to /proc/self/environ, to a file outside a run
    folder) is refused rather than followed."""
    try:
        return _read(path, what, max_bytes, follow_links).decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{what} {path} is not UTF-8 text.") from None


def read_bounded_bytes(path: Path, what: str, max_bytes: int) -> bytes:
    """The file's bytes as stored (for a digest of exactly what was read), within the bound."""
    return _read(path, what, max_bytes, follow_links=True)


def is_plain_file(path: Path) -> bool:
    """Whether `path` itself is a regular file: not a symbolic link, a FIFO or a device."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def read_plain_bytes(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file, opened without following a symbolic link (O_NOFOLLOW) and
    checked on the open descriptor, so a link swapped in after a check is refused too."""
    return _read(path, what, max_bytes, follow_links=False)


def _read(path: Path, what: str, max_bytes: int, follow_links: bool) -> bytes:
    """A regular file's bytes, checked on the open descriptor: a device (/dev/zero, which never
    ends), a pipe (which may never answer) or a folder is refused, and no more than the bound is
    ever read, even from a file that grows."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_links:
            raise BadInput(
                f"{what} {path} is a symbolic link; only plain files are read here."
            ) from None
        raise BadInput(f"{what} {path} cannot be read: {exc.strerror or exc}.") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise BadInput(
            f"{what} {path} cannot be read: it is not a regular file (a folder, a device or a "
            "pipe)."
        )
    with os.fdopen(fd, "rb") as handle:
        _refuse_size(path, what, info.st_size, max_bytes)
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise BadInput(f"{what} {path} cannot be read: {exc.strerror or exc}.") from None
        _refuse_size(path, what, len(data), max_bytes)
        return data


def _refuse_size(path: Path, what: str, size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise BadInput(
            f"{what} {path} is {size / 2**20:.1f} MiB, over the {max_bytes / 2**20:g} MiB "
            "this reads: pass the right file."
        )


@cache
def _bounded_loader() -> Any:
    """SafeLoader that refuses a document using more than MAX_YAML_ALIASES aliases; built on
    first use, so that reading JSON (every result file) does not import yaml."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_YAML_ALIASES:
                    raise BadInput(f"uses more than {MAX_YAML_ALIASES} YAML aliases")
            return super().compose_node(parent, index)

    return BoundedLoader


def load_yaml(text: str, where: str) -> Any:
    """YAML (safe tags only) within the bounds; a syntax error stays a yaml.YAMLError so that
    callers that accept plain strings can fall back to the text."""
    import yaml

    try:
        value = yaml.load(text, Loader=_bounded_loader())  # noqa: S506 - a SafeLoader subclass
    except BadInput as exc:
        raise BadInput(f"{where} {exc}: write the values out.") from None
    except RecursionError:
        raise BadInput(f"{where} nests deeper than this reads ({MAX_DEPTH} levels).") from None
    check_shape(value, where)
    return value


def load_json(text: str, where: str, max_values: int = MAX_VALUES) -> Any:
    """JSON within the bounds; one sentence for text that is not JSON."""
    try:
        value = json.loads(text)
        # json's C parser reads every number; only a document with one out of range (an
        # overflowed float, an integer past 64 bits) is read again through the hooks below,
        # which name that number, at a Python call per number.
        if not check_shape(value, where, max_values):
            value = json.loads(text, parse_float=_finite_float, parse_int=_bounded_int)
    except RecursionError:
        raise BadInput(f"{where} nests deeper than this reads ({MAX_DEPTH} levels).") from None
    except ValueError as exc:  # JSONDecodeError, or an integer of more than 4,300 digits
        raise BadInput(f"{where} is not readable JSON ({str(exc).split(';')[0]}).") from None
    return value


def _finite_float(text: str) -> float:
    # 1e400 parses to inf, which no writer here ever wrote (non-finite values are spelled as
    # strings) and which later arithmetic cannot take.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:24]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    # Past 64 bits, a count or size is not one; float() of it would overflow later.
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"number {text[:24]}... has more than {MAX_INT_DIGITS} digits")
    return int(text)


_CONTAINERS = frozenset({dict, list})
_INT_LIMIT = 10**MAX_INT_DIGITS


def check_shape(value: Any, where: str, max_values: int = MAX_VALUES) -> bool:
    """Walk the parsed document without recursion: at most MAX_DEPTH levels and `max_values`
    values, counting each alias's target every time it is used; True when every number is in
    range (floats finite, integers of at most MAX_INT_DIGITS digits). A container's values are
    counted by its length and sorted by type in C, so a result file's tens of thousands of
    samples are never visited one by one in Python."""
    in_range = _numbers_in_range([value])
    stack: list[tuple[Any, int]] = [(value, 1)] if type(value) in _CONTAINERS else []
    seen = 1
    while stack:
        item, depth = stack.pop()
        children = list(item.values()) if isinstance(item, dict) else item
        if not children:
            continue
        seen += len(children)
        if seen > max_values:
            raise BadInput(
                f"{where} holds more than {max_values:,} values once expanded: a YAML alias "
                "bomb or a file that is not what it should be."
            )
        if depth + 1 > MAX_DEPTH:
            raise BadInput(f"{where} nests deeper than this reads ({MAX_DEPTH} levels).")
        in_range = in_range and _numbers_in_range(children)
        nested = compress(children, map(_CONTAINERS.__contains__, map(type, children)))
        stack.extend((child, depth + 1) for child in nested)
    return in_range


def _numbers_in_range(values: list[Any]) -> bool:
    types = list(map(type, values))
    floats = compress(values, map(is_, types, repeat(float)))
    ints = compress(values, map(is_, types, repeat(int)))
    return all(map(math.isfinite, floats)) and max(map(abs, ints), default=0) < _INT_LIMIT


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel = 3
_SHOWN.maxstring = 60
_SHOWN.maxother = 60
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 6


def shown(value: Any, limit: int = 80) -> str:
    """A value as an error message shows it: a bounded repr, built only as far as it is shown."""
    text = _SHOWN.repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


# Shapes: what `check_fields` expects of a parsed document, declared beside the code that reads
# it. A shape is a type (float also takes whole numbers; neither takes true/false), None (null),
# a tuple of alternative shapes, [shape] (a list of them), {key: shape} (a mapping whose listed
# keys, when present, match; other keys are not read and not checked), Required(shape) (a key
# that must be present) or EachValue(shape) (a mapping of any keys, each value of the shape).
Shape = Any


class NonFinite:
    """The strings a result file writes for a float JSON cannot hold: 'nan', 'inf', '-inf'."""

    SPELLINGS = ("nan", "inf", "-inf")


@dataclass(frozen=True)
class Required:
    shape: Shape


@dataclass(frozen=True)
class EachValue:
    shape: Shape


def check_fields(value: Any, shape: Shape, where: str) -> None:
    """BadInput naming `where` and the first field that does not have its shape, e.g.
    "r1/01_baseline.json: data.configs[0].phases[1].measurement.times must be a list of numbers"."""
    problem = _mismatch(value, shape, "")
    if problem:
        raise BadInput(f"{where}: {problem}.")


def _mismatch(value: Any, shape: Shape, path: str) -> str | None:
    if isinstance(shape, Required):
        shape = shape.shape
    if isinstance(shape, tuple):
        matching = [alt for alt in shape if _same_kind(value, alt)]
        return _mismatch(value, matching[0], path) if matching else _must(path, shape)
    if not _same_kind(value, shape):
        return _must(path, shape)
    if isinstance(shape, dict):
        return _mapping_mismatch(value, shape, path)
    if isinstance(shape, EachValue):
        return _first(
            _mismatch(item, shape.shape, _key_path(path, key)) for key, item in value.items()
        )
    if isinstance(shape, list):
        (element,) = shape
        if not all(_same_kind(item, element) for item in value):
            return _must(path, shape)  # a list of the wrong things is named as the list
        return _first(
            _mismatch(item, element, f"{path}[{index}]") for index, item in enumerate(value)
        )
    return None


def _mapping_mismatch(value: dict[str, Any], shape: dict[str, Shape], path: str) -> str | None:
    for key, field_shape in shape.items():
        if key in value:
            problem = _mismatch(value[key], field_shape, _key_path(path, key))
        elif isinstance(field_shape, Required):
            problem = f"{_key_path(path, key)} is missing; it must be {_describe(field_shape)}"
        else:
            problem = None
        if problem:
            return problem
    return None


def _first(problems: Any) -> str | None:
    return next((problem for problem in problems if problem), None)


def _same_kind(value: Any, shape: Shape) -> bool:
    """Whether `value` is of the shape's own kind (a container's contents are checked apart)."""
    if isinstance(shape, Required):
        return _same_kind(value, shape.shape)
    if isinstance(shape, tuple):
        return any(_same_kind(value, alt) for alt in shape)
    if shape is None:
        return value is None
    if isinstance(shape, (dict, EachValue)):
        return isinstance(value, dict)
    if isinstance(shape, list):
        return isinstance(value, list)
    if shape is NonFinite:
        return value in NonFinite.SPELLINGS
    if shape is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if shape is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, shape)


_NAMES = {
    type(None): ("null", "nulls"),
    bool: ("true or false", "true or false values"),
    int: ("a whole number", "whole numbers"),
    float: ("a number", "numbers"),
    str: ("a string", "strings"),
    NonFinite: ("'nan', 'inf' or '-inf'", "'nan', 'inf' or '-inf'"),
}


def _describe(shape: Shape, plural: bool = False) -> str:
    if isinstance(shape, Required):
        return _describe(shape.shape, plural)
    if isinstance(shape, tuple):
        return " or ".join(dict.fromkeys(_describe(alt, plural) for alt in shape))
    if isinstance(shape, (dict, EachValue)):
        return "mappings" if plural else "a mapping"
    if isinstance(shape, list):
        return ("lists of " if plural else "a list of ") + _describe(shape[0], plural=True)
    singular, many = _NAMES.get(type(None) if shape is None else shape, ("a value", "values"))
    return many if plural else singular


def _must(path: str, shape: Shape) -> str:
    return f"{path or 'the whole file'} must be {_describe(shape)}"


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,60}")


def _key_path(path: str, key: Any) -> str:
    """`a.b` for a plain key; `a['odd key']`, shown bounded, for any other."""
    if isinstance(key, str) and _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{shown(key, 40)}]"
