"""Workload: a model plus everything needed to run a training step or an inference call on it.

Built-ins are named (`seed-mlp`); a user's workload is a spec `pkg.module:factory` whose factory
returns either a `Workload` or a plain `nn.Module` described by input parameters, or
`hf:FOLDER` / `hf:MODEL_TYPE` for a Hugging Face model (workbench/workloads/huggingface.py).

The contract every notebook follows: a batch's inputs are a tuple (positional arguments) or a
dict (keyword arguments, as Hugging Face models take them); a model may return a tensor, a tuple,
a dict or a `ModelOutput`. `Workload.forward`, `compute_loss` and `score` are the only places
that know the difference.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_map

from workbench.errors import BadInput, describe_error, did_you_mean
from workbench.scorecard import ATTENTION, Finding, Verdict, judge
from workbench.workloads import BUILTIN_WORKLOADS, DEFAULT_WORKLOAD

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


def batch_size_of(inputs: Inputs) -> int:
    """Samples in a batch: the leading dimension of its first input tensor."""
    return int(input_tensors(inputs)[0].shape[0])


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
            "task_metric": self.task_metric_name if self.task_metric else None,
            "optimizer": type(self.make_optimizer(model)).__name__,
            "loss": "the model's own (output.loss)" if self.loss_from_output else "workload loss",
        } | ({"script": self.script_run} if self.script_run is not None else {})


# The contract's own frames sit between workbench's machinery and the model or loss. This file
# also holds workload code (the plain-module wrapper's losses and batches), so a frame walker
# looking for the user's code is told these frames by their code objects and passes through.
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


@dataclass(frozen=True)
class InputDescription:
    """How to feed a plain nn.Module: one shape per input, a dtype, a class (or vocab) count."""

    shapes: tuple[tuple[int, ...], ...]
    dtype: torch.dtype
    num_classes: int

    @property
    def is_token_input(self) -> bool:
        return not self.dtype.is_floating_point


_DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "long": torch.int64,
    "int32": torch.int32,
}


def parse_shapes(text: str) -> tuple[tuple[int, ...], ...]:
    """'3x32x32' -> ((3, 32, 32),); several inputs are separated by ';' ('16;16x4')."""
    shapes = []
    for part in text.split(";"):
        dims = [d for d in re.split(r"[x,\s()\[\]]+", part.strip()) if d]
        if not dims or not all(d.isdigit() and int(d) > 0 for d in dims):
            raise ValueError(f"cannot read {part.strip()!r} as a shape such as 3x32x32")
        shapes.append(tuple(int(d) for d in dims))
    return tuple(shapes)


def parse_input_description(
    input_shape: str, input_dtype: str, num_classes: int | None
) -> InputDescription:
    if input_dtype not in _DTYPES:
        raise ValueError(f"input_dtype {input_dtype!r} is not one of {', '.join(_DTYPES)}")
    if not num_classes or num_classes < 2:
        raise ValueError("num_classes must be at least 2 (the class count, or vocab size)")
    return InputDescription(parse_shapes(input_shape), _DTYPES[input_dtype], int(num_classes))


def workload_from_module(
    factory: Callable[[], nn.Module], description: InputDescription, name: str, batch_size: int
) -> Workload:
    """Wrap a plain module: random inputs of the described shapes, cross-entropy targets.

    Float inputs make a classifier (targets: one class per sample). Integer inputs are token ids
    in [0, num_classes) and the model must return (batch, seq, num_classes) logits.
    """

    def batch_maker(size: int, generator: torch.Generator) -> Batch:
        if description.is_token_input:
            inputs = tuple(
                torch.randint(
                    description.num_classes,
                    (size, *s),
                    generator=generator,
                    dtype=description.dtype,
                )
                for s in description.shapes
            )
            targets = torch.randint(
                description.num_classes, (size, *description.shapes[0]), generator=generator
            )
        else:
            inputs = tuple(
                torch.randn((size, *s), generator=generator).to(description.dtype)
                for s in description.shapes
            )
            targets = torch.randint(description.num_classes, (size,), generator=generator)
        return inputs, targets

    token_input = description.is_token_input
    return Workload(
        name=name,
        model_factory=factory,
        batch_maker=batch_maker,
        # A plain module may return a tuple or a dict: the loss and metric read its logits.
        loss_fn=on_primary_output(
            token_cross_entropy if token_input else nn.functional.cross_entropy
        ),
        optimizer_factory=lambda params: torch.optim.AdamW(params, lr=1e-3),
        batch_size=batch_size,
        task=TASK_LANGUAGE_MODEL if token_input else TASK_CLASSIFICATION,
        sequence_length=description.shapes[0][-1] if token_input else None,
        task_metric=on_primary_output(perplexity if token_input else accuracy),
        task_metric_name="perplexity" if token_input else "accuracy",
        description="user module, inputs "
        + "; ".join("x".join(map(str, shape)) for shape in description.shapes),
    )


def import_factory(spec: str) -> Callable[[], Any]:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise BadInput(
            f"Workload {spec!r}{did_you_mean(spec, BUILTIN_WORKLOADS)}: expected a built-in "
            f"name ({', '.join(BUILTIN_WORKLOADS)}), 'package.module:factory', 'hf:FOLDER' "
            "or 'script:train.py'."
        )
    # Console scripts do not put the working directory on sys.path; user modules live there.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        # Seeded too: a module built at import time gets the same weights in every process.
        with seeded(DEFAULT_SEED):
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise BadInput(
            f"Workload {spec!r}: module {exc.name!r} was not found "
            "(run from the folder that holds it, or add it to PYTHONPATH)."
        ) from None
    except Exception as exc:  # a user module that fails at import time
        raise BadInput(
            f"Workload {spec!r}: importing {module_name!r} raised {describe_error(exc)}."
        ) from None
    factory = getattr(module, attribute, None)
    if factory is None:
        raise BadInput(f"Workload {spec!r}: module {module_name!r} has no attribute {attribute!r}.")
    if not callable(factory):
        raise BadInput(f"Workload {spec!r}: {attribute!r} is not callable.")
    return factory


@dataclass(frozen=True)
class WorkloadSpec:
    """What the user named, and how to feed it: everything needed to load the same workload
    again. Plain values only, so it travels to child processes (tuning trials by pickle,
    torchrun ranks as JSON) where the workload's closures cannot."""

    spec: str = DEFAULT_WORKLOAD  # built-in name, package.module:factory, hf:FOLDER or hf:TYPE
    input_shape: str = ""  # per-sample input shape(s) of a plain nn.Module, e.g. 3x32x32
    input_dtype: str = "float32"
    num_classes: int | None = None  # class count, or vocabulary size, of a plain nn.Module
    batch_size: int | None = None  # None keeps the workload's own
    task: str = ""  # hf: the task, when the architecture does not say it ("" infers it)
    sequence_length: int | None = None  # hf: tokens per sample (None: a default)
    image_size: int | None = None  # hf: image side in pixels (None: the config's)
    hf_config: str = ""  # hf: config overrides, "key=value,key=value"
    allow_partial_model: bool = False  # hf: measure the part of the model a task keeps
    trust_remote_code: bool = False  # hf: run the Python a checkpoint folder ships
    # script: the target its device calls are redirected to. Not part of what the workload is
    # (equal specs on two targets name the same workload), so left out of comparisons.
    target: str = field(default="auto", compare=False)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> WorkloadSpec:
        """From notebook parameters; one a notebook does not declare takes its default here,
        and 0 (the parameters cells' "not set") means None."""
        return cls(
            spec=params.get("workload") or DEFAULT_WORKLOAD,
            input_shape=params.get("input_shape") or "",
            input_dtype=params.get("input_dtype") or "float32",
            num_classes=params.get("num_classes") or None,
            batch_size=params.get("batch_size") or None,
            task=params.get("task") or "",
            sequence_length=params.get("sequence_length") or None,
            image_size=params.get("image_size") or None,
            hf_config=params.get("hf_config") or "",
            allow_partial_model=bool(params.get("allow_partial_model")),
            trust_remote_code=bool(params.get("trust_remote_code")),
            target=params.get("target") or "auto",
        )

    def load(self) -> Workload:
        """The workload; every problem is a BadInput naming the spec and what is wrong."""
        return load_workload(
            self.spec,
            input_shape=self.input_shape,
            input_dtype=self.input_dtype,
            num_classes=self.num_classes,
            batch_size=self.batch_size,
            task=self.task,
            sequence_length=self.sequence_length,
            image_size=self.image_size,
            hf_config=self.hf_config,
            allow_partial_model=self.allow_partial_model,
            trust_remote_code=self.trust_remote_code,
            target=self.target,
        )


