"""Workloads: built-ins are what they claim to be; user specs load or fail with one sentence."""

import json
import pickle
from dataclasses import asdict

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from tests.fixtures import REPO_ROOT
from workbench.errors import EXIT_BAD_INPUT, BadInput
from workbench.tuning.parallel import RankJob
from workbench.workload import WorkloadSpec, load_workload, parse_shapes
from workbench.workloads import BUILTIN_WORKLOADS, DEFAULT_WORKLOAD


def test_seed_mlp_is_the_reference_baseline():
    workload = load_workload("seed-mlp")
    model = workload.build_model()
    layers = list(model)
    assert [type(m) for m in layers] == [nn.Linear, nn.GELU, nn.Linear]
    assert (layers[0].in_features, layers[0].out_features) == (128, 256)
    assert (layers[2].in_features, layers[2].out_features) == (256, 10)
    assert workload.batch_size == 64 and workload.seed == 42
    optimizer = workload.make_optimizer(model)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.defaults["lr"] == pytest.approx(1e-3)
    assert workload.loss_fn is nn.functional.cross_entropy
    (inputs,), targets = workload.batch()
    assert inputs.shape == (64, 128) and targets.shape == (64,)


@pytest.mark.parametrize("name", list(BUILTIN_WORKLOADS))
def test_builtin_trains_and_is_deterministic(name):
    workload = load_workload(name)
    first, second = workload.build_model(), workload.build_model()
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b), "two builds must start from the same seeded weights"
    inputs, targets = workload.batch()
    again, _ = workload.batch()
    assert all(torch.equal(a, b) for a, b in zip(inputs, again, strict=True))
    optimizer = workload.make_optimizer(first)
    losses = []
    for _ in range(15):
        loss = workload.loss_fn(first(*inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    metric = workload.task_metric(first(*inputs), targets)
    assert metric > 0
    described = workload.describe()
    assert described["parameters"] > 0 and described["inputs"][0]["shape"][0] == workload.batch_size


def test_tiny_transformer_is_a_sequence_workload():
    workload = load_workload("tiny-transformer")
    assert workload.is_sequence and workload.throughput_unit == "tokens/s"
    assert workload.items_per_sample() == workload.sequence_length
    called = []

    class RecordCalls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            called.append(getattr(func, "__name__", ""))
            return func(*args, **(kwargs or {}))

    inputs, _ = workload.batch()
    with RecordCalls():
        workload.build_model()(*inputs)
    assert "scaled_dot_product_attention" in called
    assert "layer_norm" in called and "embedding" in called


def test_user_factory_returning_workload():
    workload = load_workload("tests.fixtures.user_workloads:full_workload")
    assert workload.name == "user-linear"
    assert workload.spec == "tests.fixtures.user_workloads:full_workload"


def test_user_plain_module_with_input_description():
    workload = load_workload(
        "tests.fixtures.user_workloads:plain_module",
        input_shape="3x4x4",
        num_classes=5,
        batch_size=6,
    )
    (inputs,), targets = workload.batch()
    assert inputs.shape == (6, 3, 4, 4) and targets.shape == (6,)
    loss = workload.loss_fn(workload.build_model()(inputs), targets)
    assert loss.ndim == 0


def test_user_plain_module_with_token_input():
    workload = load_workload(
        "tests.fixtures.user_workloads:token_module",
        input_shape="12",
        input_dtype="int64",
        num_classes=50,
    )
    assert workload.is_sequence and workload.task_metric_name == "perplexity"
    (tokens,), targets = workload.batch()
    assert tokens.dtype == torch.int64 and targets.shape == tokens.shape
    assert workload.loss_fn(workload.build_model()(tokens), targets).ndim == 0


@pytest.mark.parametrize(
    ("spec", "kwargs", "fragment"),
    [
        ("no_such_pkg.mod:make", {}, "module 'no_such_pkg' was not found"),
        ("tests.fixtures.user_workloads:nope", {}, "has no attribute 'nope'"),
        ("tests.fixtures.user_workloads:raising_factory", {}, "raised RuntimeError: weights"),
        ("tests.fixtures.user_workloads:wrong_type", {}, "returned int"),
        (
            "tests.fixtures.broken_import:make",
            {},
            "importing 'tests.fixtures.broken_import' raised",
        ),
        ("tests.fixtures.user_workloads:plain_module", {}, "-p input_shape="),
        (
            "tests.fixtures.user_workloads:plain_module",
            {"input_shape": "3xbananax4", "num_classes": 5},
            "cannot read '3xbananax4' as a shape",
        ),
        ("not-a-builtin", {}, "expected a built-in name"),
    ],
)
def test_bad_spec_is_one_sentence_naming_the_spec(spec, kwargs, fragment):
    with pytest.raises(BadInput) as info:
        load_workload(spec, **kwargs)
    message = str(info.value)
    assert spec in message and fragment in message
    assert "\n" not in message
    assert info.value.exit_code == EXIT_BAD_INPUT


def test_parse_shapes():
    assert parse_shapes("3x32x32") == ((3, 32, 32),)
    assert parse_shapes("16; 4x8") == ((16,), (4, 8))
    assert parse_shapes("(3, 4)") == ((3, 4),)
    for bad in ("", "0x3", "-1", "a"):
        with pytest.raises(ValueError):
            parse_shapes(bad)


def test_spec_from_notebook_parameters_reads_zero_as_not_set():
    params = {
        "workload": "tests.fixtures.user_workloads:plain_module",
        "input_shape": "3x4x4",
        "input_dtype": "float32",
        "num_classes": 5,
        "batch_size": 0,
        "steady_steps": 30,  # not the workload's: ignored
    }
    spec = WorkloadSpec.from_params(params)
    assert spec == WorkloadSpec(
        "tests.fixtures.user_workloads:plain_module", "3x4x4", "float32", 5, None
    )
    # A notebook that declares none of them (04 has no batch_size) gets the defaults.
    assert WorkloadSpec.from_params({}) == WorkloadSpec(DEFAULT_WORKLOAD)
    assert WorkloadSpec.from_params({"batch_size": 16}).batch_size == 16


def test_spec_loads_the_workload_it_names_with_its_batch_size():
    plain = "tests.fixtures.user_workloads:plain_module"
    workload = WorkloadSpec(plain, "3x4x4", num_classes=5, batch_size=6).load()
    (inputs,), _ = workload.batch()
    assert inputs.shape == (6, 3, 4, 4)
    assert WorkloadSpec("seed-mlp", batch_size=8).load().batch_size == 8
    assert WorkloadSpec().load().batch_size == load_workload(DEFAULT_WORKLOAD).batch_size
    with pytest.raises(BadInput, match="plain nn.Module"):
        WorkloadSpec(plain).load()


def test_spec_survives_json_and_pickle_on_its_way_to_a_child_process():
    spec = WorkloadSpec("tests.fixtures.user_workloads:token_module", "12", "int64", 50, 4)
    assert WorkloadSpec(**json.loads(json.dumps(asdict(spec)))) == spec
    assert pickle.loads(pickle.dumps(spec)) == spec
    job = RankJob(spec, "cpu", 16, 2, 5, 30.0, 1, "")
    assert RankJob.from_json(job.to_json()) == job


def _plain_module_hash() -> str:
    workload = load_workload(
        "tests.fixtures.user_workloads:plain_module", input_shape="3x4x4", num_classes=5
    )
    return workload.describe()["initial_state_sha256"]


def test_plain_module_gets_the_same_weights_whatever_the_global_generator_did():
    torch.manual_seed(1)
    first = _plain_module_hash()
    torch.manual_seed(2)
    torch.rand(100)
    assert _plain_module_hash() == first


def test_plain_module_gets_the_same_weights_in_every_process():
    """Two fresh interpreters, as two notebooks or two runs are: the factory's draw is seeded."""
    import subprocess
    import sys

    root = REPO_ROOT
    script = (
        "from workbench.workload import load_workload\n"
        "w = load_workload('tests.fixtures.user_workloads:plain_module', "
        "input_shape='3x4x4', num_classes=5)\n"
        "print(w.describe()['initial_state_sha256'])\n"
    )
    hashes = {
        subprocess.run(
            [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True
        ).stdout.split()[-1]
        for _ in range(2)
    }
    assert hashes == {_plain_module_hash()}


def test_initial_state_hash_tells_different_weights_apart():
    workload = load_workload(
        "tests.fixtures.user_workloads:plain_module", input_shape="3x4x4", num_classes=5
    )
    model = workload.build_model()
    from workbench.workload import state_sha256

    assert state_sha256(model) == workload.describe()["initial_state_sha256"]
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert state_sha256(model) != workload.describe()["initial_state_sha256"]
