"""A matrix's ROOT folder: one sub-folder per item, and a claim file that ties ROOT to one matrix.

Array tasks start at once and all write under ROOT; the first one writes the claim (created
whole, never half-written), and a task from a matrix with different items is refused, so two
matrices never mix their runs in one dashboard.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from workbench.errors import BadInput
from workbench.fleet.matrix import Matrix

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
    try:
        value = json.loads((root / CLAIM_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise BadInput(f"{root / CLAIM_FILE} is not readable ({exc}).") from None
    return value if isinstance(value, dict) else {}
