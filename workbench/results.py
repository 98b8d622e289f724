"""Result records: one schema-versioned JSON file per notebook, written atomically.

Each question package owns its file's shape in both directions: `result_data` writes it from
the package's dataclasses, and its ResultFile reads it back into a typed record (decode), so the
runner's index, compare and the fleet's collect read attributes, never string keys.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, is_dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Generic, TypeVar

from workbench.decode import decode
from workbench.errors import BadInput
from workbench.redact import scrub_data
from workbench.safe_load import (
    RESULT_MAX_BYTES,
    RESULT_MAX_VALUES,
    Required,
    Shape,
    check_fields,
    load_json,
    read_bounded,
    shown,
)
from workbench.scorecard import Verdict

# One version for every result file and summary.json. Bump it when a field a reader needs is
# renamed or removed (tests/contract reads files written by the current version and fails
# until the bump); adding a field with a default needs no bump.
SCHEMA_VERSION = 1


def _jsonable(value: Any) -> Any:
    """Turn dataclasses, paths, tensors-as-scalars and non-finite floats into plain JSON."""
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        # JSON has no NaN/Inf; keep them readable instead of silently becoming null.
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return _jsonable(value.item())
    return value


def write_text_atomic(path: Path, text: str) -> Path:
    """Write to a temp file in the same folder, fsync, then rename over `path`.

    A reader never sees a half-written file, and a crash leaves the previous file intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; results are shared like the reports beside them.
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: Path, payload: Any) -> Path:
    """`payload` as strict JSON (NaN and Inf spelled out), written atomically."""
    text = json.dumps(_jsonable(payload), indent=2, allow_nan=False)
    return write_text_atomic(path, text + "\n")


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def save_result(out_dir: str | Path, notebook: str, data: dict[str, Any], **header: Any) -> Path:
    """Save `<out_dir>/<notebook>.json` with the schema header every result file carries.

    Every string is scrubbed of secrets: parameters, error messages and paths in a result come
    from the user.
    """
    record = {
        "schema_version": SCHEMA_VERSION,
        "notebook": notebook,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **header,
        "data": data,
    }
    return write_json_atomic(Path(out_dir) / f"{notebook}.json", scrub_data(_jsonable(record)))


class UnreadableResult(BadInput, ValueError):
    """A result file that is too large, too deep, not JSON, of a newer schema or with a field of
    the wrong type. A ValueError too: a run's own report treats it as "no result", as before."""


_VERDICT_SHAPE: Shape = {
    "status": str,
    "reason": str,
    "rule": str,
    "findings": [{"status": str, "reason": Required(str)}],
}
# The fields a report and the run's summary read of every result file (the lead: verdict,
# headline, what ran, provenance); each notebook's own fields are read by its own code.
RESULT_SHAPE: Shape = {
    "target": ({}, None),
    "workload": ({}, None),
    "versions": ({}, None),
    "parameters": ({}, None),
    "data": Required({"headline": (str, None), "verdict": (_VERDICT_SHAPE, None)}),
}


def load_result(path: str | Path) -> dict[str, Any]:
    """Read a result file within bounds, refuse one written by a newer, incompatible schema, and
    check the fields every reader of it reads; UnreadableResult says what is wrong."""
    path = Path(path)
    try:
        record = load_json(
            read_bounded(path, "Result file", RESULT_MAX_BYTES), str(path), RESULT_MAX_VALUES
        )
        if not isinstance(record, dict):
            raise BadInput(f"{path} does not hold a JSON object: it is not a result file.")
        version = record.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool) or version > SCHEMA_VERSION:
            raise BadInput(
                f"{path} has result schema {shown(version)}; this workbench reads up to "
                f"{SCHEMA_VERSION}."
            )
        check_fields(record, RESULT_SHAPE, str(path))
    except BadInput as exc:
        raise UnreadableResult(str(exc)) from None
    return record


@dataclass(kw_only=True)
class ResultLead:
    """What every result file's data leads with, whatever the notebook: the index, summary.json
    and compare's scorecard read these. Each notebook's data record extends it."""

    headline: str | None = None
    verdict: Verdict | None = None  # None: a result that judged nothing


@dataclass
class MeasuredOn:
    """What a notebook's result was measured on, as the workload and the target describe
    themselves; each notebook's result record starts with it."""

    workload: dict[str, Any]
    target: dict[str, Any]


D = TypeVar("D", bound=ResultLead)


@dataclass(frozen=True)
class ResultFile(Generic[D]):
    """One notebook's result file as its readers see it: `read` returns the typed record of its
    data, or says in one sentence (UnreadableResult) why it cannot."""

    notebook: str
    data_type: type[D]

    def read(self, record: Mapping[str, Any], where: str) -> D:
        """The data of an already loaded result file (`where` names it in errors)."""
        version = record.get("schema_version")
        if version != SCHEMA_VERSION:
            raise UnreadableResult(
                f"{where} has result schema {shown(version)}; this workbench reads schema "
                f"{SCHEMA_VERSION} (rerun the notebook with this version)."
            )
        try:
            return decode(self.data_type, record.get("data"), where, root="data")
        except BadInput as exc:
            raise UnreadableResult(str(exc)) from None

    def load(self, path: str | Path) -> D:
        return self.read(load_result(path), str(path))


LEAD = ResultFile("any notebook", ResultLead)
