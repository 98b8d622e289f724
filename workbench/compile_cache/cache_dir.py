"""Where the workbench keeps what it can reuse between runs on one machine."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """~/.cache/workbench, or $XDG_CACHE_HOME/workbench where that is set."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "workbench"
