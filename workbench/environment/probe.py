"""What an interpreter has installed, read inside that interpreter: run as a script by any Python
(`PY -I probe.py`), so it imports nothing but the standard library and prints one JSON object.

`workbench env pin --python PY` and `workbench env restore` read another environment through it:
its version and platform, every distribution `import` would find first (a shadowed copy further
down sys.path is not the one that runs), and which of them are editable installs (PEP 610's
direct_url.json), which a restore leaves alone.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib import metadata


def normalize_name(name: str) -> str:
    """PEP 503 name: `PyYAML` and `pyyaml`, `torch_xla` and `torch-xla` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _editable_location(dist: metadata.Distribution) -> str | None:
    text = dist.read_text("direct_url.json")
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    if isinstance(found, dict) and (found.get("dir_info") or {}).get("editable"):
        return str(found.get("url", ""))
    return None


def facts() -> dict[str, Any]:
    """This interpreter: its version, platform, installed distributions and editable ones."""
    # Imported here: the readers of a pinned manifest and of result files import this module
    # for normalize_name alone, and never list packages.
    import platform
    from importlib import metadata

    packages: dict[str, str] = {}
    editable: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if not name:
            continue
        # Any copy of it installed editable makes it editable: a source tree's own egg-info
        # (left by the editable build) is found first when Python starts inside that tree.
        location = _editable_location(dist)
        if location is not None:
            editable.setdefault(normalize_name(name), location)
        if normalize_name(name) not in packages:
            packages[normalize_name(name)] = dist.version
    return {
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "platform": platform.platform(),
        },
        "packages": dict(sorted(packages.items())),
        "editable": dict(sorted(editable.items())),
    }


if __name__ == "__main__":
    json.dump(facts(), sys.stdout)
