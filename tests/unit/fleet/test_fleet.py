"""Matrix runs: the matrix file, one item per array task, the dashboard, and the job templates.

The Slurm templates also run for real on a single-node cluster in tests/slurm/local_cluster.sh
(CI runs it as root); here they are checked for syntax and for what they pass to the workbook.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT
from tests.fixtures.fleet_matrices import DEPLOY, TWO_TARGETS, workbench, write
from tests.fixtures.run_folders import write_run
from workbench.cli import main
from workbench.errors import BadInput
from workbench.fleet.collect import COMPLETE, MISSING, ItemRow, collect
from workbench.fleet.command import resolve_index
from workbench.fleet.dashboard import dashboard_data
from workbench.fleet.matrix import check_matrix, load_matrix
from workbench.fleet.root import claim


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


def test_a_matrix_is_checked_without_its_devices_and_indexed_per_target(
    tmp_path: Path, capsys
) -> None:
    path = write(tmp_path / "m.yaml", TWO_TARGETS)
    matrix = load_matrix(path)
    assert check_matrix(matrix) == [], "a target missing here is the item's own check, on its node"
    assert [i.name for i in matrix.select("cpu")] == ["mlp-cpu"]
    assert matrix.item(0, "cpu").name == "mlp-cpu" and matrix.item(0).name == "mlp-trn2"
    with pytest.raises(BadInput, match=r"out of range: .* 0 to 0 on target 'cpu'"):
        matrix.item(1, "cpu")
    assert main(["matrix", str(path)]) == 0
    assert main(["matrix", str(path), "--count", "--target", "cpu"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1"
    assert main(["matrix", str(path), "--target", "neuron"]) == 0
    assert (
        capsys.readouterr().out
        == "  0  mlp-trn2: seed-mlp on neuron, notebooks 00 (item 0 of the file)\n"
    )
    assert main(["matrix", str(path), "--count", "--target", "xla"]) == 2
    assert "no item on target 'xla'; its targets: cpu, neuron." in capsys.readouterr().err
    bad = write(tmp_path / "bad.yaml", "items:\n  - {workload: seed-mlp, target: trn9}\n")
    assert main(["matrix", str(bad), "--count"]) == 2, "an unknown target name is still caught"


def fake_workbook(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in `workbench` that logs its arguments and exits with the next of $WB_CODES."""
    log = tmp_path / "calls"
    fake = write(
        tmp_path / "fake-workbench",
        f'#!/bin/bash\necho "$*" >> {log}\n'
        f'n=$(wc -l < {log}); codes=($WB_CODES); exit "${{codes[$((n - 1))]}}"\n',
    )
    fake.chmod(0o755)
    return fake, log


def test_the_slurm_task_runs_a_killed_item_once_more_and_nothing_else(tmp_path: Path) -> None:
    """The array script's retry: 137/143 once, findings (1-5) and a second kill returned."""
    fake, log = fake_workbook(tmp_path)
    for codes, expected, runs in (
        ("137 0", 0, 2),
        ("143 5", 5, 2),
        ("1 0", 1, 1),
        ("137 137", 137, 2),
    ):
        log.unlink(missing_ok=True)
        env = {
            **os.environ,
            "WORKBENCH": str(fake),
            "WB_CODES": codes,
            "WORKBENCH_MATRIX": "m.yaml",
            "WORKBENCH_ROOT": "root",
            "SLURM_ARRAY_TASK_ID": "3",
        }
        result = subprocess.run(
            ["bash", str(DEPLOY / "slurm" / "workbench-array.sbatch")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == expected, (codes, result.stderr)
        lines = log.read_text().splitlines()
        assert lines == ["run --matrix m.yaml --index 3 --out root"] * runs, codes


def test_collect_exits_5_when_an_item_regressed(tmp_path: Path, capsys) -> None:
    root = tmp_path / "root"
    claim(root, load_matrix(write(tmp_path / "m.yaml", "items:\n  - {workload: seed-mlp}\n")))
    write_run(root / "seed-mlp-auto" / "night1", started="2026-11-01T02:00:00", seed=1)
    write_run(root / "seed-mlp-auto" / "night2", started="2026-11-02T02:00:00", seed=2)
    assert main(["collect", str(root)]) == 0
    # Two earlier runs are a short history: only a change beyond a pair's 2x allowance counts.
    write_run(root / "seed-mlp-auto" / "night3", started="2026-11-03T02:00:00", seed=3, step=0.025)
    assert main(["collect", str(root)]) == 5
    assert "regress" in capsys.readouterr().out
    item = json.loads((root / "matrix.json").read_text())["items"][0]
    assert item["runs"] == 3 and item["regressions"] >= 1


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ([("pass", 0), ("pass", 0)], "pass"),
        ([("pass", 0), ("pass", 2)], "attention"),  # a regression is never a quiet pass
        ([("attention", 0), ("pass", 0)], "attention"),
        ([("blocker", 0), ("pass", 1)], "blocker"),
        ([("pass", 0), (None, 0)], "blocker"),  # an item with no complete run
    ],
)
def test_the_fleet_verdict_follows_its_stated_rule(states, expected) -> None:
    rows = [
        ItemRow(f"item{i}", "seed-mlp", "cpu", MISSING if verdict is None else COMPLETE)
        for i, (verdict, _) in enumerate(states)
    ]
    for row, (verdict, regressions) in zip(rows, states, strict=True):
        row.verdict, row.regressions = verdict, regressions
    data = dashboard_data(rows)
    assert data["verdict"] == expected
    assert "regressed" in data["verdict_rule"] and "without a complete run" in data["verdict_rule"]


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
    assert '"--target", "xla"' in job and "--count --target xla" in job


