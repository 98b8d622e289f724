"""Running one configuration (device, precision, eager or compiled) and keeping what it computed.

Every run starts from a fresh copy of the same initial weights and trains N steps on the fixed
batch: step 1 gives the final outputs, the loss and every parameter's gradient, all steps give
the loss trajectory. Hooks on every leaf module record each leaf's output in execution order
(and, for the reference, each leaf's inputs, so a diverging layer can be re-run on them):

- eager: during step 1's forward itself; hooks that only copy tensors change nothing that runs.
- compiled: in a separate forward under no_grad through the compiler, on its own copy of the
  weights. Traced hooks make every layer output a graph output, which can change fusion
  (Polygraphy's "mark all" hazard, methods.md d4), so the final outputs, loss, gradients and
  trajectory come from the compiled model without hooks.

Dropout modules are switched off (a compiled run or another device draws its own masks, so
they could not agree); everything else stays in training mode, so batch norm normalizes with
batch statistics. Every run seeds the target's generators with the workload's seed before its
first step, so whatever else draws random numbers (functional dropout such as
scaled_dot_product_attention's dropout_p) draws the same stream in every run on one device.

fp16 under autocast trains as torch.amp's recipe trains it: fp32 weights and optimizer state,
and a torch.amp.GradScaler that scales the loss before backward, unscales the gradients before
they are read or applied, and skips a step whose gradients overflowed (halving its scale). fp16
without it underflows small gradients, and no fp16 recipe trains that way. bf16 keeps fp32's
exponent range and needs no scaling; a cast run (16-bit weights) has none either.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map

from workbench.numerics.recipes import AS_BUILT as AS_BUILT
from workbench.numerics.recipes import AUTOCAST as AUTOCAST
from workbench.numerics.recipes import CAST as CAST
from workbench.numerics.recipes import LOSS_SCALE_INIT as LOSS_SCALE_INIT
from workbench.targets.base import Target
from workbench.targets.compiling import CompileFailed
from workbench.workload import (
    Batch,
    Inputs,
    Workload,
    call_model,
    named_float_tensors,
    primary_output,
)

ModelBuilder = Callable[[], nn.Module]  # a fresh fp32 CPU model with the reference weights


@dataclass(frozen=True)
class Precision:
    name: str
    dtype: torch.dtype
    method: str  # AS_BUILT, CAST or AUTOCAST
    loss_scaling: bool = False  # a torch.amp.GradScaler scales the loss (fp16 autocast)

    @property
    def is_low(self) -> bool:
        return self.dtype in (torch.float16, torch.bfloat16)


FP32 = Precision("fp32", torch.float32, AS_BUILT)
FP64 = Precision("fp64", torch.float64, CAST)
PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        FP32,
        Precision("bf16-autocast", torch.bfloat16, AUTOCAST),
        Precision("bf16-cast", torch.bfloat16, CAST),
        Precision("fp16-autocast", torch.float16, AUTOCAST, loss_scaling=True),
        Precision("fp16-cast", torch.float16, CAST),
        FP64,
    )
}


class AutocastUnavailable(RuntimeError):
    """torch.autocast cannot use the requested dtype on this device."""


@dataclass(frozen=True)
class RunSpec:
    """Where and how one run computes: a target, a precision recipe, eager or compiled."""

    target: Target
    precision: Precision
    compiled: bool = False

    @property
    def mode(self) -> str:
        return "compiled" if self.compiled else "eager"

    @property
    def label(self) -> str:
        return f"{self.target.name} {self.precision.name} {self.mode}"

    def place_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.target.device)
        if self.precision.method == CAST:
            model = model.to(self.precision.dtype)  # floating parameters and buffers only
        return model

    def place(self, value: Any) -> Any:
        """Tensors onto the device; float tensors cast too in a cast run (ids stay integers)."""

        def move(tensor: Any) -> Any:
            if not isinstance(tensor, torch.Tensor):
                return tensor
            tensor = tensor.to(self.target.device)
            if self.precision.method == CAST and tensor.is_floating_point():
                tensor = tensor.to(self.precision.dtype)
            return tensor

        return tree_map(move, value)

    def place_batch(self, batch: Batch) -> Batch:
        """The inputs placed as `place` places them; the targets moved to the device as they are."""
        inputs, targets = batch
        return self.place(inputs), targets.to(self.target.device)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.precision.method != AUTOCAST:
            return contextlib.nullcontext()
        device_type = self.target.autocast_device_type
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            context = torch.autocast(device_type, dtype=self.precision.dtype)
        # For a dtype a device cannot autocast to, torch warns and runs in full precision:
        # that run would pass for the wrong reason, so it is refused instead.
        disabled = [str(w.message) for w in caught if "disabl" in str(w.message).lower()]
        if disabled:
            raise AutocastUnavailable(
                f"torch.autocast({device_type!r}, dtype={self.precision.dtype}) is not "
                f"available here (torch {torch.__version__}): {disabled[0]}"
            )
        return context

    def grad_scaler(self) -> torch.amp.GradScaler:
        """torch.amp's loss scaler for this recipe; a disabled one (no scaling, every step
        taken) for a recipe without loss scaling, as torch.amp's `enabled=` idiom has it."""
        return torch.amp.GradScaler(
            self.target.autocast_device_type,
            init_scale=LOSS_SCALE_INIT,
            enabled=self.precision.loss_scaling,
        )

    def forward_of(self, model: nn.Module) -> Callable[..., Any]:
        if not self.compiled:
            return model
        # Dynamo's in-process cache holds at most a few entries per code object before it
        # silently runs eager: each compiled run starts from an empty cache.
        torch._dynamo.reset()
        try:
            return self.target.compile(model)
        except Exception as exc:
            raise CompileFailed(f"{self.target.name} compile() raised: {exc}") from exc

    def describe(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "target": self.target.name,
            "device": str(self.target.device),
            "precision": self.precision.name,
            "method": self.precision.method,
            "dtype": str(self.precision.dtype).removeprefix("torch."),
            "autocast": (
                {
                    "device_type": self.target.autocast_device_type,
                    "dtype": str(self.precision.dtype).removeprefix("torch."),
                }
                if self.precision.method == AUTOCAST
                else None
            ),
            "loss_scaling": (
                f"torch.amp.GradScaler (initial scale {LOSS_SCALE_INIT:g}, halved on overflow)"
                if self.precision.loss_scaling
                else None
            ),
            "compiled": self.compiled,
            "compiled_means": self.target.compile_description if self.compiled else None,
        }


