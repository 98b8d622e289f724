"""`script:path/to/train.py`: an unmodified PyTorch training script as a workload.

The script runs in this process, from its own folder, with its own `sys.argv`, under the device
redirection of workbench/targets/redirect.py, and is watched rather than edited: the model is the
module whose parameters the first optimizer holds (its weights copied as that optimizer is
made), a step ends at each `optimizer.step`, the batch is the inputs of the first training
forward whose output the loss reads, the targets and the loss are that loss module or function
(or the loss the model returns), and `backward` gives each step's loss value. The run is
stopped after CAPTURE_STEPS optimizer steps. From what was seen a Workload is built, so that
every notebook measures the script's own model on the script's own batch as it would any
workload.

While it runs, `torch.compile` is recorded and answered with the model itself (the notebooks
compile with the target's compiler; notebook 01, timing the script's own loop, has the call
answered by the target's compiler for real), a DataLoader's worker processes are run
in-process, and a script that starts a process or joins a process group is refused.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import copy
import ctypes
import functools
import inspect
import io
import itertools
import logging
import math
import multiprocessing.process
import os
import pty
import re
import runpy
import shlex
import signal
import statistics
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._pytree import tree_map

from workbench.errors import BadInput, describe_error, is_user_code, one_line, short_path
from workbench.redact import console_line, scrub_text
from workbench.targets.base import Target
from workbench.targets.redirect import DeviceRedirection, patched
from workbench.workloads import SCRIPT_PREFIX
from workbench.workloads.contract import (
    DEFAULT_SEED,
    Batch,
    Inputs,
    Workload,
    accuracy,
    input_tensors,
    primary_output,
    seeded,
)
from workbench.workloads.copies import check_forward_apart, independent_copy
from workbench.workloads.script_loss import LossTerm, add_term, find_loss, own_terms

# Optimizer steps a capture runs: the first gives the model, batch and loss, the rest the
# script's own step times.
CAPTURE_STEPS = 5
# A capture (5 steps, no compile) that runs longer is stopped: a script that sleeps or waits
# on something that never comes must not hang the command (notebooks have their cell timeout).
CAPTURE_TIME_LIMIT_S = 600.0
# A training script larger than this is not a script (a data file named .py, a mistake).
SCRIPT_MAX_BYTES = 16 * 2**20
# The script's printed output kept for the notebook: the first characters of it.
OUTPUT_CHARS = 20_000
# Options through which a script takes its batch size: notebook 04's sweep sets them.
BATCH_SIZE_FLAGS = ("--batch-size", "--batch_size")
# A `--key=value` override of a batch size, as configurator-style scripts take them.
_BATCH_OVERRIDE = re.compile(r"--(?:[\w-]+\.)*batch[_-]size=\d+")

# Loss functions a script may call on its model's output directly.
_FUNCTIONAL_LOSSES = (
    "cross_entropy",
    "nll_loss",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "kl_div",
)


def script_spec(path: str, script_args: str = "", cwd: Path | None = None) -> str:
    """The workload spec of a script: its absolute path (notebooks run in another folder) and
    its arguments, quoted as a shell would."""
    folder = cwd if cwd is not None else Path.cwd()
    try:
        args = shlex.split(script_args)
    except ValueError as exc:
        raise BadInput(f"--script-args {script_args!r} cannot be split: {exc}.") from None
    absolute = os.path.abspath(folder / Path(path).expanduser())
    return SCRIPT_PREFIX + shlex.join([absolute, *args])


def parse_script_spec(spec: str) -> tuple[Path, list[str]]:
    """(script path, its arguments) from `script:PATH ARGS...`."""
    try:
        words = shlex.split(spec.removeprefix(SCRIPT_PREFIX))
    except ValueError as exc:
        raise BadInput(
            f"Workload {spec!r} cannot be split into a path and arguments: {exc}."
        ) from None
    if not words:
        raise BadInput("Workload 'script:' names no script; give script:path/to/train.py.")
    return Path(words[0]), words[1:]


class _Stop(BaseException):
    """Raised from optimizer.step once the capture has its steps. A BaseException, so that a
    script's own `except Exception` does not swallow it."""


class NoOptimizerStep(BadInput):
    """The script ran to its end without an optimizer step on a model."""


class _Refused(BaseException):
    """The script did what the watch cannot follow (it started a process, joined a process
    group, or made a model that cannot be copied independently)."""

    def __init__(self, sentence: str) -> None:
        super().__init__(sentence)
        self.sentence = sentence  # what the script did, where, and what to do instead


# What the run says for each refused call: what the script did, and what to do instead.
_STARTS_A_PROCESS = (
    "it starts a process",
    "the workbook watches one process, so run the script's workers in-process",
)
_JOINS_A_GROUP = (
    "it joins a process group",
    "the workbook runs the script as one process, so run it without torchrun or WORLD_SIZE",
)


@dataclass
class ScriptCapture:
    """What watching the script's run found."""

    path: Path
    args: list[str]
    model: nn.Module | None = None  # the watched model, live
    initial_model: nn.Module | None = None  # its weights as the optimizer was made, on the CPU
    optimizer: torch.optim.Optimizer | None = None
    inputs: Inputs | None = None
    output: Any = None  # the first forward's output, to recognise the loss applied to it
    targets: torch.Tensor | None = None
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor] | None = None
    loss_name: str = ""
    losses: list[float] = field(default_factory=list)
    loss_dtype: torch.dtype | None = None  # of the tensors `backward` was called on
    step_ends: list[float] = field(default_factory=list)
    started: float = 0.0
    compile_calls: list[str] = field(default_factory=list)
    # The options the script gave torch.compile, by site: not passed to the target's compiler.
    compile_options: dict[str, dict[str, str]] = field(default_factory=dict)
    dataloaders: list[str] = field(default_factory=list)
    printed: str = ""
    stopped: bool = False
    loss_from_output: bool = False
    loss_problem: str = ""  # why the loss `backward` received cannot be recomputed, if it cannot
    mixed_inputs: bool = False  # the model was called with positional and keyword inputs
    options: list[str] = field(default_factory=list)  # the option strings its argparse declares
    parsed_batch_size: int | None = None  # `batch_size` of what its argparse parsed
    autocast_dtype: str | None = None  # the autocast the training forward ran under, if any
    own_files: list[str] = field(default_factory=list)  # its own project's modules it imported
    backward_calls: int = 0
    stray_threads: list[str] = field(default_factory=list)  # non-daemon threads it left running
    loader_batch_sizes: list[int] = field(default_factory=list)  # each DataLoader's batch_size

    @property
    def batch_size_flag(self) -> str | None:
        """The option that sets the script's batch size: one its argparse declares, or a
        `--key=value` override among its arguments (`--batch_size=4`, a configurator's
        `--trainer.batch_size=4`)."""
        declared = next((f for f in BATCH_SIZE_FLAGS if f in self.options), None)
        return declared or next(
            (a.split("=")[0] for a in self.args if _BATCH_OVERRIDE.fullmatch(a)), None
        )

    def declared_batch_size(self) -> int | None:
        """The batch size the script says it uses: its parsed option, its override, or its
        first DataLoader's."""
        overrides = [a.split("=")[1] for a in self.args if _BATCH_OVERRIDE.fullmatch(a)]
        for value in (self.parsed_batch_size, *overrides, *self.loader_batch_sizes):
            if isinstance(value, (int, str)) and str(value).isdigit() and int(value) > 0:
                return int(value)
        return None

    @property
    def steps(self) -> int:
        return len(self.step_ends)

    def step_seconds(self) -> list[float]:
        """Each optimizer step's wall time, the first measured from the optimizer's creation."""
        ends = [self.started, *self.step_ends]
        return [b - a for a, b in zip(ends, ends[1:], strict=False)]


