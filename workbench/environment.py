"""What exactly is installed: capture a manifest, pin it, diff two, check the Neuron release matrix.

Packages come from `importlib.metadata` in-process (no pip subprocess, which fails in uv venvs and
picks the wrong interpreter: ../reference: methods.md a1). Every string in the manifest passes
through `workbench.redact`; from `os.environ` only the allowlisted variables are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from importlib import metadata, resources
from pathlib import Path
from typing import Any, cast

import psutil

from workbench.errors import BadInput, WorkbenchError
from workbench.redact import redact_environment, redact_value, scrub_data
from workbench.results import write_json_atomic, write_text_atomic
from workbench.targets.detect import FLAVOUR_XLA, NeuronStack, detect_neuron_stack

MANIFEST_KIND = "workbench.environment-manifest"
MANIFEST_SCHEMA_VERSION = 1
_TOOL_TIMEOUT_S = 10

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


def _normalize(name: str) -> str:
    """PEP 503 name: `PyYAML` and `pyyaml`, `torch_xla` and `torch-xla` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------------- capture


def _installed_packages() -> dict[str, str]:
    packages: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        # The first distribution found on sys.path is the one `import` uses; later ones are
        # shadowed copies.
        if name and _normalize(name) not in packages:
            packages[_normalize(name)] = dist.version
    return dict(sorted(packages.items()))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _legacy_setting(read: Callable[[], Any]) -> Any:
    """A legacy TF32/precision flag, or None where torch refuses to read it.

    Since the fp32_precision API (torch 2.9), reading a legacy flag after the new API was used
    raises RuntimeError ("mix of the legacy and new APIs"); fp32_precision then has the answer.
    """
    try:
        return read()
    except RuntimeError:
        return None