HF_PREFIX = "hf:"
SCRIPT_PREFIX = "script:"


def load_workload(
    spec: str = DEFAULT_WORKLOAD,
    *,
    input_shape: str = "",
    input_dtype: str = "float32",
    num_classes: int | None = None,
    batch_size: int | None = None,
    task: str = "",
    sequence_length: int | None = None,
    image_size: int | None = None,
    hf_config: str = "",
    allow_partial_model: bool = False,
    trust_remote_code: bool = False,
    target: str = "auto",
) -> Workload:
    """Resolve a workload spec; every problem is a BadInput naming the spec and what is wrong."""
    if spec.startswith(SCRIPT_PREFIX):
        # Imported here: the script watcher patches torch only while a script runs.
        from workbench.targets import get_target, resolve_target_name
        from workbench.workloads.script import load_script_workload

        return load_script_workload(spec, get_target(resolve_target_name(target)[0]), batch_size)
    if spec.startswith(HF_PREFIX):
        # Imported here: transformers is an optional extra, needed for hf: specs only.
        from workbench.workloads.huggingface import HfOptions, load_hf_workload

        options = HfOptions(
            task=task,
            batch_size=batch_size,
            sequence_length=sequence_length,
            image_size=image_size,
            config=hf_config,
            allow_partial_model=allow_partial_model,
            trust_remote_code=trust_remote_code,
        )
        workload = load_hf_workload(spec, options)
        workload.spec = spec
        announce_attentions(workload)
        return workload
    target = BUILTIN_WORKLOADS.get(spec, spec)
    factory = import_factory(target)
    try:
        # A plain module's weights are drawn here, so the draw is seeded: every notebook and
        # every run then starts from the same weights.
        with seeded(DEFAULT_SEED):
            made = factory()
    except Exception as exc:
        raise BadInput(f"Workload {spec!r}: the factory raised {describe_error(exc)}.") from None

    if isinstance(made, Workload):
        workload = made
    elif isinstance(made, nn.Module):
        if not input_shape:
            raise BadInput(
                f"Workload {spec!r} returned a plain nn.Module; describe its input with "
                "-p input_shape=3x32x32 -p num_classes=10 (and -p input_dtype=int64 for token ids)."
            )
        try:
            description = parse_input_description(input_shape, input_dtype, num_classes)
        except ValueError as exc:
            raise BadInput(f"Workload {spec!r}: {exc}.") from None
        module = made
        workload = workload_from_module(
            lambda: _fresh_copy(module), description, spec, batch_size or 32
        )
    else:
        raise BadInput(
            f"Workload {spec!r}: the factory returned {type(made).__name__}; "
            "expected a workbench Workload or a torch.nn.Module."
        )
    if batch_size:
        workload.batch_size = batch_size
    workload.spec = spec
    announce_attentions(workload)
    return workload


