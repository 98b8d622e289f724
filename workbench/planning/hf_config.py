"""A Hugging Face config.json as the planner reads it: no weights needed or loaded.

`hf:FOLDER` names a folder with a config.json (weights may be absent: a 70B plan needs none),
`hf:MODEL_TYPE` a transformers model type with its default config. The model is built on the
meta device; its scaled-down copy for measuring activations keeps the architecture and gives
every width a distinct prime (symbols.py), with its two layers standing in for the stack.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.errors import BadInput, describe_error
from workbench.planning import symbols
from workbench.workloads import HF_PREFIX
from workbench.workloads.hf_folder import check_sizes, folder_config
from workbench.workloads.huggingface import (
    TASKS,
    apply_overrides,
    import_transformers,
    parse_overrides,
    task_of_architecture,
)

PROBE_LAYERS = 2
# Config field names of each size, across the model families transformers has.
_HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
_HEADS_KEYS = ("num_attention_heads", "n_head")
_KV_KEYS = ("num_key_value_heads",)
_INTERMEDIATE_KEYS = ("intermediate_size", "n_inner", "ffn_dim")
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
_POSITION_KEYS = ("max_position_embeddings", "n_positions")
_EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "moe_top_k", "top_k")


@dataclass
class HfModel:
    spec: str
    config: Any
    auto_class: Any
    sizes: dict[str, int]  # hidden, heads, kv_heads, head_dim, intermediate, vocab, layers
    task: str = "causal-lm"  # workloads.huggingface.TASKS name; "" where AutoModel builds it

    @property
    def keeps_kv_cache(self) -> bool:
        """Whether serving it generates token by token, keeping each layer's keys and values."""
        return self.task == "causal-lm"

    def build_meta(self) -> nn.Module:
        try:
            with torch.device("meta"):
                return self.auto_class.from_config(self.config, trust_remote_code=False)
        except Exception as exc:
            raise BadInput(
                f"Workload {self.spec!r}: its config builds no model: {describe_error(exc)}."
            ) from None


def _first(config: Any, keys: tuple[str, ...]) -> tuple[str, int] | None:
    for key in keys:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return key, value
    return None


def load_hf_model(spec: str, hf_config: str = "") -> HfModel:
    """The config of `hf:FOLDER` (config.json only is enough) or `hf:MODEL_TYPE`, with the
    `-p hf_config` overrides a run of that spec would take."""
    transformers = import_transformers()
    name = spec.removeprefix(HF_PREFIX).strip()
    path = Path(name).expanduser()
    if path.is_file() and path.name == "config.json":
        path = path.parent
    if (path / "config.json").is_file():
        config = folder_config(spec, path, transformers, trusted=False, flag=None)
    elif "/" in name or path.exists():
        raise BadInput(f"Workload {spec!r}: {path} has no config.json.")
    else:
        try:
            config = transformers.AutoConfig.for_model(name)
        except Exception:
            raise BadInput(
                f"Workload {spec!r}: {name!r} is neither a folder with a config.json nor a "
                "transformers model type."
            ) from None
    if hf_config:
        try:
            overrides = parse_overrides(hf_config)
        except ValueError as exc:
            raise BadInput(f"Workload {spec!r}: hf_config {exc}.") from None
        apply_overrides(spec, config, overrides)
    check_sizes(spec, config.to_dict(), "config")
    architectures = list(getattr(config, "architectures", None) or [])
    task = next(filter(None, map(task_of_architecture, architectures)), None) or "causal-lm"
    auto_class = getattr(transformers, TASKS[task].auto_class)
    if type(config) not in auto_class._model_mapping:
        auto_class, task = transformers.AutoModel, ""
    config.use_cache = False
    return HfModel(spec, config, auto_class, read_sizes(config), task)


def read_sizes(config: Any) -> dict[str, int]:
    """The sizes the planner reads from a config; a size the config does not state is absent."""
    sizes: dict[str, int] = {}
    for key, names in (
        ("hidden", _HIDDEN_KEYS),
        ("heads", _HEADS_KEYS),
        ("kv_heads", _KV_KEYS),
        ("intermediate", _INTERMEDIATE_KEYS),
        ("layers", _LAYER_KEYS),
        ("positions", _POSITION_KEYS),
    ):
        found = _first(config, names)
        if found:
            sizes[key] = found[1]
    vocab = _first(config, ("vocab_size",))
    if vocab:
        sizes["vocab"] = vocab[1]
    if "heads" in sizes:
        sizes.setdefault("kv_heads", sizes["heads"])
        head_dim = _first(config, ("head_dim",))
        if head_dim:
            sizes["head_dim"] = head_dim[1]
        elif "hidden" in sizes:
            sizes["head_dim"] = sizes["hidden"] // sizes["heads"]
    return sizes


