"""`workbench plan -p`: the workload parameters `run` takes, routed to what plan sizes."""

from __future__ import annotations

import pytest

from workbench.errors import BadInput
from workbench.planning.command import planned_workload
from workbench.planning.hf_config import load_hf_model


def test_an_hf_config_is_planned_with_the_hf_config_run_would_take():
    spec, hf_config = planned_workload("hf:gpt2", ["hf_config=n_layer=3,n_embd=96"])
    assert (spec, hf_config) == ("hf:gpt2", "n_layer=3,n_embd=96")
    model = load_hf_model(spec, hf_config)
    assert (model.config.n_layer, model.config.n_embd) == (3, 96)
    assert load_hf_model(spec).config.n_layer == 12  # without it, the config as it is


def test_a_built_in_workload_is_built_with_the_parameters_given():
    workload, hf_config = planned_workload("seed-mlp", ["batch_size=8"])
    assert (workload.batch_size, hf_config) == (8, "")
    assert planned_workload("seed-mlp", []) == ("seed-mlp", "")


@pytest.mark.parametrize(
    ("spec", "pairs", "fragment"),
    [
        ("seed-mlp", ["steady_steps=5"], "'steady_steps' is not one plan takes"),
        ("seed-mlp", ["batch_size=many"], "'batch_size' (01_baseline) expects int"),
        ("seed-mlp", ["hf_config=n_layer=2"], "hf_config applies to hf: workloads"),
        ("hf:gpt2", ["batch_size=8"], "batch_size does not change the model it sizes"),
        ("hf:gpt2", ["hf_config=n_layers=2"], "hf_config key 'n_layers' is not a field"),
    ],
)
def test_a_parameter_plan_cannot_use_is_one_sentence(spec, pairs, fragment):
    with pytest.raises(BadInput, match=None) as refused:
        workload, hf_config = planned_workload(spec, pairs)
        load_hf_model(workload, hf_config)
    assert fragment in str(refused.value)