def _site() -> str:
    frame = sys._getframe(1)
    while frame is not None:
        if is_user_code(frame.f_code.co_filename) and frame.f_code.co_filename != __file__:
            return f"{short_path(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown>"


def _on_cpu(tree: Any) -> Any:
    return tree_map(lambda t: t.detach().cpu().clone() if isinstance(t, torch.Tensor) else t, tree)


def _how_loss_reads(argument: Any, output: Any) -> str | None:
    """How a loss's first argument comes from the model's output: "as returned", "logits"
    (a container's primary tensor), "cast" (that tensor in another dtype, as `.float()` makes
    it), "reshaped" (that tensor's values regrouped: `logits.view(-1, vocab)`, `.squeeze(-1)`),
    "permuted" (that tensor with its dimensions after the batch reordered: an LM's
    `logits.transpose(1, 2)` for cross-entropy over classes), or None when it is computed some
    other way."""
    if argument is output:
        return "as returned"
    try:
        logits = primary_output(output)
    except ValueError:
        return None
    if argument is logits:
        return "logits"
    if (
        isinstance(argument, torch.Tensor)
        and argument.grad_fn is not None
        and argument.grad_fn.name() == "ToCopyBackward0"
        and argument.grad_fn.next_functions[0][0] is logits.grad_fn
        and argument.shape == logits.shape
    ):
        return "cast"  # logits.float(): the output of a mixed-precision forward, widened
    if _regroups(argument, logits):
        return "reshaped"
    if _permutation(argument, logits) is not None:
        return "permuted"
    return None


def _permutation(view: Any, tensor: torch.Tensor) -> tuple[int, ...] | None:
    """The order of `tensor`'s dimensions that `view` is, with the batch dimension kept first;
    None where `view` is not such a view of it."""
    if not (
        isinstance(view, torch.Tensor)
        and view._base is not None
        and view._base is (tensor._base if tensor._base is not None else tensor)
        and view.data_ptr() == tensor.data_ptr()
        and view.dim() == tensor.dim()
        and 2 < view.dim() <= 5
    ):
        return None
    for order in itertools.permutations(range(1, tensor.dim())):
        moved = tensor.permute(0, *order)
        if moved.shape == view.shape and moved.stride() == view.stride():
            return (0, *order)
    return None


def _regroups(view: Any, tensor: Any) -> bool:
    """Whether `view` holds `tensor`'s values in the same order under another shape: a view of
    the same contiguous memory with as many elements (not a slice, not a transpose)."""
    return (
        isinstance(view, torch.Tensor)
        and isinstance(tensor, torch.Tensor)
        and view._base is not None
        and view._base is (tensor._base if tensor._base is not None else tensor)
        and view.dim() >= 1
        and view.numel() == tensor.numel()
        and view.is_contiguous()
        and tensor.is_contiguous()
        and view.data_ptr() == tensor.data_ptr()
    )


def _held_modules(values: Iterable[Any]) -> Iterator[nn.Module]:
    """The modules among `values` and among the attributes of the script's own objects there
    (a Trainer's `self.model`): a model need not be a variable of its own."""
    for value in values:
        if isinstance(value, nn.Module):
            yield value
        elif _defined_by_the_user(type(value)) and hasattr(value, "__dict__"):
            yield from (held for held in vars(value).values() if isinstance(held, nn.Module))


def _defined_by_the_user(kind: type) -> bool:
    """A class of the script or of a module beside it, not of an installed package."""
    source: str | None = getattr(sys.modules.get(kind.__module__), "__file__", None)
    return source is not None and is_user_code(source) and "-packages" + os.sep not in source


def _owning_module(params: set[int]) -> nn.Module | None:
    """The smallest module, among those the script's frames hold, that owns every parameter
    the optimizer was given: the model."""
    found: list[nn.Module] = []
    frame = sys._getframe(2)
    while frame is not None:
        if is_user_code(frame.f_code.co_filename) and frame.f_code.co_filename != __file__:
            for value in _held_modules([*frame.f_locals.values(), *frame.f_globals.values()]):
                if params <= {id(p) for p in value.parameters()}:
                    found.append(value)
        frame = frame.f_back  # type: ignore[assignment]
    return min(found, key=lambda m: sum(1 for _ in m.parameters()), default=None)