_COMPILE_WRAPPER = re.compile(r"(^|\.)_orig_mod(?=\.|$)")


def normalize_name(name: str) -> str:
    """A module or parameter name without torch.compile's `_orig_mod` wrapper level."""
    return _COMPILE_WRAPPER.sub("", name).lstrip(".")


def float_tensors(value: Any) -> list[torch.Tensor]:
    """The floating-point tensors inside a (nested) output, in the order named_float_tensors
    names them (one walk for both, so names and positions always agree)."""
    return [t for _, t in named_float_tensors(value)]


def to_cpu(value: Any) -> Any:
    return tree_map(
        lambda t: t.detach().to("cpu", copy=True) if isinstance(t, torch.Tensor) else t, value
    )


@dataclass
class LayerTensor:
    """One floating-point output tensor of one call of one leaf module."""

    key: str  # normalized module name, "#k" for its k-th call, "[i]" for its i-th output tensor
    call_key: str  # the key without the output index: which call produced it
    index: int  # position among that call's floating-point output tensors
    value: torch.Tensor  # on the CPU


@dataclass
class LayerCall:
    """One call of a leaf module: what the attribution re-run needs."""

    call_key: str
    module_name: str  # the name in its own model (get_submodule reaches it)
    module_type: str  # its class name, for tables and figures ("Linear")
    input_dtypes: list[torch.dtype]  # of the tensors among its inputs, in tree order
    inputs: tuple[tuple[Any, ...], dict[str, Any]] | None = None  # kept for the reference only


@dataclass
class LayerCapture:
    tensors: list[LayerTensor]  # execution order
    calls: dict[str, LayerCall]

    def by_key(self) -> dict[str, LayerTensor]:
        return {t.key: t for t in self.tensors}


