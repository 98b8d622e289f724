"""The probes: real training steps on the CPU that activation and optimizer memory are read from.

An hf: config is measured on its scaled-down copy (hf_config.probe_config) at three sizes
(symbols.HF_PROBES: two batch sizes, two sequence lengths); a workload on its own model at two
batch sizes (its sequence length is its own). Each builds its model and warms it up once. A
probe that cannot run (a model too large to train on this host, a forward that fails) leaves
activations unsized, with the reason, and the plan goes on without them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psutil
import torch
from torch import nn

from workbench.errors import describe_error
from workbench.planning import symbols
from workbench.planning.activations import (
    ActivationModel,
    OptimizerProfile,
    ProbeRun,
    fit_model,
    run_probe,
)
from workbench.planning.hf_config import PROBE_LAYERS, HfModel, probe_config
from workbench.planning.shapes import ModelShape, read_shape
from workbench.workload import Workload, seeded

# A probe trains the real model: params, grads and AdamW's two states, 16 bytes per parameter.
TRAINING_BYTES_PER_PARAMETER = 16
# Share of the host's available memory a probe may take.
PROBE_MEMORY_SHARE = 0.25
# The optimizer an hf: config is planned with: the one transformers' Trainer defaults to.
HF_OPTIMIZER = "AdamW"


@contextmanager
def one_thread() -> Iterator[None]:
    """The probes' steps on one intra-op thread: their tensors are small, and on a busy machine
    threads waiting on each other make a probe several times slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _stack_of(model: nn.Module, shape: ModelShape) -> nn.ModuleList | nn.Sequential | None:
    stack = model.get_submodule(shape.stack_path) if shape.stack_path else None
    return stack if isinstance(stack, (nn.ModuleList, nn.Sequential)) else None


def _lm_loss(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor
) -> Callable[[nn.Module], torch.Tensor]:
    def loss_of(m: nn.Module) -> torch.Tensor:
        output = m(input_ids=inputs)
        logits = output.logits if hasattr(output, "logits") else output[0]
        return nn.functional.cross_entropy(logits.flatten(0, -2).float(), targets.flatten())

    return loss_of


def measure_hf(model: HfModel) -> tuple[ActivationModel | None, list[str]]:
    """Activations of an hf: config, from its scaled-down copy."""
    with one_thread():
        return _measure_hf(model)


def _measure_hf(model: HfModel) -> tuple[ActivationModel | None, list[str]]:
    probe = probe_config(model)
    runs: list[ProbeRun] = []
    try:
        # One model and optimizer for every probe: the sizes change only the batch, and the
        # state a step holds is the same at each (building and warming up once per probe was
        # most of `workbench plan`'s time).
        eager = {"experts_implementation": "eager"} if probe.eager_experts else {}
        with seeded(0):
            built = model.auto_class.from_config(probe.config, **eager).float()
        shape = read_shape(built, model.spec, "probe", {})
        optimizer = torch.optim.AdamW(built.parameters(), lr=1e-4)
        stack = _stack_of(built, shape)
        vocab = int(probe.config.vocab_size)
        for index, (batch, seq) in enumerate(symbols.HF_PROBES):
            generator = torch.Generator().manual_seed(batch * seq)
            tokens = torch.randint(vocab, (batch, seq + 1), generator=generator)
            inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
            loss_of = _lm_loss(built, inputs, targets)
            runs.append(run_probe(built, optimizer, loss_of, stack, batch, seq, index == 0))
    except Exception as exc:  # any model transformers builds but this step cannot train
        return None, [
            *probe.unsized,
            f"activations (the scaled-down copy did not train: {describe_error(exc)})",
        ]
    sizes = ", ".join(f"{batch} x {seq}" for batch, seq in symbols.HF_PROBES)
    experts = (
        "; experts run one by one (transformers' eager experts path: grouped_mm needs "
        "16-byte-aligned widths), every token routed to every expert and the experts' tensors "
        f"scaled by top-k / experts = {probe.expert_share:.3g}"
        if probe.eager_experts
        else ""
    )
    fitted = fit_model(
        runs,
        shape,
        probe.atoms,
        probe.full_dims,
        None,
        PROBE_LAYERS,
        HF_OPTIMIZER,
        f"measured on a scaled-down copy ({PROBE_LAYERS} layers, every width a distinct "
        f"prime) at batch x sequence {sizes}, on this machine's CPU{experts}",
        probe.expert_share,
    )
    return fitted, probe.unsized


def measure_workload(
    workload: Workload, shape: ModelShape
) -> tuple[ActivationModel | None, list[str]]:
    """Activations of a workload, measured on its own model."""
    with one_thread():
        return _measure_workload(workload, shape)


def _measure_workload(
    workload: Workload, shape: ModelShape
) -> tuple[ActivationModel | None, list[str]]:
    needed = shape.total * TRAINING_BYTES_PER_PARAMETER
    available = psutil.virtual_memory().available
    if needed > PROBE_MEMORY_SHARE * available:
        return None, [
            f"activations (training the model to measure them needs {needed / 2**30:.1f} GiB, "
            f"more than {PROBE_MEMORY_SHARE:.0%} of this machine's available memory)"
        ]
    runs = []
    name = ""
    try:
        model = workload.build_model("cpu")
        optimizer = workload.make_optimizer(model)
        name = type(optimizer).__name__
        stack = _stack_of(model, shape)
        for index, batch in enumerate(symbols.BATCH_PROBES):
            inputs, targets = workload.batch("cpu", batch)

            def loss_of(
                m: nn.Module, inputs: object = inputs, targets: object = targets
            ) -> torch.Tensor:
                return workload.compute_loss(workload.forward(m, inputs), targets)  # type: ignore[arg-type]

            runs.append(
                run_probe(
                    model, optimizer, loss_of, stack, batch, workload.sequence_length, index == 0
                )
            )
    except Exception as exc:  # the user's model: whatever its forward raises is reported
        return None, [f"activations (the workload's training step failed: {describe_error(exc)})"]
    fitted = fit_model(
        runs,
        shape,
        {},
        {},
        workload.sequence_length,
        shape.layers,
        name,
        f"measured on the workload's own model at batch {symbols.BATCH_PROBES[0]} and "
        f"{symbols.BATCH_PROBES[1]}, on this machine's CPU",
    )
    return fitted, []


def default_optimizer(name: str) -> OptimizerProfile:
    """Where nothing could be measured: AdamW's two states, and step temporaries as large as
    the parameters (torch's foreach AdamW), stated as assumed."""
    return OptimizerProfile(f"{name} (assumed: not measured)", 2.0, 1.0)
