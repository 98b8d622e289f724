"""The reference artifact notebook 01 leaves for the numerics notebook: a fixed batch, the
initial model's outputs and loss on it, and a hash that identifies the initial weights."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workbench.errors import describe_error
from workbench.redact import scrub_text
from workbench.targets.base import Target
from workbench.workload import Workload, move_inputs, named_float_tensors, state_sha256

BASELINE_REFERENCE_FILE = "01_baseline_reference.pt"  # next to 01_baseline.json


@dataclass
class ReferenceSummary:
    """Where the numerics notebook finds the reference artifact, and what identifies it."""

    path: str | None
    state_sha256: str | None
    loss: float | None
    device: str
    error: str | None = None


def make_reference(workload: Workload, target: Target) -> dict[str, Any]:
    """The fixed batch, the initial model's eval-mode outputs and loss on it, the state hash.

    Computed eagerly on the target before any training step; tensors are moved to the CPU so
    the file loads anywhere.
    """
    model = workload.build_model(target.device).eval()
    inputs, targets = workload.batch(target.device)
    with torch.no_grad():
        outputs = workload.forward(model, inputs)
        loss = workload.compute_loss(outputs, targets)
    return {
        # Scrubbed as every file the workbook writes: a folder path may hold user:password@.
        "workload": scrub_text(workload.spec or workload.name),
        "seed": workload.seed,
        "device": str(target.device),
        "torch": str(torch.__version__),
        "state_sha256": state_sha256(model),
        "inputs": move_inputs(inputs, "cpu"),
        "targets": targets.detach().cpu(),
        # By name, plain tensors only: a ModelOutput would not pass the weights_only loader.
        "outputs": {name: t.detach().cpu() for name, t in named_float_tensors(outputs)},
        "loss": float(loss),
    }


def save_reference(reference: dict[str, Any], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(reference, tmp)
    tmp.replace(path)  # a reader never sees a half-written artifact
    return path


def load_reference(path: Path) -> dict[str, Any]:
    """Tensors, strings and numbers only, so the safe weights_only loader reads it."""
    return torch.load(Path(path), weights_only=True)


def write_reference(workload: Workload, target: Target, path: Path | None) -> ReferenceSummary:
    """Make the artifact and save it at `path` (if given); a model that fails is recorded."""
    try:
        reference = make_reference(workload, target)
    except Exception as exc:  # the baseline's configurations report the same problem in full
        error = str(describe_error(exc))
        return ReferenceSummary(None, None, None, str(target.device), error)
    saved = str(save_reference(reference, path)) if path is not None else None
    return ReferenceSummary(
        saved, reference["state_sha256"], reference["loss"], reference["device"]
    )