def test_airflow_dag_maps_one_task_per_item_then_collects(tmp_path: Path) -> None:
    source = (DEPLOY / "airflow" / "workbench_matrix_dag.py").read_text()
    tree = ast.parse(source)
    calls = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert {"partial", "expand"} <= calls
    assert 'trigger_rule="all_done"' in source
    assert '--target "$ITEM_TARGET" --index "$ITEM_INDEX"' in source and '"retries": 0' in source
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
    indexes = namespace["matrix_indexes"]
    assert indexes(str(REPO_ROOT / "tests" / "slurm" / "fleet.yaml"), "cpu") == ["0", "1"]
    assert indexes("/no/such/matrix.yaml", "cpu") == []
    two = tmp_path / "two.yaml"
    two.write_text(TWO_TARGETS + "  - {workload: tiny-cnn}\n")
    assert [indexes(str(two), t) for t in ("neuron", "cpu", "auto")] == [["0"], ["0"], ["0"]]
    # The retry is the task's shell command: run it with a stand-in workbook killed once.
    names = {"MATRIX", "ROOT", "WORKBENCH", "RUN_ITEM", "_WORKBENCH"}
    settings = [
        node
        for node in tree.body
        if isinstance(node, ast.Assign)
        and {getattr(n, "id", "") for n in ast.walk(node.targets[0])} & names
    ]
    fake, log = fake_workbook(tmp_path)
    env = {**os.environ, "WORKBENCH": str(fake), "WORKBENCH_MATRIX": "m.yaml"}
    env["WORKBENCH_ROOT"] = "root"
    with pytest.MonkeyPatch.context() as patch:
        for name in ("WORKBENCH", "WORKBENCH_MATRIX", "WORKBENCH_ROOT"):
            patch.setenv(name, env[name])
        exec("import os, shlex\n" + "\n".join(map(ast.unparse, settings)), namespace)  # noqa: S102
    for codes, expected, runs in (("137 0", 0, 2), ("2 0", 2, 1), ("143 143", 143, 2)):
        log.unlink(missing_ok=True)
        task_env = {**env, "WB_CODES": codes, "ITEM_TARGET": "cpu", "ITEM_INDEX": "1"}
        result = subprocess.run(
            ["bash", "-c", namespace["RUN_ITEM"]], env=task_env, capture_output=True, text=True
        )
        assert result.returncode == expected, (codes, result.stderr)
        calls = log.read_text().splitlines()
        assert calls == ["run --matrix m.yaml --target cpu --index 1 --out root"] * runs
    # Must refuse to run a second command: a ROOT holding `;touch ...` is one quoted word.
    marker = tmp_path / "injected"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WORKBENCH", str(fake))
        patch.setenv("WORKBENCH_MATRIX", "m.yaml")
        patch.setenv("WORKBENCH_ROOT", f"root;touch {marker}")
        exec("import os, shlex\n" + "\n".join(map(ast.unparse, settings)), namespace)  # noqa: S102
    log.unlink(missing_ok=True)
    task_env = {**env, "WB_CODES": "0", "ITEM_TARGET": "cpu", "ITEM_INDEX": "1"}
    subprocess.run(["bash", "-c", namespace["RUN_ITEM"]], env=task_env, capture_output=True)
    assert not marker.exists()
    assert log.read_text().splitlines() == [
        f"run --matrix m.yaml --target cpu --index 1 --out root;touch {marker}"
    ]


