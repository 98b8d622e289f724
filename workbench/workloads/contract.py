"""The workload contract: a model plus everything needed to run a training step or an
inference call on it, and the helpers every notebook uses to feed it and read its output.

The contract every notebook follows: a batch's inputs are a tuple (positional arguments) or a
dict (keyword arguments, as Hugging Face models take them); a model may return a tensor, a tuple,
a dict or a `ModelOutput`. `Workload.forward`, `compute_loss` and `score` are the only places
that know the difference.

This module is the bottom of the workload rooms: the built-in workloads, `hf:` and `script:`
build on it, and `workbench/workload.py` (which loads what a spec names) imports them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

# Model inputs: positional (a tuple) or keyword arguments (a dict, e.g. input_ids, attention_mask).
Inputs = tuple[torch.Tensor, ...] | dict[str, torch.Tensor]
Batch = tuple[Inputs, torch.Tensor]  # (model inputs, targets)

DEFAULT_SEED = 42

TASK_CLASSIFICATION = "classification"
TASK_LANGUAGE_MODEL = "language-model"


def accuracy(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """Share of samples whose arg-max class equals the target."""
    return float((outputs.argmax(dim=-1) == targets).float().mean().item())


def perplexity(outputs: torch.Tensor, targets: torch.Tensor) -> float:
    """exp(mean token cross-entropy): the usual language-model task metric."""
    loss = nn.functional.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))
    return float(math.exp(loss.item()))


def token_cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every position of a (batch, seq, vocab) output."""
    return nn.functional.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))


def call_model(model: Callable[..., Any], inputs: Inputs) -> Any:
    """The model (or its compiled forward) on a batch's inputs: keyword arguments for a dict."""
    if isinstance(inputs, Mapping):
        return model(**inputs)
    return model(*inputs)


def move_inputs(inputs: Inputs, device: torch.device | str, non_blocking: bool = False) -> Inputs:
    """The same inputs, every tensor on `device` (tuples stay tuples, dicts stay dicts)."""
    return tree_map(
        lambda t: t.to(device, non_blocking=non_blocking) if isinstance(t, torch.Tensor) else t,
        inputs,
    )


def input_tensors(inputs: Inputs) -> list[torch.Tensor]:
    """The input tensors in call order (a dict's in insertion order)."""
    values = inputs.values() if isinstance(inputs, Mapping) else inputs
    return [t for t in values if isinstance(t, torch.Tensor)]


def named_inputs(inputs: Inputs) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) per input: a dict's keys, or input[0], input[1], ... for positional ones."""
    if isinstance(inputs, Mapping):
        return [(str(k), t) for k, t in inputs.items() if isinstance(t, torch.Tensor)]
    return [(f"input[{i}]", t) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)]


def batch_size_of(inputs: Inputs, batch_dim: int = 0) -> int:
    """Samples in a batch: its first input tensor's size along the batch dimension (the
    leading one, except for `(sequence, batch)` inputs)."""
    return int(input_tensors(inputs)[0].shape[batch_dim])


class KeywordCall(nn.Module):
    """A keyword-argument model behind a positional forward, for APIs that take example inputs
    as a tuple (torch_neuronx.analyze and trace); the wrapped model's weights are its own."""

    def __init__(self, model: nn.Module, keys: Iterable[str]) -> None:
        super().__init__()
        self.model = model
        self.keys = tuple(keys)

    def forward(self, *args: torch.Tensor) -> Any:
        return self.model(**dict(zip(self.keys, args, strict=True)))


