"""Sharded runs that check the planner: FSDP2, DTensor tensor parallelism and ZeRO-1 for real,
on gloo, on a tiny Llama-architecture model, at each world size.

One torchrun launch per world size runs every layout in turn (one process group, so the ranks
start once). Each layout trains two steps from the same seed, batch and optimizer as one
process does alone, then MEASURED_STEPS more; each rank measures the memory of every step after
the first (tracking.py: the bytes its parameters, gradients and optimizer state hold, plus the
peak of torch's CPU allocations during the step) and writes its losses, and rank 0 the full
gradients and parameter updates of the first step. The parent runs the single process and
compares rank by rank, as AWS's distributed-training tutorial for Neuron does, and puts the
planner's prediction for each rank beside the measurement.

Why the lowest of several steps: on gloo a collective's buffers are released when gloo's worker
thread drops them, so a step's measured peak holds zero to two extra layer-sized buffers
depending on thread timing (FSDP2 at 4 ranks: 9,019,996 bytes on most steps, 9,758,300 or
10,496,604 on some, on the same rank in the same run). The layout needs the lowest; the highest
is reported beside it.

A planted wrong sharding runs too: TP whose row-parallel layers skip their all-reduce (each
rank keeps its partial sums), a wrong split that runs without an error and must fail the check.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.planning.activations import ActivationModel
from workbench.planning.hf_config import HfModel, read_sizes
from workbench.planning.layouts import (
    FSDP,
    GLOO_LAYERS_IN_FLIGHT,
    NONE,
    PRECISIONS,
    ZERO1,
    Layout,
    rank_memory,
)
from workbench.planning.probe import measure_hf
from workbench.planning.shapes import ModelShape, read_shape
from workbench.planning.tracking import BACKWARD, FORWARD, STEP, phase, tracked_step
from workbench.processes import read_tail, torchrun

FSDP2 = "fsdp2"
TP = "tp"
ZERO = "zero1"
WRONG_TP = "tp-without-all-reduce"
LAYOUT_KINDS = (FSDP2, TP, ZERO, WRONG_TP)
# The check's tolerances: fp32 on one CPU, so a correct sharding differs only by the order of
# its sums; the planted error is orders of magnitude larger.
LOSS_RTOL = 1e-5
GRADIENT_RTOL = 1e-4
# Adam divides by the root of the squared-gradient average: a near-zero gradient's order-of-sum
# difference moves its update more, so updates get a looser bound (a wrong sharding is off by
# order 1).
UPDATE_RTOL = 1e-3
MEMORY_AIM = 0.20  # prediction within 20 % of the measured peak, per rank
MEASURED_STEPS = 3  # steady steps measured per rank; the check takes the lowest peak
SEED = 0
BATCH = 8  # global batch of the check
SEQ = 64
TINY_LLAMA: dict[str, Any] = {
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "intermediate_size": 352,
    "vocab_size": 1024,
    "max_position_embeddings": 128,
}


def tiny_config() -> Any:
    import transformers

    return transformers.LlamaConfig(**TINY_LLAMA, use_cache=False)


def tiny_model() -> nn.Module:
    import transformers

    torch.manual_seed(SEED)
    return transformers.LlamaForCausalLM(tiny_config())


def tiny_batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(SEED)
    tokens = torch.randint(TINY_LLAMA["vocab_size"], (BATCH, SEQ + 1), generator=generator)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def _loss(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=inputs).logits
    return nn.functional.cross_entropy(logits.flatten(0, -2).float(), targets.flatten())


def _optimizer(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-2)


def layout_of(kind: str, world: int) -> Layout:
    if kind in (TP, WRONG_TP):
        return Layout(world, 1, 1, NONE, False)
    return Layout(1, 1, world, FSDP if kind == FSDP2 else ZERO1, False)


def _tp_plan(model: nn.Module, wrong: bool) -> dict[str, Any]:
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    row = RowwiseParallel(output_layouts=Partial()) if wrong else RowwiseParallel()
    plan: dict[str, Any] = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
        "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
    }
    for i in range(TINY_LLAMA["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            plan[p + name] = ColwiseParallel()
        plan[p + "mlp.gate_proj"] = ColwiseParallel()
        plan[p + "mlp.up_proj"] = ColwiseParallel()
        plan[p + "self_attn.o_proj"] = row
        plan[p + "mlp.down_proj"] = row
    return plan


def _grad(parameter: torch.Tensor) -> torch.Tensor:
    assert parameter.grad is not None, "every parameter takes part in the loss"
    return parameter.grad


def _full(tensor: torch.Tensor) -> torch.Tensor:
    full_tensor = getattr(tensor, "full_tensor", None)
    return (full_tensor() if callable(full_tensor) else tensor).detach().clone()


@dataclass
class RankReport:
    kind: str
    world: int
    rank: int
    losses: list[float]
    held: dict[str, int]
    phase_peaks: dict[str, int]  # of the step with the lowest peak
    peak: int  # the lowest of step_peaks
    step_peaks: list[int]


def _laid_out(
    kind: str, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, rank: int, world: int
) -> tuple[torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    """`model` laid out as `kind` on this rank (in place), its optimizer, and the batch this
    rank steps on: the whole batch under TP, its share of the rows under FSDP2 and ZeRO-1."""
    if kind in (TP, WRONG_TP):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import parallelize_module

        mesh = init_device_mesh("cpu", (world,))
        parallelize_module(model, mesh, _tp_plan(model, kind == WRONG_TP))
        return _optimizer(model.parameters()), inputs, targets
    share = BATCH // world
    rows = slice(rank * share, (rank + 1) * share)
    if kind == FSDP2:
        from torch.distributed.fsdp import fully_shard

        layers = model.get_submodule("model.layers")
        assert isinstance(layers, nn.ModuleList)
        for layer in layers:
            fully_shard(layer)
        fully_shard(model)
        return _optimizer(model.parameters()), inputs[rows], targets[rows]
    from torch.distributed.optim import ZeroRedundancyOptimizer

    zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-2)
    return zero, inputs[rows], targets[rows]


def _run_layout(kind: str, out: Path) -> None:
    """One layout on every rank of the group: two steps, memory of the second."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    model = tiny_model()
    inputs, targets = tiny_batch()
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer, inputs, targets = _laid_out(kind, model, inputs, targets, rank, world)

    def global_loss(loss: torch.Tensor) -> float:
        value = _full(loss).reshape(()).clone()
        if kind in (FSDP2, ZERO):
            dist.all_reduce(value)
            value /= world
        return float(value)

    losses = []
    optimizer.zero_grad(set_to_none=False)
    loss = _loss_only(model, inputs, targets, kind)
    _backward(loss, kind, model, world)
    losses.append(global_loss(loss))
    step_grads = {n: _full(_grad(p)) for n, p in model.named_parameters()}
    optimizer.step()
    updates = {n: _full(p) - start[n] for n, p in model.named_parameters()}
    steps = []
    for _ in range(MEASURED_STEPS):
        optimizer.zero_grad(set_to_none=False)
        with tracked_step(model, optimizer) as memory:
            with phase(FORWARD):
                loss = _loss_only(model, inputs, targets, kind)
            with phase(BACKWARD):
                _backward(loss, kind, model, world)
            losses.append(global_loss(loss))
            del loss
            with phase(STEP):
                optimizer.step()
        steps.append(memory)
    lowest = min(steps, key=lambda m: m.peak)
    report = RankReport(
        kind,
        world,
        rank,
        losses[:2],  # the single process reproduces the first two steps
        asdict(lowest.held),
        lowest.phase_peaks,
        lowest.peak,
        [m.peak for m in steps],
    )
    Path(out, f"{kind}-rank{rank}.json").write_text(json.dumps(asdict(report)))
    if rank == 0:
        torch.save({"grads": step_grads, "updates": updates}, Path(out, f"{kind}-tensors.pt"))
    dist.barrier()


