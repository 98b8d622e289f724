"""The shape of 00_environment.json."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.environment.drift import Drift, worst_severity
from workbench.environment.releases import ReleaseMatch


def result_data(
    manifest: dict[str, Any],
    release: ReleaseMatch,
    drifts: Sequence[Drift] | None,
    broken: Sequence[Drift] = (),
) -> dict[str, Any]:
    """The 00_environment.json payload, headline first; `broken` are `import_failures`."""
    torch_version = manifest["packages"].get("torch", "not installed")
    if drifts is None:
        drift_text = "no pinned manifest"
    else:
        worst = worst_severity(list(drifts)) or "none"
        drift_text = f"{len(drifts)} change(s) since the pin, worst {worst}"
    imports = ""
    if broken:
        first = broken[0]
        imports = (
            f"; CRITICAL: {len(broken)} companion package(s) fail to import "
            f"({first.key.removeprefix('imports.')}: {first.new})"
        )
    return {
        "headline": f"torch {torch_version}; {manifest['neuron']['summary']}; "
        f"release check: {release.status}; {drift_text}{imports}.",
        "manifest": manifest,
        "release": release,
        "drift": None if drifts is None else list(drifts),
        "import_failures": list(broken),
    }