def test_slurm_templates_are_valid_bash_and_pass_the_array_index() -> None:
    slurm = DEPLOY / "slurm"
    for script in ("workbench-array.sbatch", "workbench-collect.sbatch", "submit.sh"):
        result = subprocess.run(["bash", "-n", str(slurm / script)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    array = (slurm / "workbench-array.sbatch").read_text()
    assert '--index "$SLURM_ARRAY_TASK_ID"' in array and "#SBATCH --exclusive" in array
    submit = (slurm / "submit.sh").read_text()
    assert '--dependency="afterany:$after"' in submit and "--array=" in submit


def test_slurm_submission_refuses_a_value_sbatch_export_would_split(tmp_path: Path) -> None:
    """Must refuse: a matrix path with a comma would add `LD_PRELOAD=...` to sbatch's
    --export; submit.sh names it and submits nothing (a stand-in sbatch records any call)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch-calls"
    (bin_dir / "sbatch").write_text(f'#!/bin/bash\necho "$@" >> {calls}\necho 1\n')
    (bin_dir / "sbatch").chmod(0o755)
    matrix = tmp_path / "m,LD_PRELOAD=evil.so.yaml"
    matrix.write_text("items:\n  - {workload: seed-mlp}\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(
        ["bash", str(DEPLOY / "slurm" / "submit.sh"), str(matrix), str(tmp_path / "root")],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2 and "holds a comma, quote or newline" in result.stderr
    assert not calls.exists()


def test_dashboard_links_stay_inside_the_root_and_never_carry_a_scheme(tmp_path: Path) -> None:
    """A folder named like a script link becomes a relative link to itself, inert on click; a
    folder symlinked to somewhere outside the root is not an item."""
    root = tmp_path / "root"
    claim(root, load_matrix(write(tmp_path / "m.yaml", "items:\n  - {workload: seed-mlp}\n")))
    write_run(root / "javascript:alert(1)" / "night1", started="2026-11-01T02:00:00")
    outside = tmp_path / "outside"
    write_run(outside / "night1", started="2026-11-01T02:00:00")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    assert main(["collect", str(root)]) == 0
    page = (root / "index.html").read_text()
    hrefs = [part.split('"', 1)[0] for part in page.split('href="')[1:]]
    assert "./javascript%3Aalert%281%29/night1/index.html" in hrefs
    assert all(h.startswith("./") or h == "matrix.json" for h in hrefs), hrefs
    names = [item["name"] for item in json.loads((root / "matrix.json").read_text())["items"]]
    assert "linked" not in names and "javascript:alert(1)" in names


@pytest.mark.parametrize("name", ["../escape", "/tmp/abs", "..", "a/b"])
def test_a_claim_naming_a_folder_outside_the_root_is_refused(tmp_path: Path, name: str) -> None:
    root = tmp_path / "fleet" / "root"
    claim(root, load_matrix(write(tmp_path / "m.yaml", "items:\n  - {workload: seed-mlp}\n")))
    claimed = json.loads((root / "workbench-matrix.json").read_text())
    claimed["items"][0]["name"] = name
    (root / "workbench-matrix.json").write_text(json.dumps(claimed))
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(BadInput, match="not a folder name inside"):
        collect(root)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_claim_file_that_is_a_link_is_refused_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "fleet" / "root"
    claim(root, load_matrix(write(tmp_path / "m.yaml", "items:\n  - {workload: seed-mlp}\n")))
    collect(root)  # the plain claim file reads
    claimed = root / "workbench-matrix.json"
    claimed.rename(tmp_path / "elsewhere.json")
    claimed.symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(BadInput, match="is a symbolic link; only plain files are read here"):
        collect(root)


def test_checking_a_matrix_runs_nothing_its_items_name(tmp_path: Path, monkeypatch) -> None:
    """Must refuse to run: a script item, a module factory and a model folder that asks for its
    own code (with trust_remote_code set) are checked on the login node without running any of
    them; each would leave a marker file. A missing script or module is still named."""
    marker = tmp_path / "ran"
    (tmp_path / "train.py").write_text(f"open({str(marker)!r}, 'w')\n")
    (tmp_path / "evil_models.py").write_text(f"open({str(marker)!r}, 'w')\ndef make(): pass\n")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "x", "auto_map": {"AutoConfig": "c.C"}}')
    (folder / "c.py").write_text(f"open({str(marker)!r}, 'w')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = write(
        tmp_path / "m.yaml",
        "items:\n"
        f"  - {{workload: 'script:{tmp_path / 'train.py'}'}}\n"
        "  - {workload: 'evil_models:make'}\n"
        f"  - {{workload: 'hf:{folder}', parameters: {{trust_remote_code: true}}}}\n"
        f"  - {{workload: 'script:{tmp_path / 'missing.py'}'}}\n"
        "  - {workload: 'no_such_package.models:make', name: other}\n",
    )
    problems = check_matrix(load_matrix(path))
    assert not marker.exists()
    assert len(problems) == 2, problems
    assert "item 3" in problems[0] and "there is no file" in problems[0]
    assert "item 4" in problems[1] and "no module named 'no_such_package'" in problems[1]
