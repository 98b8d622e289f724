"""The matrix file: which workloads run on which targets, checked in by the team that runs them.

    defaults:                 # optional: every item starts from these
      target: xla
      only: [00, 01, 02, 03]
      parameters: {steady_steps: 20}
    items:
      - workload: seed-mlp
      - {workload: my_models.bert:make_workload, name: bert-base, parameters: {batch_size: 16}}
      - {workload: seed-mlp, target: neuron}

An array job passes only an item's index; everything else comes from this file. Every item is
checked (workload spec, target name, notebooks, parameters) before any item runs; whether the
item's device is present is checked by its own run, on its node. One array per target (Trn1 and
Trn2 need different images) passes `--target T` with the index, which then counts only T's items.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from workbench.errors import BadInput
from workbench.safe_load import CONFIG_MAX_BYTES, load_yaml, read_bounded

if TYPE_CHECKING:
    from workbench.runner import RunRequest

ITEM_KEYS = ("name", "workload", "target", "only", "parameters")
DEFAULT_KEYS = ("workload", "target", "only", "parameters")
RUNNER_SET = ("workload", "target", "out_dir")


@dataclass(frozen=True)
class MatrixItem:
    index: int
    name: str
    workload: str
    target: str = "auto"
    only: list[str] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)

    def request(
        self, root: Path, show_code: bool = False, cell_timeout: int | None = None
    ) -> RunRequest:
        """The run this item stands for, writing under ROOT/<item name>/."""
        from workbench.runner import DEFAULT_CELL_TIMEOUT_S, RunRequest

        return RunRequest(
            workload=self.workload,
            target=self.target,
            only=self.only,
            parameters=self.parameters,
            show_code=show_code,
            cell_timeout=cell_timeout or DEFAULT_CELL_TIMEOUT_S,
            reports_root=root / self.name,
            workbook=self.only,
        )


@dataclass(frozen=True)
class Matrix:
    path: Path
    items: list[MatrixItem]

    def select(self, target: str | None = None) -> list[MatrixItem]:
        """The items on `target` as the file names it (all items for None), in file order: the
        list an array of that target's items is indexed over."""
        if target is None:
            return self.items
        chosen = [item for item in self.items if item.target == target]
        if not chosen:
            targets = ", ".join(sorted({item.target for item in self.items}))
            raise BadInput(f"{self.path} has no item on target {target!r}; its targets: {targets}.")
        return chosen

    def item(self, index: int, target: str | None = None) -> MatrixItem:
        """Item `index` of the whole file, or the index-th item on `target` (0 first)."""
        chosen = self.select(target)
        if not 0 <= index < len(chosen):
            among = f" on target {target!r} (--target counts only those)" if target else ""
            raise BadInput(
                f"--index {index} is out of range: {self.path} has items 0 to "
                f"{len(chosen) - 1}{among}."
            )
        return chosen[index]

    def fingerprint(self) -> str:
        """Identifies the items (names and settings), so two matrices never share a ROOT."""
        text = json.dumps([asdict(i) for i in self.items], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:80] or "item"


def _only(value: Any, where: str) -> list[str]:
    if value in (None, "", []):
        return []
    items = value if isinstance(value, list) else str(value).split(",")
    found = [str(item).strip().zfill(2) for item in items if str(item).strip()]
    if not all(item.isdigit() for item in found):
        raise BadInput(f"{where}: 'only' must list notebook numbers such as 00, 01.")
    return found


def _mapping(value: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadInput(f"{where} must be a mapping with keys {', '.join(allowed)}.")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise BadInput(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}.")
    return value


def load_matrix(path: str | Path) -> Matrix:
    """Read and check the file's shape; `check_items` then checks what each item names."""
    path = Path(path)
    try:
        document = load_yaml(read_bounded(path, "Matrix", CONFIG_MAX_BYTES), f"Matrix {path}")
    except yaml.YAMLError as exc:
        raise BadInput(f"Matrix {path} is not valid YAML: {' '.join(str(exc).split())}") from None
    top = _mapping(document, f"Matrix {path}", ("defaults", "items"))
    defaults = _mapping(top.get("defaults"), f"Matrix {path}: defaults", DEFAULT_KEYS)
    raw_items = top.get("items")
    if not isinstance(raw_items, list) or not raw_items:
        raise BadInput(f"Matrix {path} needs a non-empty list under 'items'.")
    items = []
    for index, raw in enumerate(raw_items):
        where = f"Matrix {path}: item {index}"
        entry = _mapping(raw, where, ITEM_KEYS)
        workload = entry.get("workload", defaults.get("workload"))
        if not isinstance(workload, str) or not workload:
            raise BadInput(f"{where} names no workload.")
        target = entry.get("target", defaults.get("target", "auto"))
        parameters = {}
        for scope, given in (("defaults", defaults), (where, entry)):
            values = given.get("parameters") or {}
            if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
                raise BadInput(
                    f"Matrix {path}: {scope}: parameters must be a mapping of name: value, "
                    "each name a word."
                )
            parameters.update(values)
        name = _slug(str(entry.get("name") or f"{workload.rsplit(':', 1)[-1]}-{target}"))
        items.append(
            MatrixItem(
                index,
                name,
                workload,
                str(target),
                _only(entry.get("only", defaults.get("only")), where),
                parameters,
            )
        )
    names = [item.name for item in items]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadInput(
            f"Matrix {path}: item name {twice[0]!r} is used twice; give the items distinct "
            "'name:' values (each gets its own folder)."
        )
    return Matrix(path, items)


def check_item(item: MatrixItem, where: str, *, here: bool = True) -> None:
    """BadInput, in one sentence naming the item, for anything its run would reject.

    here=False leaves out whether the item's target is available on this machine: a matrix is
    checked where it is submitted, and each item's own run checks its device on its node.
    """
    from workbench.runner import check_request, prepare_run

    try:
        reserved = sorted(set(item.parameters) & set(RUNNER_SET))
        if reserved:
            raise BadInput(
                f"parameter {reserved[0]!r} is set by the item's own key, not parameters"
            )
        request = item.request(Path("reports"))
        if here:
            prepare_run(request)
        else:
            # Checked where the matrix is submitted (a login node): nothing the item names runs
            # there, neither its script nor its module nor a model folder's own code.
            check_request(request, load_workload=False)
    except BadInput as exc:
        raise BadInput(
            f"{where}: item {item.index} ({item.name}): {str(exc).rstrip('.')}."
        ) from None


def check_matrix(matrix: Matrix) -> list[str]:
    """One sentence per bad item (empty when every item would run on a node with its target)."""
    problems = []
    for item in matrix.items:
        try:
            check_item(item, str(matrix.path), here=False)
        except BadInput as exc:
            problems.append(str(exc))
    return problems
