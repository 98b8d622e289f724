"""Hash-pinned locks: the sha256 of the very files the package index serves for an environment's
pinned versions, read by pip itself, so a restore verifies what it installs (pip's
`--require-hashes`, the check only hash-pinned locks such as pylock.toml, uv.lock and conda-lock
give).

The files are fetched with `pip download --no-deps --only-binary=:all:` run for the environment's
own interpreter, so the index, find-links and platform tags are those the environment already
uses: nothing here reaches further than its own package index. A version the index no longer
serves, or serves only as a source archive, gets no hash, and its lock line says why.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workbench.environment.probe import normalize_name
from workbench.errors import BadInput

PIP_TIMEOUT_S = 1800  # a large wheel (torch) copied from a slow index
# pip's sentences that name the requirement it could not fetch.
_NOT_SERVED = re.compile(
    r"(?:satisfies the requirement|No matching distribution found for) ([A-Za-z0-9_.\-]+)==(\S+)"
)
_HASH_MISMATCH = re.compile(r"^\s+([A-Za-z0-9_.\-]+)==(\S+) from ", re.M)


@dataclass(frozen=True)
class Fetched:
    """What pip fetched for a set of pinned versions: each one's file hashes, and why the
    others could not be had."""

    hashes: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # name -> reason, one sentence


def pip_command(python: Path, has_pip: bool) -> list[str]:
    """pip acting on `python`: its own where it has one, else this interpreter's pip told to
    act on it (`pip --python`, which runs pip inside that interpreter)."""
    if has_pip:
        return [str(python), "-m", "pip"]
    return [sys.executable, "-m", "pip", "--python", str(python)]


def requirement_lines(pins: Mapping[str, str], hashes: Mapping[str, list[str]] | None) -> str:
    lines = []
    for name, version in sorted(pins.items()):
        line = f"{name}=={version}"
        for digest in (hashes or {}).get(name, []):
            line += f" --hash=sha256:{digest}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _wheel_name_version(path: Path) -> tuple[str, str] | None:
    parts = path.name.split("-")
    if path.suffix != ".whl" or len(parts) < 5:
        return None
    return normalize_name(parts[0]), parts[1]


def file_hashes(folder: Path) -> dict[str, list[str]]:
    """The sha256 of every wheel in `folder`, by package name."""
    found: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*.whl")):
        named = _wheel_name_version(path)
        if named is not None:
            found.setdefault(named[0], []).append(hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def _failure(stderr: str, wanted: Mapping[str, str]) -> dict[str, str]:
    """The requirements pip's error names, each with the reason in its words."""
    failed: dict[str, str] = {}
    for name, version in _NOT_SERVED.findall(stderr):
        if normalize_name(name) in wanted:
            failed[normalize_name(name)] = (
                f"the index serves no wheel of {name}=={version} for this platform"
            )
    if "DO NOT MATCH THE HASHES" in stderr:
        for name, version in _HASH_MISMATCH.findall(stderr):
            if normalize_name(name) in wanted:
                failed[normalize_name(name)] = (
                    f"the file the index serves for {name}=={version} does not match the "
                    "pinned hash"
                )
    return failed


def _download(
    pip: list[str], pins: Mapping[str, str], dest: Path, hashes: Mapping[str, list[str]] | None
) -> subprocess.CompletedProcess[str]:
    requirements = dest / "requirements.txt"
    requirements.write_text(requirement_lines(pins, hashes), encoding="utf-8")
    command = [*pip, "download", "--no-deps", "--only-binary=:all:", "--dest", str(dest)]
    command += ["--progress-bar", "off", "-r", str(requirements)]
    if hashes is not None:
        command.append("--require-hashes")
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BadInput(f"pip download could not run for {pip[0]}: {exc}.") from None


def _last_line(text: str) -> str:
    return next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), "")


def fetch(
    pip: list[str],
    pins: Mapping[str, str],
    dest: Path,
    hashes: Mapping[str, list[str]] | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> Fetched:
    """Download the wheels of `pins` into `dest` (checked against `hashes` where given), one
    pip call for all; a requirement pip names as the one it cannot fetch is set aside with pip's
    reason and the rest fetched again, so one gone version does not hide the others' answers.
    A failure that names none is settled one requirement at a time."""
    remaining = dict(pins)
    failed: dict[str, str] = {}
    log(f"fetching {len(remaining)} pinned wheel(s) with pip download ...")
    while remaining:
        done = _download(pip, remaining, dest, hashes)
        if done.returncode == 0:
            break
        found = _failure(done.stderr, remaining)
        if not found:
            for name, version in list(remaining.items()):
                alone = _download(pip, {name: version}, dest, hashes)
                if alone.returncode != 0:
                    failed[name] = _failure(alone.stderr, {name: version}).get(name) or (
                        f"pip download failed: {_last_line(alone.stderr)}"
                    )
                    remaining.pop(name)
            break
        failed.update(found)
        for name in found:
            remaining.pop(name, None)
        if remaining:
            log(f"  {len(failed)} set aside (not fetchable), fetching the other {len(remaining)}")
    fetched = file_hashes(dest)
    return Fetched({name: fetched[name] for name in remaining if name in fetched}, failed)


def hash_pins(
    pip: list[str], pins: Mapping[str, str], log: Callable[[str], None] = lambda _: None
) -> Fetched:
    """The hashes of the files the index serves for `pins`, and why some have none."""
    with tempfile.TemporaryDirectory(prefix="workbench-lock-") as folder:
        fetched = fetch(pip, pins, Path(folder), log=log)
    failed = dict(fetched.failed)
    for name in pins:
        if name not in fetched.hashes and name not in failed:
            failed[name] = "pip fetched no wheel for it"
    return Fetched(fetched.hashes, failed)


def lock_text(
    header: list[str],
    pins: Mapping[str, str],
    fetched: Fetched,
    editable: Mapping[str, str],
) -> str:
    """The lock in pip's `--require-hashes` format: one requirement per pinned version with
    the hashes of its files; a version without a hash, and each editable install, as a comment
    saying why."""
    lines = [f"# {line}" for line in header]
    for name, version in sorted(pins.items()):
        if name in editable:
            lines.append(f"# {name}=={version}: an editable install ({editable[name]}), not pinned")
        elif name in fetched.hashes:
            digests = " \\\n    ".join(f"--hash=sha256:{d}" for d in fetched.hashes[name])
            lines.append(f"{name}=={version} \\\n    {digests}")
        else:
            reason = fetched.failed.get(name, "no hash")
            lines.append(f"# {name}=={version}: no hash: {reason}")
    return "\n".join(lines) + "\n"