def _loss_only(
    model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, kind: str
) -> torch.Tensor:
    if kind in (TP, WRONG_TP):
        from torch.distributed.tensor.parallel import loss_parallel

        with loss_parallel():
            return _loss(model, inputs, targets)
    return _loss(model, inputs, targets)


def _backward(loss: torch.Tensor, kind: str, model: nn.Module, world: int) -> None:
    import torch.distributed as dist

    if kind in (TP, WRONG_TP):
        from torch.distributed.tensor.parallel import loss_parallel

        with loss_parallel():
            loss.backward()
        return
    loss.backward()
    if kind == ZERO:
        for p in model.parameters():
            grad = _grad(p)
            dist.all_reduce(grad)
            grad /= world


def rank_main(out: str, kinds: list[str]) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        for kind in kinds:
            _run_layout(kind, Path(out))
    finally:
        dist.destroy_process_group()


@dataclass
class RankCheck:
    rank: int
    measured_peak: int  # the lowest of its measured steps' peaks
    predicted_peak: float
    highest_peak: int = 0  # the highest: the spread gloo's release timing adds

    @property
    def ratio(self) -> float:
        return self.predicted_peak / max(self.measured_peak, 1)

    @property
    def within_aim(self) -> bool:
        return abs(self.ratio - 1) <= MEMORY_AIM


