"""A model ready to serve one batch shape in one mode: the inputs of that shape, the model
compiled for it the way the target compiles, and one inference request as a callable."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch
from torch import nn

from workbench.errors import describe_error
from workbench.serving.records import COMPILED, RequestTime
from workbench.targets.base import Target
from workbench.targets.compiling import CompileFailed
from workbench.workload import Inputs, Workload

# Labels make a Hugging Face model compute a loss: a service never sends them.
_TRAINING_ONLY_INPUTS = ("labels",)


def serving_inputs(inputs: Inputs) -> Inputs:
    """A batch's inputs as a request carries them (no labels)."""
    if isinstance(inputs, Mapping):
        return {k: v for k, v in inputs.items() if k not in _TRAINING_ONLY_INPUTS}
    return inputs


def build_serving_model(workload: Workload, target: Target) -> nn.Module:
    """The workload's seeded model on the target, in eval mode."""
    model = workload.build_model(target.device)
    model.eval()
    return model


@dataclass
class ServedCall:
    """One shape, ready: `request()` serves one request of `batch_size` samples as an inference
    client sees it: the host inputs copied in to the target's device, the model, the outputs
    read back to the host (the target is synchronized between the parts)."""

    batch_size: int
    mode: str
    model_call: Callable[..., Any]  # the model, or its compiled form
    host_inputs: Inputs  # what a request brings: its inputs in host memory
    inputs: Inputs  # one device copy of them, for the host-gap series (gaps.py)
    workload: Workload
    target: Target

    def _infer(self, inputs: Inputs) -> Any:
        # no_grad rather than inference_mode: Dynamo guards on the mode, and notebook 01's
        # compiled inference runs under no_grad too.
        with torch.no_grad():
            output = self.workload.forward(self.model_call, inputs)
        # The output stays referenced until the device finished: a lazy target drops the work
        # of a tensor nobody holds.
        self.target.synchronize()
        return output

    def call(self) -> Any:
        """One request, untimed: its outputs in host memory."""
        return self.target.to_host(self._infer(self.target.to_device(self.host_inputs)))

    def request(self) -> RequestTime:
        """One request, timed in its parts (perf_analyzer's compute input, infer, output)."""
        start = perf_counter()
        inputs = self.target.to_device(self.host_inputs)
        copied = perf_counter()
        output = self._infer(inputs)
        inferred = perf_counter()
        on_host = self.target.to_host(output)
        done = perf_counter()
        del output, on_host
        return RequestTime(copied - start, inferred - copied, done - inferred)

    def timed(self) -> float:
        """One request, its latency in seconds."""
        return self.request().total


class ShapeFailed(RuntimeError):
    """A shape the target could not prepare (compile() raised): one sentence, as `str()`."""


def prepare_call(
    workload: Workload, target: Target, model: nn.Module, batch_size: int, mode: str
) -> ServedCall:
    """`model` served at `batch_size` in `mode`. Compiled mode resets Dynamo's in-process caches
    first, so this shape gets its own compile, as a static-shape target (Neuron) compiles one
    graph per shape."""
    host_inputs = serving_inputs(workload.batch(batch_size=batch_size)[0])
    model_call: Callable[..., Any] = model
    if mode == COMPILED:
        try:
            model_call = target.compile_fresh(model)
        except CompileFailed as exc:
            cause = exc.__cause__ or exc
            raise ShapeFailed(describe_error(cause).text.splitlines()[0]) from cause
    device_inputs = target.to_device(host_inputs)
    return ServedCall(batch_size, mode, model_call, host_inputs, device_inputs, workload, target)
