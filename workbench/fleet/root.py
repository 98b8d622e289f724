"""A matrix's ROOT folder: one sub-folder per item, and a claim file that ties ROOT to one matrix.

Array tasks start at once and all write under ROOT; the first one writes the claim (created
whole, never half-written), and a task from a matrix with different items is refused, so two
matrices never mix their runs in one dashboard.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from workbench.errors import BadInput
from workbench.fleet.matrix import Matrix
from workbench.safe_load import CONFIG_MAX_BYTES, load_json, read_bounded, shown

CLAIM_FILE = "workbench-matrix.json"


def claim(root: Path, matrix: Matrix) -> None:
    root.mkdir(parents=True, exist_ok=True)
    wanted = {
        "fingerprint": matrix.fingerprint(),
        "matrix": str(matrix.path),
        "items": [
            {"index": i.index, "name": i.name, "workload": i.workload, "target": i.target}
            for i in matrix.items
        ],
    }
    path = root / CLAIM_FILE
    fd, tmp = tempfile.mkstemp(prefix=f".{CLAIM_FILE}.", dir=root)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(wanted, handle, indent=2)
        try:
            os.link(tmp, path)  # atomic: exists whole, or not at all
        except FileExistsError:
            existing = read_claim(root)
            if existing.get("fingerprint") != wanted["fingerprint"]:
                raise BadInput(
                    f"{root} holds runs of another matrix ({existing.get('matrix')}, items "
                    f"{', '.join(i['name'] for i in existing.get('items', []))}); give this "
                    "matrix its own --out folder."
                ) from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def read_claim(root: Path) -> dict[str, Any]:
    """The claim file's matrix, its items checked: each names a folder directly inside ROOT."""
    path = root / CLAIM_FILE
    if not path.exists():
        return {}
    # A plain file only: a root is shared, and a link would make collect read elsewhere.
    text = read_bounded(path, "Claim file", CONFIG_MAX_BYTES, follow_links=False)
    value = load_json(text, str(path))
    if not isinstance(value, dict):
        return {}
    items = value.get("items", [])
    if not isinstance(items, list):
        raise BadInput(f"{path}: 'items' must be a list; re-run `workbench run --matrix`.")
    for item in items:
        fields = ("name", "workload", "target")
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) for k in fields):
            raise BadInput(f"{path}: every item needs a name, a workload and a target as text.")
        if not is_item_folder_name(item["name"]):
            raise BadInput(
                f"{path} names item {shown(item['name'])}, which is not a folder name inside "
                f"{root}: the file was edited by hand; re-run `workbench run --matrix`."
            )
    return value


# What matrix item names are made of (matrix._slug): one path segment, never "." or "..".
_ITEM_FOLDER_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,78}[A-Za-z0-9_])?")


def is_item_folder_name(name: str) -> bool:
    return bool(_ITEM_FOLDER_NAME.fullmatch(name))
