"""Token match and logit matching as NxD Inference's check_accuracy and check_accuracy_logits
define them: free-running greedy tokens compared with exact equality (the gated rate), logit
matching teacher-forced past a divergence within NxD's tolerances, and a tie excused only when
the run's own logit error there is within the precision's tolerance too. The planted language
model ties two tokens at every position; its compiled path moves one of them by 0.5 (real
torch.compile: Dynamo traces it, with its eager backend to keep the test quick), as a silent
miscompile would."""

import torch
from torch import nn

from workbench.numerics import acceptance
from workbench.numerics.acceptance_records import (
    GATE_FAIL,
    GATE_PASS,
    LIVENESS,
    LOGIT_MATCH,
    TOKEN_MATCH,
    TOP1,
    AcceptanceRule,
    RunAcceptance,
)
from workbench.numerics.capture import FP32, PRECISIONS, RunSpec
from workbench.numerics.token_match import (
    AcceptanceSet,
    agreement,
    build_acceptance_set,
    generated_by,
    logits_on,
    position_stats,
    set_reference,
    topk_errors,
)
from workbench.numerics.validation import HeldOutBatches
from workbench.targets.cpu import CpuTarget
from workbench.workload import TASK_LANGUAGE_MODEL, Workload, token_cross_entropy

CPU = CpuTarget()
RULE = AcceptanceRule()
VOCAB = 16
# The token planted level with the arg-max: the highest id, so an eager arg-max picks the other.
TIED = VOCAB - 1


def _gates(found):
    gates = acceptance.gates(
        RunAcceptance(agreement=found), RULE, acceptance.Prepared(None, None, [1], None), None
    )
    return {g.gate: g for g in gates}


class _TiedLM(nn.Module):
    """A causal language model whose logits tie its arg-max with token TIED at every position;
    `planted` is what its compiled path adds to the tied logit."""

    def __init__(self, planted: float) -> None:
        super().__init__()
        self.planted = planted
        self.embed = nn.Embedding(VOCAB, 8)
        self.head = nn.Linear(8, VOCAB)

    def forward(self, tokens):
        # Each position sees the running mean of the embeddings so far: causal.
        x = self.embed(tokens).cumsum(dim=1) / torch.arange(1, tokens.shape[1] + 1).view(1, -1, 1)
        logits = self.head(x)[..., :TIED]
        tied = logits.max(dim=-1, keepdim=True).values
        if torch.compiler.is_compiling():
            tied = tied + self.planted
        return torch.cat([logits, tied], dim=-1)

    def generate(self, tokens, max_new_tokens):  # marks the model as generating
        raise NotImplementedError("the workbook decodes greedily itself")


def _tokens(size, generator):
    sequence = torch.randint(TIED, (size, 13), generator=generator)
    return (sequence[:, :-1],), sequence[:, 1:]


def _workload(planted: float) -> Workload:
    return Workload(
        name="tied-lm",
        model_factory=lambda: _TiedLM(planted),
        batch_maker=_tokens,
        loss_fn=token_cross_entropy,
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.1),
        batch_size=5,
        task=TASK_LANGUAGE_MODEL,
    )


def _compared(planted: float, spec: RunSpec, compiled: bool):
    """The acceptance set from the eager fp32 reference, and one run's agreement with it."""
    workload = _workload(planted)
    torch.manual_seed(0)
    model = workload.model_factory().eval()
    held_out = HeldOutBatches([workload.batch_maker(5, torch.Generator().manual_seed(1))], "test")
    reference_spec = RunSpec(CPU, FP32)
    aset, notes = build_acceptance_set(workload, model, held_out, 5, 4, 8, reference_spec)
    assert aset.kind == TOKEN_MATCH and not notes
    set_reference(aset, logits_on(model, reference_spec, workload, aset), None)
    forward = torch.compile(model, backend="eager") if compiled else model
    logits = logits_on(forward, spec, workload, aset)
    stats = position_stats(aset, logits, generated_by(forward, spec, workload, aset))
    # The tie tolerance: the CPU run's own logit error at the run's precision.
    tolerance = position_stats(aset, logits_on(model, spec, workload, aset)).error.clamp_min(1e-7)
    return agreement(aset, stats, tolerance, RULE.cosine_p5, "cpu", RULE.divergence_tolerance)


def test_a_planted_half_logit_shift_at_a_tie_fails_token_match_and_logit_matching():
    found = _compared(0.5, RunSpec(CPU, FP32, compiled=True), compiled=True)
    assert found.free_running and found.compared == 40
    assert found.exact_matches == 0 and found.rate == 0.0
    assert found.near_ties == 0  # the run's own logit error (0.5) is far beyond its tolerance
    assert found.divergences == 40 and found.divergence_difference_max >= 0.5
    gates = _gates(found)
    assert gates[TOKEN_MATCH].status == GATE_FAIL and gates[LIVENESS].status == GATE_FAIL
    assert gates[LOGIT_MATCH].status == GATE_FAIL
    assert gates[TOKEN_MATCH].measured.startswith("0.0% exact (0 of 40 free-running greedy tokens")


def test_the_sound_tied_model_passes_compiled_and_in_bf16():
    for spec, compiled in (
        (RunSpec(CPU, FP32, compiled=True), True),
        (RunSpec(CPU, PRECISIONS["bf16-autocast"]), False),
    ):
        found = _compared(0.0, spec, compiled)
        gates = _gates(found)
        assert found.exact_matches == 40 and found.logits_matched, found
        assert gates[TOKEN_MATCH].status == gates[LOGIT_MATCH].status == GATE_PASS
        assert gates[TOKEN_MATCH].measured.startswith("100.0% exact (40 of 40")