def as_positional(model: nn.Module, inputs: Inputs) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The model and inputs in positional form: unchanged for tuples, KeywordCall for dicts."""
    if isinstance(inputs, Mapping):
        return KeywordCall(model, inputs.keys()), tuple(inputs.values())
    return model, tuple(inputs)


def _output_items(outputs: Any) -> list[tuple[str, Any]]:
    """A container output's (key, value) pairs: ModelOutput and dict by key, tuple by index.
    A ModelOutput is an OrderedDict that skips its None fields, so it reads as a dict."""
    if isinstance(outputs, Mapping):
        return [(str(k), v) for k, v in outputs.items() if v is not None]
    if isinstance(outputs, (tuple, list)):
        return [(f"[{i}]", v) for i, v in enumerate(outputs)]
    return []


def named_float_tensors(outputs: Any, name: str = "outputs") -> list[tuple[str, torch.Tensor]]:
    """Every floating-point tensor in an output, recursively, with a name that says where it
    sits ("logits", "hidden_states[2]", "outputs[1]"): how outputs are compared by name."""
    if isinstance(outputs, torch.Tensor):
        return [(name, outputs)] if outputs.is_floating_point() else []
    found = []
    for key, value in _output_items(outputs):
        if key.startswith("["):
            child = f"{name}{key}"
        else:
            child = key if name == "outputs" else f"{name}.{key}"
        found.extend(named_float_tensors(value, child))
    return found


def primary_output(outputs: Any) -> Any:
    """The tensor a loss or a task metric reads: the output itself when it is a tensor, else
    its `logits`, else its first floating-point tensor (first element for a tuple)."""
    if isinstance(outputs, torch.Tensor):
        return outputs
    if isinstance(outputs, Mapping) and outputs.get("logits") is not None:
        return outputs["logits"]
    tensors = named_float_tensors(outputs)
    if not tensors:
        raise ValueError(f"the model's output ({type(outputs).__name__}) holds no float tensor")
    # A tuple's first element is by convention its main output; for dicts without logits the
    # first float tensor in key order.
    return tensors[0][1]


def on_primary_output(fn: Callable[[torch.Tensor, torch.Tensor], Any]) -> Callable[[Any, Any], Any]:
    """A loss or metric written for one logits tensor, made to accept any model output (a
    tuple, a dict, a ModelOutput): how workbench's own losses and metrics read a model's output.
    A user's Workload gets the output as the model returned it."""

    def read(outputs: Any, targets: Any) -> Any:
        return fn(primary_output(outputs), targets)

    return read


def output_loss(outputs: Any) -> torch.Tensor:
    """The loss a model computed itself (a `loss` field or key)."""
    loss = outputs.get("loss") if isinstance(outputs, Mapping) else getattr(outputs, "loss", None)
    if not isinstance(loss, torch.Tensor):
        raise ValueError(
            f"the workload takes its loss from the model's output, but the output "
            f"({type(outputs).__name__}) has no 'loss' tensor (were labels passed?)"
        )
    return loss


