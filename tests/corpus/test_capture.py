"""The workbook's capture on each public script of the corpus, run unmodified: every item gives a
workload that recomputes the loss the script called `backward` on, or (for a script that steps
no torch.optim optimizer) one sentence saying so. Nothing here was written for the workbook.

The recomputed loss is held to 10% of the script's own first loss, not to its bits: scripts with
dropout draw other masks in the script's step than in the recomputation."""

from __future__ import annotations

import json
import math
import shlex

import pytest

from tests.corpus.materialise import COMMAND, MANIFEST, corpus_folder
from workbench.errors import BadInput
from workbench.targets import get_target
from workbench.workloads.script import load_script_workload, script_spec

pytestmark = pytest.mark.corpus

ITEMS = json.loads(MANIFEST.read_text())["items"]
CPU = get_target("cpu")
NO_OPTIMIZER = "no optimizer (manual update)"
# Items whose loss cannot be recomputed from the captured batch alone, with the reason the
# workload states: a loss on a masked slice of the output (a graph model's train nodes).
# What the redirection's answers changed, said for items that take their CUDA path.
EFFECTS = {
    "nanogpt-char-cuda-path": (
        "the script trained under bfloat16 autocast (after the redirection answered "
        "torch.cuda.is_available() at train.py:73",
        "the script chose a fused AdamW",
    )
}
STAND_IN = {"gat-cora": "by its own arithmetic, not through a torch loss"}


@pytest.mark.parametrize("item", ITEMS, ids=[item["name"] for item in ITEMS])
def test_the_capture_answers_each_public_script_honestly(item, monkeypatch):
    folder = corpus_folder(item["name"])
    if folder is None:
        pytest.skip(f"{item['name']} is not materialised: run {COMMAND}")
    for name, value in item.get("env", {}).items():
        monkeypatch.setenv(name, value)
    spec = script_spec(str(folder / item["entry"]), shlex.join(item["args"]))
    if item["name"] in STAND_IN:
        workload = load_script_workload(spec, CPU)
        assert STAND_IN[item["name"]] in workload.loss_stand_in
        return
    if NO_OPTIMIZER in item["styles"]:
        with pytest.raises(BadInput) as refused:
            load_script_workload(spec, CPU)
        message = str(refused.value)
        assert "without an optimizer step" in message and "\n" not in message
        assert "called backward" in message
        return
    workload = load_script_workload(spec, CPU)
    run = workload.script_run
    assert run is not None and run["steps_run"] >= 1
    inputs, targets = workload.batch()
    model = workload.build_model()
    recomputed = workload.compute_loss(workload.forward(model, inputs), targets).item()
    first = run["losses"][0]
    assert math.isfinite(recomputed)
    assert recomputed == pytest.approx(first, rel=0.10), (recomputed, first, run["loss"])
    # The batch the notebooks measure is the script's batch at its own size.
    assert workload.batch_size >= 1 and workload.batch_dim in (0, 1)
    if item["name"] in EFFECTS:
        for words in EFFECTS[item["name"]]:
            assert any(words in effect for effect in run["effects"]), run["effects"]
