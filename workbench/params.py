"""Notebook parameters: read each notebook's `parameters` cell, then validate and coerce values.

papermill only warns about an unknown parameter and passes `-p` lists as strings; here an unknown
name or a value of the wrong type is rejected before any kernel starts.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import math
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import BadInput, did_you_mean
from workbench.safe_load import load_yaml, shown

_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool, "list": list}
# `list[int]` in a parameters cell also fixes the type of every element.
_ELEMENT_TYPES: dict[str, type] = {"list[str]": str, "list[int]": int, "list[float]": float}
# Far more than any path, shape or list a notebook takes; longer values are typing accidents
# (or attempts to make the YAML reader or the file system choke).
MAX_VALUE_CHARS = 4096

# The workbook's notebooks, whose parameters cells declare what each one takes.
NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"

# Parameters that shape the workload itself. Every notebook that loads the workload must get the
# same values, or its numbers describe another model or batch than its neighbours'.
WORKLOAD_PARAMETERS = (
    "input_shape",
    "input_dtype",
    "num_classes",
    "batch_size",
    "task",
    "sequence_length",
    "image_size",
    "hf_config",
    "allow_partial_model",
    "trust_remote_code",
)
# Set by the runner itself; users choose them with --workload / --target / --out /
# --compile-cache.
RUNNER_PARAMETERS = ("workload", "target", "out_dir", "compile_cache")


@dataclass(frozen=True)
class Parameter:
    name: str
    type_name: str  # str, int, float, bool, list or list[str|int|float] (the cell's annotation)
    default: Any
    help: str
    notebook: str


def notebook_parameters(path: Path) -> dict[str, Parameter]:
    """The typed parameters a notebook declares in its `parameters` cell."""
    params = {}
    for name, type_name, default, help_text in _parameter_lines(path):
        if type_name not in _TYPES and type_name not in _ELEMENT_TYPES:
            # Every notebook parameter is annotated; an unannotated one is a notebook bug.
            raise ValueError(
                f"{path.name}: parameter {name!r} needs a str/int/float/bool/list[...] type"
            )
        params[name] = Parameter(
            name=name,
            type_name=type_name,
            default=ast.literal_eval(default),
            help=help_text,
            notebook=path.stem,
        )
    return params


def _matches(value: Any, expected: type) -> bool:
    if expected is not bool and isinstance(value, bool):
        return False
    return isinstance(value, expected)


def coerce(param: Parameter, value: Any) -> Any:
    """Coerce a CLI string or config value to the parameter's declared type, or raise BadInput."""
    element = _ELEMENT_TYPES.get(param.type_name)
    expected = list if element else _TYPES[param.type_name]
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        raise BadInput(
            f"Parameter {param.name!r} ({param.notebook}) is {len(value):,} characters long; "
            f"values are limited to {MAX_VALUE_CHARS:,}."
        )
    try:
        value = _parse(value, expected, f"Parameter {param.name!r} ({param.notebook})")
    except (ValueError, RecursionError):  # more digits than Python converts; nesting too deep
        pass
    if expected is float:
        value = _float_text(value)
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if expected is list and isinstance(value, tuple):
        value = list(value)
    if element is float and isinstance(value, list):
        value = [float(v) if _matches(v, int) else _float_text(v) for v in value]
    ok = _matches(value, expected)
    if ok and element is not None:
        ok = all(_matches(v, element) for v in value)
    if not ok:
        raise BadInput(
            f"Parameter {param.name!r} ({param.notebook}) expects {param.type_name}, "
            f"got {shown(value)}."
        )
    return value


def _float_text(value: Any) -> Any:
    """A string YAML 1.1 leaves as text but that is a finite number (`1e12`: YAML 1.1 wants
    `1.0e+12`) as that float; anything else unchanged."""
    if not isinstance(value, str):
        return value
    try:
        number = float(value.strip())
    except ValueError:
        return value
    return number if math.isfinite(number) else value


def _parse(value: Any, expected: type, where: str) -> Any:
    """A CLI string read as YAML; a value that does not parse stays as it was, and one that
    would expand or nest beyond safe_load's bounds is BadInput naming `where`."""
    if not isinstance(value, str) or expected is str:
        return value
    import yaml  # here, not at the top: most commands never parse a -p value

    try:
        if expected is list:
            # "8, 16, 32", "[8, 16, 32]" and "eager" all read as flow lists; numbers stay numbers.
            listed = f"[{value.strip().removeprefix('[').removesuffix(']')}]"
            return load_yaml(listed, where)
        return load_yaml(value, where) if value.strip() else None
    except yaml.YAMLError:
        return value


