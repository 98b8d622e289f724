"""Activation memory, measured on the model (or its scaled-down copy) and scaled to the plan.

Each probe is one real training step on the CPU (tracking.py): the tensors the forward saves for
the backward, each read as a formula of the model's dimensions (symbols.py) and attributed to
the module that saved it; and the step's allocations, whose peak above the saved tensors is the
backward's working set (the gradient of the largest saved tensor and its input's, about 2x that
tensor on a language model's logits). The formulas come from the first probe; the other probes
check them and fit the working-set factor kappa, and the largest relative miss of the resulting
step peak over all probes is the fit's stated error.

Under tensor parallelism, a tensor saved inside an attention or MLP block (other than the input
a column-parallel projection keeps) is split across the TP ranks, as are the logits when the LM
head is split by vocabulary (a vocabulary-parallel loss); the rest (norms, residual stream)
stays whole. With sequence parallelism those too are split, along the sequence, so a layer's
whole share is divided by the TP degree (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models": per layer s*b*h*(34 + 5*a*s/h) bytes without it,
divided by t with TP and SP). Selective recomputation drops the attention core's saved tensors,
the ones that grow with the square of the sequence (the 5*a*s/h term), and recomputes them in
the backward; where the probe's attention keeps no such tensor (a fused SDPA kernel, as flash
attention on Trainium), it saves nothing more. With full recomputation (activation
checkpointing) a layer keeps only its input and recomputes the rest during the backward, one
layer at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from workbench.planning import symbols
from workbench.planning.shapes import COLWISE, VOCAB, ModelShape
from workbench.planning.symbols import Formula, decode

# Imported where they are used: they load torch, which reading result files back (compare,
# collect, export-metrics) never needs.
if TYPE_CHECKING:
    import torch
    from torch import nn

    from workbench.planning.tracking import SavedTensor


@dataclass(frozen=True)
class SavedTerm:
    """One saved tensor of the first probe, as a formula."""

    module: str
    layer: bool  # saved inside the layer stack (the probe's layers together)
    sharded: bool  # split across tensor-parallel ranks
    floating: bool
    element_size: int
    formula: Formula
    expert: bool = False  # saved inside a mixture of experts' experts (scaled by expert_share)


@dataclass(frozen=True)
class FitPoint:
    batch: int
    seq: int | None
    measured_saved: int
    predicted_saved: float
    measured_peak: int  # the step's forward/backward peak above what it held at its start
    predicted_peak: float

    @property
    def error(self) -> float:
        return abs(self.predicted_peak - self.measured_peak) / max(self.measured_peak, 1)


@dataclass(frozen=True)
class OptimizerProfile:
    """The workload's optimizer, measured on the probe: state and step temporaries per byte of
    parameters (AdamW: 2 states, so 2.0)."""

    name: str
    state_per_param_byte: float
    step_temporaries_per_param_byte: float


@dataclass(frozen=True)
class ActivationEstimate:
    saved: float  # bytes the forward keeps for the backward
    largest: float  # the largest of them
    kappa: float

    @property
    def working(self) -> float:
        """Peak of the forward and backward above what the step held at its start."""
        return self.saved + self.kappa * self.largest


@dataclass
class ActivationModel:
    source: str
    terms: list[SavedTerm]
    probe_layers: int
    layer_input: Formula | None  # elements of the hidden state entering a layer
    kappa: float
    points: list[FitPoint]
    full_dims: dict[str, float]  # width dimensions at full size
    fixed_seq: int | None  # a workload's own sequence length; None where seq is a dimension
    optimizer: OptimizerProfile
    unsized: list[str] = field(default_factory=list)
    # A mixture of experts' probe routes every token to every expert; the full model top-k.
    expert_share: float = 1.0

    @property
    def fit_error(self) -> float:
        return max((p.error for p in self.points), default=0.0)

    @property
    def attention_core_terms(self) -> int:
        """Saved tensors of the layer stack that grow with the square of the sequence."""
        return sum(1 for t in self.terms if t.layer and _quadratic_in_seq(t.formula))

    def _dims(self, batch: int, seq: int | None) -> dict[str, float]:
        return {**self.full_dims, symbols.BATCH: batch, symbols.SEQ: seq or 1}

    def estimate(
        self,
        batch: int,
        seq: int | None,
        layers: int,
        tp: int = 1,
        float_bytes: int = 4,
        checkpointing: bool = False,
        layer_share: float = 1.0,
        outside_share: float = 1.0,
        sequence_parallel: bool = False,
        selective: bool = False,
    ) -> ActivationEstimate:
        """Saved bytes for a micro-batch of `batch` at `seq` tokens over `layers` layers,
        split by `tp`, floats at `float_bytes` each. `layer_share` and `outside_share` scale
        the stack's and the rest's part (a pipeline stage holds some layers, and some of the
        rest, for several micro-batches). `sequence_parallel` splits a layer's unsharded
        tensors by `tp` too; `selective` leaves out the attention core's (module docstring)."""
        dims = self._dims(batch, seq)

        def size(term: SavedTerm) -> float:
            element = float_bytes if term.floating else term.element_size
            split = tp if term.sharded or (sequence_parallel and term.layer) else 1
            share = self.expert_share if term.expert else 1.0
            return term.formula.value(dims) * element * share / split

        def kept(term: SavedTerm) -> bool:
            return term.layer and not (selective and _quadratic_in_seq(term.formula))

        per_layer = sum(size(t) for t in self.terms if kept(t)) / max(self.probe_layers, 1)
        outside = sum(size(t) for t in self.terms if not t.layer)
        if checkpointing and self.layer_input is not None and layers > 0:
            # With SP the checkpointed input is kept split along the sequence, as NxD does.
            split = tp if sequence_parallel else 1
            kept_input = self.layer_input.value(dims) * float_bytes / split
            recomputed = sum(size(t) for t in self.terms if t.layer) / max(self.probe_layers, 1)
            stack = layers * kept_input + recomputed
        else:
            stack = layers * per_layer
        largest = max((size(t) for t in self.terms), default=0.0)
        return ActivationEstimate(
            stack * layer_share + outside * outside_share, largest, self.kappa
        )


