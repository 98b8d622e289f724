"""Whether an hf: workload is the model the user named: the whole model rather than the part a
task head keeps, its checkpoint's weights rather than random ones, and inputs within the
positions the model can embed.

These read models built on the meta device (shapes only, no memory), so each rule costs no
weights and runs before any notebook.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from torch import nn

# transformers builds token-level heads (masked-LM, ViT classification) on their base model
# without its pooler, and saves them so: the one part of a base model a head goes without.
POOLER = "pooler"
NAMES_SHOWN = 3  # missing tensors named in a sentence; the count says how many more


def _in_pooler(name: str) -> bool:
    return POOLER in name.split(".")[:-1]


def parameter_count(model: nn.Module, *, skip_poolers: bool = False) -> int:
    """Parameters of `model`, each shared (tied) tensor once."""
    return sum(
        p.numel() for name, p in model.named_parameters() if not (skip_poolers and _in_pooler(name))
    )


def _parts_with_parameters(model: nn.Module) -> list[str]:
    return [
        name for name, child in model.named_children() if next(child.parameters(), None) is not None
    ]


@dataclass(frozen=True)
class ModelShare:
    """How much of the config's whole model the task's model holds."""

    task_class: str  # the class the task builds (WhisperForCausalLM)
    task_parameters: int
    whole_class: str  # the whole model the config describes (WhisperForConditionalGeneration)
    whole_parameters: int
    left_out: tuple[str, ...]  # the whole model's parts the task's model lacks ("encoder")
    partial: bool

    def sentence(self) -> str:
        parts = ", ".join(self.left_out) if self.left_out else "part of its base model"
        return (
            f"{self.task_class} holds {self.task_parameters:,} of the {self.whole_parameters:,} "
            f"parameters of {self.whole_class} (it leaves out {parts})"
        )


def model_share(task_model: nn.Module, base_model: nn.Module, whole_model: nn.Module) -> ModelShare:
    """Rule: the task's model is partial when its base model (the part under the head) has fewer
    parameters than the config's base model, poolers aside. A head adds parameters, so a
    complete model never has fewer; Whisper's decoder-only causal LM has a quarter fewer.

    `base_model` is the config's headless model (AutoModel); `whole_model` the one the counts
    are said against (the checkpoint's architecture, else the base model)."""
    kept = getattr(task_model, "base_model", task_model)
    partial = parameter_count(kept, skip_poolers=True) < parameter_count(
        base_model, skip_poolers=True
    )
    present = set(_parts_with_parameters(kept))
    left_out = tuple(
        name
        for name in _parts_with_parameters(base_model)
        if name not in present and name != POOLER
    )
    return ModelShare(
        type(task_model).__name__,
        parameter_count(task_model),
        type(whole_model).__name__,
        parameter_count(whole_model),
        left_out if partial else (),
        partial,
    )


@dataclass(frozen=True)
class PositionLimit:
    """The longest sequence the model can embed, and why."""

    tokens: int
    reason: str  # "the model's 64 positions": what a too-long sequence is longer than


def position_limit(max_positions: int | None, model: nn.Module) -> PositionLimit | None:
    """The config's max positions, less what a RoBERTa-style position embedding reserves: its
    position ids start after its padding index, so padding_idx + 1 rows are never a position."""
    limit = (
        PositionLimit(max_positions, f"the model's {max_positions} positions")
        if max_positions
        else None
    )
    for name, module in model.named_modules():
        if not (name.endswith("position_embeddings") and isinstance(module, nn.Embedding)):
            continue
        if module.padding_idx is None:
            continue
        usable = module.num_embeddings - module.padding_idx - 1
        if limit is None or usable < limit.tokens:
            limit = PositionLimit(
                usable,
                f"the {usable} positions the model can use ({module.num_embeddings} position "
                f"embeddings less {module.padding_idx + 1}: its position ids start after "
                f"padding_idx {module.padding_idx})",
            )
    return limit


def _is_head_key(key: str, base_prefix: str) -> bool:
    return not key.startswith(f"{base_prefix}.") or _in_pooler(key)


def unexpected_missing(
    missing: Iterable[str], base_prefix: str, new_head: bool
) -> tuple[list[str], list[str]]:
    """Missing checkpoint tensors split into (expected, unexpected). Only a head the checkpoint
    was not saved with (a base checkpoint, or another task's) is expected to start from random
    weights; anything else missing means the model runs with weights nobody trained."""
    expected: list[str] = []
    unexpected: list[str] = []
    for key in missing:
        (expected if new_head and _is_head_key(key, base_prefix) else unexpected).append(key)
    return expected, unexpected


def missing_sentence(model_class: str, keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:NAMES_SHOWN]) + (", …" if len(keys) > NAMES_SHOWN else "")
    return (
        f"{len(keys)} tensor(s) of {model_class} are not in the checkpoint and start from random "
        f"weights: {shown}"
    )
