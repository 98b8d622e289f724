"""The planner's parts in process: instance table, formulas, layouts, the rule, bad input."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.errors import BadInput
from workbench.planning.instances import GiB, get_instance
from workbench.planning.layouts import FSDP, NONE, ZERO1, Layout, RankMemory
from workbench.planning.recommend import Candidate, availability, batch_plan, choose
from workbench.planning.shapes import read_shape
from workbench.planning.symbols import BATCH, SEQ, decode, factorize


def test_instances_follow_the_reference() -> None:
    trn1 = get_instance("trn1.32xlarge")
    trn2 = get_instance("trn2.48xlarge")
    assert (trn1.ranks, trn1.hbm_per_rank_bytes) == (32, 16 * GiB)
    assert (trn2.ranks, trn2.hbm_per_rank_bytes) == (64, 24 * GiB)
    assert get_instance("trn2.3xlarge").ranks == 4


def test_unknown_instance_names_the_closest() -> None:
    with pytest.raises(BadInput, match=r"did you mean trn1\.32xlarge\?"):
        get_instance("trn1.32xlarg")


def test_a_size_decodes_into_dimensions() -> None:
    assert factorize(19 * 29 * 770) == {2: 1, 5: 1, 7: 1, 11: 1, 19: 1, 29: 1}
    formula = decode(19 * 29 * 3 * 17, {19: BATCH, 29: SEQ, 17: "vocab"})
    assert formula.constant == 3
    assert formula.value({BATCH: 2, SEQ: 10, "vocab": 100}) == 3 * 2 * 10 * 100


class _Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
        self.head = nn.Linear(8, 2)


def test_a_stack_of_layers_is_found_and_no_tp_plan_is_invented() -> None:
    with torch.device("meta"):
        shape = read_shape(_Stack(), "stack", "test")
    assert (shape.stack_path, shape.layers) == ("layers", 3)
    assert shape.tp_degrees(8) == [1]
    assert "no TP plan" in shape.tp_problem()


def _candidate(layout: Layout, peak: float, capacity: int = 100) -> Candidate:
    return Candidate(layout, RankMemory(peak, 0, 0, 0, 0, 0), capacity, 4, True, "")


def test_the_rule_takes_the_least_model_parallelism_with_headroom() -> None:
    tight = _candidate(Layout(1, 1, 8, ZERO1, False), 95)  # fits, but 5 % headroom
    tp2 = _candidate(Layout(2, 1, 4, ZERO1, False), 60)
    tp4 = _candidate(Layout(4, 1, 2, ZERO1, False), 30)
    assert choose([tight, tp4, tp2]) is tp2


def test_fsdp_is_not_offered_on_trn1() -> None:
    layout = Layout(1, 1, 32, FSDP, False)
    assert "Trn1" in availability(layout, get_instance("trn1.32xlarge"))
    assert availability(layout, get_instance("trn2.48xlarge")) == ""
    assert "chip" in availability(Layout(8, 1, 8, NONE, False), get_instance("trn2.48xlarge"))


def test_global_batch_must_divide_by_dp_times_micro_batch() -> None:
    chosen = _candidate(Layout(8, 1, 4, ZERO1, False), 50)
    assert batch_plan(chosen, 1024).equation() == (
        "4 per rank x 4 data-parallel x 64 accumulation = 1024"
    )
    with pytest.raises(BadInput, match="not divisible by DP x micro-batch = 4 x 3"):
        batch_plan(chosen, 1024, micro_batch=3)


def test_the_memory_check_passes_a_prediction_within_its_aim_and_fails_one_outside() -> None:
    from workbench.planning.sharded import LayoutCheck, RankCheck

    def check(*predicted: float) -> LayoutCheck:
        ranks = [RankCheck(r, 1_000_000, p, 1_080_000) for r, p in enumerate(predicted)]
        return LayoutCheck("fsdp2", len(ranks), "FSDP2", 0.0, 0.0, 0.0, "", ranks)

    assert check(1_190_000, 810_000).memory_within_aim
    assert not check(1_000_000, 790_000).memory_within_aim  # one rank off fails the layout
    assert not check(1_210_000).memory_within_aim
    assert not LayoutCheck("fsdp2", 2, "FSDP2", 0.0, 0.0, 0.0, "").memory_within_aim
