"""What the planner knows of a model without its weights: every parameter tensor's size, which
layer of the model's stack it belongs to, and how tensor parallelism splits it.

Models are built on the meta device (shapes, no memory, no weights drawn), as accelerate's
`estimate-memory` does, so a 70B config is read in about a second. Tensor parallelism follows
the Megatron split every Trainium stack uses (NxD's ColumnParallel/RowParallel layers, DTensor's
ColwiseParallel/RowwiseParallel): the attention's q, k, v and the MLP's gate and up projections
split by output features, o and down by input features, the embedding and the LM head by
vocabulary; norms stay whole on every rank. A model whose linear layers carry other names gets
no TP plan, and the plan says which layers it could not place.

Attention is split by heads. Where the TP degree exceeds the KV-head count, each rank keeps a
whole KV head, replicated on TP/kv ranks (NxD's `kv_replicator`, NxD Inference's GQA
replication up to the TP degree); where the query heads do not divide by it (served only), they
are padded up to a multiple of it, as NxD Inference does. A rank then holds ceil(heads / TP)
query heads and ceil(kv_heads / TP) KV heads of each layer. Mixture-of-experts layers (Megatron,
NxD) split each expert's FFN by TP like any FFN, or spread whole experts over expert-parallel
ranks; the router stays whole on every rank.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

# Imported where they are used: they load torch, which reading result files back (compare,
# collect, export-metrics) never needs.
if TYPE_CHECKING:
    from torch import nn


COLWISE = "colwise"
ROWWISE = "rowwise"
VOCAB = "vocab"  # embedding or LM head split by vocabulary
REPLICATED = "replicated"
EXPERT = "expert"  # an expert's FFN weights: split by TP (and spread by EP)
# Which part of the attention a parameter belongs to: its per-rank share follows the head count.
QUERY_PART = "query"  # q and o projections: ceil(heads / TP) heads per rank
KV_PART = "kv"  # k and v projections: ceil(kv_heads / TP) heads per rank (replicated past kv)

# Leaf module names of the Megatron split, as Llama-family checkpoints name them.
COLWISE_NAMES = frozenset({"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"})
ROWWISE_NAMES = frozenset({"o_proj", "down_proj"})
VOCAB_NAMES = frozenset({"embed_tokens", "lm_head"})
QUERY_NAMES = frozenset({"q_proj", "o_proj"})
KV_NAMES = frozenset({"k_proj", "v_proj"})
# Experts as a list of Linear layers (w1, w3 up, w2 down: Mixtral's older layout) or as one
# module holding every expert's weights stacked (transformers' fused `experts`).
EXPERT_COLWISE_NAMES = frozenset({"w1", "w3"})
EXPERT_ROWWISE_NAMES = frozenset({"w2"})
EXPERTS_MODULE = "experts"
ROUTER_NAMES = frozenset({"gate", "router"})  # kept whole on every rank
_EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_HEAD_ATTRIBUTES = ("num_attention_heads", "num_heads", "n_head", "heads")


@dataclass(frozen=True)
class ParameterInfo:
    name: str
    numel: int
    layer: int | None  # index in the layer stack; None outside it (embeddings, head, final norm)
    tp: str  # COLWISE, ROWWISE, VOCAB, EXPERT or REPLICATED
    part: str = ""  # QUERY_PART, KV_PART or "": how the attention's head split applies


@dataclass
class ModelShape:
    """A model's parameters and structure, read from the model built on the meta device."""

    name: str
    source: str  # how it was read, for the report
    parameters: list[ParameterInfo]
    layers: int  # length of the stack of identical layers; 0 where there is none
    stack_path: str  # e.g. "model.layers"
    heads: int | None
    kv_heads: int | None
    vocab: int | None
    tp_modules: dict[str, str]  # module name -> COLWISE / ROWWISE / VOCAB; empty: no TP plan
    tp_unplaced: list[str]  # linear layers in the stack the TP plan cannot place
    config: dict[str, int] = field(default_factory=dict)  # the config's sizes, where one exists
    keeps_kv_cache: bool = False  # a decoder served token by token (hf: causal LMs)
    experts: int = 0  # experts per mixture-of-experts layer; 0 for a dense model
    # Sums the layouts read again and again (per TP degree), kept once computed.
    cache: dict[tuple[object, ...], float] = field(default_factory=dict, repr=False)

    @property
    def total(self) -> int:
        return sum(p.numel for p in self.parameters)

    @property
    def tp_planned(self) -> bool:
        return bool(self.tp_modules) and not self.tp_unplaced

    def layer_numel(self) -> int:
        """Parameters of the largest layer of the stack."""
        if ("layer",) in self.cache:
            return int(self.cache[("layer",)])
        per_layer = Counter[int]()
        for p in self.parameters:
            if p.layer is not None:
                per_layer[p.layer] += p.numel
        self.cache[("layer",)] = max(per_layer.values(), default=0)
        return int(self.cache[("layer",)])

    def kv_per_token_layer(self, tp: int = 1) -> int | None:
        """Elements one token's keys and values take in one layer on one rank of `tp`:
        2 x ceil(kv_heads / tp) x head_dim (a replicated KV head is held whole by each of its
        ranks); None where the model keeps no KV cache or the config does not give both sizes."""
        kv_heads, head_dim = self.config.get("kv_heads"), self.config.get("head_dim")
        if not self.keeps_kv_cache or not kv_heads or not head_dim:
            return None
        return 2 * -(-kv_heads // tp) * head_dim

    def head_share(self, part: str, tp: int) -> float:
        """Share of a QUERY_PART or KV_PART parameter one rank of `tp` holds: its heads over
        all heads (padded or replicated as the module docstring says); 1/tp for the rest."""
        heads = self.heads if part == QUERY_PART else self.kv_heads if part == KV_PART else None
        if not heads:
            return 1 / tp
        return -(-heads // tp) / heads

    def kv_replication(self, tp: int) -> int:
        """Ranks holding each KV head at `tp` (NxD's kv_replicator); 1 where TP <= kv_heads."""
        kv = self.kv_heads or self.heads or 1
        return max(tp // kv, 1) if tp > kv else 1

    def outside_numel(self) -> int:
        return sum(p.numel for p in self.parameters if p.layer is None)

    def tp_degrees(self, most: int, training: bool = True) -> list[int]:
        """TP degrees up to `most` (the ranks of one instance). Training (NxD): degrees that
        divide the attention heads and either divide the KV heads or are a multiple of them
        (each KV head then replicated, `kv_replicator` = TP / kv_heads). Serving (NxD
        Inference): every degree that divides `most`, query heads padded and KV heads
        replicated up to it."""
        if not self.tp_planned or not self.heads:
            return [1]
        if not training:
            return [d for d in range(1, most + 1) if most % d == 0]
        kv = self.kv_heads or self.heads
        return [
            d for d in range(1, most + 1) if self.heads % d == 0 and (kv % d == 0 or d % kv == 0)
        ]

    def tp_problem(self) -> str:
        """Why no TP degree above 1 is planned, or ""."""
        if not self.tp_modules:
            return (
                "no TP plan: the model has none of the q/k/v/o, gate/up/down projections "
                "tensor parallelism splits"
            )
        if self.tp_unplaced:
            shown = ", ".join(self.tp_unplaced[:4])
            return f"no TP plan: the planner cannot place linear layers {shown}"
        if not self.heads:
            return "no TP plan: the attention head count could not be read"
        return ""


def find_stack(model: nn.Module) -> tuple[str, int]:
    """The ModuleList (or Sequential) with the most children of one class: the layer stack
    pipeline parallelism cuts and activation checkpointing wraps; ("", 0) where there is none."""
    from torch import nn

    best = ("", 0)
    for name, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)) or len(module) < 2:
            continue
        classes = {type(child) for child in module}
        sizes = {sum(p.numel() for p in child.parameters()) for child in module}
        if len(classes) == 1 and len(sizes) == 1 and sizes != {0} and len(module) > best[1]:
            best = (name, len(module))
    return best


def _layer_of(name: str, stack_path: str) -> int | None:
    prefix = f"{stack_path}." if stack_path else ""
    if not stack_path or not name.startswith(prefix):
        return None
    index = name[len(prefix) :].split(".", 1)[0]
    return int(index) if index.isdigit() else None


def _tp_role(module_name: str) -> str | None:
    leaf = module_name.rsplit(".", 1)[-1]
    if leaf in COLWISE_NAMES:
        return COLWISE
    if leaf in ROWWISE_NAMES:
        return ROWWISE
    if leaf in VOCAB_NAMES:
        return VOCAB
    in_experts = f".{EXPERTS_MODULE}." in f".{module_name}."
    if in_experts and leaf in EXPERT_COLWISE_NAMES | EXPERT_ROWWISE_NAMES:
        return EXPERT
    return None


def _attention_part(parameter_name: str) -> str:
    module = parameter_name.rsplit(".", 2)[-2] if parameter_name.count(".") >= 1 else ""
    if module in QUERY_NAMES:
        return QUERY_PART
    if module in KV_NAMES:
        return KV_PART
    return ""


def _is_router(module_name: str) -> bool:
    return module_name.rsplit(".", 1)[-1] in ROUTER_NAMES


def _fused_experts(module: nn.Module, name: str) -> bool:
    """A module named `experts` holding every expert's weights as stacked 3-D parameters."""
    return name.rsplit(".", 1)[-1] == EXPERTS_MODULE and any(
        p.dim() == 3 for p in module.parameters(recurse=False)
    )


def _count_experts(model: nn.Module) -> int:
    config = getattr(model, "config", None)
    for key in _EXPERT_COUNT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 0


def _count_heads(model: nn.Module) -> int | None:
    config = getattr(model, "config", None)
    for holder in (config, *model.modules()):
        for attribute in _HEAD_ATTRIBUTES:
            value = getattr(holder, attribute, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


def read_shape(
    model: nn.Module, name: str, source: str, config: dict[str, int] | None = None
) -> ModelShape:
    """The ModelShape of a model (meta or real: only shapes are read)."""
    from torch import nn

    stack_path, layers = find_stack(model)
    tp_modules: dict[str, str] = {}
    unplaced: list[str] = []
    for module_name, module in model.named_modules():
        role = _tp_role(module_name)
        if role is not None and isinstance(module, (nn.Linear, nn.Embedding)):
            tp_modules[module_name] = role
        elif _fused_experts(module, module_name):
            tp_modules[module_name] = EXPERT
        elif _is_router(module_name):
            continue  # replicated on every rank
        elif isinstance(module, nn.Linear) and _layer_of(module_name, stack_path) is not None:
            unplaced.append(module_name)
    if not any(role in (COLWISE, ROWWISE) for role in tp_modules.values()):
        tp_modules = {}
    owners = {
        f"{module_name}.{p}" if module_name else p: tp_modules.get(module_name, REPLICATED)
        for module_name, module in model.named_modules()
        for p, _ in module.named_parameters(recurse=False)
    }
    parameters = [
        ParameterInfo(
            n, p.numel(), _layer_of(n, stack_path), owners.get(n, REPLICATED), _attention_part(n)
        )
        for n, p in model.named_parameters()
    ]
    config = config or {}
    heads = config.get("heads") or _count_heads(model)
    return ModelShape(
        name=name,
        source=source,
        parameters=parameters,
        layers=layers,
        stack_path=stack_path,
        heads=heads,
        kv_heads=config.get("kv_heads") or heads,
        vocab=config.get("vocab"),
        tp_modules=tp_modules,
        tp_unplaced=unplaced,
        config=config,
        experts=_count_experts(model),
    )