def _torch_section() -> dict[str, Any]:
    import torch

    def fp32_precision(backend: Any) -> str | None:
        # The fp32_precision controls are newer than some torch releases we support.
        return getattr(backend, "fp32_precision", None)

    return {
        "version": torch.__version__,
        "cuda_build": torch.version.cuda,
        "build_config": torch.__config__.show(),
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_algorithms_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "float32_matmul_precision": _legacy_setting(torch.get_float32_matmul_precision),
        "cuda_matmul_allow_tf32": _legacy_setting(lambda: torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": _legacy_setting(lambda: torch.backends.cudnn.allow_tf32),
        "cudnn_enabled": torch.backends.cudnn.enabled,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "fp32_precision": {
            "generic": fp32_precision(torch.backends),
            "cuda_matmul": fp32_precision(torch.backends.cuda.matmul),
            "cudnn": fp32_precision(torch.backends.cudnn),
            "mkldnn": fp32_precision(torch.backends.mkldnn),
        },
    }


def _run_tool(argv: list[str]) -> subprocess.CompletedProcess[str] | str:
    """Run a system tool briefly; return the finished process, or why it could not run."""
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{argv[0]} could not run: {exc}"


def _first_line(text: str) -> str:
    return redact_value(text.strip().splitlines()[0]) if text.strip() else ""


def _system_neuron_packages() -> dict[str, Any]:
    """aws-neuronx-* OS packages (driver, runtime, collectives, tools) from dpkg or rpm."""
    if shutil.which("dpkg-query"):
        argv = ["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Status}\n", "aws-neuronx-*"]
    elif shutil.which("rpm"):
        fmt = "%{NAME}\t%{VERSION}-%{RELEASE}\tinstalled\n"
        argv = ["rpm", "-qa", "--queryformat", fmt, "aws-neuronx-*"]
    else:
        return {"tool": None, "packages": {}, "error": None}
    result = _run_tool(argv)
    if isinstance(result, str):
        return {"tool": argv[0], "packages": {}, "error": result}
    packages = {}
    for line in result.stdout.splitlines():
        name, version, status = (line.split("\t") + ["", ""])[:3]
        # dpkg also lists removed packages whose config files remain ("deinstall ok config-files").
        if name and status.split()[-1:] == ["installed"]:
            packages[name] = version
    # dpkg-query exits 1 when nothing matches the pattern: that means none installed.
    nothing_matched = "no packages found" in result.stderr
    error = None
    if result.returncode != 0 and not nothing_matched:
        error = _first_line(result.stderr) or f"{argv[0]} exited {result.returncode}"
    return {"tool": argv[0], "packages": dict(sorted(packages.items())), "error": error}


def _neuron_ls() -> dict[str, Any]:
    """Devices and per-process runtime versions from `neuron-ls --json-output` (neuron.md 2.9)."""
    if not shutil.which("neuron-ls"):
        return {"status": "absent", "devices": [], "runtime_versions": [], "error": None}
    result = _run_tool(["neuron-ls", "--json-output"])
    if isinstance(result, str):
        return {"status": "failed", "devices": [], "runtime_versions": [], "error": result}
    try:
        devices = json.loads(result.stdout) if result.returncode == 0 else None
    except json.JSONDecodeError:
        devices = None
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        error = _first_line(result.stderr) or f"neuron-ls exited {result.returncode} without JSON"
        return {"status": "failed", "devices": [], "runtime_versions": [], "error": error}
    runtime_versions = sorted(
        {
            str(process["neuron_runtime_version"])
            for device in devices
            for process in device.get("neuron_processes") or []
            if process.get("neuron_runtime_version")
        }
    )
    for device in devices:
        # Command lines are user input and may carry tokens passed as arguments.
        for process in device.get("neuron_processes") or []:
            if isinstance(process.get("command"), str):
                process["command"] = redact_value(process["command"])
    return {"status": "ok", "devices": devices, "runtime_versions": runtime_versions, "error": None}


def _neuron_section() -> dict[str, Any]:
    stack = detect_neuron_stack()
    return {
        **asdict(stack),
        "summary": stack.summary(),
        "system_packages": _system_neuron_packages(),
        "neuron_ls": _neuron_ls(),
    }


def capture_manifest() -> dict[str, Any]:
    """A JSON-able description of this environment, with every secret removed."""
    libc_name, libc_version = platform.libc_ver()
    manifest = {
        "kind": MANIFEST_KIND,
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "captured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
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
        "libc": {"name": libc_name or None, "version": libc_version or None},
        "cpu": {
            "model": _cpu_model(),
            "logical_cores": psutil.cpu_count(logical=True),
            "memory_total_bytes": psutil.virtual_memory().total,
        },
        "packages": _installed_packages(),
        "torch": _torch_section(),
        "neuron": _neuron_section(),
        "environment": redact_environment(os.environ),
    }
    # Secret values can also surface in paths, tool output or command lines.
    return cast(dict[str, Any], scrub_data(manifest))


# -------------------------------------------------------------------------------------- pin


def _lock_text(manifest: dict[str, Any], manifest_name: str) -> str:
    python, host = manifest["python"], manifest["platform"]["platform"]
    lines = [
        f"# workbench environment lock, captured {manifest['captured_at']} ({manifest_name})",
        f"# python {python['version']} ({python['implementation']}) on {host}",
        "# Local version tags (+cpu, +cu128) need their index, e.g.",
        "# --extra-index-url https://download.pytorch.org/whl/cpu ; Neuron packages need",
        "# --extra-index-url https://pip.repos.neuron.amazonaws.com",
        "# workbench itself is not pinned: install it from its checkout with `pip install -e .`",
    ]
    lines += [
        f"{name}=={version}"
        for name, version in sorted(manifest["packages"].items())
        if name != "workbench"
    ]
    return "\n".join(lines) + "\n"


def pin(out_path: str | Path) -> tuple[Path, Path]:
    """Write the manifest to `out_path` and a `name==version` lock `<stem>.lock.txt` beside it."""
    manifest_path = Path(out_path)
    lock_path = manifest_path.with_name(f"{manifest_path.stem}.lock.txt")
    manifest = capture_manifest()
    write_json_atomic(manifest_path, manifest)
    write_text_atomic(lock_path, _lock_text(manifest, manifest_path.name))
    return manifest_path, lock_path


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read a manifest written by `pin`; anything else is BadInput with one clear sentence."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(
            f"Manifest {path} does not exist: pin the environment first or pass the right path."
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"Manifest {path} could not be read as JSON ({exc}).") from None
    if not isinstance(record, dict) or record.get("kind") != MANIFEST_KIND:
        raise BadInput(
            f"{path} is not a workbench environment manifest: pass a file written by pin()."
        )
    version = record.get("schema_version")
    if not isinstance(version, int) or version > MANIFEST_SCHEMA_VERSION:
        raise BadInput(
            f"Manifest {path} has schema {version!r}; this workbench reads up to "
            f"{MANIFEST_SCHEMA_VERSION}: upgrade workbench or re-pin."
        )
    return record


