"""One compile cache folder per run, stamped with the versions its artifacts depend on.

A compiled graph is only valid for the compiler that made it, so every run writes into a
subfolder named after the target's compiler versions (torch, torch-xla, torch-neuronx,
neuronx-cc) and keeps a stamp file there. A cache left by other versions sits beside it and is
never read; the run says so, so a cold compile after an upgrade is explained rather than a
surprise. A folder that cannot be written is one sentence, and the run goes on uncached.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from workbench.compile_cache.cache_dir import user_cache_dir
from workbench.targets.base import Target
from workbench.targets.caching import CacheCounters

OFF = "off"  # the `compile_cache` value that turns the caches off
STAMP_FILE = "workbench-cache-stamp.json"
STATUS_IN_USE: Final = "in use"
STATUS_UNWRITABLE: Final = "unwritable"
STATUS_OFF: Final = "off"
STATUS_STAMP_MISMATCH: Final = "stamp mismatch"
CacheStatus = Literal["in use", "unwritable", "off", "stamp mismatch"]


def default_cache_root() -> Path:
    """~/.cache/workbench/compile-cache, or under $XDG_CACHE_HOME where it is set."""
    return user_cache_dir() / "compile-cache"


def cache_root(requested: str) -> Path:
    """The folder a `compile_cache` value names: the default when empty."""
    return Path(requested).expanduser() if requested.strip() else default_cache_root()


def stamped_folder(requested: str, versions: dict[str, str]) -> Path:
    """This version set's folder under the requested root, created with its stamp file."""
    folder = cache_root(requested) / stamp_name(versions)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / STAMP_FILE).exists():
        _write_stamp(folder / STAMP_FILE, versions)
    return folder


def stamp_name(versions: dict[str, str]) -> str:
    """The subfolder for these versions, e.g. `torch-2.13.0+cpu`, readable and path-safe."""
    text = "_".join(f"{name}-{version}" for name, version in sorted(versions.items()))
    return re.sub(r"[^A-Za-z0-9.+_-]+", "-", text)


@dataclass
class CompileCache:
    """Where this run's compiled artifacts go, and what its cache counted."""

    requested: str  # as given: a folder, "" for the default, or "off"
    folder: str | None  # the version-stamped folder in use; None: the run is uncached
    status: CacheStatus
    sentence: str  # what the report says about it
    versions: dict[str, str]
    other_versions: list[str] = field(default_factory=list)  # stamped folders left unread
    wiring: str = ""  # the target's own sentence: which caches point where
    counters: CacheCounters | None = None  # read at the end of the run

    @property
    def in_use(self) -> bool:
        return self.folder is not None

    def miss_explanation(self) -> str:
        """Why a run with this cache may still compile everything; empty when nothing says."""
        if self.status != STATUS_IN_USE:
            return f"every graph compiles: the compile cache is {self.status}"
        unreadable = self.counters.extra.get("deserialize_failures", 0) if self.counters else 0
        if unreadable:
            return (
                f"{unreadable} cached graph(s) were found but could not be read back "
                "(PersistentCacheDeserializeFailure: torch-xla on XLA:CPU cannot deserialize "
                "its own entries), so they compiled again"
            )
        if self.other_versions and not _has_entries(Path(self.folder or "")):
            others = ", ".join(self.other_versions)
            return (
                f"the cache holds artifacts of other versions only ({others}); they are not "
                f"reused by {stamp_name(self.versions)}, so every graph compiles"
            )
        return ""


def _has_entries(folder: Path) -> bool:
    return folder.is_dir() and any(p.name != STAMP_FILE for p in folder.iterdir())


def open_compile_cache(requested: str, target: Target) -> CompileCache:
    """The cache folder for this run on `target`, created and wired before anything compiles."""
    versions = target.compiler_versions()
    if requested.strip().lower() == OFF:
        return CompileCache(
            requested,
            None,
            STATUS_OFF,
            "compile caches are off (compile_cache=off)",
            versions,
            wiring=target.use_compile_cache(None),
        )
    root = cache_root(requested)
    folder = root / stamp_name(versions)
    others = sorted(
        p.name for p in _subfolders(root) if p.name != folder.name and (p / STAMP_FILE).exists()
    )
    try:
        stamped_folder(requested, versions)
        recorded = _recorded_versions(folder / STAMP_FILE)
        if recorded != versions:
            sentence = (
                f"compile cache {folder} is stamped for {recorded or 'unreadable versions'}, "
                f"not this run's {versions}; it is not reused and this run goes on uncached"
            )
            return CompileCache(
                requested,
                None,
                STATUS_STAMP_MISMATCH,
                sentence,
                versions,
                others,
                target.use_compile_cache(None),
            )
        _probe_writable(folder)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        sentence = (
            f"compile cache folder {root} cannot be written ({reason}); this run goes on "
            "uncached, so every graph compiles and nothing is kept for the next run"
        )
        return CompileCache(
            requested,
            None,
            STATUS_UNWRITABLE,
            sentence,
            versions,
            others,
            target.use_compile_cache(None),
        )
    wiring = target.use_compile_cache(str(folder))
    sentence = f"compile cache: {folder}"
    if others:
        sentence += f" (caches of other versions beside it are not reused: {', '.join(others)})"
    return CompileCache(requested, str(folder), STATUS_IN_USE, sentence, versions, others, wiring)


def _subfolders(root: Path) -> list[Path]:
    try:
        return [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return []


def _recorded_versions(stamp: Path) -> dict[str, str] | None:
    """The versions a stamp file names; None for one that is not a stamp this code wrote."""
    try:
        recorded = json.loads(stamp.read_text(encoding="utf-8")).get("versions")
    except (ValueError, AttributeError):
        return None
    return recorded if isinstance(recorded, dict) else None


def _write_stamp(stamp: Path, versions: dict[str, str]) -> None:
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"versions": versions}, indent=1), encoding="utf-8")
    os.replace(tmp, stamp)


def _probe_writable(folder: Path) -> None:
    """Write and remove a file: a read-only mount or a full disk fails here, not mid-compile."""
    probe = folder / f".write-probe.{os.getpid()}"
    probe.write_bytes(b"0" * 4096)
    probe.unlink()
