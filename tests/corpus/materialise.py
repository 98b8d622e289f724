"""Put the public-script corpus in place: each item of scripts.json into DEST/<name>/.

    python -m tests.corpus.materialise [--mirror OWNER/NAME=GITDIR ...] [--dest DIR]

Files are taken from a local git mirror of their repository at the pinned commit when one is
given, or else downloaded from raw.githubusercontent.com at that commit. The licence file goes
beside the script as LICENSE. Every file's sha256 is checked against the manifest; a mismatch
stops with one sentence and a non-zero exit. Then the item's data maker (tests/corpus/data.py)
writes its small offline data. Running it again changes nothing.

DEST defaults to $WORKBENCH_CORPUS, or else ~/.cache/workbench/corpus.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from tests.corpus.data import MAKERS

MANIFEST = Path(__file__).with_name("scripts.json")
# Written last into an item's folder: the data maker has run for this very manifest entry.
DONE = ".materialised.json"
COMMAND = "python -m tests.corpus.materialise"


class Mismatch(Exception):
    """A file that is not the one the manifest pins: its sentence is the whole report."""


def load_manifest() -> dict[str, Any]:
    return json.loads(MANIFEST.read_text())


def items() -> list[dict[str, Any]]:
    return load_manifest()["items"]


def default_dest() -> Path:
    env = os.environ.get("WORKBENCH_CORPUS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "workbench" / "corpus"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _owner_name(item: dict[str, Any]) -> str:
    return item["repository"].removeprefix("https://github.com/").strip("/")


def _entry_digest(item: dict[str, Any]) -> str:
    return _sha256(json.dumps(item, sort_keys=True).encode())


def _pinned(item: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(path in repo, path in the item folder, sha256) of every file, the licence included."""
    files = [(f["path"], f["as"], f["sha256"]) for f in item["files"]]
    files.append((item["licence_path"], "LICENSE", item["licence_sha256"]))
    return files


def _read(item: dict[str, Any], path: str, mirrors: dict[str, Path]) -> bytes:
    repo = _owner_name(item)
    if repo in mirrors:
        try:
            return subprocess.run(
                ["git", "-C", str(mirrors[repo]), "show", f"{item['commit']}:{path}"],
                check=True,
                capture_output=True,
            ).stdout
        except subprocess.CalledProcessError as exc:
            raise Mismatch(
                f"{repo} mirror {mirrors[repo]} has no {path} at commit {item['commit']}: "
                f"{exc.stderr.decode(errors='replace').strip()}"
            ) from None
    url = f"https://raw.githubusercontent.com/{repo}/{item['commit']}/{path}"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.read()
    except OSError as exc:
        raise Mismatch(
            f"{url} could not be downloaded ({exc}); give a local clone with "
            f"--mirror {repo}=GITDIR."
        ) from None


def materialise_item(item: dict[str, Any], dest: Path, mirrors: dict[str, Path]) -> Path:
    folder = dest / item["name"]
    digest = _entry_digest(item)
    done = folder / DONE
    for path, target, expected in _pinned(item):
        out = folder / target
        if out.is_file() and _sha256(out.read_bytes()) == expected:
            continue
        data = _read(item, path, mirrors)
        got = _sha256(data)
        if got != expected:
            raise Mismatch(
                f"{_owner_name(item)}:{path} at {item['commit'][:12]} has sha256 {got}, "
                f"not the {expected} that tests/corpus/scripts.json pins for {item['name']}."
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
    if done.is_file() and json.loads(done.read_text()).get("entry") == digest:
        return folder
    if item["data"] is not None:
        MAKERS[item["data"]](folder)
    done.write_text(json.dumps({"entry": digest, "name": item["name"]}) + "\n")
    return folder


def corpus_folder(name: str, dest: Path | None = None) -> Path | None:
    """The materialised, hash-verified folder of item `name`, or None when it is missing,
    incomplete, or holds a file other than the pinned one."""
    entry = next((item for item in items() if item["name"] == name), None)
    if entry is None:
        return None
    folder = (dest or default_dest()) / name
    done = folder / DONE
    try:
        if json.loads(done.read_text()).get("entry") != _entry_digest(entry):
            return None
        for _, target, expected in _pinned(entry):
            if _sha256((folder / target).read_bytes()) != expected:
                return None
    except (OSError, ValueError):
        return None
    return folder


def _parse_mirrors(words: list[str]) -> dict[str, Path]:
    mirrors = {}
    for word in words:
        repo, sep, gitdir = word.partition("=")
        if not sep or repo.count("/") != 1 or not gitdir:
            raise SystemExit(f"--mirror {word!r} is not OWNER/NAME=GITDIR.")
        mirrors[repo] = Path(gitdir).expanduser()
    return mirrors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="OWNER/NAME=GITDIR",
        help="a local git clone or bare mirror to read that repository's files from",
    )
    parser.add_argument("--dest", type=Path, default=None, help="where the items go")
    parser.add_argument("--only", action="append", default=[], help="materialise these items")
    args = parser.parse_args(argv)
    mirrors = _parse_mirrors(args.mirror)
    dest = (args.dest or default_dest()).expanduser()
    chosen = [item for item in items() if not args.only or item["name"] in args.only]
    try:
        for item in chosen:
            folder = materialise_item(item, dest, mirrors)
            print(f"{item['name']}: {folder}")
    except Mismatch as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