def _quadratic_in_seq(formula: Formula) -> bool:
    return any(name == symbols.SEQ and power >= 2 for name, power in formula.powers)


def korthikanti_layer_bytes(
    seq: int,
    batch: int,
    hidden: int,
    heads: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    selective: bool = False,
) -> float:
    """Activation bytes one transformer layer keeps for the backward in 16-bit precision, by
    Korthikanti et al. 2022 (Table 2): s*b*h*(10 + 24/t + 5*a*s/(h*t)) with TP, all of it over
    t with SP; selective recomputation drops the 5*a*s/h term. The planner's own numbers are
    measured (module docstring); this is the published reference they are checked against."""
    sbh = seq * batch * hidden
    attention_core = 0.0 if selective else 5 * heads * seq / hidden
    if sequence_parallel:
        return sbh * (34 + attention_core) / tp
    return sbh * (10 + 24 / tp + attention_core / tp)


@dataclass
class ProbeRun:
    """One measured step of the probe model."""

    batch: int
    seq: int | None
    saved: list[SavedTensor]
    layer_input: int | None
    peak_above_held: int
    step_peak: int
    parameter_bytes: int
    optimizer_bytes: int


def run_probe(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_of: Callable[[nn.Module], torch.Tensor],
    stack: nn.ModuleList | nn.Sequential | None,
    batch: int,
    seq: int | None,
    warm_up: bool = True,
) -> ProbeRun:
    """One warm-up step (the optimizer's state comes to be), then one tracked step whose
    gradients already exist (zero_grad keeps them), as every training step after the first.
    A model and optimizer that a run_probe before has warmed up need no second warm-up."""
    import torch

    from workbench.planning import tracking

    model.train()
    optimizer.zero_grad(set_to_none=False)
    if warm_up:
        loss_of(model).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
    recorder = tracking.SavedTensorRecorder(model)
    seen_input: list[int] = []
    handle = None
    if stack is not None and len(stack) > 0:

        def keep_input(module: nn.Module, args: tuple, kwargs: dict) -> None:
            tensors = [a for a in (*args, *kwargs.values()) if torch.is_tensor(a)]
            if tensors and not seen_input:
                seen_input.append(tensors[0].numel())

        handle = stack[0].register_forward_pre_hook(keep_input, with_kwargs=True)
    try:
        with tracking.tracked_step(model, optimizer) as memory:
            with tracking.phase(tracking.FORWARD), recorder.recording():
                loss = loss_of(model)
            with tracking.phase(tracking.BACKWARD):
                loss.backward()
            del loss
            with tracking.phase(tracking.STEP):
                optimizer.step()
    finally:
        if handle is not None:
            handle.remove()
    peaks = memory.phase_peaks
    return ProbeRun(
        batch=batch,
        seq=seq,
        saved=recorder.saved,
        layer_input=seen_input[0] if seen_input else None,
        peak_above_held=max(peaks.get(tracking.FORWARD, 0), peaks.get(tracking.BACKWARD, 0)),
        step_peak=peaks.get(tracking.STEP, 0),
        parameter_bytes=memory.held.parameters,
        optimizer_bytes=memory.held.optimizer,
    )


