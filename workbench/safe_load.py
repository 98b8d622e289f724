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

import json
import reprlib
from pathlib import Path
from typing import Any

import yaml

from workbench.errors import BadInput

CONFIG_MAX_BYTES = 1 << 20
RESULT_MAX_BYTES = 64 << 20
MAX_DEPTH = 64
MAX_VALUES = 200_000
MAX_YAML_ALIASES = 64


def read_bounded(path: Path, what: str, max_bytes: int) -> str:
    """The file's UTF-8 text; one sentence for a missing, unreadable, oversized or binary file."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise BadInput(
                f"{what} {path} is {size / 2**20:.1f} MiB, over the {max_bytes / 2**20:g} MiB "
                "this reads: pass the right file."
            )
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{what} {path} cannot be read: {exc.strerror or exc}.") from None
    except UnicodeDecodeError:
        raise BadInput(f"{what} {path} is not UTF-8 text.") from None


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses a document using more than MAX_YAML_ALIASES aliases."""

    aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                raise BadInput(f"uses more than {MAX_YAML_ALIASES} YAML aliases")
        return super().compose_node(parent, index)


def load_yaml(text: str, where: str) -> Any:
    """YAML (safe tags only) within the bounds; a syntax error stays a yaml.YAMLError so that
    callers that accept plain strings can fall back to the text."""
    try:
        value = yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 - a SafeLoader subclass
    except BadInput as exc:
        raise BadInput(f"{where} {exc}: write the values out.") from None
    except RecursionError:
        raise BadInput(f"{where} nests deeper than this reads ({MAX_DEPTH} levels).") from None
    check_shape(value, where)
    return value


def load_json(text: str, where: str) -> Any:
    """JSON within the bounds; one sentence for text that is not JSON."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise BadInput(f"{where} nests deeper than this reads ({MAX_DEPTH} levels).") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{where} is not valid JSON ({exc}).") from None
    check_shape(value, where)
    return value


def check_shape(value: Any, where: str) -> None:
    """Walk the parsed document without recursion: at most MAX_DEPTH levels and MAX_VALUES
    values, counting each alias's target every time it is used."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise BadInput(
                f"{where} holds more than {MAX_VALUES:,} values once expanded: a YAML alias "
                "bomb or a file that is not what it should be."
            )
        if depth > MAX_DEPTH:
            raise BadInput(f"{where} nests deeper than this reads ({MAX_DEPTH} levels).")
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel = 3
_SHOWN.maxstring = 60
_SHOWN.maxother = 60
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = _SHOWN.maxset = 6


def shown(value: Any, limit: int = 80) -> str:
    """A value as an error message shows it: a bounded repr, built only as far as it is shown."""
    text = _SHOWN.repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
