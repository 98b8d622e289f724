"""Everything under tests/e2e runs the workbook as a user does (notebooks in real kernels, the CLI
in a subprocess, reports in Chromium, JupyterLab): each test here is marked `e2e`, so
`-m "not e2e"` leaves only the unit and contract tests."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A conftest's collection hook sees every collected item, not only this folder's.
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)