WORKLOAD_RULE = (
    "attention also: the workload is not the model as named (tensors missing from its "
    "checkpoint, or a task that keeps only part of the model)"
)


def with_workload_attentions(data: Mapping[str, Any], attentions: Sequence[str]) -> dict[str, Any]:
    """A notebook's result data with its workload's attentions added to the verdict (each one a
    finding, judged with the notebook's own) and in front of the headline, so that no report
    reads as a measurement of the model the user named when it is not."""
    amended = dict(data)
    if not attentions:
        return amended
    verdict = data.get("verdict")
    if isinstance(verdict, Verdict):
        # First among equals: what the workload is qualifies every other finding of the notebook.
        findings = [*(Finding(ATTENTION, f"workload: {a}") for a in attentions), *verdict.findings]
        amended["verdict"] = judge(findings, f"{verdict.rule}; {WORKLOAD_RULE}", verdict.reason)
    if data.get("headline"):
        amended["headline"] = f"Workload: {'; '.join(attentions)}. {data['headline']}"
    return amended


def announce_attentions(workload: Workload) -> None:
    """Each attention on stderr as the workload loads: the console of `workbench run`, which
    loads it before any notebook starts, and each notebook's own output."""
    for sentence in workload.attentions:
        print(f"workbench: attention: {workload.name}: {sentence}", file=sys.stderr)


def _fresh_copy(module: nn.Module) -> nn.Module:
    """Each build gets its own weights object, so runs never share optimizer-mutated state."""
    return copy.deepcopy(module)