@dataclass
class LayoutCheck:
    kind: str
    world: int
    layout: str
    loss_error: float  # largest relative difference of the two steps' losses
    gradient_error: float  # largest relative norm of a gradient's difference (first step)
    update_error: float  # likewise for a parameter's update
    worst_tensor: str
    ranks: list[RankCheck] = field(default_factory=list)
    failure: str = ""

    @property
    def numerics_pass(self) -> bool:
        return (
            not self.failure
            and self.loss_error <= LOSS_RTOL
            and self.gradient_error <= GRADIENT_RTOL
            and self.update_error <= UPDATE_RTOL
        )

    @property
    def memory_within_aim(self) -> bool:
        return bool(self.ranks) and all(r.within_aim for r in self.ranks)


@dataclass
class CheckRuns:
    checks: list[LayoutCheck]
    method: str
    tolerance: str
    logs: dict[int, str] = field(default_factory=dict)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / max(float(b.norm()), 1e-12))


@dataclass
class Reference:
    losses: list[float]
    grads: dict[str, torch.Tensor]
    updates: dict[str, torch.Tensor]


def single_process_reference() -> Reference:
    """The same two steps in one process: what every sharded run must reproduce."""
    model = tiny_model()
    optimizer = _optimizer(model.parameters())
    inputs, targets = tiny_batch()
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    losses = []
    loss = _loss(model, inputs, targets)
    loss.backward()
    losses.append(float(loss.detach()))
    grads = {n: _grad(p).detach().clone() for n, p in model.named_parameters()}
    optimizer.step()
    updates = {n: p.detach() - start[n] for n, p in model.named_parameters()}
    optimizer.zero_grad(set_to_none=False)
    loss = _loss(model, inputs, targets)
    loss.backward()
    losses.append(float(loss.detach()))
    return Reference(losses, grads, updates)


def tiny_shape() -> tuple[ModelShape, ActivationModel | None]:
    """The tiny model as the planner sees it: the same path as any hf: config."""
    import transformers

    config = tiny_config()
    model = HfModel("tiny Llama", config, transformers.AutoModelForCausalLM, read_sizes(config))
    shape = read_shape(model.build_meta(), model.spec, "tiny Llama config", model.sizes)
    activations, _ = measure_hf(model)
    return shape, activations


def zero1_shares(shape: ModelShape, world: int) -> list[float]:
    """Each rank's share of the parameters under ZeroRedundancyOptimizer's partition: largest
    tensor first, each to the rank holding the least so far."""
    totals = [0] * world
    for numel in sorted((p.numel for p in shape.parameters), reverse=True):
        totals[totals.index(min(totals))] += numel
    return [t / shape.total for t in totals]


def predict_ranks(
    shape: ModelShape, activations: ActivationModel | None, kind: str, world: int
) -> list[float]:
    """The planner's peak for each rank of one check run."""
    layout = layout_of(kind, world)
    micro = BATCH if kind in (TP, WRONG_TP) else BATCH // world
    memory = rank_memory(
        shape, activations, layout, PRECISIONS["fp32"], micro, SEQ, True, GLOO_LAYERS_IN_FLIGHT
    )
    if kind != ZERO:
        return [memory.peak] * world
    peaks = []
    for share in zero1_shares(shape, world):
        scale = share * world  # the even split rank_memory assumes, corrected to this rank's
        held = memory.parameters + memory.gradients + memory.optimizer * scale
        peaks.append(held + max(memory.activations, memory.step_temporaries * scale))
    return peaks


