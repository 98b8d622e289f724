"""Notebook parameters: read each notebook's `parameters` cell, then validate and coerce values.

papermill only warns about an unknown parameter and passes `-p` lists as strings; here an unknown
name or a value of the wrong type is rejected before any kernel starts.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import papermill
import yaml

from workbench.errors import BadInput

_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool, "list": list}

# Parameters that shape the workload itself. Every notebook that loads the workload must get the
# same values, or its numbers describe another model or batch than its neighbours'.
WORKLOAD_PARAMETERS = ("input_shape", "input_dtype", "num_classes", "batch_size")


@dataclass(frozen=True)
class Parameter:
    name: str
    type_name: str  # str, int, float, bool or list (from the annotation in the parameters cell)
    default: Any
    help: str
    notebook: str


def notebook_parameters(path: Path) -> dict[str, Parameter]:
    """The typed parameters a notebook declares in its `parameters` cell."""
    declared = papermill.inspect_notebook(str(path))
    params = {}
    for name, info in declared.items():
        type_name = info.get("inferred_type_name") or "None"
        if type_name not in _TYPES:
            # Every notebook parameter is annotated; an unannotated one is a notebook bug.
            raise ValueError(
                f"{path.name}: parameter {name!r} needs a str/int/float/bool/list type"
            )
        params[name] = Parameter(
            name=name,
            type_name=type_name,
            default=ast.literal_eval(info["default"]),
            help=info.get("help", ""),
            notebook=path.stem,
        )
    return params


def coerce(param: Parameter, value: Any) -> Any:
    """Coerce a CLI string or config value to the parameter's declared type, or raise BadInput."""
    expected = _TYPES[param.type_name]
    if isinstance(value, str) and expected is list:
        # "8, 16, 32", "[8, 16, 32]" and "eager" all read as YAML flow lists; numbers stay numbers.
        try:
            value = yaml.safe_load(f"[{value.strip().removeprefix('[').removesuffix(']')}]")
        except yaml.YAMLError:
            pass
    elif isinstance(value, str) and expected is not str:
        try:
            value = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            pass
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if expected is list and isinstance(value, tuple):
        value = list(value)
    if expected is not bool and isinstance(value, bool):
        ok = False
    else:
        ok = isinstance(value, expected)
    if not ok:
        raise BadInput(
            f"Parameter {param.name!r} ({param.notebook}) expects {param.type_name}, got {value!r}."
        )
    return value


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
        raise BadInput(
            f"Unknown parameter {unknown[0]!r}: the selected notebooks take "
            f"{', '.join(sorted(known))}."
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
