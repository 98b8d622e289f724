"""Which code is the workload's own: the files that define its factory, its model classes and
its batch, loss and optimizer code, and within those files the definitions the workload uses.

Installed libraries (site-packages) are never the user's code: a guarded `import torch_xla`
inside transformers says nothing about the user's model. A file that also defines other models
keeps its module-level code and the definitions the workload reaches, by name, from its own;
the other models' classes and factories are left out, and the report says so.
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import BadInput, is_user_code
from workbench.workload import BUILTIN_WORKLOADS, Workload, import_factory
from workbench.workloads import SCRIPT_PREFIX

_INSTALLED = ("site-packages", "dist-packages")


@dataclass
class SourceFile:
    """One of the workload's files and the top-level definitions in it the workload never uses."""

    path: Path
    used: set[str] = field(default_factory=set)  # top-level names the workload's objects live in
    left_out: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (first, last)

    def keeps(self, line: int) -> bool:
        return not any(first <= line <= last for first, last in self.left_out.values())


def _is_installed(path: Path) -> bool:
    return any(part in _INSTALLED for part in path.parts)


def _workload_objects(workload: Workload) -> list[object]:
    objects: list[object] = [
        workload.model_factory,
        workload.batch_maker,
        workload.loss_fn,
        workload.optimizer_factory,
    ]
    try:
        objects.append(import_factory(BUILTIN_WORKLOADS.get(workload.spec, workload.spec)))
    except BadInput:  # a workload made in code, or by a loader other than a factory spec
        pass
    try:
        # On the meta device: the classes are all that is needed, not the weights.
        objects += [type(m) for m in workload.build_model("meta").modules()]
    except Exception:  # noqa: BLE001 - a model that fails to build still has a factory file
        pass
    return objects


def _script_files(workload: Workload) -> tuple[Path, Path] | None:
    """(the script, the loader that ran it) of a `script:` workload; None for any other kind."""
    if not workload.spec.startswith(SCRIPT_PREFIX):
        return None
    from workbench.workloads import script as loader  # a script workload has loaded it

    path, _ = loader.parse_script_spec(workload.spec)
    return path.resolve(), Path(loader.__file__).resolve()


def _script_own_files(workload: Workload) -> list[Path]:
    run = workload.script_run or {}
    script = _script_files(workload)
    folder = script[0].parent if script else Path.cwd()
    return [(folder / f).resolve() for f in run.get("own_files", []) if (folder / f).is_file()]


def _source_file(obj: object) -> str | None:
    """The file an object was defined in; None for builtins, C extensions and partials."""
    if isinstance(obj, type) and obj.__module__ == "__main__":
        # A class of a script run as __main__: that module is gone once the script ends (or is
        # another program's now), but the class's own functions name the file they came from.
        files = [m.__code__.co_filename for m in vars(obj).values() if hasattr(m, "__code__")]
        return files[0] if files else None
    try:
        # getsourcefile takes any object at run time (typeshed narrows it to modules, classes
        # and functions) and raises TypeError for what has no source file.
        return inspect.getsourcefile(obj)  # type: ignore[arg-type]
    except (TypeError, OSError):
        return None


def _top_level_name(obj: object) -> str | None:
    qualname = getattr(obj, "__qualname__", None) or getattr(type(obj), "__qualname__", "")
    name = str(qualname or "").split(".")[0]
    return None if not name or name.startswith("<") else name


_Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


def _definitions(tree: ast.Module) -> dict[str, _Definition]:
    return {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _span(node: _Definition) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return first, node.end_lineno or node.lineno


def _leave_out_unused(source: SourceFile) -> None:
    """Keep the definitions the workload's objects live in and, transitively, those they name;
    leave out the rest. A file that does not parse is kept whole."""
    try:
        tree = ast.parse(source.path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return
    definitions = _definitions(tree)
    kept: set[str] = set()
    pending = [name for name in source.used if name in definitions]
    while pending:
        name = pending.pop()
        if name in kept:
            continue
        kept.add(name)
        pending += [n for n in _names_in(definitions[name]) if n in definitions]
    if not kept:  # nothing of the workload is defined at top level here: keep the whole file
        return
    source.left_out = {name: _span(node) for name, node in definitions.items() if name not in kept}


def workload_source_files(workload: Workload) -> list[SourceFile]:
    """The workload's own files, in discovery order, each with what in it the workload uses."""
    # The workload contract and its loaders wrap a plain module's losses and batches: workbench's
    # machinery, never the workload's own code.
    machinery = {Path(inspect.getfile(m)).resolve() for m in (Workload, import_factory)}
    found = _script_files(workload)
    script = found[0] if found else None
    if found:
        machinery.add(found[1])
    # A script is the workload's own code whole (its loop, its device calls), never trimmed to
    # the definitions its model and loss live in; so are the modules of its own project it
    # imported (a model.py beside train.py), which the redirection also watched.
    files: dict[Path, SourceFile] = {script: SourceFile(script)} if script else {}
    for own in _script_own_files(workload):
        files.setdefault(own, SourceFile(own))
    for obj in _workload_objects(workload):
        source = _source_file(obj)
        if not source or not is_user_code(source):
            continue
        path = Path(source).resolve()
        if path in machinery or _is_installed(path):
            continue
        entry = files.setdefault(path, SourceFile(path))
        name = _top_level_name(obj)
        if name and path != script:
            entry.used.add(name)
    for entry in files.values():
        _leave_out_unused(entry)
    return list(files.values())
