"""Copies of a model that share nothing with it.

`copy.deepcopy` copies a function by reference, so a model that reaches its own submodules
through a closure (`m = self.mlp; self.mlpf = lambda x: m.c_proj(m.c_fc(x))`, as minGPT does)
keeps calling the original's layers from its copy: "reference" and "target" would then be the
same weights trained twice. Here such functions are copied with their closure cells, inside the
same deepcopy, so the copy's closures reach the copy's modules; a copy that would still share
state with its original is refused with one sentence.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Iterator
from typing import Any, TypeVar

import torch
from torch import nn

from workbench.errors import BadInput

M = TypeVar("M", bound=nn.Module)

# Attributes of nn.Module that hold its own state, walked by deepcopy as usual.
_MODULE_STATE = frozenset({"_parameters", "_buffers", "_modules"})


def independent_copy(model: M) -> M:
    """A deep copy of `model` whose closures reach its own modules; refused where the copy
    would still reach any of the original's modules, parameters or buffers."""
    memo: dict[int, Any] = {}
    for function in _closures_held(model):
        _copy_function(function, memo)
    copied = copy.deepcopy(model, memo)
    shared = shared_with(model, copied)
    if shared:
        raise BadInput(
            f"The model {type(model).__name__} cannot be copied independently: {shared}, so a "
            "copy would train the original's weights; copy-based comparisons need a model "
            "whose submodules are its attributes."
        )
    return copied


def shared_with(original: nn.Module, copied: nn.Module) -> str:
    """What `copied` still shares with `original` (a tensor's memory, or a closure reaching one
    of its objects), in a few words; empty when nothing is shared."""
    owned = {id(m) for m in original.modules()}
    owned |= {id(t) for t in original.parameters()} | {id(t) for t in original.buffers()}
    pointers = {t.data_ptr() for t in [*original.parameters(), *original.buffers()] if t.numel()}
    for name, tensor in [*copied.named_parameters(), *copied.named_buffers()]:
        if id(tensor) in owned or (tensor.numel() and tensor.data_ptr() in pointers):
            return f"its {name} is the original's memory"
    for function in _closures_held(copied):
        for cell in function.__closure__ or ():
            if _cell_value(cell) is not None and id(_cell_value(cell)) in owned:
                return f"its function {function.__qualname__} reaches the original's modules"
    return ""


def check_forward_apart(originals: list[nn.Module], copied: nn.Module, run: Any) -> None:
    """Refused where `run(copied)` (a forward on the copy) reads any parameter of the
    originals: a model reaching its layers through a global registry, say, which no copy of
    its attributes can follow."""
    named = [(n, p) for m in originals for n, p in m.named_parameters() if p.requires_grad]
    weights = [p for _, p in named]
    output = run(copied)
    tensors = [t for t in _leaves(output) if t.requires_grad]
    if not weights or not tensors:
        return
    total = torch.stack([t.float().sum() for t in tensors]).sum()
    grads = torch.autograd.grad(total, weights, allow_unused=True)
    names = [n for (n, _), g in zip(named, grads, strict=True) if g is not None]
    if names:
        raise BadInput(
            f"The model {type(copied).__name__} cannot be copied independently: a copy's "
            f"forward still reads the original's {names[0]}, so a copy would train the "
            "original's weights; copy-based comparisons need a model whose layers are its "
            "attributes."
        )


def _leaves(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in _leaves(v)]
    if isinstance(tree, (tuple, list)):
        return [t for v in tree for t in _leaves(v)]
    return []


def _closures_held(model: nn.Module) -> Iterator[types.FunctionType]:
    """Functions with closures that the model's modules hold as attributes (directly, or in a
    list, tuple or dict attribute)."""
    seen: set[int] = set()
    for module in model.modules():
        for name, value in vars(module).items():
            if name in _MODULE_STATE:
                continue
            items = value.values() if isinstance(value, dict) else value
            for item in items if isinstance(value, (list, tuple, dict)) else (value,):
                if isinstance(item, types.FunctionType) and item.__closure__:
                    if id(item) not in seen:
                        seen.add(id(item))
                        yield item


def _cell_value(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _copy_function(function: types.FunctionType, memo: dict[int, Any]) -> None:
    """The function with new closure cells, entered in deepcopy's memo before the cells are
    filled, so a cell holding the model (or a function holding this one) meets the copy."""
    if id(function) in memo:
        return
    cells = tuple(types.CellType() for _ in function.__closure__ or ())
    clone = types.FunctionType(
        function.__code__, function.__globals__, function.__name__, function.__defaults__, cells
    )
    clone.__kwdefaults__ = function.__kwdefaults__
    clone.__qualname__ = function.__qualname__
    clone.__dict__.update(function.__dict__)
    memo[id(function)] = clone
    # deepcopy keeps what it copied alive for the memo's lifetime: so must this.
    memo.setdefault(id(memo), []).append(function)
    for cell, old in zip(cells, function.__closure__ or (), strict=True):
        value = _cell_value(old)
        if value is None:
            continue
        if isinstance(value, types.FunctionType) and value.__closure__:
            _copy_function(value, memo)
            cell.cell_contents = memo[id(value)]
        else:
            cell.cell_contents = copy.deepcopy(value, memo)