class _Watch:
    """The hooks and patches that watch one run of the script."""

    def __init__(
        self,
        capture: ScriptCapture,
        target: Target,
        steps: int,
        loader_batch: int | None,
        until: Callable[[list[float]], bool] | None = None,
        compile_on_target: bool = False,
    ) -> None:
        self.capture = capture
        self.target = target
        self.steps = steps
        self.compile_on_target = compile_on_target
        self.until = until  # ends the run earlier, judged on the step times so far
        self.loader_batch = loader_batch  # a DataLoader's batch size, where one is asked
        self.pending: Inputs | None = None
        self.pending_mixed = False
        self.terms: list[LossTerm] = []  # the torch losses read from the model's output
        # A GradScaler's scaled loss, by id, with the loss it scaled: `backward` on the scaled
        # one records the script's own loss value.
        self.scaled: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        capture = self.capture
        with contextlib.ExitStack() as stack:
            stack.enter_context(patched(torch.optim.Optimizer, "__init__", self._optimizer_init()))
            stack.enter_context(patched(torch.Tensor, "backward", self._backward()))
            stack.enter_context(
                patched(torch.amp.grad_scaler.GradScaler, "scale", self._scaler_scale())
            )
            stack.enter_context(patched(torch, "compile", self._compile()))
            stack.enter_context(
                patched(argparse._ActionsContainer, "add_argument", self._add_argument())
            )
            stack.enter_context(
                patched(argparse.ArgumentParser, "parse_known_args", self._parse_known_args())
            )
            stack.enter_context(
                patched(torch.utils.data.DataLoader, "__init__", self._dataloader_init())
            )
            for name in _FUNCTIONAL_LOSSES:
                stack.enter_context(
                    patched(
                        nn.functional,
                        name,
                        self._functional_loss(getattr(nn.functional, name), name),
                    )
                )
            for owner, name, why in _process_starters():
                refusal = _refuse(getattr(owner, name), f"{owner.__name__}.{name}", why)
                stack.enter_context(patched(owner, name, refusal))
            stack.enter_context(patched(ctypes.CDLL, "__getattr__", _foreign_refusal()))
            stack.enter_context(patched(ctypes.CDLL, "__getitem__", _foreign_refusal(item=True)))
            # Global hooks only: nothing is left on the script's own objects, so its
            # torch.save, pickle, deepcopy or torch.jit.script of them behaves as without the
            # watch (a hook held by the model would travel with it and fail to pickle).
            for handle in (
                register_optimizer_step_post_hook(self._after_step),
                nn.modules.module.register_module_forward_hook(self._after_loss_module),
                nn.modules.module.register_module_forward_hook(
                    self._after_forward, with_kwargs=True
                ),
            ):
                stack.callback(handle.remove)
            capture.started = time.perf_counter()
            yield

    def _optimizer_init(self) -> Callable[..., None]:
        original = torch.optim.Optimizer.__init__
        capture = self.capture

        def init(optimizer: torch.optim.Optimizer, params: Any, defaults: Any) -> None:
            original(optimizer, params, defaults)
            if capture.optimizer is not None:
                return
            held = {id(p) for group in optimizer.param_groups for p in group["params"]}
            model = _owning_module(held)
            if model is None:
                return
            capture.optimizer = optimizer
            capture.model = model
            try:
                capture.initial_model = independent_copy(model).to("cpu")
            except BadInput as exc:
                raise _Refused(str(exc).rstrip(".")) from None
            capture.started = time.perf_counter()

        return init

    def _after_step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        capture = self.capture
        if optimizer is not capture.optimizer:
            return
        self.target.synchronize()
        capture.step_ends.append(time.perf_counter())
        if capture.steps >= self.steps or (self.until and self.until(capture.step_seconds())):
            capture.stopped = True
            raise _Stop

    def _after_loss_module(self, module: nn.Module, args: tuple[Any, ...], value: Any) -> None:
        if torch.compiler.is_compiling():
            return
        if isinstance(module, nn.modules.loss._Loss):
            self._term_seen(args, lambda: copy.deepcopy(module), type(module).__name__, value)

    def _after_forward(self, module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        # Every module's forward passes here: only the model's is kept. Inside a compile of
        # the model (01 timing the script's own compiled loop) nothing is recorded, and the
        # compiler sees a constant test instead of the watch's state.
        if torch.compiler.is_compiling():
            return
        if module is self.capture.model:
            self._model_called(args, kwargs, output)

    # Each forward that records gradients is held until a loss is seen to read its output:
    # that forward's inputs are the batch (an evaluation pass before training is not).
    @torch.compiler.disable
    def _model_called(self, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        if self.capture.loss_fn is not None or not torch.is_grad_enabled():
            return
        # A batch is positional or keyword inputs (the Workload contract), not both.
        self.pending_mixed = bool(args and kwargs)
        self.pending = _on_cpu(dict(kwargs)) if kwargs and not args else _on_cpu(tuple(args))
        self.capture.output = output
        kind = self.target.device.type
        self.capture.autocast_dtype = (
            str(torch.get_autocast_dtype(kind)).removeprefix("torch.")
            if torch.is_autocast_enabled(kind)
            else None
        )
        self.terms.clear()

    def _loss_found(self) -> None:
        """The held forward is the step's: its inputs are the batch."""
        self.capture.inputs = self.pending
        self.capture.mixed_inputs = self.pending_mixed

    def _term_seen(
        self, args: Any, make_loss: Callable[[], Callable[..., Any]], name: str, value: Any
    ) -> None:
        capture = self.capture
        if capture.loss_fn is not None or capture.output is None or len(args) < 2:
            return
        if not (isinstance(value, torch.Tensor) and value.requires_grad):
            return
        # The loss is recognised only where it reads the model's output as returned, its
        # logits, or those regrouped under another shape (a language model's
        # `logits.view(-1, vocab)` with `targets.view(-1)`, a regression's `.squeeze(-1)`):
        # re-running it on the captured batch then computes what the script computed. A
        # regrouping is kept by its shape after the batch dimension, so it holds at any batch.
        read = _how_loss_reads(args[0], capture.output)
        if read is None:
            return
        loss, target = make_loss(), args[1]
        output_tail = tuple(args[0].shape[1:]) if read == "reshaped" else None
        order = (
            _permutation(args[0], primary_output(capture.output)) if read == "permuted" else None
        )
        target_tail = None
        if read == "reshaped" and _regroups(target, getattr(target, "_base", None)):
            # The targets as the batch holds them, before `.view(-1)`.
            target_tail, target = tuple(target.shape[1:]), target._base

        dtype = args[0].dtype if read == "cast" else None

        def loss_fn(outputs: Any, targets: torch.Tensor) -> torch.Tensor:
            logits = primary_output(outputs) if read != "as returned" else outputs
            if dtype is not None:
                logits = logits.to(dtype)
            if output_tail is not None:
                logits = logits.reshape(-1, *output_tail)
            if order is not None:
                logits = logits.permute(order)
            if target_tail is not None:
                targets = targets.reshape(-1, *target_tail)
            return loss(logits, targets)

        add_term(self.terms, LossTerm(loss_fn, target, value, name))

    def _functional_loss(self, original: Callable[..., Any], name: str) -> Callable[..., Any]:
        def loss(*args: Any, **kwargs: Any) -> Any:
            options = {k: v for k, v in kwargs.items() if k not in ("input", "target")}
            value = original(*args, **kwargs)
            make = functools.partial(functools.partial, original, **options)
            self._term_seen(args, make, f"F.{name}", value)
            return value

        return loss

    def _backward(self) -> Callable[..., Any]:
        original = torch.Tensor.backward
        capture = self.capture

        def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            scaled, loss = self.scaled.pop(id(tensor), (None, tensor))
            if scaled is not tensor:
                loss = tensor
            self.scaled.clear()
            capture.backward_calls += 1
            if capture.optimizer is not None and loss.numel() == 1:
                capture.losses.append(float(loss.detach().float().cpu()))
                capture.loss_dtype = loss.dtype
            if capture.optimizer is not None and capture.loss_fn is None:
                self._loss_backward(loss)
            return original(tensor, *args, **kwargs)

        return backward

    def _scaler_scale(self) -> Callable[..., Any]:
        original = torch.amp.grad_scaler.GradScaler.scale

        def scale(scaler: Any, outputs: Any) -> Any:
            scaled = original(scaler, outputs)
            if isinstance(outputs, torch.Tensor) and isinstance(scaled, torch.Tensor):
                self.scaled[id(scaled)] = (scaled, outputs)
            return scaled

        return scale

    def _loss_backward(self, loss: torch.Tensor) -> None:
        """`backward` on the step's loss: found as constant weights over the torch losses that
        read the model's output (the model's own included), or the reason it is not."""
        capture = self.capture
        if capture.loss_problem:
            return  # judged at the first backward; the batch is that step's
        if capture.output is None:
            capture.loss_problem = "no forward of the model recorded gradients before it"
            return
        found = find_loss(loss, [*own_terms(capture.output), *self.terms], capture.output)
        if isinstance(found, str):
            capture.loss_problem = found
            self._loss_found()  # the batch is still this step's: 01, 02 and 05 measure it
            return
        capture.loss_fn = found.loss_fn()
        capture.loss_name = found.name
        capture.loss_from_output = any(t.from_output for t in found.terms)
        self._loss_found()
        read = [t.target for t in found.terms if t.target is not None]
        if read:
            capture.targets = _on_cpu(read[0])
            return
        # A model computing its own loss reads its targets among its inputs: the batch's
        # targets are its labels, else its last positional input (`model(x, y)`'s y).
        inputs = capture.inputs
        if isinstance(inputs, dict):
            capture.targets = inputs.get("labels")
        elif inputs:
            capture.targets = [t for t in inputs if isinstance(t, torch.Tensor)][-1]

    def _compile(self) -> Callable[..., Any]:
        """The script's torch.compile, recorded, and answered with the model itself (a capture
        needs the script's model, not a compile) or, where the watch compiles on the target,
        with the target's compiler run for real, so the script's first step holds its compile.
        The script's own options are recorded, not passed (the target's compiler takes its
        own); torch's own calls go through unchanged."""
        original = torch.compile
        capture = self.capture
        in_target_compile = False  # the target's compiler calls torch.compile itself

        def answer(fn: Any) -> Any:
            nonlocal in_target_compile
            if not self.compile_on_target:
                return fn
            in_target_compile = True
            try:
                return self.target.compile(fn)
            finally:
                in_target_compile = False

        def compile(model: Any = None, **options: Any) -> Any:
            if in_target_compile or not is_user_code(sys._getframe(1).f_code.co_filename):
                return original(model, **options)
            site = _site()
            capture.compile_calls.append(site)
            if options:
                capture.compile_options[site] = {k: repr(v) for k, v in options.items()}
            if model is None:  # used as @torch.compile(mode=...)
                return answer
            return answer(model)

        return compile

    def _add_argument(self) -> Callable[..., Any]:
        original = argparse._ActionsContainer.add_argument
        capture = self.capture

        def add_argument(parser: Any, *names: Any, **kwargs: Any) -> Any:
            capture.options.extend(n for n in names if isinstance(n, str))
            return original(parser, *names, **kwargs)

        return add_argument

    def _parse_known_args(self) -> Callable[..., Any]:
        original = argparse.ArgumentParser.parse_known_args
        capture = self.capture

        def parse_known_args(parser: Any, *args: Any, **kwargs: Any) -> Any:
            namespace, rest = original(parser, *args, **kwargs)
            size = getattr(namespace, "batch_size", None)
            if isinstance(size, int) and capture.parsed_batch_size is None:
                capture.parsed_batch_size = size
            return namespace, rest

        return parse_known_args

    def _dataloader_init(self) -> Callable[..., None]:
        original = torch.utils.data.DataLoader.__init__
        capture = self.capture

        loader_batch = self.loader_batch

        def init(loader: Any, *args: Any, **kwargs: Any) -> None:
            if loader_batch is not None:
                if len(args) > 1:  # DataLoader(dataset, batch_size, ...)
                    args = (args[0], loader_batch, *args[2:])
                else:
                    kwargs["batch_size"] = loader_batch
            workers = kwargs.get("num_workers", 0)
            pinned = bool(kwargs.get("pin_memory")) and self.target.device.type != "cuda"
            if pinned:
                # Page-locked memory speeds copies to a CUDA device only.
                kwargs["pin_memory"] = False
            if workers:
                # Worker processes would run outside the watch: the loader runs in-process.
                kwargs.update(num_workers=0, persistent_workers=False, prefetch_factor=None)
            original(loader, *args, **kwargs)
            if isinstance(loader.batch_size, int):
                capture.loader_batch_sizes.append(loader.batch_size)
            capture.dataloaders.append(
                f"DataLoader at {_site()}: batch_size {loader.batch_size}"
                + (f", num_workers={workers} run in-process" if workers else "")
                + (
                    ", pin_memory=True not applied (it speeds copies to CUDA only)"
                    if pinned
                    else ""
                )
            )

        return init


# Every way Python starts or replaces a process: the exec family replaces the run itself (a
# green exit with nothing written), the others start children the watch cannot see.
_OS_STARTERS = (
    "fork",
    "forkpty",
    "system",
    "popen",
    "posix_spawn",
    "posix_spawnp",
    *(f"exec{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")),
    *(f"spawn{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")),
)
# C functions a script could reach through ctypes to do the same.
_C_STARTERS = frozenset(
    {"system", "fork", "vfork", "popen", "posix_spawn", "posix_spawnp", "clone", "daemon"}
    | {f"exec{suffix}" for suffix in ("l", "le", "lp", "v", "ve", "vp", "vpe")}
)