# ------------------------------------------------------------------------------------- diff


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


def diff_manifests(old: dict[str, Any], new: dict[str, Any]) -> list[Drift]:
    """Every difference between two manifests, critical first, then by key."""
    old_flat, new_flat = _flatten(old), _flatten(new)
    drifts = []
    for key in sorted((old_flat.keys() | new_flat.keys()) - _IGNORED_KEYS):
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


# --------------------------------------------------------------------------- release matrix


@dataclass(frozen=True)
class NeuronRelease:
    """One published Neuron release (one flavour of it) and the package versions it ships."""

    neuron_release: str
    date: str | None
    flavour: str  # FLAVOUR_XLA or FLAVOUR_NATIVE
    torch_neuronx: tuple[str, ...]
    torch: tuple[str, ...]
    torch_xla: tuple[str, ...]  # PyTorch minor series ("2.9"): torch-xla follows the torch minor
    neuronx_cc: tuple[str, ...]
    runtime_lib: tuple[str, ...]
    dkms: tuple[str, ...]
    python: tuple[str, ...] | None  # None: the reference does not say
    instances: tuple[str, ...] | None
    components: dict[str, str]
    note: str | None
    source: str


@dataclass(frozen=True)
class PackageCheck:
    """One package of a Neuron stack compared with what a release ships."""

    package: str
    expected: str
    installed: str | None
    ok: bool


@dataclass(frozen=True)
class ReleaseMatch:
    """How an environment's Neuron packages relate to the published releases."""

    status: str  # "match" | "partial" | "no-neuron-stack" | "unknown-combination"
    releases: list[NeuronRelease]
    checks: list[PackageCheck]
    explanation: str


_LIST_FIELDS = ("torch_neuronx", "torch", "torch_xla", "neuronx_cc", "runtime_lib", "dkms")


def _matrix_document() -> dict[str, Any]:
    text = resources.files("workbench").joinpath("data/neuron_releases.json").read_text("utf-8")
    return json.loads(text)


def load_release_matrix() -> list[NeuronRelease]:
    """Published Neuron releases, oldest first (data/neuron_releases.json)."""
    releases = []
    for row in _matrix_document()["releases"]:
        values = dict(row)
        for name in _LIST_FIELDS:
            values[name] = tuple(row[name])
        for name in ("python", "instances"):
            values[name] = None if row[name] is None else tuple(row[name])
        releases.append(NeuronRelease(**values))
    return releases


def _public(version: str) -> str:
    """The version without its local tag: 2.9.0+cpu -> 2.9.0."""
    return version.split("+", 1)[0]


def _minor(version: str) -> str:
    return ".".join(_public(version).split(".")[:2])


def _same_build(installed: str, published: str) -> bool:
    # Native wheels are published as a family, e.g. torch-neuronx==2.14.3.0.* (neuron.md 1.2).
    installed = _public(installed)
    return installed == published or installed.startswith(published + ".")


def _published_build(release: NeuronRelease, torch_neuronx: str) -> str | None:
    return next((v for v in release.torch_neuronx if _same_build(torch_neuronx, v)), None)


