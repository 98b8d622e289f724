"""The layout rules on real configs sized on the meta device (no probe): TP past the KV heads
with KV replication, padded query heads when served, experts split by TP and EP with the router
whole, sequence parallelism and selective recomputation against Korthikanti et al. 2022, the
collectives each layout adds, the runtime's per-core reserve and the host's memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.planning.activations import (
    ActivationModel,
    OptimizerProfile,
    SavedTerm,
    korthikanti_layer_bytes,
)
from workbench.planning.hf_config import load_hf_model
from workbench.planning.instances import GiB, get_instance
from workbench.planning.layouts import (
    FSDP,
    NONE,
    PRECISIONS,
    ZERO1,
    Layout,
    enumerate_layouts,
    kv_bytes_per_sequence,
    rank_memory,
)
from workbench.planning.planner import HostNeed
from workbench.planning.recommend import RUNTIME_RESERVE, reserve_for
from workbench.planning.shapes import (
    EXPERT,
    KV_PART,
    QUERY_PART,
    REPLICATED,
    ModelShape,
    read_shape,
)
from workbench.planning.symbols import BATCH, HIDDEN, SEQ, Formula

CONFIGS = Path(__file__).resolve().parents[2] / "fixtures" / "hf_configs"


def _shape(name: str) -> ModelShape:
    model = load_hf_model(f"hf:{CONFIGS / name}")
    shape = read_shape(model.build_meta(), name, "meta", model.sizes)
    shape.keeps_kv_cache = model.keeps_kv_cache
    return shape


@pytest.fixture(scope="module")
def llama_70b() -> ModelShape:
    return _shape("llama-3-70b")


@pytest.fixture(scope="module")
def mixtral() -> ModelShape:
    return _shape("mixtral-8x7b")


def test_training_tp_goes_past_the_kv_heads_by_replicating_them(llama_70b: ModelShape) -> None:
    # 64 heads, 8 KV heads: TP16 and TP32 replicate each KV head on 2 and 4 ranks (NxD's
    # kv_replicator 4 in run_llama3_70B_tp_pp.sh); TP3, TP12 and TP24 divide no head count.
    assert llama_70b.tp_degrees(32) == [1, 2, 4, 8, 16, 32]
    assert llama_70b.kv_replication(32) == 4 and llama_70b.kv_replication(8) == 1
    assert 24 not in llama_70b.tp_degrees(32)


def test_serving_tp_reaches_the_instance_cores_with_padded_heads(llama_70b: ModelShape) -> None:
    # inf2.48xlarge's 24 cores: NxD Inference pads 64 query heads to 72 and replicates KV heads.
    assert 24 in llama_70b.tp_degrees(24, training=False)
    assert llama_70b.tp_degrees(64, training=False)[-1] == 64  # trn2.48xlarge at LNC=2
    assert llama_70b.head_share(QUERY_PART, 24) == pytest.approx(3 / 64)  # ceil(64/24) = 3
    assert llama_70b.head_share(QUERY_PART, 32) == pytest.approx(1 / 32)
    assert llama_70b.head_share(KV_PART, 32) == pytest.approx(1 / 8)  # one whole KV head


def test_replicated_kv_heads_cost_memory_per_rank(llama_70b: ModelShape) -> None:
    bf16 = PRECISIONS["bf16"]
    # Past the KV heads, each rank keeps a whole head of the cache: TP32 holds what TP8 holds.
    tp8 = kv_bytes_per_sequence(llama_70b, Layout(8, 1, 1, NONE, False), bf16, 4096)
    tp32 = kv_bytes_per_sequence(llama_70b, Layout(32, 1, 1, NONE, False), bf16, 4096)
    tp4 = kv_bytes_per_sequence(llama_70b, Layout(4, 1, 1, NONE, False), bf16, 4096)
    assert tp32 == tp8 == 4096 * 80 * 2 * 128 * 2
    assert tp4 == 2 * tp8
    # The k and v projections too: TP32 holds 4x its even share of them.
    even = rank_memory(llama_70b, None, Layout(32, 1, 1, NONE, False), bf16, 1, 4096, False)
    kv_numel = sum(p.numel for p in llama_70b.parameters if p.part == KV_PART)
    without_replication = (llama_70b.total - kv_numel) / 32 + kv_numel / 32
    assert even.parameters == pytest.approx(
        (without_replication - kv_numel / 32 + kv_numel / 8) * 2, rel=1e-3
    )


def test_experts_split_by_tp_and_ep_and_the_router_stays_whole(mixtral: ModelShape) -> None:
    roles = {p.name.split("layers.0.", 1)[-1]: p.tp for p in mixtral.parameters if ".0." in p.name}
    assert roles["mlp.experts.gate_up_proj"] == roles["mlp.experts.down_proj"] == EXPERT
    assert roles["mlp.gate.weight"] == REPLICATED
    assert mixtral.experts == 8 and mixtral.tp_planned
    precision = PRECISIONS["bf16-mixed"]
    tp8_pp4 = rank_memory(mixtral, None, Layout(8, 4, 1, NONE, False), precision, 1, 4096)
    # 46.7 B parameters over TP8 x PP4 in bf16: about 2.7 GiB, every expert split (21 GiB whole).
    assert 2.6 * GiB < tp8_pp4.parameters < 2.8 * GiB
    ep4 = rank_memory(mixtral, None, Layout(8, 4, 4, NONE, False, ep=4), precision, 1, 4096)
    assert ep4.parameters < 0.4 * tp8_pp4.parameters


def test_layouts_include_sp_selective_and_ep_and_never_fsdp_with_pipelines(
    mixtral: ModelShape,
) -> None:
    layouts = enumerate_layouts(mixtral, 256, 32)
    assert Layout(32, 4, 2, ZERO1, True, False, True, 1) in layouts
    assert any(lay.selective and lay.sequence_parallel for lay in layouts)
    assert any(lay.ep == 8 for lay in layouts)
    assert not any(lay.sharding == FSDP and lay.pp > 1 for lay in layouts)
    served = enumerate_layouts(mixtral, 32, 32, training=False)
    assert not any(lay.sequence_parallel or lay.selective or lay.checkpointing for lay in served)


def test_korthikanti_activation_formulas() -> None:
    s, b, h, a = 2048, 1, 12288, 96  # GPT-3 175B's layer, the paper's example
    plain = korthikanti_layer_bytes(s, b, h, a)
    assert plain == s * b * h * (34 + 5 * a * s / h)
    assert korthikanti_layer_bytes(s, b, h, a, tp=8) == s * b * h * (
        10 + 24 / 8 + 5 * a * s / h / 8
    )
    assert korthikanti_layer_bytes(s, b, h, a, 8, sequence_parallel=True) == plain / 8
    selective = korthikanti_layer_bytes(s, b, h, a, 8, sequence_parallel=True, selective=True)
    assert selective == 34 * s * b * h / 8


def _model(*terms: SavedTerm) -> ActivationModel:
    return ActivationModel(
        "test", list(terms), 1, None, 0.0, [], {HIDDEN: 100.0}, None, OptimizerProfile("x", 2, 1)
    )


def _term(sharded: bool, *powers: tuple[str, int]) -> SavedTerm:
    return SavedTerm("model.layers.0.x", True, sharded, True, 4, Formula(1, powers))


def test_sp_splits_the_unsharded_and_selective_drops_the_attention_core() -> None:
    split = _term(True, (BATCH, 1), (HIDDEN, 1), (SEQ, 1))
    whole = _term(False, (BATCH, 1), (HIDDEN, 1), (SEQ, 1))
    scores = _term(True, (BATCH, 1), (SEQ, 2))
    model = _model(split, whole, scores)
    seq, tp = 64, 4
    base = (64 * 100) / tp + 64 * 100 + 64 * 64 / tp
    assert model.estimate(1, seq, 1, tp, 1).saved == pytest.approx(base)
    sp = model.estimate(1, seq, 1, tp, 1, sequence_parallel=True).saved
    assert sp == pytest.approx((64 * 100 * 2 + 64 * 64) / tp)
    both = model.estimate(1, seq, 1, tp, 1, sequence_parallel=True, selective=True).saved
    assert both == pytest.approx(64 * 100 * 2 / tp)
    assert model.attention_core_terms == 1


def test_each_layout_names_the_collectives_it_adds() -> None:
    sp = Layout(8, 1, 4, ZERO1, False, sequence_parallel=True).collectives()
    assert any("reduce-scatter along the sequence" in c for c in sp)
    assert any("all-reduce after each" in c for c in Layout(8, 1, 4, ZERO1, False).collectives())
    moe = Layout(8, 4, 4, ZERO1, False, ep=4).collectives()
    assert any("all-to-all" in c for c in moe) and any("point-to-point" in c for c in moe)
    assert Layout(1, 1, 1, NONE, False).collectives() == []
    assert Layout(8, 1, 2, ZERO1, True).collectives(training=False) == [
        "TP: an all-reduce after each attention and MLP block, forward and backward"
    ]


def test_the_runtime_reserve_replaces_a_flat_tenth() -> None:
    # transformers-neuronx issue 92: 482 + 512 + 1470 + 367 MB of a 16 GB core.
    assert RUNTIME_RESERVE == 2_831 * 10**6
    assert reserve_for(get_instance("trn1.32xlarge")) == RUNTIME_RESERVE
    assert reserve_for(get_instance("trn2.48xlarge")) == RUNTIME_RESERVE


def test_host_memory_holds_the_checkpoint_and_the_shards_or_is_oom_killed() -> None:
    weights = 14.96 * GiB  # Llama-3.1-8B in bf16
    tight = HostNeed(0, 0, 32 * GiB, whole_model=weights, instance_shards=weights)
    assert not tight.fits and "OOM-killed" in tight.sentence()
    roomy = HostNeed(0, 0, 128 * GiB, whole_model=weights, instance_shards=weights)
    assert roomy.fits
    unknown = HostNeed(0, 0, None, whole_model=weights, instance_shards=weights)
    assert unknown.fits and "not judged" in unknown.sentence()
