"""The planner's parts in process: instance table, formulas, layouts, the rule, bad input."""

from __future__ import annotations

import sys

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


def _candidate(layout: Layout, peak: float, capacity: int = 100, reserve: int = 0) -> Candidate:
    return Candidate(layout, RankMemory(peak, 0, 0, 0, 0, 0), capacity, 4, True, "", reserve)


def test_the_rule_takes_the_least_model_parallelism_within_the_runtime_reserve() -> None:
    past_reserve = _candidate(Layout(1, 1, 8, ZERO1, False), 85, reserve=20)  # 85 > 100 - 20
    tp2 = _candidate(Layout(2, 1, 4, ZERO1, False), 60, reserve=20)
    tp4 = _candidate(Layout(4, 1, 2, ZERO1, False), 30, reserve=20)
    assert not past_reserve.fits and tp2.fits
    assert choose([past_reserve, tp4, tp2]) is tp2
    # Less recomputation first among equal model parallelism: none, then selective, then full.
    full = _candidate(Layout(2, 1, 4, ZERO1, True), 40, reserve=20)
    selective = _candidate(Layout(2, 1, 4, ZERO1, False, selective=True), 50, reserve=20)
    assert choose([full, selective]) is selective


def test_a_floor_never_fits() -> None:
    floor = _candidate(Layout(8, 1, 4, ZERO1, False), 10)
    floor = Candidate(floor.layout, floor.memory, 100, 0, True, "", 0, complete=False)
    assert not floor.fits and choose([floor]) is None


def test_training_rules_fsdp_on_trn1_and_tp_in_chip_with_fsdp_on_trn2() -> None:
    trn1, trn2 = get_instance("trn1.32xlarge"), get_instance("trn2.48xlarge")
    layout = Layout(1, 1, 32, FSDP, False)
    assert "Trn1" in availability(layout, trn1)
    assert availability(layout, trn2) == ""
    assert "chip" in availability(Layout(8, 1, 8, FSDP, False), trn2)
    # NxD Training runs TP32 x PP4 with ZeRO-1 across chips on trn2 (hf_llama3_70B_trn2_config).
    assert availability(Layout(32, 4, 4, ZERO1, False, True, True), trn2) == ""


def test_serving_is_not_held_to_the_training_rules() -> None:
    trn2 = get_instance("trn2.48xlarge")
    assert availability(Layout(8, 1, 8, FSDP, False), trn2, training=True)
    assert availability(Layout(64, 1, 1, NONE, False), trn2, training=False) == ""


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


def test_kineto_lines_are_kept_off_stderr_and_other_lines_pass(
    capfd: pytest.CaptureFixture[str],
) -> None:
    from torch.profiler import ProfilerActivity, profile

    from workbench.planning.tracking import without_kineto_lines

    raw = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    raw.start()
    raw.stop()
    assert "profiler_start" in capfd.readouterr().err  # what torch's profiler writes unasked
    quiet = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with without_kineto_lines():
        quiet.start()
        print("a warning of the model's own", file=sys.stderr)
    with without_kineto_lines():
        quiet.stop()
    err = capfd.readouterr().err
    assert "USDT" not in err and "profiler_st" not in err
    assert "a warning of the model's own" in err


def test_a_probe_that_cannot_run_leaves_a_plan_that_never_says_fits() -> None:
    """A workload whose training step raises: the plan names what it could not size, every
    candidate is a floor, and the headline says whether it fits cannot be said."""
    import dataclasses

    from workbench.planning import make_plan
    from workbench.workload import WorkloadSpec

    def broken_loss(output: object, targets: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("loss not defined for this output")

    workload = dataclasses.replace(WorkloadSpec(spec="seed-mlp").load(), loss_fn=broken_loss)
    plan = make_plan(workload, "trn1.32xlarge")
    assert any("training step failed" in item for item in plan.unsized)
    assert not plan.complete and not plan.fits and plan.chosen is None
    assert not any(c.fits for c in plan.candidates)
    assert "cannot be said" in plan.headline() and "lower bound" in plan.headline()
    assert " fits" not in plan.headline().replace("Whether it fits", "")
    healthy = make_plan(WorkloadSpec(spec="seed-mlp").load(), "trn1.32xlarge")
    assert healthy.complete and healthy.fits
