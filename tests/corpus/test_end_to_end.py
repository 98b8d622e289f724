"""Public training scripts through the whole workbook, as a user runs it: `workbench run
--workload script:...` on two corpus items nobody here wrote, 00 to 05, each in one command.

- ddp-series-single-gpu (pytorch/examples): a Trainer class moving its model and batches to
  a hard-coded `cuda:0` (`.to(0)`), a DataLoader with pinned memory, `torch.save` of its
  state dict each epoch;
- tutorial-linear-regression (yunjey/pytorch-tutorial): numpy data, hard-coded settings,
  `plt.show()` at its end, no batch-size option and no DataLoader.

Each run must finish every notebook (exit 0), give no blocker, and say what it redirected."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.corpus.materialise import COMMAND, MANIFEST, corpus_folder
from tests.fixtures.workbench_process import run_workbench

pytestmark = pytest.mark.corpus

ITEMS = {item["name"]: item for item in json.loads(MANIFEST.read_text())["items"]}


@pytest.mark.parametrize("name", ["ddp-series-single-gpu", "tutorial-linear-regression"])
def test_a_public_script_runs_through_every_notebook_without_a_false_blocker(tmp_path, name):
    folder = corpus_folder(name)
    if folder is None:
        pytest.skip(f"{name} is not materialised: run {COMMAND}")
    item = ITEMS[name]
    out = tmp_path / "run"
    done = run_workbench(
        [
            "run",
            "--workload",
            f"script:{folder / item['entry']}",
            "--script-args",
            shlex.join(item["args"]),
            "--out",
            str(out),
        ],
        tmp_path,
        timeout=900,
        **item.get("env", {}),
    )
    summary = json.loads((out / "summary.json").read_text())
    statuses = {n["notebook"]: n["status"] for n in summary["notebooks"]}
    assert set(statuses.values()) == {"ok"}, statuses
    verdicts = {n["notebook"]: n["verdict"]["status"] for n in summary["notebooks"]}
    assert "blocker" not in verdicts.values(), summary["verdict"]
    assert (out / "index.html").is_file() and (out / "05_serving.html").is_file()
    baseline = json.loads((out / "01_baseline.json").read_text())
    script = baseline["workload"]["script"]
    assert script["steps_run"] >= 1 and script["losses"]
    if name == "ddp-series-single-gpu":
        assert "redirected: module.to(0) at single_gpu.py" in done.stderr
