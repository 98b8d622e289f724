"""`workbench env restore MANIFEST --python PY [--dry-run]`: make an environment match a pinned
manifest exactly, and prove that it does.

The way back after an upgrade broke a model. Like `pip-sync` and `uv sync`, it installs what the
manifest pins and removes what it does not list; like a hash-pinned lock, it installs only files
whose sha256 the manifest holds. Everything that can refuse does so before anything changes:
- a Python version (major.minor) or implementation, an OS or machine other than the manifest's;
- a pinned version the manifest holds no hash for (the pin could not verify it);
- a pinned version the index no longer serves, or a file that does not match its hash (every
  file is fetched and checked first, into a folder of its own);
- on a Neuron host, a pinned Neuron release whose driver is newer than the host's: its runtime
  will not start on an older driver (read from the release matrix the workbook carries).
Then it installs the fetched files (`--no-index`, hash-checked, no dependencies resolved: the
manifest is the whole set), removes the rest, pins the environment again and diffs: the result
is what it prints. Editable installs (the workbook's own checkout) are left alone, and so are pip,
setuptools and wheel where the manifest does not list them, as pip-sync leaves them. A restore
stopped half way leaves packages at pinned versions or not yet changed, so running it again
completes it: the plan is always made from what is installed now.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.environment.lock import PIP_TIMEOUT_S, fetch, pip_command, requirement_lines
from workbench.environment.manifest import interpreter_facts, load_manifest
from workbench.errors import BadInput

# Never removed where the manifest does not list them: pip needs them to act at all.
KEPT_TOOLS = ("pip", "setuptools", "wheel")
NEURON_DRIVER_PACKAGE = "aws-neuronx-dkms"


@dataclass
class RestorePlan:
    """What a restore changes in one environment, and what it leaves."""

    python: Path
    install: dict[str, str]  # name -> pinned version, absent now or at another version
    remove: dict[str, str]  # name -> installed version, not in the manifest
    left_alone: dict[str, str] = field(default_factory=dict)  # name -> why
    unchanged: int = 0
    installed_now: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        now = self.installed_now
        out = [
            f"install {name}=={version}"
            + (f" (now {now[name]})" if name in now else " (not installed now)")
            for name, version in sorted(self.install.items())
        ]
        out += [f"remove {name} {version}" for name, version in sorted(self.remove.items())]
        out += [f"leave {name}: {why}" for name, why in sorted(self.left_alone.items())]
        return out


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+", 1)[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _minor(version: str) -> str:
    return ".".join(str(version).split(".")[:2])


def check_interpreter(manifest: Mapping[str, Any], found: Mapping[str, Any]) -> None:
    """A restore installs wheels built for the manifest's Python and platform: another one is
    refused, in one sentence."""
    pinned, now = manifest["python"], found["python"]
    if _minor(pinned.get("version", "")) != _minor(now.get("version", "")) or pinned.get(
        "implementation"
    ) != now.get("implementation"):
        raise BadInput(
            f"the manifest pins {pinned.get('implementation')} {pinned.get('version')} and "
            f"{now.get('executable')} is {now.get('implementation')} {now.get('version')}: "
            "restore into an interpreter of the pinned Python (a new virtualenv of it), nothing "
            "was changed."
        )
    for key in ("system", "machine"):
        want, have = manifest["platform"].get(key), found["platform"].get(key)
        if want != have:
            raise BadInput(
                f"the manifest was pinned on {key} {want} and this is {have}: its files are for "
                "another platform, nothing was changed."
            )


def host_driver() -> str | None:
    """The Neuron driver package installed on this host (dpkg or rpm), or None without one."""
    from workbench.environment.manifest import _system_neuron_packages

    packages = _system_neuron_packages()["packages"]
    return packages.get(NEURON_DRIVER_PACKAGE)


def check_driver(pinned_packages: Mapping[str, str], driver: str | None) -> str:
    """On a Neuron host, the pinned Neuron release's driver must not be newer than the host's;
    returns what was checked, in words, or raises BadInput."""
    from workbench.environment.releases import match_release

    release = match_release(dict(pinned_packages))
    if not release.releases:
        return "no Neuron release pinned: no driver to check"
    if driver is None:
        return "not a Neuron host (no aws-neuronx-dkms): the driver was not checked"
    names = ", ".join(r.neuron_release for r in release.releases)
    needed = min((v for r in release.releases for v in r.dkms), key=_version_tuple, default=None)
    if needed is not None and _version_tuple(driver) < _version_tuple(needed):
        raise BadInput(
            f"the pinned Neuron {names} runtime needs driver {needed} or newer and this host has "
            f"aws-neuronx-dkms {driver}: a newer runtime will not start on an older driver; "
            "upgrade the driver first (it is an OS package, not pip's), nothing was changed."
        )
    return f"driver {driver} on this host, Neuron {names} needs {needed or 'no stated'}: fits"


def plan_restore(manifest: Mapping[str, Any], found: Mapping[str, Any]) -> RestorePlan:
    """The changes that make `found` (interpreter_facts) match `manifest`."""
    pinned: dict[str, str] = dict(manifest["packages"])
    now: dict[str, str] = dict(found["packages"])
    editable = {**(manifest.get("editable") or {}), **(found.get("editable") or {})}
    plan = RestorePlan(Path(found["python"]["executable"]), {}, {}, installed_now=now)
    for name, version in pinned.items():
        if name in editable:
            plan.left_alone[name] = "an editable install (the checkout it points at is its pin)"
        elif now.get(name) == version:
            plan.unchanged += 1
        else:
            plan.install[name] = version
    for name, version in now.items():
        if name in pinned or name in plan.left_alone:
            continue
        if name in editable:
            plan.left_alone[name] = "an editable install"
        elif name in KEPT_TOOLS:
            plan.left_alone[name] = "pip needs it; the manifest does not pin it"
        else:
            plan.remove[name] = version
    return plan


def _check_hashes(manifest: Mapping[str, Any], plan: RestorePlan) -> dict[str, list[str]]:
    hashes: dict[str, list[str]] = dict(manifest.get("hashes") or {})
    if "hashes" not in manifest:
        raise BadInput(
            "the manifest was pinned without hashes (--no-hashes), so a restore could not verify "
            "what it installs: pin it again with hashes; nothing was changed."
        )
    unhashed = sorted(name for name in plan.install if not hashes.get(name))
    if unhashed:
        why = (manifest.get("unhashed") or {}).get(unhashed[0], "no hash was recorded")
        raise BadInput(
            f"{unhashed[0]}=={plan.install[unhashed[0]]} has no hash in the manifest ({why}), so "
            f"a restore cannot verify it ({len(unhashed)} such); nothing was changed."
        )
    return hashes


def _pip(pip: list[str], args: list[str]) -> None:
    try:
        done = subprocess.run(
            [*pip, *args], capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(f"pip could not run: {exc}.") from None
    if done.returncode != 0:
        last = next((ln for ln in reversed(done.stderr.splitlines()) if ln.strip()), "")
        raise BadInput(
            f"pip {args[0]} failed ({last.strip() or f'exit {done.returncode}'}); run "
            "`workbench env restore` again to complete the restore."
        )


@dataclass(frozen=True)
class RestoreResult:
    plan: RestorePlan
    remaining: list[str]  # what still differs from the manifest after the restore
    verified: int  # files installed whose hash matched
    driver: str


def restore(
    manifest_path: Path,
    python: Path,
    dry_run: bool = False,
    log: Callable[[str], None] = print,
    driver: Callable[[], str | None] = host_driver,
) -> RestoreResult:
    """Refuse, or fetch and verify, install, remove, then pin again and diff."""
    manifest = load_manifest(manifest_path)
    found = interpreter_facts(python)
    check_interpreter(manifest, found)
    driver_words = check_driver(manifest["packages"], driver())
    plan = plan_restore(manifest, found)
    hashes = _check_hashes(manifest, plan)
    pip = pip_command(Path(found["python"]["executable"]), "pip" in found["packages"])
    with tempfile.TemporaryDirectory(prefix="workbench-restore-") as folder:
        files = Path(folder)
        if plan.install:
            fetched = fetch(pip, plan.install, files, hashes, log)
            if fetched.failed:
                name, reason = sorted(fetched.failed.items())[0]
                raise BadInput(
                    f"{name}=={plan.install[name]} cannot be restored: {reason} "
                    f"({len(fetched.failed)} such); nothing was changed."
                )
        if dry_run:
            return RestoreResult(plan, [], 0, driver_words)
        if plan.install:
            log(f"installing {len(plan.install)} verified file(s) ...")
            requirements = files / "restore.txt"
            requirements.write_text(requirement_lines(plan.install, hashes), encoding="utf-8")
            _pip(pip, ["install", "--no-deps", "--require-hashes", "--no-index",
                       "--find-links", str(files), "--progress-bar", "off",
                       "-r", str(requirements)])  # fmt: skip
    if plan.remove:
        log(f"removing {len(plan.remove)} package(s) the manifest does not list ...")
        _pip(pip, ["uninstall", "--yes", *sorted(plan.remove)])
    after = plan_restore(manifest, interpreter_facts(python))
    remaining = [*after.lines()[: len(after.install) + len(after.remove)]]
    return RestoreResult(plan, remaining, len(plan.install), driver_words)
