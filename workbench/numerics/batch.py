"""The fixed batch every run computes on: notebook 01's reference artifact when it is for this
workload and these weights, else the workload's seeded batch, with the choice and its reason."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils._pytree import tree_map

from workbench.baseline.reference import BASELINE_REFERENCE_FILE, load_reference, state_sha256
from workbench.errors import BadInput
from workbench.numerics.capture import (
    ModelBuilder,
    float_tensors,
)
from workbench.numerics.metrics import (
    VerdictRule,
)
from workbench.numerics.records import (
    BatchSource,
)
from workbench.numerics.tensors import (
    compare_tensor,
)
from workbench.workload import Batch, Workload


def _state_hash(build: ModelBuilder) -> str:
    return state_sha256(build())


def load_batch(
    workload: Workload, build: ModelBuilder, artifact: Path | None, rule: VerdictRule
) -> tuple[Batch, BatchSource]:
    """Notebook 01's fixed batch when its artifact is for this workload and these weights;
    otherwise the workload's seeded batch. Either way the choice and its reason are recorded."""
    own = workload.batch("cpu")
    if artifact is None or not Path(artifact).is_file():
        where = f" at {artifact}" if artifact else ""
        return own, BatchSource(
            "the workload's seeded batch",
            str(artifact) if artifact else None,
            False,
            f"no notebook 01 reference artifact{where}: the reference is built here",
        )
    try:
        saved = load_reference(Path(artifact))
        expected = workload.spec or workload.name
        if saved.get("workload") != expected or saved.get("seed") != workload.seed:
            raise ValueError(
                f"it is for workload {saved.get('workload')!r} seed {saved.get('seed')!r}, "
                f"not {expected!r} seed {workload.seed}"
            )
        if saved.get("state_sha256") != _state_hash(build):
            raise ValueError("its initial weights differ from this workload's (state hash)")
        saved_inputs = saved["inputs"]
        inputs = saved_inputs if isinstance(saved_inputs, dict) else tuple(saved_inputs)
        targets = saved["targets"]
        model = build().eval()
        with torch.no_grad():
            reference = float_tensors(workload.forward(model, inputs))
            fp64_model = build().double().eval()
            fp64_inputs = tree_map(lambda t: t.double() if t.is_floating_point() else t, inputs)
            fp64 = float_tensors(workload.forward(fp64_model, fp64_inputs))
        baseline = float_tensors(saved["outputs"])
        comparison = None
        if len(baseline) == len(reference) == 1 and baseline[0].shape == reference[0].shape:
            comparison = compare_tensor(
                "notebook 01 outputs", "output", baseline[0], reference[0], fp64[0], rule
            )
    except Exception as exc:  # an unreadable or foreign artifact: say why, build our own
        return own, BatchSource(
            "the workload's seeded batch",
            str(artifact),
            False,
            f"notebook 01's artifact was not used: {exc}",
        )
    return (inputs, targets), BatchSource(
        f"notebook 01's fixed batch ({Path(artifact).name})",
        str(artifact),
        True,
        "same workload, seed and initial weights (state hash) as notebook 01",
        comparison,
        str(saved.get("device")),
    )


def baseline_artifact_path(requested: str, out_dir: Path) -> Path:
    """Notebook 01's reference artifact: the named file, or the one in `out_dir`.

    A named file that does not exist is BadInput; a missing default only means the reference
    is built here (a run of notebook 03 alone has no notebook 01 beside it).
    """
    return earlier_notebook_file(
        requested, out_dir, BASELINE_REFERENCE_FILE, "baseline_reference", "notebook 01"
    )


def earlier_notebook_file(
    requested: str, out_dir: Path, default_name: str, parameter: str, notebook: str
) -> Path:
    """A file an earlier `notebook` wrote, given as notebook 03's `parameter`: the named file,
    which must exist, or `default_name` in `out_dir`, which need not."""
    if not requested:
        return Path(out_dir) / default_name
    path = Path(requested).expanduser()
    if not path.is_file():
        raise BadInput(
            f"{parameter} {requested!r} is not a file; give the path of a "
            f"{default_name} written by {notebook}, or leave it empty."
        )
    return path
