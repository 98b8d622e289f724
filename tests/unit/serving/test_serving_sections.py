"""Notebook 05's sections on real models: token timings of a tiny generating GPT-2 (prefill and
decode apart, the static-shape statement), a model without generate asked for them, a
concurrency the machine cannot give, and the notebook's parameters building the code's
defaults."""

from __future__ import annotations

import torch

from tests.fixtures.hf_workloads import gpt2_module
from workbench.params import NOTEBOOKS_DIR, notebook_parameters
from workbench.serving.calls import build_serving_model
from workbench.serving.question import QUESTION
from workbench.serving.records import EAGER, MAX_STREAMS_PER_CORE, ServingSettings
from workbench.serving.serve import Sections, usable_cores
from workbench.serving.tokens import generates, token_study
from workbench.targets import get_target
from workbench.workload import Workload, load_workload

CPU = get_target("cpu")


def _gpt2_workload() -> Workload:
    def tokens(size: int, generator: torch.Generator):
        ids = torch.randint(128, (size, 8), generator=generator)
        return {"input_ids": ids}, ids

    return Workload(
        name="tiny-gpt2-generating",
        model_factory=gpt2_module,
        batch_maker=tokens,
        loss_fn=lambda outputs, targets: outputs.logits.mean(),
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.1),
        batch_size=1,
        max_sequence_length=64,
    )


def test_token_timings_keep_prefill_and_decode_apart_and_state_the_shapes() -> None:
    workload = _gpt2_workload()
    model = build_serving_model(workload, CPU)
    assert generates(model)
    settings = ServingSettings(prompt_lengths=(4, 62), output_lengths=(3,), token_repeats=1)
    study, skipped, seconds = token_study(workload, CPU, model, settings)
    (cell,) = study.cells  # prompt 62 + 3 outputs exceed the 64 positions: said, not measured
    assert skipped and "exceed the model's 64 positions" in skipped[0]
    assert cell.ttft is not None and cell.prefill is not None and cell.tpot is not None
    assert cell.ttft.median >= cell.prefill.median
    assert len(cell.tpot.times) == 2 and cell.decode_gap is not None
    assert cell.tokens_per_second and seconds > 0
    assert study.prefill_shapes == 1 and study.decode_shapes == 2  # cache lengths 5 and 6
    assert "one compile" in study.statement and cell.warmup_compiles == 0  # eager compiles none


def test_token_timings_asked_of_a_model_without_generate_is_one_sentence() -> None:
    run = Sections(
        load_workload("seed-mlp"), CPU, ServingSettings(token_timings="on"), lambda _: None
    )
    assert run.tokens() is None
    (problem,) = run.problems
    assert problem.section == "tokens" and "has no generate" in problem.sentence
    quiet = Sections(load_workload("seed-mlp"), CPU, ServingSettings(), lambda _: None)
    assert quiet.tokens() is None and not quiet.problems  # auto: nothing to say


def test_a_concurrency_the_machine_cannot_give_is_one_sentence_and_the_rest_measure() -> None:
    too_many = MAX_STREAMS_PER_CORE * usable_cores() + 1
    settings = ServingSettings(concurrency=(1, too_many), arrival_requests=5, modes=(EAGER,))
    run = Sections(load_workload("seed-mlp"), CPU, settings, lambda _: None)
    served = run.batch_one()
    assert served is not None
    points = run.closed(served)
    assert [p.streams for p in points] == [1] and points[0].requests == 5
    (problem,) = run.problems
    assert str(too_many) in problem.sentence and "measured up to 1" in problem.sentence


def test_the_notebook_parameters_build_the_code_defaults() -> None:
    declared = notebook_parameters(NOTEBOOKS_DIR / "05_serving.ipynb")
    defaults = {name: p.default for name, p in declared.items()}
    assert QUESTION.settings(defaults) == ServingSettings()
    # batch_sizes is declared as serving_batch_sizes: 04's batch_sizes is its training sweep.
    fields = set(ServingSettings.__dataclass_fields__) - {"batch_sizes"} | {"serving_batch_sizes"}
    assert fields <= set(defaults), sorted(fields - set(defaults))
    assert ServingSettings(modes=(EAGER,)).served_mode == EAGER
