"""What exactly is installed: capture a manifest, pin it, diff two, check the Neuron release matrix.

Packages come from `importlib.metadata` in-process (no pip subprocess, which fails in uv venvs and
picks the wrong interpreter: ../reference: methods.md a1). Every string in the manifest passes
through `workbench.redact`; from `os.environ` only the allowlisted variables are kept.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from workbench.environment import probe
from workbench.environment.companions import check_imports
from workbench.environment.lock import Fetched, hash_pins, lock_text, pip_command
from workbench.environment.probe import facts
from workbench.errors import BadInput
from workbench.redact import redact_environment, redact_value, scrub_data, scrub_text
from workbench.results import write_json_atomic, write_text_atomic
from workbench.safe_load import (
    RESULT_MAX_BYTES,
    EachValue,
    Shape,
    check_fields,
    load_json,
    read_bounded,
)
from workbench.targets.detect import detect_neuron_stack

MANIFEST_KIND = "workbench.environment-manifest"


MANIFEST_SCHEMA_VERSION = 1


_TOOL_TIMEOUT_S = 10
PROBE_TIMEOUT_S = 60


def _is_this_interpreter(python: Path | None) -> bool:
    """Whether `python` is the running interpreter. Not by resolving links: every virtualenv's
    python links to one base interpreter, and what differs is the environment around it."""
    return python is None or Path(python).absolute() == Path(sys.executable).absolute()


def interpreter_facts(python: Path | None = None) -> dict[str, Any]:
    """An interpreter's version, platform, packages and editable installs (probe.facts), read in
    this process for the running interpreter and by running the probe in any other."""
    if _is_this_interpreter(python):
        return facts()
    try:
        done = subprocess.run(
            [str(python), "-I", probe.__file__],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(f"--python {python} could not be run: {exc}.") from None
    try:
        found = json.loads(done.stdout) if done.returncode == 0 else None
    except json.JSONDecodeError:
        found = None
    if not isinstance(found, dict) or not isinstance(found.get("packages"), dict):
        last = next((ln for ln in reversed(done.stderr.splitlines()) if ln.strip()), "")
        raise BadInput(
            f"--python {python} did not describe its packages ({last.strip() or 'no output'}); "
            "name a Python 3.8 or newer interpreter."
        )
    return found


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def legacy_setting(read: Callable[[], Any]) -> Any:
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
        "float32_matmul_precision": legacy_setting(torch.get_float32_matmul_precision),
        "cuda_matmul_allow_tf32": legacy_setting(lambda: torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": legacy_setting(lambda: torch.backends.cudnn.allow_tf32),
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


def capture_manifest(
    python: Path | None = None,
    hashes: bool = False,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """A JSON-able description of an environment (the running one, or `python`'s), with every
    secret removed; with `hashes` (as `pin` asks), the sha256 of the files its index serves for
    each pinned version (lock.hash_pins), and why a version has none: fetching them takes tens
    of seconds, which notebook 00's record of the environment does not spend."""
    # Imported here: the readers of a pinned manifest (compare, drift) never capture one.
    import platform

    import psutil

    found = interpreter_facts(python)
    own = _is_this_interpreter(python)
    libc_name, libc_version = platform.libc_ver()
    packages: dict[str, str] = found["packages"]
    editable: dict[str, str] = found.get("editable") or {}
    manifest: dict[str, Any] = {
        "kind": MANIFEST_KIND,
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "captured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": found["python"],
        "platform": found["platform"],
        "libc": {"name": libc_name or None, "version": libc_version or None},
        "cpu": {
            "model": _cpu_model(),
            "logical_cores": psutil.cpu_count(logical=True),
            "memory_total_bytes": psutil.virtual_memory().total,
        },
        "packages": packages,
        "editable": editable,
        # Installed is not importable: a companion built for another torch fails at import.
        # Checked in this interpreter only: another one's imports are its own to run.
        "imports": (
            {check.package: check.status for check in check_imports(packages)} if own else {}
        ),
        "torch": _torch_section() if own else None,
        "neuron": _neuron_section(),
        "environment": redact_environment(os.environ),
    }
    if hashes:
        pins = {name: v for name, v in packages.items() if name not in editable}
        pip = pip_command(Path(found["python"]["executable"]), "pip" in packages)
        fetched = hash_pins(pip, pins, log)
        manifest["hashes"] = fetched.hashes
        manifest["unhashed"] = fetched.failed
    # Secret values can also surface in paths, tool output or command lines.
    return scrub_manifest(manifest)


# Maps keyed by package name: `google-auth` names a package, not a secret, so these are scrubbed
# by content alone (its version is not redacted for its name).
_BY_PACKAGE = ("packages", "hashes", "unhashed", "editable")


def scrub_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with every secret removed: by key and content everywhere, except that the
    maps keyed by package name are scrubbed by content only."""
    named = {key: manifest[key] for key in _BY_PACKAGE if key in manifest}
    rest = {key: value for key, value in manifest.items() if key not in named}
    scrubbed = cast(dict[str, Any], scrub_data(rest))
    for key, mapping in named.items():
        # A value in a list: scrub_data judges a dict's values by their keys, a list's by content.
        values = cast(list[Any], scrub_data(list(mapping.values())))
        scrubbed[key] = {scrub_text(name): v for name, v in zip(mapping, values, strict=True)}
    return {key: scrubbed[key] for key in manifest}


def _lock_text(manifest: dict[str, Any], manifest_name: str) -> str:
    python, host = manifest["python"], manifest["platform"]["platform"]
    header = [
        f"workbench environment lock, captured {manifest['captured_at']} ({manifest_name})",
        f"python {python['version']} ({python['implementation']}) on {host}",
    ]
    editable = manifest.get("editable") or {}
    if "hashes" not in manifest:
        header += [
            "pinned without hashes (--no-hashes): `pip install -r` installs these versions but",
            "cannot verify the files; `workbench env restore` needs a hash-pinned lock",
        ]
        lines = [f"# {line}" for line in header]
        lines += [
            f"{name}=={version}"
            for name, version in sorted(manifest["packages"].items())
            if name not in editable
        ]
        return "\n".join(lines) + "\n"
    header += [
        "hash-pinned: `pip install --no-deps --require-hashes -r` this file installs exactly",
        "these files; `workbench env restore` also removes what it does not list",
    ]
    fetched = Fetched(manifest["hashes"], manifest.get("unhashed") or {})
    return lock_text(header, manifest["packages"], fetched, editable)


def pin(
    out_path: str | Path,
    *,
    force: bool = False,
    python: Path | None = None,
    hashes: bool = True,
    log: Callable[[str], None] = lambda _: None,
) -> tuple[Path, Path]:
    """Write the manifest of `python`'s environment (default: this one) to `out_path` and its
    lock `<stem>.lock.txt` beside it, hash-pinned unless `hashes` is False.

    An existing manifest or lock is a pinned, known-good environment: it is replaced only with
    `force`. Every problem with the path is a BadInput, found before anything is written.
    """
    manifest_path = Path(out_path)
    lock_path = manifest_path.with_name(f"{manifest_path.stem}.lock.txt")
    try:
        if manifest_path.is_dir():
            raise BadInput(
                f"--out {manifest_path} is a folder; name the manifest file, e.g. "
                f"{manifest_path / 'workbench-env.json'}."
            )
        existing = [p for p in (manifest_path, lock_path) if p.exists()]
    except OSError as exc:
        raise BadInput(f"--out {manifest_path} cannot be used: {exc.strerror or exc}.") from None
    if existing and not force:
        raise BadInput(
            f"{existing[0]} already exists; pass --force to replace the pinned environment, "
            "or choose another --out."
        )
    _check_writable(manifest_path)
    manifest = capture_manifest(python, hashes, log)
    try:
        write_json_atomic(manifest_path, manifest)
        write_text_atomic(lock_path, scrub_text(_lock_text(manifest, manifest_path.name)))
    except OSError as exc:
        raise BadInput(
            f"--out {manifest_path} cannot be written: {exc.strerror or exc}; choose a "
            "writable place."
        ) from None
    return manifest_path, lock_path


def _check_writable(path: Path) -> None:
    """Refuse a place the manifest cannot be written before the capture spends its time: the
    nearest folder that exists must be a writable folder."""
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    try:
        if not parent.is_dir():
            raise OSError(f"{parent} is not a folder")
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise BadInput(
            f"--out {path} cannot be written ({parent}: {exc.strerror or exc}); choose a "
            "writable place."
        ) from None


# The fields a manifest diff reads, with their types (safe_load's shapes); others are not read.
MANIFEST_SHAPE: Shape = {
    "captured_at": str,
    "python": {},
    "platform": {},
    "libc": ({}, None),
    "cpu": ({}, None),
    "packages": EachValue(str),
    "imports": EachValue(str),
    "torch": ({}, None),
    "neuron": ({}, None),
    "environment": EachValue(str),
}


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read a manifest written by `pin`; anything else is BadInput with one clear sentence."""
    path = Path(path)
    if not path.exists():
        raise BadInput(
            f"Manifest {path} does not exist: pin the environment first or pass the right path."
        )
    record = load_json(read_bounded(path, "Manifest", RESULT_MAX_BYTES), f"Manifest {path}")
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
    # What `env diff` reads, by type: a hand-edited "imports": "abc" is one sentence naming it.
    check_fields(record, MANIFEST_SHAPE, f"Manifest {path}")
    return record
