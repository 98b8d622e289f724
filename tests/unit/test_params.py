"""Parameters are read from the notebooks themselves and validated before any kernel starts."""

import re

import pytest

from tests.fixtures import REPO_ROOT
from workbench.errors import BadInput
from workbench.params import (
    WORKLOAD_PARAMETERS,
    Parameter,
    coerce,
    notebook_parameters,
    parse_assignments,
    validate,
)

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))


def _param(type_name, default):
    return Parameter("x", type_name, default, "", "00_environment")


@pytest.mark.parametrize(
    ("type_name", "raw", "expected"),
    [
        ("int", "12", 12),
        ("float", "0.5", 0.5),
        ("float", "3", 3.0),
        ("float", 3, 3.0),
        ("float", "1e12", 1e12),  # YAML 1.1 leaves this as text
        ("float", "2.5E-3", 0.0025),
        ("bool", "true", True),
        ("bool", "False", False),
        ("str", "123", "123"),
        ("list", "[1, 2, 4]", [1, 2, 4]),
        ("list", "8, 16", [8, 16]),
        ("list", "eager", ["eager"]),
        ("list", (8, 16), [8, 16]),
        # A typed list coerces each element.
        ("list[int]", "8, 16", [8, 16]),
        ("list[int]", "[]", []),
        ("list[str]", "eager, compiled", ["eager", "compiled"]),
        ("list[float]", "1, 2.5", [1.0, 2.5]),
        ("list[float]", "1e3, 30", [1000.0, 30.0]),
    ],
)
def test_coerce_accepts_values_of_the_declared_type(type_name, raw, expected):
    assert coerce(_param(type_name, None), raw) == expected


@pytest.mark.parametrize(
    ("type_name", "raw"),
    [
        ("int", "abc"),
        ("int", "1.5"),
        ("bool", "maybe"),
        ("int", True),
        ("list", "{a: 1"),
        ("float", ""),
        ("float", "1e400"),  # parses to inf: no finite number
        ("float", "nan"),
        # A typed list refuses an element of another type.
        ("list[int]", "abc,def"),
        ("list[int]", "8, 1.5"),
        ("list[int]", "true, 2"),
        ("list[str]", "1, 2"),
        ("list[int]", [[1], 2]),
    ],
)
def test_coerce_rejects_with_the_parameter_name(type_name, raw):
    expects = rf"Parameter 'x' \(00_environment\) expects {re.escape(type_name)}, got"
    with pytest.raises(BadInput, match=expects):
        coerce(_param(type_name, None), raw)


def test_parse_assignments():
    assert parse_assignments(["a=1", "b= x=y"]) == {"a": "1", "b": " x=y"}
    with pytest.raises(BadInput, match="key=value"):
        parse_assignments(["novalue"])


def test_unknown_parameter_is_rejected_naming_what_exists():
    declared = {"00_environment": notebook_parameters(NOTEBOOKS[0])}
    with pytest.raises(BadInput, match="Unknown parameter 'warmup_stepz'") as info:
        validate({"warmup_stepz": "3"}, declared)
    assert "fail_on_drift" in str(info.value)


