"""The public-script corpus: the manifest is well-formed, and each pinned script, run plainly with
this Python from its materialised folder, trains with its small arguments and data.

The plain runs prove the corpus itself (the data makers and the arguments) before any test uses
it to watch the scripts; an item that is not materialised is skipped, naming the command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.corpus.data import MAKERS
from tests.corpus.materialise import COMMAND, MANIFEST, corpus_folder, default_dest

pytestmark = pytest.mark.corpus

MANIFEST_DATA = json.loads(MANIFEST.read_text())
ITEMS = MANIFEST_DATA["items"]
# A guard against a hang, not a speed check: the LBFGS item took 120 s on a 2-core runner busy
# with the rest of the suite (about 40 s alone).
PLAIN_TIMEOUT_S = 400
_HEX40 = re.compile(r"[0-9a-f]{40}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def test_the_manifest_is_well_formed():
    assert len(ITEMS) >= 10
    names = [item["name"] for item in ITEMS]
    assert len(set(names)) == len(names), "item names repeat"
    for item in ITEMS:
        where = item["name"]
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]*", item["name"]), where
        assert re.fullmatch(r"https://github.com/[\w.-]+/[\w.-]+", item["repository"]), where
        assert _HEX40.fullmatch(item["commit"]), where
        assert item["licence"] and item["licence_path"], where
        assert _HEX64.fullmatch(item["licence_sha256"]), where
        assert item["files"], where
        targets = [f["as"] for f in item["files"]]
        assert len(set(targets)) == len(targets) and "LICENSE" not in targets, where
        for f in item["files"]:
            assert f["path"] and _HEX64.fullmatch(f["sha256"]), (where, f)
            assert not f["as"].startswith(("/", "..")) and ".." not in f["as"].split("/"), where
        assert item["entry"] in targets, where
        assert isinstance(item["args"], list), where
        assert all(isinstance(word, str) for word in item["args"]), where
        assert item["data"] is None or item["data"] in MAKERS, where
        assert item["styles"], where


def test_every_style_is_covered_or_its_absence_explained():
    covered = {style for item in ITEMS for style in item["styles"]}
    uncovered = MANIFEST_DATA.get("uncovered_styles", {})
    for style in MANIFEST_DATA["required_styles"]:
        assert style in covered or uncovered.get(style), f"no item shows {style!r}"
    assert not set(uncovered) & covered, "a style listed as uncovered is covered"


def test_the_data_makers_are_deterministic(tmp_path):
    for name, maker in MAKERS.items():
        first, second = tmp_path / f"{name}-1", tmp_path / f"{name}-2"
        maker(first)
        maker(second)
        files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
        assert files, name
        for rel in files:
            assert (first / rel).read_bytes() == (second / rel).read_bytes(), (name, rel)


@pytest.mark.parametrize("item", ITEMS, ids=[item["name"] for item in ITEMS])
def test_the_script_trains_plainly_with_its_corpus_arguments(item):
    folder = corpus_folder(item["name"])
    if folder is None:
        pytest.skip(
            f"corpus item {item['name']} is not materialised in {default_dest()}: run "
            f"`{COMMAND}` (with --mirror OWNER/NAME=GITDIR for offline clones)."
        )
    if item.get("needs_cuda"):
        pytest.skip(f"{item['name']} needs a CUDA device: {item.get('notes', '')}")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "MPLBACKEND": "Agg", **item.get("env", {})}
    env.pop("RANK", None)  # nanoGPT takes a set RANK for a DDP launch
    run = subprocess.run(
        [sys.executable, item["entry"], *item["args"]],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=PLAIN_TIMEOUT_S,
    )
    assert run.returncode == 0, (
        f"{item['name']} exited {run.returncode}:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    )