def _parameter_lines(path: Path) -> list[tuple[str, str, str, str]]:
    """(name, annotation, default source, help) for each `name: type = default  # help` line
    of the notebook's `parameters` cell, read as papermill reads them, without importing
    papermill and nbformat (two seconds of a notebook kernel's start-up)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cell = next(
        (
            c
            for c in notebook.get("cells", [])
            if "parameters" in c.get("metadata", {}).get("tags", [])
        ),
        None,
    )
    if cell is None:
        return []
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    lines = source.splitlines(keepends=True)
    found = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        if node.value is None:
            continue
        default = _segment(lines, node.value)
        annotation = _segment(lines, node.annotation)
        line = node.end_lineno or node.lineno
        found.append((node.target.id, annotation, default, comments.get(line, "")))
    return found


def _segment(lines: list[str], node: ast.expr) -> str:
    """The source text of `node`, as ast.get_source_segment gives it, from lines split once:
    get_source_segment splits the whole cell again on every call, which for a 40-parameter
    cell was most of a notebook's `context.start`."""
    end_line = node.end_lineno or node.lineno
    end_col = node.end_col_offset if node.end_col_offset is not None else None
    # AST columns count UTF-8 bytes.
    first = lines[node.lineno - 1].encode()
    if node.lineno == end_line:
        return first[node.col_offset : end_col].decode()
    last = lines[end_line - 1].encode()[:end_col].decode()
    return "".join([first[node.col_offset :].decode(), *lines[node.lineno : end_line - 1], last])


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """`-p key=value` pairs into a dict; a pair without '=' is a BadInput."""
    values = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"Parameter {pair!r} is not of the form key=value.")
        values[key.strip()] = value
    return values


def validate(
    overrides: dict[str, Any], declared: dict[str, dict[str, Parameter]]
) -> dict[str, dict[str, Any]]:
    """Per notebook, the coerced overrides it declares; unknown names are rejected.

    `declared` maps notebook stem -> its parameters. A name is known if any selected notebook
    declares it; it is then passed only to the notebooks that do.
    """
    known = {name for params in declared.values() for name in params}
    unknown = sorted(set(overrides) - known)
    if unknown:
        settable = sorted(known - set(RUNNER_PARAMETERS))
        raise BadInput(
            f"Unknown parameter {unknown[0]!r}{did_you_mean(unknown[0], settable)}: the "
            f"selected notebooks take {', '.join(settable)}."
        )
    for name in sorted(set(overrides) & set(WORKLOAD_PARAMETERS)):
        missed = [
            stem for stem, params in declared.items() if "workload" in params and name not in params
        ]
        if missed:
            raise BadInput(
                f"Parameter {name!r} shapes the workload but {missed[0]} does not take it, so its "
                "numbers would describe another workload; leave that notebook out with --only."
            )
    per_notebook: dict[str, dict[str, Any]] = {}
    for stem, params in declared.items():
        per_notebook[stem] = {
            name: coerce(params[name], value) for name, value in overrides.items() if name in params
        }
    return per_notebook


class ParamAction(argparse.Action):
    """`-p KEY=VALUE`, or papermill's own `-p KEY VALUE`; kept as KEY=VALUE either way."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        words = [str(v) for v in (values or [])] if not isinstance(values, str) else [values]
        if len(words) == 1 and "=" in words[0]:
            pair = words[0]
        elif len(words) == 2 and "=" not in words[0]:
            pair = f"{words[0]}={words[1]}"
        else:
            raise argparse.ArgumentError(
                self, f"give KEY=VALUE or KEY VALUE (papermill's form), not {' '.join(words)!r}"
            )
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), pair])


def add_param_option(parser: argparse.ArgumentParser | Any, help: str) -> None:
    """The one -p of `run`, `open`, `plan`, `prewarm` and `rehearse`."""
    parser.add_argument(
        "-p",
        "--param",
        action=ParamAction,
        nargs="+",
        dest="param",
        metavar=("KEY=VALUE", "VALUE"),  # usage: -p KEY=VALUE [VALUE ...]
        help=f"{help}: KEY=VALUE, or KEY VALUE as papermill takes it; repeat for more",
    )