def _set(config: Any, keys: tuple[str, ...], value: int | None) -> None:
    found = _first(config, keys)
    if found:
        setattr(config, found[0], value)


@dataclass(frozen=True)
class Probe:
    """The scaled-down copy's config and what each of its atoms stands for at full size."""

    config: Any
    atoms: dict[int, str]  # prime -> dimension name
    full_dims: dict[str, float]  # dimension name -> full-size value (batch and seq excluded)
    unsized: list[str]
    eager_experts: bool = False  # a mixture of experts: built with the eager experts path
    expert_share: float = 1.0  # top-k / experts: the full model's routed share of the probe's


def probe_config(model: HfModel) -> Probe:
    """Same architecture, two layers, every width a distinct prime (see symbols.py)."""
    sizes, config = model.sizes, copy.deepcopy(model.config)
    atoms = {prime: name for name, prime in symbols.WIDTH_ATOMS.items()}
    full: dict[str, float] = {}
    unsized: list[str] = []
    _set(config, _LAYER_KEYS, PROBE_LAYERS)
    _set(config, _POSITION_KEYS, 2 * max(seq for _, seq in symbols.HF_PROBES))
    # transformers' grouped_mm experts need every stride a multiple of 16 bytes, which prime
    # widths never are ("strides should be multiple of 16 bytes"): the probe builds a mixture
    # of experts with the eager path instead, each expert run on its routed tokens in turn.
    # Every token is routed to every expert in the probe, so each expert's saved tensors are
    # batch x sequence x a width and read as formulas; the full model routes each token to
    # top-k of them, top-k / experts of that, whatever the balance between experts.
    experts, top_k = _first(config, _EXPERT_KEYS), _first(config, _TOP_K_KEYS)
    moe = experts is not None
    expert_share = 1.0
    if experts is not None and top_k is not None:
        expert_share = top_k[1] / experts[1]
        setattr(config, top_k[0], experts[1])
    if "heads" in sizes and "head_dim" in sizes:
        heads, kv, head_dim = sizes["heads"], sizes["kv_heads"], sizes["head_dim"]
        groups = heads // kv
        probe_kv = symbols.WIDTH_ATOMS[symbols.KV_HEADS]
        probe_groups = symbols.WIDTH_ATOMS[symbols.GROUPS] if groups > 1 else 1
        probe_head_dim = 2 * symbols.WIDTH_ATOMS[symbols.HALF_HEAD_DIM]
        full[symbols.KV_HEADS] = kv
        full[symbols.GROUPS] = groups
        full[symbols.HALF_HEAD_DIM] = head_dim / 2
        _set(config, _HEADS_KEYS, probe_kv * probe_groups)
        _set(config, _KV_KEYS, probe_kv)
        if getattr(config, "head_dim", None):
            config.head_dim = probe_head_dim
        probe_hidden = probe_kv * probe_groups * probe_head_dim
        if sizes.get("hidden") != heads * head_dim:
            probe_hidden = 2 * symbols.WIDTH_ATOMS[symbols.HIDDEN]
            full[symbols.HIDDEN] = sizes.get("hidden", 0) / 2
        _set(config, _HIDDEN_KEYS, probe_hidden)
    else:
        unsized.append("attention heads (the config names none the planner reads)")
    if "intermediate" in sizes:
        _set(config, _INTERMEDIATE_KEYS, symbols.WIDTH_ATOMS[symbols.INTERMEDIATE])
        full[symbols.INTERMEDIATE] = sizes["intermediate"]
    if "vocab" in sizes:
        config.vocab_size = symbols.WIDTH_ATOMS[symbols.VOCAB]
        full[symbols.VOCAB] = sizes["vocab"]
        # Token ids the config names must exist in the probe's small vocabulary.
        for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
            if isinstance(getattr(config, key, None), int):
                setattr(config, key, 0)
    return Probe(config, atoms, full, unsized, moe, expert_share)