def leaf_modules(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    for name, module in model.named_modules():
        if name and next(module.children(), None) is None:
            yield name, module


class LayerRecorder:
    """While entered, hooks on every leaf module of `model` record each call's output tensors
    in execution order, its input dtypes and (with `keep_inputs`) its inputs."""

    def __init__(self, model: nn.Module, *, keep_inputs: bool = False) -> None:
        self.model = model
        self.keep_inputs = keep_inputs
        self.calls: dict[str, LayerCall] = {}
        self.raw: list[tuple[str, list[torch.Tensor]]] = []
        self.counts: Counter[str] = Counter()
        self.handles: list[Any] = []

    def _call_key(self, name: str) -> str:
        count = self.counts[name]
        return normalize_name(name) + (f"#{count}" if count > 1 else "")

    def _before(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            self.counts[name] += 1
            key = self._call_key(name)
            tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            kept = None
            if self.keep_inputs:
                # Cloned before the forward: an in-place leaf (ReLU(inplace=True)) rewrites them.
                kept = tree_map(
                    lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t,
                    (args, kwargs),
                )
            self.calls[key] = LayerCall(
                key, name, type(module).__name__, [t.dtype for t in tensors], kept
            )

        return hook

    def _after(self, name: str) -> Callable[..., None]:
        def hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
        ) -> None:
            # Cloned now: a later in-place op would otherwise change the recorded value.
            clones = [t.detach().clone() for t in float_tensors(output)]
            self.raw.append((self._call_key(name), clones))

        return hook

    def __enter__(self) -> LayerRecorder:
        for name, module in leaf_modules(self.model):
            self.handles.append(
                module.register_forward_pre_hook(self._before(name), with_kwargs=True)
            )
            self.handles.append(module.register_forward_hook(self._after(name), with_kwargs=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def capture(self) -> LayerCapture:
        """What was recorded, moved to the CPU (call after the target has synchronized)."""
        tensors = []
        for key, values in self.raw:
            for index, value in enumerate(values):
                name = key if len(values) == 1 else f"{key}[{index}]"
                tensors.append(LayerTensor(name, key, index, value.to("cpu")))
        for call in self.calls.values():
            if call.inputs is not None:
                call.inputs = to_cpu(call.inputs)
        return LayerCapture(tensors, self.calls)


def capture_layers(model: nn.Module, inputs: Inputs, spec: RunSpec) -> LayerCapture:
    """Every leaf's output from one forward of the placed `model` under no_grad, through the
    run's compiler: the layer pass of a compiled run (see module docs)."""
    with LayerRecorder(model) as recorder:
        forward = spec.forward_of(model)
        with torch.no_grad(), spec.autocast():
            call_model(forward, inputs)
        spec.target.synchronize()
    return recorder.capture()


def rerun_layer(
    model: nn.Module,
    call: LayerCall,
    inputs: tuple[tuple[Any, ...], dict[str, Any]],
    spec: RunSpec,
) -> list[torch.Tensor]:
    """Run the leaf of the placed `model` that made `call` alone on `inputs`, each tensor given
    the dtype the call's own inputs had, under the run's autocast and compiler."""
    module = model.get_submodule(call.module_name)
    position = iter(call.input_dtypes)

    def place(tensor: Any) -> Any:
        if not isinstance(tensor, torch.Tensor):
            return tensor
        dtype = next(position)
        tensor = tensor.to(spec.target.device)
        return tensor.to(dtype) if tensor.is_floating_point() else tensor

    args, kwargs = tree_map(place, inputs)
    forward = spec.forward_of(module)
    with torch.no_grad(), spec.autocast():
        output = forward(*args, **kwargs)
    spec.target.synchronize()
    return [t.detach().to("cpu") for t in float_tensors(output)]


@dataclass
class TrainingCapture:
    outputs: list[torch.Tensor]  # float tensors of step 1's outputs, on the CPU
    loss: torch.Tensor  # step 1's loss, CPU scalar
    gradients: dict[str, torch.Tensor]  # normalized parameter name -> gradient after step 1
    losses: list[float]  # one per optimizer step
    task_metric_initial: float | None  # on step 1's outputs
    task_metric_final: float | None  # on the last step's outputs (weights after N-1 updates)
    predictions: torch.Tensor | None  # arg-max of step 1's outputs over the last dim
    held_out_before: Any = None  # what `evaluate` returned at the initial weights
    held_out_after: Any = None  # and after all N updates
    # Where each of `outputs` sits in the model's output ("logits", "outputs[1]"), same order.
    output_names: list[str] = field(default_factory=list)
    # Steps (1-based) whose update the loss scaler skipped because gradients overflowed.
    skipped_steps: list[int] = field(default_factory=list)


def as_fp32_cpu(outputs: Any) -> Any:
    """A model's outputs on the CPU in fp32: the metric is the judge, not part of the recipe."""
    return tree_map(
        lambda t: t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
        to_cpu(outputs),
    )


def _task_metric(
    metric: Callable[[Any, torch.Tensor], float | None] | None,
    outputs: Any,
    targets: torch.Tensor,
) -> float | None:
    if metric is None:
        return None
    value = metric(as_fp32_cpu(outputs), targets.to("cpu"))
    return None if value is None else float(value)


def _predictions(outputs: Any) -> torch.Tensor | None:
    try:
        outputs = primary_output(outputs)
    except ValueError:
        return None
    if isinstance(outputs, torch.Tensor) and outputs.ndim >= 2 and outputs.shape[-1] > 1:
        return outputs.detach().argmax(dim=-1).to("cpu")
    return None


@dataclass(frozen=True)
class TrainingLoop:
    """What each training step computes and how many there are: the loss of the outputs, the
    optimizer, `steps` updates, the target seeded with `seed` before the first."""

    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]
    make_optimizer: Callable[[nn.Module], torch.optim.Optimizer]
    steps: int
    seed: int = 0

    @classmethod
    def of(cls, workload: Workload, steps: int) -> TrainingLoop:
        """The workload's own loss, optimizer and seed, for `steps` steps."""
        return cls(workload.compute_loss, workload.make_optimizer, steps, workload.seed)


@dataclass
class _FirstStep:
    """What step 1 computed, copied to the CPU."""

    outputs: list[torch.Tensor]
    output_names: list[str]
    loss: torch.Tensor
    task: float | None
    predictions: torch.Tensor | None


def _first_step(
    outputs: Any,
    loss: torch.Tensor,
    targets: torch.Tensor,
    task_metric: Callable[[Any, torch.Tensor], float | None] | None,
) -> _FirstStep:
    named = named_float_tensors(outputs)
    return _FirstStep(
        outputs=[t.detach().to("cpu", copy=True) for _, t in named],
        output_names=[name for name, _ in named],
        loss=loss.detach().to("cpu", copy=True),
        task=_task_metric(task_metric, outputs, targets),
        predictions=_predictions(outputs),
    )


def _cpu_gradients(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        normalize_name(n): p.grad.detach().to("cpu", copy=True)
        for n, p in model.named_parameters()
        if p.grad is not None
    }


def _overflowed(gradients: dict[str, torch.Tensor], scaler: torch.amp.GradScaler) -> bool:
    """A step whose scaled gradients overflowed changes no weight (the scaler skips it), so the
    next step computes the gradients of the same weights on the same batch at half the scale:
    those are the run's first gradients."""
    return scaler.is_enabled() and not all(
        bool(torch.isfinite(g).all()) for g in gradients.values()
    )


def _scaled_step(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> bool:
    """One optimizer update through the loss scaler; True when the scaler skipped it."""
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() < scale


def capture_training(
    model: nn.Module,
    inputs: Inputs,
    targets: torch.Tensor,
    spec: RunSpec,
    loop: TrainingLoop,
    *,
    task_metric: Callable[[Any, torch.Tensor], float | None] | None = None,
    recorder: LayerRecorder | None = None,
    evaluate: Callable[[nn.Module, Callable[..., Any]], Any] | None = None,
    score_initial: bool = True,
) -> TrainingCapture:
    """`loop.steps` training steps of the placed `model` on one fixed batch; see module docs.
    `evaluate(model, forward)` scores held-out data after the last update through the same
    (possibly compiled) forward, and before the first step unless `score_initial` is False."""
    optimizer = loop.make_optimizer(model)
    scaler = spec.grad_scaler()
    forward = spec.forward_of(model)
    held_out_before = evaluate(model, forward) if evaluate and score_initial else None
    spec.target.manual_seed(loop.seed)
    losses: list[torch.Tensor] = []
    first: _FirstStep | None = None
    gradients: dict[str, torch.Tensor] | None = None
    skipped: list[int] = []
    for step in range(loop.steps):
        optimizer.zero_grad(set_to_none=True)
        # Hooks record the first step's forward: in eager mode they change nothing that runs.
        recording = recorder if recorder is not None and step == 0 else contextlib.nullcontext()
        with spec.autocast():
            with recording:
                outputs = call_model(forward, inputs)
            loss = loop.loss_fn(outputs, targets)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)  # gradients at their true size before anything reads them
        if first is None:
            spec.target.synchronize()
            first = _first_step(outputs, loss, targets, task_metric)
        if gradients is None or _overflowed(gradients, scaler):
            gradients = _cpu_gradients(model)
        # The last update is only observed by the held-out score.
        if (step < loop.steps - 1 or evaluate is not None) and _scaled_step(scaler, optimizer):
            skipped.append(step + 1)
        # A lazy-tensor target cuts its graph here: one graph per step, as a training loop runs.
        spec.target.synchronize()
        losses.append(loss.detach())
    assert first is not None and gradients is not None, "a training run takes at least one step"
    return TrainingCapture(
        outputs=first.outputs,
        loss=first.loss,
        gradients=gradients,
        losses=[float(v) for v in losses],
        task_metric_initial=first.task,
        task_metric_final=_task_metric(task_metric, outputs, targets),
        predictions=first.predictions,
        held_out_before=held_out_before,
        held_out_after=evaluate(model, forward) if evaluate else None,
        output_names=first.output_names,
        skipped_steps=skipped,
    )
