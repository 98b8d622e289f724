"""Notebook 00: what exactly is installed, is it a published Neuron release, and what changed
since the pinned manifest?"""

from workbench.environment.drift import drift_from, enforce_no_critical_drift, import_failures
from workbench.environment.manifest import capture_manifest, pin
from workbench.environment.releases import match_release

__all__ = [
    "capture_manifest",
    "drift_from",
    "enforce_no_critical_drift",
    "import_failures",
    "match_release",
    "pin",
]
