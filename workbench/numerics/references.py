"""The reference side of notebook 03: fp32 eager on the CPU, run twice with the same seed (two
runs that differ are reported, and every verdict is judged against their spread), and an fp64
run of the same weights and batch as the error yardstick. Every run starts from the same
initial weights (the state dict is copied), the same fixed batch and the same seed."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_map

from workbench.errors import WorkbenchError, describe_error
from workbench.numerics.capture import (
    FP32,
    FP64,
    LayerCall,
    LayerCapture,
    LayerRecorder,
    ModelBuilder,
    RunSpec,
    TrainingCapture,
    TrainingLoop,
    capture_training,
    float_tensors,
    rerun_layer,
)
from workbench.numerics.metrics import TrajectorySensitivity, trajectory_sensitivity
from workbench.numerics.records import (
    Reproducibility,
)
from workbench.numerics.validation import HeldOutBatches, HeldOutScore, evaluator, held_out_batches
from workbench.targets.base import Target
from workbench.workload import Batch, Workload, disable_dropout

Spread = dict[tuple[str, str], float]  # (kind, name) -> RMSE between the two reference runs


NO_LAYERS = LayerCapture([], {})  # what a reference run that recorded no layer compares


@dataclass
class ReferenceRuns:
    spec: RunSpec
    layers: LayerCapture
    training: TrainingCapture
    fp64_spec: RunSpec
    fp64_layers: LayerCapture | None
    fp64_training: TrainingCapture | None
    fp64_error: str | None
    dropout_disabled: list[str]
    build: ModelBuilder
    held_out: HeldOutBatches
    reproducibility: Reproducibility
    spread: Spread  # empty when the two reference runs agree exactly
    trajectory_spread: float  # largest relative loss difference of the two runs (and held out)
    metric_spread: float  # their held-out task metric difference
    # The reference trained again from weights and inputs one ulp away: how far it moves a
    # difference of the size reordering makes.
    sensitivity: TrajectorySensitivity | None = None
    _fp64_model: torch.nn.Module | None = field(default=None, repr=False)
    # Re-runs shared by every run: fp64 on the reference's inputs, and rounding alone per dtype.
    _fp64_outputs: dict[str, list[torch.Tensor]] = field(default_factory=dict, repr=False)
    _rounded: dict[tuple[Any, ...], list[torch.Tensor]] = field(default_factory=dict, repr=False)

    def fp64_model(self) -> torch.nn.Module:
        """The fp64 model at the initial weights, for layer re-runs: built when first needed."""
        if self._fp64_model is None:
            self._fp64_model, _ = prepared_model(self.build, self.fp64_spec)
        return self._fp64_model

    def fp64_on_reference_inputs(self, call_key: str) -> list[torch.Tensor]:
        """The fp64 layer fed the reference's inputs: what every run's re-run is measured by."""
        if call_key not in self._fp64_outputs:
            assert self.fp64_layers is not None
            inputs = self.layers.calls[call_key].inputs
            assert inputs is not None  # the reference keeps every layer's inputs
            self._fp64_outputs[call_key] = rerun_layer(
                self.fp64_model(), self.fp64_layers.calls[call_key], inputs, self.fp64_spec
            )
        return self._fp64_outputs[call_key]

    def rounded(
        self, call: LayerCall, weight_dtype: torch.dtype, output_dtypes: tuple[torch.dtype, ...]
    ) -> list[torch.Tensor]:
        """The exact (fp64) layer on the reference's inputs rounded to the dtypes `call` got,
        weights rounded to `weight_dtype`, outputs rounded to `output_dtypes`: what a perfect
        kernel at the run's precision gives."""
        key = (call.call_key, tuple(call.input_dtypes), weight_dtype, output_dtypes)
        if key not in self._rounded:
            assert self.fp64_layers is not None
            inputs = self.layers.calls[call.call_key].inputs
            assert inputs is not None
            fp64_call = self.fp64_layers.calls[call.call_key]
            module = copy.deepcopy(self.fp64_model().get_submodule(fp64_call.module_name))
            with torch.no_grad():
                for parameter in module.parameters():
                    parameter.copy_(parameter.to(weight_dtype).to(torch.float64))
            position = iter(call.input_dtypes)

            def round_input(tensor: Any) -> Any:
                if not isinstance(tensor, torch.Tensor):
                    return tensor
                dtype = next(position)
                if not tensor.is_floating_point():
                    return tensor
                return tensor.to(dtype).to(torch.float64)

            args, kwargs = tree_map(round_input, inputs)
            with torch.no_grad():
                outputs = float_tensors(module(*args, **kwargs))
            self._rounded[key] = [
                t.to(dtype) for t, dtype in zip(outputs, output_dtypes, strict=False)
            ]
        return self._rounded[key]


