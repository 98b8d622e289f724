"""The KV cache of a served decoder: per token and layer 2 x kv_heads x head_dim elements, split
by TP, and vLLM Neuron's default KV budget (acceptance_inference_parallelism.md 2.4)."""

from __future__ import annotations

import pytest

from workbench.planning.instances import GiB
from workbench.planning.kv_cache import vllm_budget
from workbench.planning.layouts import NONE, PRECISIONS, Layout, RankMemory, rank_memory
from workbench.planning.recommend import Candidate
from workbench.planning.shapes import ModelShape

MiB = 2**20


def _llama_8b_geometry(keeps_kv_cache: bool = True) -> ModelShape:
    """Llama-3-8B's attention geometry: 32 layers, 8 KV heads of 128 (no parameters needed)."""
    return ModelShape(
        name="llama-like",
        source="test",
        parameters=[],
        layers=32,
        stack_path="model.layers",
        heads=32,
        kv_heads=8,
        vocab=None,
        tp_modules={},
        tp_unplaced=[],
        config={"kv_heads": 8, "head_dim": 128},
        keeps_kv_cache=keeps_kv_cache,
    )


def _served(shape: ModelShape, tp: int, sequences: int, training: bool = False) -> RankMemory:
    layout = Layout(tp, 1, 1, NONE, False)
    return rank_memory(shape, None, layout, PRECISIONS["bf16"], sequences, 4096, training)


def test_kv_cache_is_two_x_kv_heads_x_head_dim_per_token_and_layer_split_by_tp() -> None:
    # 4096 tokens x 32 layers x 2 x 8 x 128 x 2 bytes = 512 MiB for one sequence on one rank.
    shape = _llama_8b_geometry()
    assert _served(shape, 1, 1).kv_cache == 512 * MiB
    assert _served(shape, 2, 1).kv_cache == 256 * MiB
    assert _served(shape, 2, 3).kv_cache == 3 * 256 * MiB
    assert _served(shape, 2, 3).held == pytest.approx(3 * 256 * MiB)  # held for the whole serve


def test_no_kv_cache_in_training_or_for_a_model_that_keeps_none() -> None:
    assert _served(_llama_8b_geometry(), 2, 1, training=True).kv_cache == 0
    assert _served(_llama_8b_geometry(keeps_kv_cache=False), 2, 1).kv_cache == 0


def _candidate(parameters_gib: float) -> Candidate:
    memory = RankMemory(parameters_gib * GiB, 0, 0, 0, 0, 0)
    return Candidate(Layout(2, 1, 12, NONE, False), memory, 16 * GiB, 1, True, "")


def test_vllm_budget_is_capped_at_thirty_percent_of_the_usable_hbm() -> None:
    # 16 GiB x 0.9 = 14.4 GiB; 14.4 - 7.48 of weights = 6.92 GiB, above the cap 14.4 x 0.3.
    budget = vllm_budget(_candidate(7.48), 256 * MiB, 4096)
    assert budget.budget_bytes == pytest.approx(16 * GiB * 0.9 * 0.3)
    assert budget.sequences == int(16 * GiB * 0.9 * 0.3 // (256 * MiB)) == 17


def test_vllm_budget_is_what_the_weights_leave_and_never_negative() -> None:
    tight = vllm_budget(_candidate(14.0), 256 * MiB, 4096)
    assert tight.budget_bytes == pytest.approx((16 * 0.9 - 14.0) * GiB)
    assert tight.sequences == 1
    full = vllm_budget(_candidate(15.0), 256 * MiB, 4096)
    assert full.budget_bytes == 0 and full.sequences == 0
    assert "raise VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION" in full.sentence()