def _process_starters() -> list[tuple[Any, str, tuple[str, str]]]:
    starters: list[tuple[Any, str, tuple[str, str]]] = [
        (multiprocessing.process.BaseProcess, "start", _STARTS_A_PROCESS),
        (subprocess.Popen, "__init__", _STARTS_A_PROCESS),
        (pty, "fork", _STARTS_A_PROCESS),
        (pty, "spawn", _STARTS_A_PROCESS),
        (torch.distributed, "init_process_group", _JOINS_A_GROUP),
    ]
    starters += [(os, name, _STARTS_A_PROCESS) for name in _OS_STARTERS if hasattr(os, name)]
    return starters


def _foreign_refusal(item: bool = False) -> Callable[..., Any]:
    """`ctypes.CDLL(...).system` (or `["fork"]`) refused where the script asks for a C function
    that starts a process; any other C function is looked up as usual."""
    original = ctypes.CDLL.__getitem__ if item else ctypes.CDLL.__getattr__

    def lookup(library: Any, name: Any) -> Any:
        if isinstance(name, str) and name in _C_STARTERS and _the_script_asks():
            call = f"ctypes {name}"
            raise _Refused(f"{_STARTS_A_PROCESS[0]} ({call} at {_site()}); {_STARTS_A_PROCESS[1]}")
        return original(library, name)

    return lookup


