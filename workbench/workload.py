"""Loading what a workload spec names: `WorkloadSpec` and `load_workload`.

Built-ins are named (`seed-mlp`); a user's workload is a spec `pkg.module:factory` whose factory
returns either a `Workload` or a plain `nn.Module` described by input parameters, `hf:FOLDER` /
`hf:MODEL_TYPE` for a Hugging Face model (workbench/workloads/huggingface.py), or
`script:train.py` (workbench/workloads/script.py).

The contract itself (`Workload`, `Batch`, `Inputs` and the helpers that feed a model and read
its output) is workbench/workloads/contract.py, the bottom of the workload rooms; its names are
imported from here too, as every notebook package does.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from workbench.errors import BadInput, describe_error, did_you_mean
from workbench.scorecard import ATTENTION, Finding, Verdict, judge
from workbench.workloads import BUILTIN_WORKLOADS, DEFAULT_WORKLOAD, HF_PREFIX, SCRIPT_PREFIX
from workbench.workloads.contract import (
    CONTRACT_CODE,
    DEFAULT_SEED,
    TASK_CLASSIFICATION,
    TASK_LANGUAGE_MODEL,
    Batch,
    Inputs,
    KeywordCall,
    Workload,
    accuracy,
    as_positional,
    batch_size_of,
    call_model,
    disable_dropout,
    input_tensors,
    move_inputs,
    named_float_tensors,
    named_inputs,
    on_primary_output,
    output_loss,
    perplexity,
    primary_output,
    seeded,
    state_sha256,
    token_cross_entropy,
)
from workbench.workloads.copies import independent_copy

__all__ = [
    "BUILTIN_WORKLOADS",
    "CONTRACT_CODE",
    "DEFAULT_SEED",
    "HF_PREFIX",
    "SCRIPT_PREFIX",
    "TASK_CLASSIFICATION",
    "TASK_LANGUAGE_MODEL",
    "Batch",
    "InputDescription",
    "Inputs",
    "KeywordCall",
    "Workload",
    "WorkloadSpec",
    "accuracy",
    "announce_attentions",
    "as_positional",
    "batch_size_of",
    "call_model",
    "disable_dropout",
    "import_factory",
    "input_tensors",
    "load_workload",
    "move_inputs",
    "named_float_tensors",
    "named_inputs",
    "on_primary_output",
    "output_loss",
    "parse_input_description",
    "parse_shapes",
    "perplexity",
    "primary_output",
    "seeded",
    "state_sha256",
    "token_cross_entropy",
    "with_workload_attentions",
    "workload_from_module",
]


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
    else:
        workload = _from_factory(spec, input_shape, input_dtype, num_classes, batch_size)
    workload.spec = spec
    announce_attentions(workload)
    return workload


def _from_factory(
    spec: str, input_shape: str, input_dtype: str, num_classes: int | None, batch_size: int | None
) -> Workload:
    """A built-in's or a `package.module:factory`'s workload: the Workload it returns, or its
    plain nn.Module fed as the input parameters describe."""
    factory = import_factory(BUILTIN_WORKLOADS.get(spec, spec))
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
    return independent_copy(module)