def _token_set(reference: torch.Tensor) -> AcceptanceSet:
    """10 prompts x 10 generated tokens whose free-running tokens are the reference's arg-max."""
    aset = AcceptanceSet(TOKEN_MATCH, [], 7, 10, "test")
    set_reference(aset, reference, None)
    aset.reference_generated = aset.reference_tokens.reshape(10, 10)
    return aset


def _token_agreement(share_flipped: float, shift: float, tolerance: float = 1e-6):
    """100 positions of 8 logits; a share of them with the run's arg-max moved by `shift` onto
    a token the reference ties with its own."""
    generator = torch.Generator().manual_seed(0)
    reference = torch.randn(100, 8, generator=generator, dtype=torch.float64)
    rows = torch.arange(int(share_flipped * 100))
    second = (reference[rows].argmax(-1) + 1) % 8
    reference[rows, second] = reference[rows].amax(-1) - 1e-9  # a near tie
    run = reference.clone()
    run[rows, second] += shift
    aset = _token_set(reference)
    stats = position_stats(aset, run, run.argmax(-1))
    return agreement(
        aset, stats, torch.full((100,), tolerance), RULE.cosine_p5, "cpu", RULE.divergence_tolerance
    )


def test_the_exact_rate_is_gated_at_95_percent_and_liveness_at_30():
    for share, token, live in ((0.03, GATE_PASS, GATE_PASS), (0.10, GATE_FAIL, GATE_PASS)):
        gates = _gates(_token_agreement(share, shift=1e-6))
        assert gates[TOKEN_MATCH].status == token and gates[LIVENESS].status == live
    gates = _gates(_token_agreement(0.8, shift=1e-6))
    assert gates[LIVENESS].status == GATE_FAIL
    assert gates[LIVENESS].measured.startswith("20.0% exact")


def test_a_tie_is_excused_only_when_the_runs_own_logit_error_is_within_tolerance():
    # The run moved the tied logit within its precision's error: a tie, excused in logit matching.
    within = _token_agreement(0.10, shift=1e-6)
    assert within.near_ties == 10 and within.logits_matched is True
    assert within.exact_matches == 90 and within.rate == 0.9  # ties never raise the exact rate
    # Moved by 0.5 (far beyond its error, the reference's margin as tiny as before): no tie.
    moved = _token_agreement(0.10, shift=0.5)
    assert moved.near_ties == 0 and moved.logits_matched is False
    assert moved.first_logit_failure == "prompt 1, generated token 1"


def test_a_divergence_within_nxds_tolerance_passes_logit_matching_without_a_tie():
    # No tie tolerance at all (None): only NxD's own divergence difference can accept it.
    generator = torch.Generator().manual_seed(0)
    reference = torch.randn(100, 8, generator=generator, dtype=torch.float64)
    top, second = int(reference[0].argmax()), int(reference[0].argmax() + 1) % 8
    reference[0, second] = reference[0, top] - 1e-4
    run = reference.clone()
    run[0, second] = reference[0, top] + 4e-4  # diverges by 0.0004 < 0.001
    aset = _token_set(reference)
    found = agreement(aset, position_stats(aset, run, run.argmax(-1)), None, 0.95, None)
    assert found.divergences == 1 and found.near_ties == 0 and found.logits_matched is True
    assert found.positions_outside_tolerance == 0
    run[0, second] = reference[0, top] + 5e-3  # 0.005: beyond it, still within the top-k map
    found = agreement(aset, position_stats(aset, run, run.argmax(-1)), None, 0.95, None)
    assert found.logits_matched is False


def test_nxd_top_k_errors_follow_its_tolerance_map_after_a_constant_shift():
    generator = torch.Generator().manual_seed(3)
    reference = torch.randn(4, 2000, generator=generator, dtype=torch.float64) * 3
    shifted = reference + 7.0  # a constant shift is removed first
    assert topk_errors(reference, shifted).max() <= 0  # |error| - atol: nothing left
    noisy = reference.clone()
    top = reference.argmax(-1)
    noisy[torch.arange(4), top] += 0.04 * reference.abs().amax(-1)  # 4% on the top token
    errors = topk_errors(reference, noisy)
    assert (errors[:, 3] > 0.01).all()  # top 5: beyond 0.01
    assert (errors[:, 0] < 0.05).all()  # all: within 0.05


def test_top1_agreement_still_counts_excused_ties_and_shows_the_exact_rate_first():
    generator = torch.Generator().manual_seed(0)
    reference = torch.randn(100, 8, generator=generator, dtype=torch.float64)
    rows = torch.arange(4)
    second = (reference[rows].argmax(-1) + 1) % 8
    reference[rows, second] = reference[rows].amax(-1) - 1e-9
    run = reference.clone()
    run[rows, second] += 1e-7
    aset = AcceptanceSet(TOP1, [], 0, None, "test")
    set_reference(aset, reference, None)
    found = agreement(aset, position_stats(aset, run), torch.full((100,), 1e-6), 0.95, "cpu")
    assert found.exact_matches == 96 and found.near_ties == 4 and found.rate == 1.0
    assert found.logits_matched is None
    gates = _gates(found)
    assert gates[TOP1].status == GATE_PASS and LOGIT_MATCH not in gates
    assert gates[TOP1].measured.startswith("96.0% exact (96 of 100 positions; 100.0% with 4 ties")