NUDGE_SEED = 20261206  # which way each weight moves: fixed, so a run is repeatable


def _nudged(tensor: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """`tensor` with every element one unit in the last place up or down, at random."""
    up = torch.rand(tensor.shape, generator=generator) < 0.5
    toward = torch.where(up.to(tensor.device), math.inf, -math.inf).to(tensor.dtype)
    return torch.nextafter(tensor, toward)


def nudge_weights(model: torch.nn.Module, seed: int = NUDGE_SEED) -> None:
    """Move every floating-point parameter of `model` by one unit in the last place, up or down
    at random: the size of difference a reordered floating-point sum makes."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.is_floating_point():
                parameter.copy_(_nudged(parameter, generator))


def nudge_inputs(batch: Batch, seed: int = NUDGE_SEED) -> Batch:
    """The batch with every floating-point model input moved by one unit in the last place (a
    reordered sum in the layer before a normalization moves its input that far); token ids,
    masks and targets stay as they are."""
    generator = torch.Generator().manual_seed(seed + 1)

    def nudge(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return _nudged(value, generator)
        return value

    inputs, targets = batch
    return tree_map(nudge, inputs), targets


@dataclass(frozen=True)
class _Recipe:
    """What every reference run shares: the builder of the same initial weights, the fixed
    batch, the workload that trains on it and the number of steps."""

    build: ModelBuilder
    batch: Batch
    workload: Workload
    steps: int


def _sensitivity(
    recipe: _Recipe, spec: RunSpec, held_out: HeldOutBatches, reference: TrainingCapture
) -> TrajectorySensitivity:
    """The reference run again from its initial weights and floating-point inputs nudged by one
    ulp (nudge_weights, nudge_inputs): its trajectory and its first gradients against the
    reference's."""
    model, _ = prepared_model(recipe.build, spec)
    nudge_weights(model)
    nudged_batch = nudge_inputs(recipe.batch)
    nudged = train_run(
        model,
        spec,
        nudged_batch,
        recipe.workload,
        recipe.steps,
        None,
        held_out,
        score_initial=False,
    )
    scores = (nudged.held_out_after, reference.held_out_after)
    held = None
    if all(isinstance(h, HeldOutScore) for h in scores):
        held = (scores[0].loss, scores[1].loss)
    gradients = (nudged.gradients, reference.gradients)
    return trajectory_sensitivity(reference.losses, nudged.losses, held, gradients)


def prepared_model(build: ModelBuilder, spec: RunSpec) -> tuple[torch.nn.Module, list[str]]:
    model = build()
    model.train()
    disabled = disable_dropout(model)
    return spec.place_model(model), disabled


def train_run(
    model: torch.nn.Module,
    spec: RunSpec,
    batch: Batch,
    workload: Workload,
    steps: int,
    recorder: LayerRecorder | None,
    held_out: HeldOutBatches | None,
    *,
    score_initial: bool = True,
) -> TrainingCapture:
    inputs, targets = spec.place_batch(batch)
    return capture_training(
        model,
        inputs,
        targets,
        spec,
        TrainingLoop.of(workload, steps),
        task_metric=workload.score if workload.task_metric else None,
        recorder=recorder,
        evaluate=evaluator(held_out, spec, workload) if held_out else None,
        score_initial=score_initial,
    )


def _capture_run(
    recipe: _Recipe, spec: RunSpec, held_out: HeldOutBatches | None, *, keep_inputs: bool
) -> tuple[LayerCapture, TrainingCapture, list[str]]:
    """An eager run whose first training step also records every layer."""
    model, dropout = prepared_model(recipe.build, spec)
    layers, training = recorded_run(
        model, spec, recipe.batch, recipe.workload, recipe.steps, held_out, keep_inputs=keep_inputs
    )
    return layers, training, dropout


def recorded_run(
    model: torch.nn.Module,
    spec: RunSpec,
    batch: Batch,
    workload: Workload,
    steps: int,
    held_out: HeldOutBatches | None,
    *,
    keep_inputs: bool = False,
) -> tuple[LayerCapture, TrainingCapture]:
    """The placed eager `model` trained (train_run), every layer recorded in its first step
    (with its inputs where `keep_inputs`)."""
    recorder = LayerRecorder(model, keep_inputs=keep_inputs)
    training = train_run(model, spec, batch, workload, steps, recorder, held_out)
    return recorder.capture(), training


def output_names(training: TrainingCapture) -> list[str]:
    """The names of a run's output tensors ("logits", "loss", "outputs[1]"): compared by name."""
    count = len(training.outputs)
    if len(training.output_names) == count:
        return training.output_names
    return ["outputs"] if count == 1 else [f"outputs[{i}]" for i in range(count)]


def _named_tensors(layers: LayerCapture, training: TrainingCapture) -> dict[tuple[str, str], Any]:
    named: dict[tuple[str, str], Any] = {("layer", t.key): t.value for t in layers.tensors}
    outputs = zip(output_names(training), training.outputs, strict=True)
    named |= {("output", n): t for n, t in outputs}
    named[("loss", "loss")] = training.loss
    named |= {("gradient", n): t for n, t in training.gradients.items()}
    named[("trajectory", "losses")] = torch.tensor(training.losses, dtype=torch.float64)
    return named


def relative_gap(run: list[float], reference: list[float]) -> tuple[float, int | None]:
    """Largest |run - reference| / |reference| over the steps, and the (1-based) step."""
    worst, at = 0.0, None
    for step, (a, b) in enumerate(zip(run, reference, strict=False), 1):
        gap = abs(a - b) / abs(b) if b else abs(a - b)
        if not math.isfinite(gap):
            return math.inf, step
        if gap > worst:
            worst, at = gap, step
    return worst, at


def reproducibility_of(
    first: tuple[LayerCapture, TrainingCapture],
    *others: tuple[LayerCapture | None, TrainingCapture],
) -> tuple[Reproducibility, Spread, float, float]:
    """Identically seeded reference runs, tensor by tensor against the first: exact agreement,
    or the spread every verdict is then judged against (dynamo's eager_two_runs_differ). A run
    without layers (None) is compared on everything else."""
    a = _named_tensors(*first)
    spread: Spread = {}
    largest, where = 0.0, None
    trajectory_spread = metric_spread = 0.0
    for layers, training in others:
        b = _named_tensors(layers or NO_LAYERS, training)
        for key, value in a.items():
            other = b.get(key)
            if other is None or other.shape != value.shape or torch.equal(value, other):
                continue
            difference = (value.double() - other.double()).nan_to_num()
            spread[key] = max(spread.get(key, 0.0), float(difference.square().mean().sqrt()))
            biggest = float(difference.abs().max())
            if biggest > largest:
                largest, where = biggest, f"{key[0]} {key[1]}"
        gap, _ = relative_gap(training.losses, first[1].losses)
        trajectory_spread = max(trajectory_spread, gap)
        held = (first[1].held_out_after, training.held_out_after)
        if all(isinstance(h, HeldOutScore) for h in held):
            one, two = held
            loss_gap = abs(one.loss - two.loss) / abs(one.loss or 1.0)
            trajectory_spread = max(trajectory_spread, loss_gap)
            if one.metric is not None and two.metric is not None:
                metric_gap = abs(one.metric - two.metric)
                metric_spread = max(metric_spread, metric_gap)
                if metric_gap and where is None:
                    largest, where = metric_gap, "held-out task metric"
    if not spread and not trajectory_spread and not metric_spread:
        note = "Two identically seeded reference runs computed identical numbers."
        return Reproducibility(True, 0.0, None, note), spread, 0.0, 0.0
    note = (
        f"The reference is not deterministic: identically seeded runs differ, by up to "
        f"{largest:.3g} in {where}; every verdict is judged against their spread "
        "(nothing is widened beyond it). Look for unseeded randomness or nondeterministic "
        "kernels (torch.use_deterministic_algorithms)."
    )
    return Reproducibility(False, largest, where, note), spread, trajectory_spread, metric_spread


def run_references(
    build: ModelBuilder,
    batch: Batch,
    workload: Workload,
    steps: int,
    reference_target: Target,
    held_out: HeldOutBatches | None = None,
) -> ReferenceRuns:
    """The fp32 eager reference twice, once more from weights and inputs nudged by one ulp (how
    much its training amplifies a difference of the size reordering makes), and the fp64
    yardstick.

    The first reference run records every layer with its inputs. The second only has to agree,
    so it records no layer and scores held-out data only after its trajectory: when its
    outputs, loss, gradients, trajectory and held-out score equal the first run's bit for bit,
    so do the layers that produced them. When anything differs, a third run records every layer,
    so each layer also gets the spread its verdict is judged against.
    """
    held_out = held_out or held_out_batches(workload, 1)
    recipe = _Recipe(build, batch, workload, steps)
    spec = RunSpec(reference_target, FP32)
    try:
        layers, training, dropout = _capture_run(recipe, spec, held_out, keep_inputs=True)
        reproducibility, spread, trajectory_spread, metric_spread = _agreement(
            recipe, spec, held_out, (layers, training)
        )
        sensitivity = _sensitivity(recipe, spec, held_out, training)
    except Exception as exc:
        raise WorkbenchError(
            f"The reference run ({spec.label}) of workload {workload.name!r} failed, so there "
            f"is nothing to compare against: {describe_error(exc)}"
        ) from exc
    fp64_spec = RunSpec(reference_target, FP64)
    fp64_layers, fp64_training, fp64_error = _yardstick(recipe, fp64_spec)
    return ReferenceRuns(
        spec,
        layers,
        training,
        fp64_spec,
        fp64_layers,
        fp64_training,
        fp64_error,
        dropout,
        build,
        held_out,
        reproducibility,
        spread,
        trajectory_spread,
        metric_spread,
        sensitivity,
    )


def _agreement(
    recipe: _Recipe,
    spec: RunSpec,
    held_out: HeldOutBatches,
    first: tuple[LayerCapture, TrainingCapture],
) -> tuple[Reproducibility, Spread, float, float]:
    """The first reference run against the same run again (reproducibility_of). The second
    records no layer and scores held-out data only after its trajectory; when anything differs,
    a third run records every layer, so each layer gets the spread it is judged against."""
    model, _ = prepared_model(recipe.build, spec)
    again = train_run(
        model,
        spec,
        recipe.batch,
        recipe.workload,
        recipe.steps,
        None,
        held_out,
        score_initial=False,
    )
    repeats: list[tuple[LayerCapture | None, TrainingCapture]] = [(None, again)]
    agreement = reproducibility_of(first, *repeats)
    if agreement[0].deterministic:
        return agreement
    third_layers, third, _ = _capture_run(recipe, spec, held_out, keep_inputs=False)
    return reproducibility_of(first, *repeats, (third_layers, third))


def _yardstick(
    recipe: _Recipe, fp64_spec: RunSpec
) -> tuple[LayerCapture | None, TrainingCapture | None, str | None]:
    """The fp64 run's layers and training, or why it failed: some ops have no float64 kernel,
    and then closeness alone judges."""
    try:
        fp64_layers, fp64_training, _ = _capture_run(recipe, fp64_spec, None, keep_inputs=False)
    except Exception as exc:
        return None, None, str(describe_error(exc))
    return fp64_layers, fp64_training, None
