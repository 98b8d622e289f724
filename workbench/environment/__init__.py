"""Notebook 00: what exactly is installed, is it a published Neuron release, and what changed
since the pinned manifest?"""

from typing import TYPE_CHECKING

from workbench.lazy_exports import lazy_exports

__all__ = [
    "capture_manifest",
    "drift_from",
    "enforce_no_critical_drift",
    "import_failures",
    "match_release",
    "pin",
    "way_back",
]

if TYPE_CHECKING:
    from workbench.environment.drift import drift_from, enforce_no_critical_drift, import_failures
    from workbench.environment.manifest import capture_manifest, pin
    from workbench.environment.releases import match_release
    from workbench.environment.rollback import way_back

__getattr__ = lazy_exports(
    __name__,
    {
        "drift_from": "workbench.environment.drift",
        "enforce_no_critical_drift": "workbench.environment.drift",
        "import_failures": "workbench.environment.drift",
        "capture_manifest": "workbench.environment.manifest",
        "pin": "workbench.environment.manifest",
        "match_release": "workbench.environment.releases",
        "way_back": "workbench.environment.rollback",
    },
)
