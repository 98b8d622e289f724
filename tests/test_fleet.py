"""Matrix runs: the matrix file, one item per array task, the dashboard, and the job templates.

The Slurm templates also run for real on a single-node cluster in tests/slurm/local_cluster.sh
(CI runs it as root); here they are checked for syntax and for what they pass to the workbook.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.errors import BadInput
from workbench.fleet.collect import COMPLETE, INCOMPLETE, MISSING, collect
from workbench.fleet.command import resolve_index
from workbench.fleet.matrix import check_matrix, load_matrix
from workbench.fleet.root import claim
from workbench.report import network_references

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"


def workbench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_items_take_the_defaults_and_get_distinct_names(tmp_path: Path) -> None:
    matrix = load_matrix(
        write(
            tmp_path / "m.yaml",
            "defaults: {target: cpu, only: [0, 1], parameters: {steady_steps: 5}}\n"
            "items:\n"
            "  - workload: seed-mlp\n"
            "  - {workload: seed-mlp, name: mlp-b8, parameters: {batch_size: 8}}\n",
        )
    )
    first, second = matrix.items
    assert (first.name, first.target, first.only) == ("seed-mlp-cpu", "cpu", ["00", "01"])
    assert second.parameters == {"steady_steps": 5, "batch_size": 8}
    assert check_matrix(matrix) == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("items: []\n", "non-empty list under 'items'"),
        ("items:\n  - {workload: seed-mlp, colour: red}\n", "unknown key 'colour'"),
        ("items:\n  - {target: cpu}\n", "names no workload"),
        ("items:\n  - {workload: seed-mlp}\n  - {workload: seed-mlp}\n", "used twice"),
        ("items: [\n", "not valid YAML"),
    ],
)
def test_a_malformed_matrix_is_one_sentence(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(BadInput, match=message):
        load_matrix(write(tmp_path / "m.yaml", text))


def test_every_bad_item_is_named_and_the_command_exits_2(tmp_path: Path) -> None:
    path = write(
        tmp_path / "m.yaml",
        "items:\n"
        "  - {workload: no-such-model}\n"
        "  - {workload: seed-mlp, parameters: {bach_size: 3}}\n"
        "  - {workload: seed-mlp, target: tpu}\n"
        "  - {workload: seed-mlp, name: fine}\n",
    )
    problems = check_matrix(load_matrix(path))
    assert len(problems) == 3
    assert "item 0" in problems[0] and "no-such-model" in problems[0]
    assert "item 1" in problems[1] and "bach_size" in problems[1]
    assert "item 2" in problems[2] and "tpu" in problems[2]
    result = workbench("matrix", str(path), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("workbench: error:") == 3


def test_the_index_comes_from_the_array_engine(monkeypatch) -> None:
    for name in ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX", "AWS_BATCH_JOB_ARRAY_INDEX"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(BadInput, match="found none of"):
        resolve_index("auto")
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    assert resolve_index("auto") == 3
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    assert resolve_index("auto") == 1 and resolve_index("7") == 7
    with pytest.raises(BadInput, match="not a number"):
        resolve_index("first")


def test_a_root_belongs_to_one_matrix(tmp_path: Path) -> None:
    one = load_matrix(write(tmp_path / "one.yaml", "items:\n  - {workload: seed-mlp}\n"))
    two = load_matrix(write(tmp_path / "two.yaml", "items:\n  - {workload: tiny-cnn}\n"))
    claim(tmp_path / "root", one)
    claim(tmp_path / "root", one)  # the same matrix again: every array task does this
    with pytest.raises(BadInput, match="another matrix"):
        claim(tmp_path / "root", two)


def test_matrix_items_run_into_root_and_collect_shows_every_item(tmp_path: Path) -> None:
    path = write(
        tmp_path / "m.yaml",
        "defaults: {target: cpu, only: ['00']}\n"
        "items:\n"
        "  - {workload: seed-mlp, name: '<b>mlp</b>'}\n"
        "  - {workload: tiny-cnn}\n",
    )
    for _ in range(2):
        result = workbench(
            "run", "--matrix", str(path), "--index", "0", "--out", "root", cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr
    item_dir = tmp_path / "root" / "b-mlp-b"
    assert (item_dir / "latest" / "summary.json").is_file()
    out_of_range = workbench(
        "run", "--matrix", str(path), "--index", "2", "--out", "root", cwd=tmp_path
    )
    assert out_of_range.returncode == 2 and "out of range" in out_of_range.stderr
    clash = workbench("run", "--matrix", str(path), "--index", "0", "--workload", "x", cwd=tmp_path)
    assert clash.returncode == 2 and "cannot be combined" in clash.stderr
    (item_dir / "20991231-000000-killed").mkdir()  # a run that never wrote summary.json
    (tmp_path / "root" / "tiny-cnn-cpu" / "20991231-000000-half").mkdir(parents=True)

    rows = {row.name: row for row in collect(tmp_path / "root")}
    mlp, cnn = rows["b-mlp-b"], rows["tiny-cnn-cpu"]
    assert mlp.state == COMPLETE and mlp.runs == 2 and mlp.incomplete == ["20991231-000000-killed"]
    assert "no regression" in mlp.change and mlp.comparison.endswith("compare.html")
    assert cnn.state == INCOMPLETE and cnn.incomplete == ["20991231-000000-half"]

    result = workbench("collect", "root", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    page = (tmp_path / "root" / "index.html").read_text()
    assert network_references(page) == [] and "<b>" not in page
    data = json.loads((tmp_path / "root" / "matrix.json").read_text())
    assert [item["state"] for item in data["items"]] == [COMPLETE, INCOMPLETE]
    assert data["verdict"] == "blocker", "an item without a complete run is never a pass"


def test_a_missing_item_is_shown_not_dropped(tmp_path: Path) -> None:
    matrix = load_matrix(
        write(tmp_path / "m.yaml", "items:\n  - {workload: seed-mlp}\n  - {workload: tiny-cnn}\n")
    )
    claim(tmp_path / "root", matrix)
    rows = collect(tmp_path / "root")
    assert [(r.name, r.state) for r in rows] == [
        ("seed-mlp-auto", MISSING),
        ("tiny-cnn-auto", MISSING),
    ]
    with pytest.raises(BadInput, match="no such folder"):
        collect(tmp_path / "nowhere")


def test_kubernetes_templates_validate_against_the_api_schema() -> None:
    manifests = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
    assert len(manifests) == 2
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubernetes_validate",
            "--strict",
            "--kubernetes-version",
            "1.33.0",
            *map(str, manifests),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    job = (DEPLOY / "kubernetes" / "indexed-job.yaml").read_text()
    assert "completionMode: Indexed" in job and "backoffLimitPerIndex: 1" in job
    assert "values: [1, 2, 3, 4, 5]" in job and "values: [137, 143]" in job
    assert '"--index", "auto"' in job and "aws.amazon.com/neuroncore" in job


def test_airflow_dag_maps_one_task_per_item_then_collects() -> None:
    source = (DEPLOY / "airflow" / "workbench_matrix_dag.py").read_text()
    tree = ast.parse(source)
    calls = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert {"partial", "expand"} <= calls
    assert 'trigger_rule="all_done"' in source and "--index $ITEM_INDEX" in source
    # The parse-time item count uses only YAML: run that function on the CI matrix.
    function = next(
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "matrix_indexes"
    )
    namespace: dict = {}
    exec(  # noqa: S102 - the DAG's own helper, without Airflow
        "from pathlib import Path\nimport yaml\n" + ast.unparse(function), namespace
    )
    assert namespace["matrix_indexes"](str(REPO / "tests" / "slurm" / "fleet.yaml")) == ["0", "1"]
    assert namespace["matrix_indexes"]("/no/such/matrix.yaml") == []


def test_slurm_templates_are_valid_bash_and_pass_the_array_index() -> None:
    slurm = DEPLOY / "slurm"
    for script in ("workbench-array.sbatch", "workbench-collect.sbatch", "submit.sh"):
        result = subprocess.run(["bash", "-n", str(slurm / script)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    array = (slurm / "workbench-array.sbatch").read_text()
    assert '--index "$SLURM_ARRAY_TASK_ID"' in array and "#SBATCH --exclusive" in array
    submit = (slurm / "submit.sh").read_text()
    assert '--dependency="afterany:$array"' in submit and "--array=" in submit