def _sharded(module: str, formula: Formula, shape: ModelShape) -> bool:
    """Whether tensor parallelism splits a tensor saved while `module` ran (module docstring)."""
    if not shape.tp_planned:
        return False
    role = shape.tp_modules.get(module)
    if role == COLWISE:
        return False  # its saved input is the whole hidden state
    blocks = {name.rsplit(".", 1)[0] for name, r in shape.tp_modules.items() if r != VOCAB}
    if any(module == block or module.startswith(block + ".") for block in blocks):
        return True
    vocab_split = any(r == VOCAB for r in shape.tp_modules.values())
    return vocab_split and any(name == symbols.VOCAB for name, _ in formula.powers)


def _in_stack(module: str, shape: ModelShape) -> bool:
    prefix = f"{shape.stack_path}."
    return bool(shape.stack_path) and module.startswith(prefix)


def _saved_term(tensor: SavedTensor, atoms: Mapping[int, str], shape: ModelShape) -> SavedTerm:
    """One saved tensor of the first probe run as a formula of the model's dimensions."""
    formula = decode(tensor.numel, atoms)
    return SavedTerm(
        tensor.module,
        _in_stack(tensor.module, shape),
        _sharded(tensor.module, formula, shape),
        tensor.floating,
        tensor.element_size,
        formula,
        ".experts." in f".{tensor.module}.",
    )


def _fit_points(
    runs: list[ProbeRun], probe_view: ActivationModel, probe_layers: int
) -> tuple[float, list[FitPoint]]:
    """kappa (least squares of each run's working set above its saved tensors against its
    largest saved tensor) and each run's measured and predicted peak, with the formulas
    evaluated at the probe's own sizes."""
    measured = []
    for run in runs:
        estimate = probe_view.estimate(run.batch, run.seq, probe_layers, float_bytes=4)
        saved = sum(t.nbytes for t in run.saved)
        largest = max((t.nbytes for t in run.saved), default=0)
        measured.append((run, estimate, saved, largest))
    numerator = sum((r.peak_above_held - s) * big for r, _, s, big in measured)
    denominator = sum(big * big for *_, big in measured)
    kappa = max(0.0, numerator / denominator) if denominator else 0.0
    points = [
        FitPoint(
            run.batch,
            run.seq,
            saved,
            estimate.saved,
            run.peak_above_held,
            estimate.saved + kappa * estimate.largest,
        )
        for run, estimate, saved, _ in measured
    ]
    return kappa, points


def fit_model(
    runs: list[ProbeRun],
    shape: ModelShape,
    atoms: Mapping[int, str],
    full_dims: Mapping[str, float],
    fixed_seq: int | None,
    probe_layers: int,
    optimizer_name: str,
    source: str,
    expert_share: float = 1.0,
) -> ActivationModel:
    """Formulas from the first run, checked on the others; kappa fitted over all (least
    squares of the working set above the saved tensors against the largest saved tensor)."""
    first = runs[0]
    run_atoms = dict(atoms)
    run_atoms[first.batch] = symbols.BATCH
    if first.seq is not None and fixed_seq is None:
        run_atoms[first.seq] = symbols.SEQ
    terms = [_saved_term(tensor, run_atoms, shape) for tensor in first.saved]
    layer_input = decode(first.layer_input, run_atoms) if first.layer_input else None
    optimizer = OptimizerProfile(
        optimizer_name,
        first.optimizer_bytes / max(first.parameter_bytes, 1),
        first.step_peak / max(first.parameter_bytes, 1),
    )
    # The formulas evaluated at each probe's own sizes: the probe's widths, not the full ones.
    probe_dims = {name: float(prime) for prime, name in atoms.items()}
    probe_dims[symbols.HALF_HEAD_DIM] = float(symbols.WIDTH_ATOMS[symbols.HALF_HEAD_DIM])
    probe_view = ActivationModel(
        source, terms, probe_layers, layer_input, 0.0, [], probe_dims, fixed_seq, optimizer
    )
    kappa, points = _fit_points(runs, probe_view, probe_layers)
    # The fitted model is the probe's view at full size.
    return replace(
        probe_view,
        kappa=kappa,
        points=points,
        full_dims=dict(full_dims),
        expert_share=expert_share,
    )


def parameter_bytes(model: nn.Module) -> int:
    from workbench.planning.tracking import storage_bytes

    return storage_bytes(model.parameters())