def _refuse(original: Callable[..., Any], call: str, why: tuple[str, str]) -> Callable[..., Any]:
    """`call` refused where the script makes it; torch's own (Inductor's compiler processes)
    goes ahead."""
    what, instead = why

    def refuse(*args: Any, **kwargs: Any) -> Any:
        if not _the_script_asks():
            return original(*args, **kwargs)
        raise _Refused(f"{what} ({call} at {_site()}); {instead}")

    return refuse


_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep


# torch's compiler, whose own processes (Inductor's C++ builds, its compile workers) go ahead.
_COMPILER = tuple(f"{os.sep}torch{os.sep}{part}{os.sep}" for part in ("_inductor", "_dynamo"))


def _the_script_asks() -> bool:
    """Whether the call being watched comes from the script, directly or through a library
    (torch.multiprocessing.spawn included), rather than from torch's compiler or the workbench:
    a call whose first caller outside the standard library is the compiler is its own; any
    other is the script's where the script's code is among its callers."""
    frame = sys._getframe(2)
    first = True
    while frame is not None:
        source = frame.f_code.co_filename
        library = source.startswith("<frozen") or (
            os.path.realpath(source).startswith(_STDLIB) and "-packages" not in source
        )
        if source != __file__ and not library:
            if first and any(part in source for part in _COMPILER):
                return False
            first = False
            if is_user_code(source):
                return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


@contextlib.contextmanager
def _as_its_own_program(path: Path, args: list[str]) -> Iterator[io.StringIO]:
    """The script's folder as working folder and first import path, its own argv, its
    printed output collected; all restored afterwards."""
    saved = (os.getcwd(), list(sys.argv), list(sys.path))
    # Process-wide torch settings a script may change; the notebook's own code runs after it.
    torch_settings = (
        torch.get_default_dtype(),
        torch.get_float32_matmul_precision(),
        torch.are_deterministic_algorithms_enabled(),
    )
    # logging.basicConfig in the script binds a handler to the stream it sees (the collector
    # here): the root logger is put back afterwards.
    # The script starts with an unconfigured root logger, as in a process of its own.
    root_logging = (list(logging.root.handlers), logging.root.level)
    logging.root.handlers[:] = []
    printed = io.StringIO()
    os.chdir(path.parent)
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.parent))
    try:
        # An empty stdin: a script that asks for input gets EOFError at once rather than
        # waiting on the terminal of `workbench run`.
        with (
            contextlib.redirect_stdout(printed),
            contextlib.redirect_stderr(printed),
            # The interpreter's original streams and raw writes to descriptors 1 and 2 are the
            # script's output too: collected and scrubbed like the rest, never straight to the
            # console of `workbench run`.
            patched(sys, "__stdout__", printed),
            patched(sys, "__stderr__", printed),
            patched(os, "write", _collected_writes(printed)),
            _stdin(io.StringIO()),
        ):
            yield printed
    finally:
        os.chdir(saved[0])
        sys.argv[:] = saved[1]
        sys.path[:] = saved[2]
        logging.root.handlers[:] = root_logging[0]
        logging.root.setLevel(root_logging[1])
        torch.set_default_dtype(torch_settings[0])
        torch.set_float32_matmul_precision(torch_settings[1])
        torch.use_deterministic_algorithms(torch_settings[2])


def _collected_writes(printed: io.StringIO) -> Callable[[int, Any], int]:
    original = os.write

    def write(fd: int, data: Any) -> int:
        if fd in (1, 2) and _the_script_asks():
            printed.write(bytes(data).decode("utf-8", errors="replace"))
            return len(data)
        return original(fd, data)

    return write


@contextlib.contextmanager
def _stdin(stream: io.StringIO) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = stream
    try:
        yield
    finally:
        sys.stdin = saved


def run_script(
    spec: str,
    target: Target,
    steps: int = CAPTURE_STEPS,
    loader_batch: int | None = None,
    *,
    until: Callable[[list[float]], bool] | None = None,
    compile_on_target: bool = False,
    time_limit_s: float | None = CAPTURE_TIME_LIMIT_S,
) -> tuple[ScriptCapture, DeviceRedirection]:
    """Run the script of `spec` on `target`, watched, until `steps` optimizer steps, `until`
    says so from the script's step times so far, or its end; every way it can fail is a
    BadInput saying which step it reached. With `compile_on_target` the script's torch.compile
    runs the target's compiler; without, it is answered with the model."""
    path, args = parse_script_spec(spec)
    # Absolute before the run moves into the script's folder: a relative `sub/train.py` would
    # then be looked for as `sub/sub/train.py`.
    path = Path(os.path.abspath(path))
    check_script_file(spec, path)
    capture = ScriptCapture(path, args)
    memory = target.device_memory()
    redirection = DeviceRedirection(
        target.device, target.synchronize, memory.total_bytes if memory else None
    )
    failure: str | None = None
    watch = _Watch(capture, target, steps, loader_batch, until, compile_on_target)
    imported_before = set(sys.modules)
    threads_before = set(threading.enumerate())
    limit = None if compile_on_target else time_limit_s
    with (
        _time_limit(limit),
        seeded(DEFAULT_SEED),
        _as_its_own_program(path, args) as printed,
        redirection.active(),
        watch.active(),
    ):
        try:
            runpy.run_path(str(path), run_name="__main__")
        except _Stop:
            pass
        except _Refused as exc:
            failure = exc.sentence
        except SystemExit as exc:
            if exc.code not in (None, 0):
                failure = f"it exited with status {exc.code}"
        except Exception as exc:  # the script's own error, shown as it would be
            failure = f"it raised {describe_error(exc)}"
    capture.printed = scrub_text(printed.getvalue())
    capture.stray_threads = sorted(
        t.name for t in set(threading.enumerate()) - threads_before if t.is_alive() and not t.daemon
    )
    own = _own_modules(path, set(sys.modules) - imported_before)
    capture.own_files = sorted(own.values())
    # Forgotten once the run ends, as a process of its own would: another script's
    # `import model` must find its own model.py, not this one's.
    for name in own:
        sys.modules.pop(name, None)
    # Timing the script's own compiled loop (01) needs its steps, not its batch: inside the
    # compiled model the watch records nothing.
    _check_capture(spec, capture, failure, needs_batch=not compile_on_target)
    return capture, redirection


