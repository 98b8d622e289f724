"""The package's rooms import downward only: no circle between rooms, and nothing below the
runner or the command line imports them.

A room is a subpackage of workbench (`planning/`) or a top-level module (`runner`). Every import
counts, at module level or inside a function (deferred imports are dependencies too, only
later). Import statements are found by their first line and read with ast, so nothing is
imported or run, and the whole package is read in a fraction of a second rather than parsed
whole. Each rule is also run on a small package written for the test, once where it holds and
once where it is broken.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "workbench"

# The rooms that may import the runner or the command line: those above them. The command line
# is the top: it loads the commands' own modules by name and hands them what they need of it
# (rehearse gets `run`'s option check), so nothing imports it. The runner is used by the
# commands that run the workbook: `open`/`export` and fleets.
ABOVE = {
    "cli": frozenset(),
    "runner": frozenset({"cli", "workcopy", "fleet/"}),
}

Edges = dict[tuple[str, str], list[str]]

# The first line of an import statement, at any indentation (deferred imports sit in functions).
IMPORT_LINE = re.compile(r"^[ \t]*(?:from[ \t]+[.\w]+[ \t]+import\b|import[ \t]+[\w.]+)", re.M)


def _room(package: Path, module: str) -> str | None:
    """The room of a dotted module name inside `package`, or None outside it."""
    parts = module.split(".")
    if parts[0] != package.name or len(parts) < 2:
        return None
    return f"{parts[1]}/" if (package / parts[1]).is_dir() else parts[1]


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_init: bool) -> list[str]:
    """The dotted names one import statement reaches (`from a import b` may name module a.b)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = module
    if node.level:
        parts = module.split(".") if is_init else module.split(".")[:-1]
        base = ".".join(parts[: len(parts) - node.level + 1] + [node.module or ""]).rstrip(".")
    elif node.module:
        base = node.module
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def import_statements(text: str) -> Iterator[ast.Import | ast.ImportFrom]:
    """Each import statement of a source file, with its line number; a line that only looks
    like one (prose in a docstring) does not parse as one and is passed over."""
    for match in IMPORT_LINE.finditer(text):
        start = match.start()
        end = text.find("\n", start)
        statement = text[start : end if end >= 0 else len(text)]
        if "(" in statement and ")" not in statement:
            statement = text[start : text.index(")", start) + 1]
        try:
            node = ast.parse(statement.strip()).body[0]
        except SyntaxError:
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            node.lineno = text.count("\n", 0, start) + 1
            yield node


def room_edges(package: Path) -> Edges:
    """(importing room, imported room) -> the places ("file:line") that import across rooms."""
    edges: Edges = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package.parent).with_suffix("")
        is_init = relative.name == "__init__"
        module = ".".join(relative.parent.parts if is_init else relative.parts)
        own = _room(package, module) or package.name
        for node in import_statements(path.read_text(encoding="utf-8")):
            rooms = {_room(package, name) for name in _imported(node, module, is_init)}
            for other in sorted(r for r in rooms if r and r != own):
                edges[own, other].append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return dict(edges)


def circles(edges: Edges) -> list[list[str]]:
    """The rooms that reach each other through imports (Tarjan's strongly connected sets of
    more than one room), each sorted."""
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(room: str) -> None:
        index[room] = low[room] = len(index)
        stack.append(room)
        for other in sorted(graph[room]):
            if other not in index:
                visit(other)
                low[room] = min(low[room], low[other])
            elif other in stack:
                low[room] = min(low[room], index[other])
        if low[room] == index[room]:
            members = []
            while True:
                member = stack.pop()
                members.append(member)
                if member == room:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for room in sorted(set(graph) | {b for _, b in edges}):
        if room not in index:
            visit(room)
    return found


def upward(edges: Edges) -> list[str]:
    """Each import of the runner or the command line from a room not above it."""
    return [
        f"{a} -> {b}: {', '.join(places)}"
        for (a, b), places in sorted(edges.items())
        if b in ABOVE and a not in ABOVE[b]
    ]


def _write(package: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


def test_a_circle_through_a_deferred_import_is_found_and_a_one_way_chain_is_not(
    tmp_path: Path,
) -> None:
    files = {
        "__init__.py": "",
        "low/__init__.py": "",
        "low/a.py": "from pkg.high import b\n",
        "high/__init__.py": "",
        "high/b.py": "def f():\n    from ..low import a\n",
    }
    package = _write(tmp_path / "pkg", files)
    edges = room_edges(package)
    assert edges[("high/", "low/")] == ["pkg/high/b.py:2"]
    assert circles(edges) == [["high/", "low/"]]
    (package / "low" / "a.py").write_text("import json\n", encoding="utf-8")
    assert circles(room_edges(package)) == []


def test_an_import_of_the_runner_from_below_is_upward_and_from_above_is_not(
    tmp_path: Path,
) -> None:
    files = {
        "__init__.py": "",
        "runner.py": "",
        "cli.py": "from pkg import runner\n",
        "planning/__init__.py": "",
        "planning/command.py": "from pkg.runner import check\n",
    }
    edges = room_edges(_write(tmp_path / "pkg", files))
    assert upward(edges) == ["planning/ -> runner: pkg/planning/command.py:1"]


@pytest.fixture(scope="module")
def edges() -> Edges:
    return room_edges(PACKAGE)


def test_workbench_has_no_circle_between_rooms(edges: Edges) -> None:
    assert ("cli", "runner") in edges  # the reader sees the package's real imports
    found = circles(edges)
    shown = [
        f"{a} -> {b}: {', '.join(edges[a, b])}"
        for members in found
        for a in members
        for b in members
        if (a, b) in edges
    ]
    assert not found, "rooms that import each other:\n" + "\n".join(shown)


def test_nothing_below_the_runner_or_the_command_line_imports_them(edges: Edges) -> None:
    assert upward(edges) == []
