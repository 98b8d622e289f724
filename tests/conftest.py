"""Shared test setup: tests import fixture workloads as `tests.fixtures...` from the repo root."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