def _own_modules(script: Path, names: set[str]) -> dict[str, str]:
    """The modules the script imported from its own project (its folder and below, not an
    installed package), by name, with their files: what notebook 02 scans beside it."""
    folder = script.resolve().parent
    found = {}
    for name in names:
        source = getattr(sys.modules.get(name), "__file__", None)
        if not source or "-packages" in source:
            continue
        path = Path(source).resolve()
        if path.suffix == ".py" and path.is_relative_to(folder) and path != script.resolve():
            found[name] = str(path)
    return found


@contextlib.contextmanager
def _time_limit(seconds: float | None) -> Iterator[None]:
    """The script stopped with a refusal once `seconds` have passed (a timer signal, so the
    main thread only; elsewhere, and with None, no limit)."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(*_: Any) -> None:
        raise _Refused(f"it ran past the {seconds:g} s a capture may take")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_script_file(spec: str, path: Path) -> None:
    """The script exists, is of a size a script has, is text Python reads, and parses
    (compiled, never run); else one sentence."""
    if not path.is_file():
        raise BadInput(f"Workload {spec!r}: there is no file {str(path)!r}.")
    size = path.stat().st_size
    if size > SCRIPT_MAX_BYTES:
        raise BadInput(
            f"Workload {spec!r}: {path.name} is {size / 2**20:,.0f} MiB; a training script is "
            f"read only up to {SCRIPT_MAX_BYTES // 2**20} MiB."
        )
    source = path.read_bytes()
    if source.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE)):
        raise BadInput(
            f"Workload {spec!r}: {path.name} is encoded as UTF-16 or UTF-32; Python reads "
            "scripts as UTF-8 (save it as UTF-8)."
        )
    try:
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "it"
        raise BadInput(
            f"Workload {spec!r}: {path.name} {where} has a syntax error ({exc.msg})."
        ) from None


def _check_capture(
    spec: str, capture: ScriptCapture, failure: str | None, *, needs_batch: bool = True
) -> None:
    """The one sentence for a run that failed, or that gave no model, batch or loss to re-run;
    nothing for a capture the notebooks can use."""
    reached = (
        f"after {capture.steps} optimizer step(s)"
        if capture.optimizer
        else "before any optimizer was made"
    )
    if failure:
        last = next((line for line in reversed(capture.printed.splitlines()) if line.strip()), "")
        said = f" (its last line: {one_line(last)!r})" if last else ""
        raise BadInput(f"Workload {spec!r}: {failure}, {reached}{said}.")
    if capture.optimizer is None or capture.steps == 0:
        by_hand = (
            f"; it called backward {capture.backward_calls} time(s), so it updates its weights "
            "by hand or through an optimizer the workbook does not see (give it a torch.optim "
            "optimizer, as an option such as --use-optimizer may)"
            if capture.backward_calls
            else ""
        )
        raise NoOptimizerStep(
            f"Workload {spec!r}: the script ended without an optimizer step on a model "
            f"(the workbook finds the model through the torch.optim optimizer that trains "
            f"it){by_hand}."
        )
    if not needs_batch:
        return
    if capture.mixed_inputs:
        raise BadInput(
            f"Workload {spec!r}: the script calls its model with positional and keyword inputs "
            "at once; the workbook feeds a model one or the other."
        )
    if capture.inputs is None:
        why = capture.loss_problem or "no forward of the model recorded gradients"
        raise BadInput(
            f"Workload {spec!r}: the script ran {capture.steps} optimizer step(s), but no "
            f"training batch of its model was seen: {why}."
        )
    if capture.loss_fn is None:
        # The model, its batch and its optimizer are known: the questions that do not train
        # on the loss are answered with a stand-in (workloads.contract: loss_stand_in).
        capture.targets = _stand_in_targets(capture)
        capture.loss_name = "a stand-in (the mean of the model's output)"


def _stand_in_targets(capture: ScriptCapture) -> torch.Tensor:
    """Zeros with the batch along the batch dimension, where the script's own targets are
    unknown: nothing reads them but the batch's size."""
    batch_dim, _ = batch_dimension(capture)
    count = _samples(capture.inputs, batch_dim)
    return torch.zeros((1,) * batch_dim + (count,))


def _stand_in_loss(outputs: Any, _: torch.Tensor) -> torch.Tensor:
    """The mean of the model's output: gradients through every weight the output reads, so a
    training step runs the model's own forward and backward (what 01 and 02 measure)."""
    return primary_output(outputs).float().mean()


def stand_in_attention(reason: str) -> str:
    """What every answered notebook says of a stand-in loss."""
    return (
        f"{reason}: the model's own step is measured with the mean of its output as a "
        "stand-in loss (the loss's own ops are not listed); 03 and 04, which train on the "
        "loss, are not answered"
    )