def _checks(release: NeuronRelease, build: str, packages: dict[str, str]) -> list[PackageCheck]:
    torch = packages.get("torch")
    if release.flavour == FLAVOUR_XLA:
        # The XLA build number starts with the exact PyTorch it was built for; torch-xla only
        # has to share the PyTorch minor (neuron.md 1.1).
        torch_series = ".".join(build.split(".")[:3])
        checks = [
            PackageCheck(
                "torch", torch_series, torch, bool(torch) and _public(torch) == torch_series
            )
        ]
        xla = packages.get("torch-xla")
        xla_series = _minor(torch_series)
        checks.append(
            PackageCheck(
                "torch-xla", f"{xla_series}.*", xla, bool(xla) and _minor(xla) == xla_series
            )
        )
    else:
        # Native install rule: the torch-neuronx family matches the PyTorch minor (neuron.md 1.2).
        series = _minor(build)
        checks = [
            PackageCheck("torch", f"{series}.*", torch, bool(torch) and _minor(torch) == series)
        ]
    compiler = packages.get("neuronx-cc")
    checks.append(
        PackageCheck(
            "neuronx-cc",
            " or ".join(release.neuronx_cc),
            compiler,
            bool(compiler) and _public(compiler) in release.neuronx_cc,
        )
    )
    return [PackageCheck("torch-neuronx", build, packages.get("torch-neuronx"), True), *checks]


def _describe(checks: list[PackageCheck]) -> str:
    parts = [f"{c.package} {c.installed}" for c in checks]
    return ", ".join(parts[:-1]) + f" and {parts[-1]}"


def match_release(packages: dict[str, str]) -> ReleaseMatch:
    """Which published Neuron release, if any, this set of installed packages is."""
    packages = {_normalize(name): version for name, version in packages.items()}
    torch_neuronx = packages.get("torch-neuronx")
    if not torch_neuronx:
        return ReleaseMatch(
            "no-neuron-stack",
            [],
            [],
            "torch-neuronx is not installed, so no Neuron release applies.",
        )
    matrix = load_release_matrix()
    candidates = []
    for release in matrix:
        build = _published_build(release, torch_neuronx)
        if build:
            checks = _checks(release, build, packages)
            candidates.append((sum(not c.ok for c in checks), release, checks))
    if not candidates:
        return ReleaseMatch(
            "unknown-combination",
            [],
            [],
            f"torch-neuronx {torch_neuronx} is in no published Neuron release from "
            f"{matrix[0].neuron_release} to {matrix[-1].neuron_release} "
            f"(release matrix retrieved {_matrix_document()['retrieved']}).",
        )
    exact = [(release, checks) for failures, release, checks in candidates if failures == 0]
    if exact:
        checks = exact[-1][1]
        names = " / ".join(f"Neuron {release.neuron_release}" for release, _ in exact)
        return ReleaseMatch(
            "match",
            [release for release, _ in exact],
            checks,
            f"{_describe(checks)} match the published {names} release.",
        )
    fewest = min(failures for failures, _, _ in candidates)
    # Several releases can list one build (2.9.0.2.15.32035 is in 2.31 and 2.33): compare with
    # the newest of the closest ones.
    _, nearest, checks = [c for c in candidates if c[0] == fewest][-1]
    wrong = "; ".join(
        f"{c.package} is {c.installed or 'not installed'}, expected {c.expected}"
        for c in checks
        if not c.ok
    )
    return ReleaseMatch(
        "partial",
        [nearest],
        checks,
        f"torch-neuronx {torch_neuronx} is published in Neuron {nearest.neuron_release}, "
        f"but {wrong}.",
    )


# ---------------------------------------------------------------------------- drift checks


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
    critical = [d.key for d in drifts if d.severity == CRITICAL]
    raise DriftError(
        f"{len(critical)} critical change(s) since the pinned manifest "
        f"({', '.join(critical[:5])}{', ...' if len(critical) > 5 else ''}); "
        "re-pin if the change is intended."
    )