def test_values_go_only_to_the_notebooks_that_declare_them():
    env = {"flag": Parameter("flag", "bool", False, "", "00_environment")}
    other = {"steps": Parameter("steps", "int", 30, "", "01_baseline")}
    routed = validate({"flag": "yes", "steps": "40"}, {"00_environment": env, "01_baseline": other})
    assert routed == {"00_environment": {"flag": True}, "01_baseline": {"steps": 40}}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_declares_typed_parameters_and_is_committed_clean(path):
    import nbformat

    params = notebook_parameters(path)  # raises on an untyped parameter
    assert {"target", "out_dir"} <= set(params)
    nb = nbformat.read(str(path), as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "commit notebooks clean"
            if "control_panel" in cell.source:
                assert {"skip-execution", "interactive-only"} <= set(cell.metadata.get("tags", []))


def test_every_notebook_that_loads_the_workload_takes_every_workload_parameter():
    for path in NOTEBOOKS:
        declared = notebook_parameters(path)
        if "workload" in declared:
            missing = [name for name in WORKLOAD_PARAMETERS if name not in declared]
            assert not missing, f"{path.stem} does not take {missing}"


def test_a_workload_parameter_a_workload_notebook_lacks_is_refused_in_one_sentence():
    def notebook(stem: str, *names: str) -> dict[str, Parameter]:
        return {n: Parameter(n, "int" if n == "batch_size" else "str", 0, "", stem) for n in names}

    declared = {
        "01_baseline": notebook("01_baseline", "workload", "batch_size"),
        "03_numerics": notebook("03_numerics", "workload"),
    }
    with pytest.raises(BadInput, match="'batch_size' shapes the workload but 03_numerics"):
        validate({"batch_size": "8"}, declared)
    # A notebook without a workload (00) never needs it, and every workload notebook taking it
    # gets the same value.
    declared["03_numerics"] = notebook("03_numerics", "workload", "batch_size")
    declared["00_environment"] = notebook("00_environment", "target")
    routed = validate({"batch_size": "8"}, declared)
    assert routed["01_baseline"] == routed["03_numerics"] == {"batch_size": 8}
    assert routed["00_environment"] == {}


@pytest.mark.parametrize(
    "notebook", ["01_baseline", "02_op_coverage", "03_numerics", "04_retuning"]
)
def test_batch_size_reaches_every_notebook_that_loads_the_workload(notebook, tmp_path):
    from workbench import context

    # A plain module, as the run that showed 03 ignoring -p batch_size=8 used.
    namespace = {
        "workload": "tests.fixtures.user_workloads:plain_module",
        "input_shape": "3x4x4",
        "num_classes": 5,
        "batch_size": 8,
        "target": "cpu",
        "out_dir": str(tmp_path),
    }
    ctx = context.start(notebook, namespace)
    assert ctx.workload.batch_size == 8
    assert ctx.header()["workload"]["batch_size"] == 8
    assert len(ctx.header()["workload"]["initial_state_sha256"]) == 64


@pytest.mark.parametrize("raw", ["9" * 5000, "x" * 5000, "1," * 3000])
def test_a_value_too_long_to_parse_is_one_sentence(raw):
    with pytest.raises(BadInput, match="characters long; values are limited to 4,096"):
        coerce(_param("int", None), raw)


@pytest.mark.parametrize("raw", ["[" * 2000 + "]" * 2000, "{" * 1500])
def test_a_value_nested_too_deep_to_parse_is_one_sentence(raw):
    with pytest.raises(BadInput, match=r"Parameter 'x' \(00_environment\) nests deeper than"):
        coerce(_param("int", None), raw)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_are_read_as_papermill_reads_them(path) -> None:
    """The kernel reads its own parameters cell without papermill (start-up time); papermill
    injects the values, so both must see the same names, types, defaults and help."""
    import ast

    import papermill

    theirs = papermill.inspect_notebook(str(path))
    ours = notebook_parameters(path)
    assert list(ours) == list(theirs)
    for name, info in theirs.items():
        assert ours[name].type_name == info["inferred_type_name"]
        assert ours[name].default == ast.literal_eval(info["default"])
        assert ours[name].help == info["help"]


def test_workload_parameters_are_the_workload_specs_fields() -> None:
    """params.py names them without importing torch (the command line answers fast); this keeps
    the list equal to what WorkloadSpec reads."""
    from dataclasses import fields

    from workbench.workload import WorkloadSpec

    # `target` rides along for script: workloads but is every notebook's own parameter.
    assert set(WORKLOAD_PARAMETERS) == {f.name for f in fields(WorkloadSpec)} - {"spec", "target"}