def load_script_workload(spec: str, target: Target, batch_size: int | None = None) -> Workload:
    """The Workload of a script: its model's first weights, its first batch, its loss and
    its optimizer's class and settings."""
    capture, redirection = run_script(spec, target)
    assert capture.initial_model is not None and capture.inputs is not None
    assert capture.targets is not None and capture.optimizer is not None
    stand_in = (
        ""
        if capture.loss_fn is not None
        else f"the script's loss cannot be recomputed on its batch ({capture.loss_problem})"
    )
    targets = capture.targets
    batch_dim, dim_evidence = batch_dimension(capture)
    captured_size = _samples(capture.inputs, batch_dim)
    initial = capture.initial_model
    optimizer_type = type(capture.optimizer)
    # The optimizer's settings as its constructor takes them (its defaults also hold entries
    # it derives, which the constructor does not accept).
    accepted = inspect.signature(optimizer_type.__init__).parameters
    settings = {k: v for k, v in capture.optimizer.defaults.items() if k in accepted}

    batches = ScriptBatches(spec, target, capture, batch_dim)
    classification = (
        capture.loss_name in ("F.cross_entropy", "CrossEntropyLoss")
        and targets.dim() == 1
        and not targets.is_floating_point()
    )
    # Every notebook compares copies of this model: a copy must train apart from the original.
    originals = [initial] if capture.model is None else [initial, capture.model]
    check_forward_apart(originals, independent_copy(initial), _forward_on(capture.inputs))
    workload = Workload(
        name=f"script-{capture.path.stem}",
        model_factory=lambda: independent_copy(initial),
        batch_maker=batches,
        loss_fn=capture.loss_fn or _stand_in_loss,
        loss_from_output=capture.loss_from_output,
        loss_stand_in=stand_in,
        attentions=[stand_in_attention(stand_in)] if stand_in else [],
        optimizer_factory=lambda params: optimizer_type(params, **settings),
        batch_size=batch_size or captured_size,
        task_metric=accuracy if classification else None,
        task_metric_name="accuracy" if classification else "",
        description="; ".join(
            [describe_capture(capture), *redirection_effects(capture, redirection), dim_evidence]
            + [batches.how]
        ),
        spec=spec,
        batch_dim=batch_dim,
        fixed_batch="" if batches.can_vary else whole_batch_reason(capture.inputs, batch_dim),
    )
    workload.script_run = script_record(capture, redirection)
    show_capture(capture, redirection)
    return workload


class ScriptBatches:
    """The script's batch at any size: its own first batch at its own size; at another, the
    script run again for one step with its batch-size option set (or, without one, with its
    DataLoader's batch size set), so the batch is what the script makes at that size; a script
    with neither has its captured samples repeated in order."""

    def __init__(self, spec: str, target: Target, capture: ScriptCapture, batch_dim: int) -> None:
        assert capture.inputs is not None and capture.targets is not None
        self.spec = spec
        self.target = target
        self.batch_dim = batch_dim
        self.flag = capture.batch_size_flag
        self.through_loader = self.flag is None and bool(capture.dataloaders)
        self.captured_size = _samples(capture.inputs, batch_dim)
        self.made: dict[int, Batch] = {self.captured_size: (capture.inputs, capture.targets)}

    @property
    def can_vary(self) -> bool:
        """Whether batches of other sizes can be made: through the script, or by repeating
        samples of inputs that keep a batch dimension."""
        return bool(self.flag or self.through_loader) or not whole_batch_reason(
            self.made[self.captured_size][0], self.batch_dim
        )

    @property
    def how(self) -> str:
        if self.flag:
            return f"another batch size runs the script with {self.flag}"
        if self.through_loader:
            return "another batch size runs the script with its DataLoader's batch_size set"
        return (
            "the script takes no --batch-size (or --batch_size) and has no DataLoader, so "
            "another batch size repeats its captured samples"
        )

    def __call__(self, size: int, generator: torch.Generator) -> Batch:
        if size not in self.made:
            self.made[size] = self._make(size)
        return _on_cpu(self.made[size])

    def _make(self, size: int) -> Batch:
        if not (self.flag or self.through_loader):
            return _repeated(self.made[self.captured_size], size, self.batch_dim)
        try:
            if self.flag:
                path, args = parse_script_spec(self.spec)
                spec = script_spec(str(path), shlex.join(with_batch_size(args, self.flag, size)))
                how = f"{self.flag} {size}"
                capture, _ = run_script(spec, self.target, steps=1)
            else:
                how = f"its DataLoader's batch_size {size}"
                capture, _ = run_script(self.spec, self.target, steps=1, loader_batch=size)
        except NoOptimizerStep:
            # Its data holds fewer samples than one batch of that size (the word-language
            # example's batchify leaves no row): the samples it has are repeated, said so.
            print(
                f"workbench: with {how} the script takes no optimizer step (its data holds "
                f"fewer samples than that); its captured samples are repeated to {size}",
                file=sys.stderr,
            )
            return _repeated(self.made[self.captured_size], size, self.batch_dim)
        assert capture.inputs is not None and capture.targets is not None
        made = _samples(capture.inputs, self.batch_dim)
        if made < size:
            # Its data holds fewer samples than asked (a small dataset): a batch size is then
            # measured on the samples it has, repeated, and the notebook's output says so.
            print(
                f"workbench: {capture.path.name} with {how} gives a batch of {made}; its "
                f"samples are repeated to {size}",
                file=sys.stderr,
            )
        return _repeated((capture.inputs, capture.targets), size, self.batch_dim)


def _forward_on(inputs: Inputs) -> Callable[[nn.Module], Any]:
    def forward(model: nn.Module) -> Any:
        if isinstance(inputs, dict):
            return model(**inputs)
        return model(*inputs)

    return forward


