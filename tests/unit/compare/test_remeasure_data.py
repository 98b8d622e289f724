"""A run folder is data: `compare --remeasure` rebuilds a saved workload only when it is a
built-in name; any other is rebuilt only when the command line names it again, a saved trust
in a model folder's code is never honoured, and saved parameters go through the typed parser.
Each must-refuse case plants code that would leave a marker file if it ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.run_folders import samples, write_run
from workbench.compare.records import RunInfo
from workbench.compare.remeasure import _parameters
from workbench.errors import BadInput


def _run(folder: Path, parameters: dict) -> RunInfo:
    write_run(folder, started="2026-11-01", steady=samples(1, 0.001), notebooks=("01_baseline",))
    path = folder / "01_baseline.json"
    record = json.loads(path.read_text())
    record["parameters"] = parameters
    record["target"] = {"name": "cpu"}
    path.write_text(json.dumps(record))
    return RunInfo(folder.name, str(folder), "2026-11-01", "x", "cpu", "pass", {})


@pytest.mark.parametrize(
    "workload",
    ["script:{dir}/evil.py", "evil_module:build", "os:abort", "hf:{dir}/model"],
)
def test_a_saved_workload_that_is_not_built_in_is_refused_and_nothing_runs(
    tmp_path, monkeypatch, workload
):
    (tmp_path / "evil.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    (tmp_path / "evil_module.py").write_text(
        f"open({str(tmp_path / 'ran')!r}, 'w')\ndef build():\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)  # the working folder would be on sys.path for an import
    run = _run(tmp_path / "run", {"workload": workload.format(dir=tmp_path), "target": "cpu"})
    with pytest.raises(BadInput, match="a run folder is data, never code to run"):
        _parameters(run, None, "--baseline-workload")
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("trust", [True, "false", "true", 1])
def test_a_saved_trust_in_a_model_folders_code_is_never_honoured(tmp_path, trust):
    run = _run(tmp_path / "run", {"workload": "seed-mlp", "trust_remote_code": trust})
    if isinstance(trust, bool) or trust in ("false", "true"):
        params, target = _parameters(run, None, "--baseline-workload")
        assert params["trust_remote_code"] is False and target == "cpu"
    else:  # not a bool: the typed parser names it
        with pytest.raises(BadInput, match="'trust_remote_code'"):
            _parameters(run, None, "--baseline-workload")


def test_a_built_in_workload_or_one_named_again_is_rebuilt(tmp_path):
    """Must pass: a saved built-in name, or any spec the command line names."""
    run = _run(tmp_path / "run", {"workload": "tiny-cnn", "batch_size": "8"})
    params, _ = _parameters(run, None, "--baseline-workload")
    assert params["workload"] == "tiny-cnn" and params["batch_size"] == 8
    other = _run(tmp_path / "other", {"workload": "script:train.py"})
    params, _ = _parameters(other, "seed-mlp", "--candidate-workload")
    assert params["workload"] == "seed-mlp"


def test_a_saved_target_that_is_not_a_target_is_refused(tmp_path):
    run = _run(tmp_path / "run", {"workload": "seed-mlp"})
    path = Path(run.path) / "01_baseline.json"
    record = json.loads(path.read_text())
    record["target"] = {"name": "os:system"}
    path.write_text(json.dumps(record))
    with pytest.raises(BadInput, match="names no known target"):
        _parameters(run, None, "--baseline-workload")