def disable_dropout(model: nn.Module) -> list[str]:
    """Turn every dropout module off; return their names for the record.

    Eval mode stops the module itself, and p = 0 stops the attention dropout that Hugging Face
    models pass to scaled_dot_product_attention from the module's `.p` while training."""
    names = []
    for name, module in model.named_modules():
        # Every torch dropout class, alpha and feature variants included, derives from this.
        if isinstance(module, nn.modules.dropout._DropoutNd):
            module.eval()
            module.p = 0.0
            names.append(name)
    return names


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Code inside draws from torch's global generator seeded with `seed`; the caller's
    generator state is restored afterwards, so seeding here never changes anything outside."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def state_sha256(model: nn.Module) -> str:
    """SHA-256 over names, dtypes, shapes and raw bytes of the state dict, in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        data = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}|".encode())
        digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@dataclass
class Workload:
    """A model factory, a batch maker, a loss, an optimizer factory and what they describe."""

    name: str
    model_factory: Callable[[], nn.Module]
    # (batch_size, generator) -> (inputs, targets) on the CPU; `batch()` moves them.
    batch_maker: Callable[[int, torch.Generator], Batch]
    # (model output as returned, targets) -> loss; unused when loss_from_output is set.
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]
    optimizer_factory: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
    batch_size: int
    task: str = TASK_CLASSIFICATION
    sequence_length: int | None = None  # set for sequence workloads: throughput counts tokens
    task_metric: Callable[[Any, torch.Tensor], float] | None = accuracy
    task_metric_name: str = "accuracy"
    # () -> held-out (inputs, targets) batches on the CPU, for the validation metric of notebook
    # 03; None: a few batches of batch_maker drawn with another seed than the training batch's.
    evaluation_batches: Callable[[], Iterable[Batch]] | None = None
    seed: int = DEFAULT_SEED
    description: str = ""
    spec: str = ""  # what the user typed to get this workload
    # The model computes its own loss (labels among its inputs, a `loss` in its output), as a
    # Hugging Face model does in its usual training loop; loss_fn is then not called.
    loss_from_output: bool = False
    # The model's own sequence-length limit (max positions), where it has one.
    max_sequence_length: int | None = None
    # Notebook 03's downstream evaluation (workbench/numerics/evaluation.py): called with a
    # `predict(inputs) -> outputs` of the run being judged, returns a score in [0, 1] (higher is
    # better) or {task: score}; None: no downstream gate.
    downstream_eval: Callable[[Callable[[Inputs], Any]], float | Mapping[str, float]] | None = None
    # Sentences saying how this workload is not the model as named (weights missing from its
    # checkpoint, a task that keeps only part of the model): shown on the console at load time
    # and added to every notebook's verdict and headline.
    attentions: list[str] = field(default_factory=list)
    # A `script:` workload's run as watched (workbench/workloads/script.py): its steps, losses,
    # redirected device calls and printed output; None for every other kind.
    script_run: dict[str, Any] | None = None
    # The inputs' batch dimension: 0, but 1 for an RNN fed `(sequence, batch)` tensors.
    batch_dim: int = 0
    # Why the workload's loss is a stand-in (the mean of the model's output) for the script's
    # own, which cannot be recomputed; empty for a real loss. Questions that train on the loss
    # are then not answered; the others say the stand-in in their verdict.
    loss_stand_in: str = ""
    # Why the batch has one size only (a whole-graph batch: features and an N x N adjacency
    # share no batch dimension); empty where batches of other sizes can be made. 04, which
    # chooses a batch size, is then not answered; 05 serves that one size.
    fixed_batch: str = ""

    def forward(self, model: Callable[..., Any], inputs: Inputs) -> Any:
        """The model (or its compiled forward) on a batch's inputs."""
        return call_model(model, inputs)

    def compute_loss(self, outputs: Any, targets: torch.Tensor) -> torch.Tensor:
        """The training loss of one forward's outputs."""
        if self.loss_from_output:
            return output_loss(outputs)
        return self.loss_fn(outputs, targets)

    def score(self, outputs: Any, targets: torch.Tensor) -> float | None:
        """The task metric (accuracy, perplexity) of one forward's outputs, if the task has one."""
        if self.task_metric is None:
            return None
        return float(self.task_metric(outputs, targets))

    @property
    def is_sequence(self) -> bool:
        return self.sequence_length is not None

    def build_model(self, device: torch.device | str = "cpu") -> nn.Module:
        """The model with the workload's seeded initial weights, on `device`."""
        with seeded(self.seed):
            model = self.model_factory()
        return model.to(device)

    def batch(self, device: torch.device | str = "cpu", batch_size: int | None = None) -> Batch:
        """A deterministic batch (same seed, same data) on `device`."""
        generator = torch.Generator().manual_seed(self.seed)
        inputs, targets = self.batch_maker(batch_size or self.batch_size, generator)
        return move_inputs(inputs, device), targets.to(device)

    def make_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        return self.optimizer_factory(model.parameters())

    def items_per_sample(self) -> int:
        """Throughput unit per sample: tokens for sequence workloads, 1 otherwise."""
        return self.sequence_length or 1

    @property
    def throughput_unit(self) -> str:
        return "tokens/s" if self.is_sequence else "samples/s"

    def describe(self) -> dict[str, Any]:
        """Facts for reports: shapes and dtypes come from a real batch, not from the config."""
        inputs, targets = self.batch("cpu")
        model = self.build_model("cpu")
        return {
            "name": self.name,
            "spec": self.spec or self.name,
            "description": self.description,
            "attentions": list(self.attentions),
            "task": self.task,
            "batch_size": self.batch_size,
            "sequence_length": self.sequence_length,
            "seed": self.seed,
            "parameters": sum(p.numel() for p in model.parameters()),
            # Same hash, same initial weights: what lets one notebook's numbers be compared
            # with another's, or with another run's.
            "initial_state_sha256": state_sha256(model),
            "inputs": [
                {"name": name, "shape": list(t.shape), "dtype": str(t.dtype)}
                for name, t in named_inputs(inputs)
            ],
            "targets": {"shape": list(targets.shape), "dtype": str(targets.dtype)},
            "batch_dim": self.batch_dim,
            "task_metric": self.task_metric_name if self.task_metric else None,
            "optimizer": type(self.make_optimizer(model)).__name__,
            "loss": "the model's own (output.loss)" if self.loss_from_output else "workload loss",
        } | ({"script": self.script_run} if self.script_run is not None else {})


# The contract's own frames sit between workbench's machinery and the model or loss. Workload
# code lives in workbench too (the built-ins, the plain-module wrapper's losses and batches), so
# a frame walker looking for the user's code is told these frames by their code objects and
# passes through.
CONTRACT_CODE = frozenset(
    f.__code__
    for f in (
        call_model,
        Workload.forward,
        Workload.compute_loss,
        Workload.score,
        KeywordCall.forward,
        on_primary_output(accuracy),
    )
)
