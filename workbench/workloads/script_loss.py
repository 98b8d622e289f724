"""The loss a script calls `backward` on, as a function of its model's output.

Scripts rarely call `backward` on a torch loss as it is: they divide it for gradient
accumulation (`loss / grad_accum_steps`), scale it, add two of them, or compute it in a helper.
While the script runs, every torch loss that reads the model's output is kept as a term
(the loss the model computes itself too); at the first `backward`, the autograd graph between
the tensor `backward` receives and those terms says whether that tensor is a weighted sum of
them with constant weights, and finds the weights. The workload's loss is then that same sum,
recomputed on the captured batch. Where the tensor depends on the model's output in any other
way (or on the weights directly, a penalty on them), the reason is returned instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# How close sum(weight * term) must come to the loss, relative to its size: the weights are
# read from the graph, so only rounding separates the two.
_RELATIVE_TOLERANCE = 1e-4


@dataclass
class LossTerm:
    """One loss the script computed from its model's output during the step."""

    fn: Callable[[Any, torch.Tensor], torch.Tensor]  # the term, recomputed from (outputs, targets)
    target: torch.Tensor | None  # the targets it read as the batch holds them; None: the model's
    value: torch.Tensor  # the term as the script computed it
    name: str
    from_output: bool = False  # the model's own `output.loss`: its targets are among its inputs


@dataclass
class LossFound:
    """The loss `backward` received, as constant weights over the terms."""

    terms: list[LossTerm]
    weights: list[float]

    @property
    def name(self) -> str:
        if self.weights == [1.0]:
            return self.terms[0].name
        return " + ".join(
            f"{_weight(w)} x {t.name}" for w, t in zip(self.weights, self.terms, strict=True)
        )

    def loss_fn(self) -> Callable[[Any, torch.Tensor], torch.Tensor]:
        if self.weights == [1.0]:
            return self.terms[0].fn
        pairs = list(zip(self.weights, [t.fn for t in self.terms], strict=True))

        def weighted(outputs: Any, targets: torch.Tensor) -> torch.Tensor:
            total = pairs[0][0] * pairs[0][1](outputs, targets)
            for weight, fn in pairs[1:]:
                total = total + weight * fn(outputs, targets)
            return total

        return weighted


def _weight(value: float) -> str:
    inverse = 1 / value if value else 0.0
    if value and abs(inverse - round(inverse)) < 1e-6 and abs(inverse) > 1:
        return f"1/{round(inverse)}"  # gradient accumulation's `loss / steps`, as written
    return f"{value:.6g}"


def add_term(terms: list[LossTerm], term: LossTerm) -> None:
    """`term` kept; a loss module's term replaces the functional one it computed through
    (CrossEntropyLoss calls F.cross_entropy: one value, one term, the module's name)."""
    terms[:] = [t for t in terms if t.value is not term.value]
    terms.append(term)


def own_terms(output: Any) -> list[LossTerm]:
    """The losses a model's output carries: its `loss` (a Hugging Face model given labels), or
    the scalar tensors of a tuple it returns (`logits, loss = model(x, y)`)."""
    found = []
    loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        found.append(LossTerm(_output_loss, None, loss, "the model's own (output.loss)", True))
    if isinstance(output, (tuple, list)):
        for index, item in enumerate(output):
            if isinstance(item, torch.Tensor) and item.numel() == 1 and item.requires_grad:
                found.append(
                    LossTerm(_element(index), None, item, f"the model's own (output[{index}])")
                )
    return found


def _output_loss(outputs: Any, _: torch.Tensor) -> torch.Tensor:
    from workbench.workloads.contract import output_loss

    return output_loss(outputs)


def _element(index: int) -> Callable[[Any, torch.Tensor], torch.Tensor]:
    return lambda outputs, _: outputs[index]


def find_loss(loss: torch.Tensor, terms: list[LossTerm], output: Any) -> LossFound | str:
    """`loss` as constant weights over `terms`, or the reason it is not such a sum."""
    if loss.grad_fn is None:
        return "the tensor `backward` was called on does not depend on the model"
    reached = _terms_reached(loss, terms, output)
    if isinstance(reached, str):
        return reached
    if not reached:
        return "the tensor `backward` was called on reads no torch loss of the model's output"
    if any(t.value.numel() != 1 for t in reached):
        return (
            "it weighs a per-sample loss (reduction='none') by values of its own, which "
            "differ from batch to batch"
        )
    grads = torch.autograd.grad(loss, [t.value for t in reached], retain_graph=True)
    weights = [float(g.detach().double().sum()) for g in grads]
    rebuilt = sum(
        w * float(t.value.detach().double()) for w, t in zip(weights, reached, strict=True)
    )
    actual = float(loss.detach().double().sum())
    if not math.isclose(rebuilt, actual, rel_tol=_RELATIVE_TOLERANCE, abs_tol=1e-12):
        names = ", ".join(t.name for t in reached)
        return f"it is not a constant multiple or sum of {names} ({actual:.6g} from them)"
    targets = {id(t.target) for t in reached if not t.from_output and t.target is not None}
    if len(targets) > 1:
        return "its losses read different targets; the workbook feeds a batch one target"
    found = LossFound(reached, weights)
    return LossFound(reached, [1.0]) if weights == [1.0] else found


def _terms_reached(loss: torch.Tensor, terms: list[LossTerm], output: Any) -> list[LossTerm] | str:
    """The terms the graph of `loss` reaches, walking back from it and stopping at each;
    a reason where the walk reaches the model's output or a weight any other way."""
    by_node = {t.value.grad_fn: t for t in terms if t.value.grad_fn is not None}
    outputs = {t.grad_fn for t in _tensors(output) if t.grad_fn is not None}
    if loss.grad_fn in by_node:
        return [by_node[loss.grad_fn]]
    seen, stack, reached = set(), [loss.grad_fn], []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node in by_node:
            reached.append(by_node[node])
            continue
        if node in outputs:
            return (
                "it computes the loss from the model's output by its own arithmetic, not "
                "through a torch loss module or function"
            )
        if hasattr(node, "variable"):  # a leaf that records gradients: a weight
            return (
                "it adds a term computed inside the model or from its weights (an auxiliary "
                "loss, a penalty on the weights), which its output does not carry"
            )
        stack.extend(next_node for next_node, _ in node.next_functions)
    order = {id(t): i for i, t in enumerate(terms)}
    return sorted(reached, key=lambda t: order[id(t)])


def _tensors(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict) or hasattr(tree, "values") and callable(tree.values):
        return [t for value in tree.values() for t in _tensors(value)]
    if isinstance(tree, (tuple, list)):
        return [t for value in tree for t in _tensors(value)]
    return []
