"""context.start, as each notebook's first cell calls it: parameters coerced against the
notebook's own parameters cell, the target resolved, the workload loaded from its spec."""

import pytest

from workbench import context
from workbench.errors import BadInput
from workbench.results import load_result
from workbench.targets import resolve_target_name
from workbench.workload import WorkloadSpec

PLAIN = "tests.fixtures.user_workloads:plain_module"


def test_values_are_coerced_to_the_declared_types_and_the_rest_take_their_defaults(tmp_path):
    namespace = {"steady_steps": "5", "modes": "eager", "target": "cpu", "out_dir": str(tmp_path)}
    ctx = context.start("01_baseline", namespace)
    assert ctx.params["steady_steps"] == 5
    assert ctx.params["modes"] == ["eager"]
    assert ctx.params["warmup_window"] == 10 and ctx.params["kinds"] == ["train", "infer"]
    assert "not_a_parameter" not in context.start("01_baseline", {**namespace, "x": 1}).params


def test_a_value_of_the_wrong_type_is_bad_input_naming_parameter_and_notebook(tmp_path):
    with pytest.raises(BadInput, match=r"Parameter 'steady_steps' \(01_baseline\) expects int"):
        context.start("01_baseline", {"steady_steps": "many", "out_dir": str(tmp_path)})


def test_the_target_is_resolved_and_the_reason_kept(tmp_path):
    cpu = {"target": "cpu", "out_dir": str(tmp_path)}
    explicit = context.start("00_environment", cpu, with_workload=False)
    assert explicit.target.name == "cpu"
    assert explicit.target_reason.startswith("requested explicitly")
    auto = context.start("00_environment", {"out_dir": str(tmp_path)}, with_workload=False)
    assert (auto.target.name, auto.target_reason) == resolve_target_name("auto")
    assert auto.target_reason.startswith("auto: ")
    with pytest.raises(BadInput, match="Target 'neuron' is not available here"):
        context.start("00_environment", {"target": "neuron"}, with_workload=False)


def test_the_workload_comes_from_the_notebooks_workload_parameters(tmp_path):
    namespace = {
        "workload": PLAIN,
        "input_shape": "3x4x4",
        "num_classes": 5,
        "batch_size": 6,
        "target": "cpu",
        "out_dir": str(tmp_path),
    }
    ctx = context.start("01_baseline", namespace)
    assert ctx.workload_spec == WorkloadSpec(PLAIN, "3x4x4", "float32", 5, 6)
    assert ctx.workload is not None and ctx.workload.batch_size == 6
    assert ctx.workload.spec == PLAIN
    with pytest.raises(BadInput, match="plain nn.Module"):
        context.start("01_baseline", {**namespace, "input_shape": ""})


def test_a_notebook_without_a_workload_loads_none(tmp_path):
    cpu = {"target": "cpu", "out_dir": str(tmp_path)}
    ctx = context.start("00_environment", cpu, with_workload=False)
    assert ctx.workload is None and ctx.workload_spec is None
    assert ctx.header()["workload"] is None


def test_out_dir_is_created_and_save_writes_the_result_with_its_header(tmp_path):
    out = tmp_path / "nested" / "run"
    ctx = context.start("01_baseline", {"target": "cpu", "out_dir": str(out)})
    assert ctx.out_dir == out and out.is_dir()
    path = ctx.save({"headline": "all good"})
    assert path == out / "01_baseline.json"
    record = load_result(path)
    assert record["notebook"] == "01_baseline" and record["data"] == {"headline": "all good"}
    assert record["target"]["name"] == "cpu"
    assert record["target"]["chosen_because"] == ctx.target_reason
    assert record["workload"]["name"] == "seed-mlp"
    assert record["parameters"]["out_dir"] == str(out)