def _repeated(batch: Batch, size: int, batch_dim: int) -> Batch:
    """`size` samples of `batch` along its batch dimension, its own repeated in order where it
    holds fewer; targets that do not keep that dimension (flattened with the sequence) cannot
    be repeated and are refused."""
    inputs, targets = batch
    count = _samples(inputs, batch_dim)
    if size == count:
        return batch
    rows = torch.arange(size) % count

    def pick(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dim() > batch_dim and t.shape[batch_dim] == count:
            return t.index_select(batch_dim, rows)
        return t

    lead = tuple(input_tensors(inputs)[0].shape[: batch_dim + 1])
    if targets.dim() == 1 and batch_dim and targets.numel() == math.prod(lead):
        # Targets flattened with the sequence (`(seq, batch)` then `.view(-1)`): regrouped,
        # repeated along the batch, flattened again.
        grouped = targets.reshape(lead).index_select(batch_dim, rows)
        return tree_map(pick, inputs), grouped.reshape(-1)
    if not (targets.dim() > batch_dim and targets.shape[batch_dim] == count):
        raise BadInput(
            f"The script's batch of {count} cannot be made {size} by repeating its samples: "
            f"its targets {tuple(targets.shape)} do not keep the batch dimension {batch_dim}; "
            "give the script a batch-size option or data enough for that batch."
        )
    return tree_map(pick, inputs), targets.index_select(batch_dim, rows)


def _samples(inputs: Inputs | None, batch_dim: int) -> int:
    tensors = input_tensors(inputs) if inputs is not None else []
    return int(tensors[0].shape[batch_dim]) if tensors and tensors[0].dim() > batch_dim else 1


def whole_batch_reason(inputs: Inputs, batch_dim: int) -> str:
    """Why the inputs hold one batch that has no size to vary (a graph's features beside its
    N x N adjacency, or inputs that share no batch dimension); empty where they keep one."""
    tensors = input_tensors(inputs)
    if not tensors or tensors[0].dim() <= batch_dim:
        return ""
    count = tensors[0].shape[batch_dim]
    for tensor in tensors:
        shape = tuple(tensor.shape)
        if len(shape) <= batch_dim or shape[batch_dim] != count:
            return (
                f"the script's inputs {[tuple(t.shape) for t in tensors]} share no batch "
                "dimension, so its batch has one size"
            )
        if count > 1 and shape.count(count) > 1:
            return (
                f"the script's input of shape {shape} holds {count} along more than one "
                "dimension (a whole graph with its adjacency), so its batch has one size"
            )
    return ""


def with_batch_size(args: list[str], flag: str, size: int) -> list[str]:
    """The script's arguments with its batch size set to `size`: a `--key=value` override
    replaced in place, an option's value replaced, or the option added."""
    for index, arg in enumerate(args):
        if arg.startswith(flag + "="):
            return [*args[:index], f"{flag}={size}", *args[index + 1 :]]
        if arg == flag and index + 1 < len(args):
            return [*args[: index + 1], str(size), *args[index + 2 :]]
    return [*args, flag, str(size)]


def batch_dimension(capture: ScriptCapture) -> tuple[int, str]:
    """The inputs' batch dimension from evidence: the dimension of the first input whose size
    is the batch size the script declares (its option, override or DataLoader), the leading
    one where several are; with no such evidence, the leading one, and the words say so."""
    declared = capture.declared_batch_size()
    tensors = input_tensors(capture.inputs) if capture.inputs is not None else []
    if declared is None or not tensors:
        return 0, "batch dimension 0 (no declared batch size to check it against)"
    matches = [d for d, n in enumerate(tensors[0].shape) if n == declared]
    if not matches or 0 in matches:
        found = "batch dimension 0" if matches else "batch dimension 0 (unconfirmed)"
        return 0, f"{found}: the script's batch size is {declared}"
    return matches[0], (
        f"batch dimension {matches[0]}: the script's batch size {declared} is that dimension "
        f"of its inputs {tuple(tensors[0].shape)}"
    )


def redirection_effects(capture: ScriptCapture, redirection: DeviceRedirection) -> list[str]:
    """What the redirection's answers changed in how the script trains: its CUDA path taken
    on the target means its bf16 autocast and fused optimizer too."""
    answered = sorted(
        {f"{row['call']} at {row['where']}" for row in redirection.log.rows() if row["mapped"]}
    )
    asked = [a for a in answered if "is_available" in a or "bf16" in a or "capability" in a]
    because = f" (after the redirection answered {'; '.join(asked[:3])})" if asked else ""
    effects = []
    if capture.autocast_dtype:
        effects.append(
            f"the script trained under {capture.autocast_dtype} autocast{because}; the "
            "notebooks measure the captured model at their own precision"
        )
    settings = capture.optimizer.defaults if capture.optimizer is not None else {}
    if settings.get("fused"):
        effects.append(
            f"the script chose a fused {type(capture.optimizer).__name__}{because}; the "
            "workload's optimizer keeps the script's settings"
        )
    return effects


def describe_capture(capture: ScriptCapture) -> str:
    stopped = (
        f"stopped after {capture.steps} optimizer steps"
        if capture.stopped
        else f"ran to its end ({capture.steps} steps)"
    )
    seconds = capture.step_seconds()
    # The script's own clock, read by the watch at each optimizer.step (after the target's
    # synchronize): its first step carries the script's one-time costs, the rest its pace.
    timed = f", its first step {seconds[0]:.3f} s" if seconds else ""
    if len(seconds) > 1:
        timed += f", then a median {statistics.median(seconds[1:]):.3f} s per step"
    return (
        f"script {capture.path.name}: {type(capture.model).__name__} trained by "
        f"{type(capture.optimizer).__name__}, loss {capture.loss_name}; {stopped}{timed}"
    )


def script_record(capture: ScriptCapture, redirection: DeviceRedirection) -> dict[str, Any]:
    """What a result file keeps of the script's run."""
    return {
        "path": short_path(str(capture.path)),
        "args": capture.args,
        "steps_run": capture.steps,
        "stopped_by_workbook": capture.stopped,
        "step_seconds": capture.step_seconds(),
        "losses": capture.losses,
        "loss": capture.loss_name,
        "optimizer": type(capture.optimizer).__name__,
        "compile_called_at": capture.compile_calls,
        "compile_options": capture.compile_options,
        "dataloaders": capture.dataloaders,
        "device_calls": redirection.log.rows(),
        "effects": redirection_effects(capture, redirection),
        # Relative to the script's folder, where notebook 02 finds them again.
        "own_files": [os.path.relpath(f, capture.path.resolve().parent) for f in capture.own_files],
        "printed": capture.printed[:OUTPUT_CHARS],
    }


def show_capture(capture: ScriptCapture, redirection: DeviceRedirection) -> None:
    """The run as the console and the notebook show it: what the script printed, then each
    redirected or unmapped call by its line. On stderr, as a workload's attentions are: the
    command line keeps stdout for the report's path."""
    print(f"--- {capture.path.name} printed ---", file=sys.stderr)
    # Line by line through console_line: the script's terminal escapes never reach the console.
    for line in (capture.printed[:OUTPUT_CHARS].rstrip() or "(nothing)").splitlines():
        print(console_line(line), file=sys.stderr)
    print(f"--- {describe_capture(capture)} ---", file=sys.stderr)
    for row in redirection.log.rows():
        kind = "redirected" if row["mapped"] else "not mapped"
        print(
            f"{kind}: {row['call']} at {row['where']} ({row['times']}x): {row['outcome']}",
            file=sys.stderr,
        )
    for effect in redirection_effects(capture, redirection):
        print(f"effect: {effect}", file=sys.stderr)
    for site in capture.compile_calls:
        options = capture.compile_options.get(site)
        given = f" (its options {options} not passed)" if options else ""
        print(
            f"torch.compile called at {site}: the notebooks compile with the target's "
            f"compiler{given}",
            file=sys.stderr,
        )
    for loader in capture.dataloaders:
        print(loader, file=sys.stderr)
