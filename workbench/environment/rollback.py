"""The way back to a pinned environment, as notebook 00 states it: the command that restores it,
what that restore can verify, and what pip cannot restore at all (the Neuron driver and runtime
OS packages, the machine image or container), named with the pinned versions."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from workbench.environment.restore import plan_restore


@dataclass(frozen=True)
class Rollback:
    """How this environment returns to the pinned one."""

    dry_run: str  # the command that checks the restore and changes nothing
    command: str  # the command that restores
    to_install: int
    to_remove: int
    hashed: int  # pinned versions whose files the manifest holds a hash of
    pinned: int  # pinned versions a restore would install with pip (editable ones aside)
    unhashed: dict[str, str] = field(default_factory=dict)  # name -> why it has no hash
    not_pip: list[str] = field(default_factory=list)  # what pip cannot restore, with versions

    @property
    def verifiable(self) -> bool:
        return self.pinned > 0 and self.hashed == self.pinned


def _not_pip(pinned: dict[str, Any], now: dict[str, Any]) -> list[str]:
    system = ((pinned.get("neuron") or {}).get("system_packages") or {}).get("packages") or {}
    here = ((now.get("neuron") or {}).get("system_packages") or {}).get("packages") or {}
    lines = [
        f"{name} {version} (an OS package: apt or yum; here {here.get(name, 'not installed')})"
        for name, version in sorted(system.items())
    ]
    platform = (pinned.get("platform") or {}).get("platform", "unknown")
    libc = pinned.get("libc") or {}
    lines.append(
        f"the machine image (AMI) or Deep Learning Container the pin was taken on: {platform}, "
        f"{libc.get('name') or 'libc'} {libc.get('version') or 'unknown'}; restore the image "
        "itself from its registry"
    )
    return lines


def rollback(pinned_path: str, pinned: dict[str, Any], now: dict[str, Any]) -> Rollback:
    """How `now` (this environment's manifest) returns to `pinned`, loaded from `pinned_path`."""
    python = sys.executable
    command = ["workbench", "env", "restore", pinned_path, "--python", python]
    plan = plan_restore(pinned, {**now, "python": {**now["python"], "executable": python}})
    editable = pinned.get("editable") or {}
    wanted = [name for name in pinned["packages"] if name not in editable]
    hashes = pinned.get("hashes") or {}
    return Rollback(
        dry_run=shlex.join([*command, "--dry-run"]),
        command=shlex.join(command),
        to_install=len(plan.install),
        to_remove=len(plan.remove),
        hashed=sum(1 for name in wanted if hashes.get(name)),
        pinned=len(wanted),
        unhashed=dict(pinned.get("unhashed") or {}) if "hashes" in pinned else {},
        not_pip=_not_pip(pinned, now),
    )


def way_back(pinned_manifest: str, manifest: dict[str, Any]) -> Rollback | None:
    """The way back to `pinned_manifest` from `manifest`, or None where no pin was given."""
    if not pinned_manifest:
        return None
    from workbench.environment.manifest import load_manifest

    return rollback(pinned_manifest, load_manifest(pinned_manifest), manifest)
