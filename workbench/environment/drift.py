"""Drift between two environment manifests: what changed, how much it matters, and the gate that
fails a scheduled run on critical drift."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

from workbench.environment.companions import OK
from workbench.environment.manifest import load_manifest
from workbench.errors import WorkbenchError
from workbench.targets.detect import NeuronStack

CRITICAL = "critical"


WARNING = "warning"


INFO = "info"


_SEVERITY_ORDER = {CRITICAL: 0, WARNING: 1, INFO: 2}


# Packages whose version decides what is compiled and how it computes.
_CRITICAL_PACKAGES = frozenset(
    {"torch", "torch-neuronx", "torch-xla", "neuronx-cc", "libneuronxla", "nki"}
)


# The workbench's own direct dependencies: a change can alter how notebooks run or render.
_WORKBENCH_DEPENDENCIES = frozenset(
    {
        "papermill",
        "nbconvert",
        "nbclient",
        "nbformat",
        "ipykernel",
        "ipywidgets",
        "matplotlib",
        "pyyaml",
        "psutil",
        "tqdm",
        "numpy",
    }
)


_CRITICAL_SYSTEM_PACKAGES = frozenset(
    {"aws-neuronx-runtime-lib", "aws-neuronx-dkms", "aws-neuronx-collectives"}
)


# Neuron/XLA variables that only move logs, caches, debug output or core placement, told by a
# whole word of the name (NEURON_RT_LOG_LEVEL is operational, NEURON_LOGICAL_NC_CONFIG is not).
# Every other NEURON_*, XLA_*, TORCH_NEURONX_* or PJRT_* variable is taken to change compilation
# or numerics, so a new, unknown flag is reported rather than missed.
_OPERATIONAL_ENV_WORDS = frozenset(
    {"LOG", "CACHE", "DEBUG", "DIR", "DUMP", "TAG", "TIMEOUT", "KEEP", "ARTIFACTS", "CORES"}
)


_COMPILATION_ENV_PREFIXES = ("NEURON_", "XLA_", "TORCH_NEURONX_", "PJRT_")


# Disabling the device-backend autoload turns native TorchNeuron off (neuron.md 1.4).
_CRITICAL_ENV_NAMES = frozenset({"TORCH_DEVICE_BACKEND_AUTOLOAD"})


# Diff keys that never mean drift: timestamps, and NeuronStack fields that `packages` already
# reports (a torch-neuronx change would otherwise be listed twice).
_STACK_PACKAGE_FIELDS = {f.name for f in fields(NeuronStack)} - {"flavour"}


_IGNORED_KEYS = frozenset(
    {"kind", "schema_version", "captured_at", "neuron.summary"}
    | {f"neuron.{name}" for name in _STACK_PACKAGE_FIELDS}
)


@dataclass(frozen=True)
class Drift:
    """One difference between two manifests and how much it matters."""

    key: str  # dotted path into the manifest, e.g. "packages.torch", "environment.XLA_FLAGS"
    old: str | None  # None: absent in the old manifest
    new: str | None  # None: absent in the new manifest
    severity: str  # CRITICAL, WARNING or INFO
    reason: str


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        # An empty section adds no keys, so filling it later shows only the new entries.
        flat: dict[str, str] = {}
        for key, child in value.items():
            flat.update(_flatten(child, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if prefix == "torch.build_config":
        # Compare the build text by digest; the multi-line text itself stays in the manifest.
        return {prefix: "sha256:" + hashlib.sha256(str(value).encode()).hexdigest()[:16]}
    if isinstance(value, str):
        return {prefix: value}
    return {prefix: json.dumps(value, sort_keys=True)}


def _environment_severity(name: str) -> tuple[str, str]:
    if name in _CRITICAL_ENV_NAMES or (
        name.startswith(_COMPILATION_ENV_PREFIXES)
        and not _OPERATIONAL_ENV_WORDS & set(name.split("_"))
    ):
        return CRITICAL, "changes how graphs are compiled or how they compute"
    return INFO, "environment variable that does not change compilation or numerics"


def _severity(key: str) -> tuple[str, str]:
    section, _, rest = key.partition(".")
    if section == "packages":
        if rest in _CRITICAL_PACKAGES:
            return CRITICAL, "PyTorch/Neuron stack package: compiled graphs and numerics follow it"
        if rest in _WORKBENCH_DEPENDENCIES:
            return WARNING, "workbench dependency: notebooks may run or render differently"
        return INFO, "other installed package"
    if section == "environment":
        return _environment_severity(rest)
    if section == "torch":
        return CRITICAL, "torch build or numeric setting: results are not comparable"
    if key in ("python.version", "python.implementation"):
        return CRITICAL, "different Python: wheels and numerics may differ"
    if key == "neuron.flavour" or key == "neuron.neuron_ls.runtime_versions":
        return CRITICAL, "different Neuron backend or runtime"
    if key.startswith("neuron.system_packages.packages."):
        if key.removeprefix("neuron.system_packages.packages.") in _CRITICAL_SYSTEM_PACKAGES:
            return CRITICAL, "Neuron driver/runtime/collectives package"
    return INFO, "host detail"


def import_failures(manifest: dict[str, Any]) -> list[Drift]:
    """Companion packages that are installed but fail to import: critical drift whatever any
    pin says, since a pin taken of a broken environment does not make it work."""
    return [
        Drift(
            f"imports.{package}",
            None,
            status,
            CRITICAL,
            f"installed ({manifest['packages'].get(package, 'version unknown')}) but fails to "
            "import: it was built for another torch; install the build made for this torch",
        )
        for package, status in sorted((manifest.get("imports") or {}).items())
        if status != OK
    ]


def diff_manifests(old: dict[str, Any], new: dict[str, Any]) -> list[Drift]:
    """Every difference between two manifests, critical first, then by key. Import checks are
    left out: `import_failures` judges each manifest's own."""
    old_flat, new_flat = _flatten(old), _flatten(new)
    # A manifest pinned from another interpreter (`env pin --python`) has no torch section: its
    # torch settings were not read, so they cannot have drifted (its torch version still can).
    uncaptured = ("torch",) if old.get("torch") is None or new.get("torch") is None else ()
    drifts = []
    for key in sorted((old_flat.keys() | new_flat.keys()) - _IGNORED_KEYS):
        # Import checks are judged per manifest; a lock's hashes and editable installs are the
        # pin's own record of its files, not a property of the environment to drift.
        if key.startswith(("imports.", "hashes.", "unhashed.", "editable.")):
            continue
        if key.partition(".")[0] in uncaptured:
            continue
        before, after = old_flat.get(key), new_flat.get(key)
        if before == after:
            continue
        severity, why = _severity(key)
        change = "added" if before is None else "removed" if after is None else "changed"
        drifts.append(Drift(key, before, after, severity, f"{change}: {why}"))
    return sorted(drifts, key=lambda d: (_SEVERITY_ORDER[d.severity], d.key))


