"""What an export reads, writes and sends, kept safe whatever a run folder holds.

A run folder may be foreign (a shared fleet root) or hand-edited: a file in it may be a link to
`/proc/self/environ` or to a file outside the run, and a name in its summary may be `../../x`.
Reading: only plain files inside the run folder, opened without following links
(safe_load.read_plain_bytes), and what is uploaded is a copy scrubbed like a report, so the
exporter's own secrets never leave even where a file was swapped. Writing: every file-system name
made from a run's text is one plain path component, and every path is checked to stay inside its
destination. Sending: MLflow's client gets bounded timeouts and retries, and never prints its own
"View run ... at: URI" lines (which carry the tracking URI, password included).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from workbench.errors import BadInput
from workbench.redact import encodable, scrub_text
from workbench.safe_load import read_plain_bytes

# An artifact is a report page, a result file or a run log: tens of megabytes at the most.
ARTIFACT_MAX_BYTES = 256 << 20
# MLflow's client reads these from the environment at every request (mlflow/utils/rest_utils.py:
# MLFLOW_HTTP_REQUEST_TIMEOUT, default 120 s, and MLFLOW_HTTP_REQUEST_MAX_RETRIES, default 7 with
# exponential backoff: minutes before a dead server is reported). Here a request waits at most
# REQUEST_TIMEOUT_S and is tried twice, one second apart; a value the user set is kept.
REQUEST_TIMEOUT_S = 10
REQUEST_RETRIES = 1
BACKOFF_FACTOR_S = 1
_MLFLOW_SETTINGS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": str(REQUEST_TIMEOUT_S),
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(REQUEST_RETRIES),
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": str(BACKOFF_FACTOR_S),
}
# mlflow/tracking/_tracking_service/client.py prints "View run NAME at: URL" to stdout at every
# set_terminated on a server, unless this is set: the URL holds the tracking URI's userinfo.
_SILENT = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@contextlib.contextmanager
def mlflow_bounds(**overrides: str) -> Iterator[None]:
    """MLflow's client with bounded requests and no URL printing, for the calls inside."""
    settings = {
        **{k: v for k, v in _MLFLOW_SETTINGS.items() if not os.environ.get(k)},
        **overrides,
        **_SILENT,
    }
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def check_local_store(tracking_uri: str) -> None:
    """A SQLite store whose file or folder cannot be written is refused at once: MLflow would
    retry creating its engine ten times with backoff and log each failure first."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return
    existing = Path(tracking_uri[len(prefix) :].split("?", 1)[0])
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent  # the folder MLflow would create the store in
    if not os.access(existing, os.W_OK):
        raise BadInput(
            f"cannot use the MLflow tracking URI {scrub_text(tracking_uri)}: {existing} is "
            "read-only; choose a store that can be written (--tracking-uri)."
        )


def component(text: str) -> str:
    """`text` as one plain file-system name: no separator, no `..`, never hidden."""
    name = _NAME_UNSAFE.sub("_", text).strip("_")[:120]
    if not name or name.startswith("."):
        name = "_" + name
    return name


def inside(path: Path, root: Path) -> Path:
    """`path`, once it is known to stay inside `root` with links resolved; BadInput otherwise."""
    resolved, base = path.resolve(), root.resolve()
    if resolved != base and base not in resolved.parents:
        raise BadInput(f"{path} would be written outside {root}; nothing was written there.")
    return path


@contextlib.contextmanager
def scrubbed_copies(paths: Sequence[Path]) -> Iterator[list[Path]]:
    """Copies of `paths` (same names, in a private temporary folder), each read as a plain file
    without following links and scrubbed like a report, for a tracker to upload."""
    with tempfile.TemporaryDirectory(prefix="workbench-export-") as staging:
        copies = []
        for index, path in enumerate(paths):
            data = read_plain_bytes(path, "File", ARTIFACT_MAX_BYTES)
            text = encodable(scrub_text(data.decode("utf-8", errors="replace")))
            copy = Path(staging) / str(index) / component(path.name)
            copy.parent.mkdir()
            copy.write_text(text, encoding="utf-8")
            copies.append(copy)
        yield copies