def _launch(world: int, kinds: list[str], folder: Path, timeout_s: float) -> tuple[int | None, str]:
    log_path = folder / f"torchrun-{world}.log"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    args = ["-m", "workbench.planning.sharded", str(folder), ",".join(kinds)]
    code = torchrun(args, world, env, log_path, timeout_s)
    return code, read_tail(log_path)


def run_checks(
    world_sizes: tuple[int, ...] = (2, 4),
    kinds: tuple[str, ...] = LAYOUT_KINDS,
    timeout_s: float = 240.0,
) -> CheckRuns:
    """Every layout at every world size, judged against one process and the planner."""
    reference = single_process_reference()
    shape, activations = tiny_shape()
    checks: list[LayoutCheck] = []
    logs: dict[int, str] = {}
    with tempfile.TemporaryDirectory(prefix="workbench-plan-check-") as name:
        folder = Path(name)
        for world in world_sizes:
            run_kinds = [k for k in kinds if k != WRONG_TP or world == min(world_sizes)]
            code, tail = _launch(world, run_kinds, folder, timeout_s)
            logs[world] = tail
            predicted = {k: predict_ranks(shape, activations, k, world) for k in run_kinds}
            for kind in run_kinds:
                checks.append(_judge(kind, world, folder, reference, predicted[kind], code, tail))
            for path in folder.glob("*-rank*.json"):
                path.unlink()
    return CheckRuns(
        checks,
        method="per rank: storage bytes of its parameters, gradients and optimizer state at the "
        "step's start (a DTensor by its local shard), plus the peak of torch's CPU allocator "
        f"during the step (profiler memory events); the lowest of {MEASURED_STEPS} steps "
        "(gloo's release timing adds up to two layer-sized buffers to some steps)",
        tolerance=f"losses within {LOSS_RTOL:g} relative; every gradient within "
        f"{GRADIENT_RTOL:g} and every parameter update within {UPDATE_RTOL:g} relative norm of "
        "the single process's",
        logs=logs,
    )


def _judge(
    kind: str,
    world: int,
    folder: Path,
    reference: Reference,
    predicted: list[float],
    code: int | None,
    tail: str,
) -> LayoutCheck:
    name = layout_of(kind, world).name
    reports = [folder / f"{kind}-rank{r}.json" for r in range(world)]
    tensors = folder / f"{kind}-tensors.pt"
    if not tensors.exists() or not all(p.exists() for p in reports):
        why = "timed out" if code is None else f"exited with code {code}"
        return LayoutCheck(
            kind, world, name, 1.0, 1.0, 1.0, "", failure=f"torchrun {why}: {tail[-300:]}"
        )
    ranks = [RankReport(**json.loads(p.read_text())) for p in reports]
    saved = torch.load(tensors)
    loss_error = max(
        abs(a - b) / abs(b) for r in ranks for a, b in zip(r.losses, reference.losses, strict=True)
    )
    gradient = {n: _relative(saved["grads"][n], g) for n, g in reference.grads.items()}
    update = {n: _relative(saved["updates"][n], u) for n, u in reference.updates.items()}
    worst = max({**gradient, **update}.items(), key=lambda item: item[1])[0]
    return LayoutCheck(
        kind,
        world,
        name,
        loss_error,
        max(gradient.values()),
        max(update.values()),
        worst,
        [RankCheck(r.rank, r.peak, predicted[r.rank], max(r.step_peaks)) for r in ranks],
    )


def _main(argv: list[str]) -> int:
    import workbench.execution.fast_exit  # noqa: F401 - a rank that loaded torch ends without a pause

    if len(argv) != 2:
        print("usage: python -m torch.distributed.run ... -m workbench.planning.sharded DIR KINDS")
        return 2
    rank_main(argv[0], argv[1].split(","))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