def worst_severity(drifts: list[Drift]) -> str | None:
    """The most serious severity among `drifts`, or None when there is no drift."""
    return min((d.severity for d in drifts), key=_SEVERITY_ORDER.__getitem__, default=None)


class DriftError(WorkbenchError):
    """Critical drift from the pinned manifest while the run was asked to fail on it."""


def drift_from(pinned_manifest: str, manifest: dict[str, Any]) -> list[Drift] | None:
    """Changes since `pinned_manifest`, or None when no pinned manifest was given."""
    if not pinned_manifest:
        return None
    return diff_manifests(load_manifest(pinned_manifest), manifest)


def enforce_no_critical_drift(drifts: list[Drift] | None, fail_on_drift: bool) -> None:
    """Raise DriftError on critical drift when asked to; the report has already shown it."""
    if not fail_on_drift or not drifts or worst_severity(drifts) != CRITICAL:
        return
    critical = [d for d in drifts if d.severity == CRITICAL]
    broken = [d for d in critical if d.key.startswith("imports.")]
    changed = [d.key for d in critical if d not in broken]
    parts = []
    if broken:
        parts.append(
            "; ".join(f"{d.key.removeprefix('imports.')} fails to import ({d.new})" for d in broken)
            + ": install the builds made for this torch"
        )
    if changed:
        parts.append(
            f"{len(changed)} critical change(s) since the pinned manifest "
            f"({', '.join(changed[:5])}{', ...' if len(changed) > 5 else ''}); "
            "re-pin if the change is intended"
        )
    raise DriftError("; ".join(parts) + ".")
