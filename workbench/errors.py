"""Errors that reach the user as one sentence and a documented exit code."""

from __future__ import annotations

# Exit codes of `workbench` commands (README "Exit codes" lists the same table).
EXIT_OK = 0
EXIT_NOTEBOOK_FAILED = 1  # a notebook failed; its report and the others were still written
EXIT_BAD_INPUT = 2  # rejected before anything ran; nothing was written
EXIT_DRIFT = 3  # `workbench env diff`: critical drift between two manifests
EXIT_BLOCKING_FINDINGS = 4  # `workbench scan`: code that will not run on the chosen Neuron path
EXIT_REGRESSION = 5  # `workbench compare`: the newest run regressed against its baseline
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM: the partial run is kept, `latest` untouched


class WorkbenchError(Exception):
    """An expected failure with a message meant for the user, not a traceback."""

    exit_code = EXIT_NOTEBOOK_FAILED


class BadInput(WorkbenchError):
    """Wrong workload spec, unknown parameter, bad config, unwritable output..."""

    exit_code = EXIT_BAD_INPUT
