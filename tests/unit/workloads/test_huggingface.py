"""Hugging Face models as they come: tiny GPT-2, BERT, Llama and ViT built here from configs,
saved with save_pretrained to a temporary folder and loaded back through `hf:FOLDER`, with no
wrapper code. The e2e tests run them through notebooks 01, 02 and 03 with the real command line,
papermill and kernels; the rest load them in-process.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.fixtures import REPO_ROOT
from workbench.cli import main
from workbench.coverage.capture import capture_training_step
from workbench.coverage.records import SEEN_REFERENCE
from workbench.coverage.risks import INT64, INT64_RANGE, capture_flags
from workbench.errors import BadInput
from workbench.report import network_references
from workbench.workload import (
    TASK_CLASSIFICATION,
    TASK_LANGUAGE_MODEL,
    WorkloadSpec,
    named_float_tensors,
)
from workbench.workloads.huggingface import HfOptions, load_hf_workload, task_of_architecture

transformers = pytest.importorskip("transformers", reason="transformers is the hf extra")

REPO = REPO_ROOT
WORKBENCH = str(Path(sys.executable).parent / "workbench")
VOCAB = 128
POSITIONS = 64


def _save(model: torch.nn.Module, folder: Path) -> Path:
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny checkpoints as save_pretrained writes them (config.json + model.safetensors)."""
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    bert = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=32,
        num_attention_heads=2,
        intermediate_size=64,
        vocab_size=VOCAB,
        max_position_embeddings=POSITIONS,
        num_labels=3,
    )
    return {
        "gpt2": _save(
            transformers.GPT2LMHeadModel(
                transformers.GPT2Config(
                    n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=POSITIONS
                )
            ),
            root / "gpt2",
        ),
        "bert": _save(transformers.BertForSequenceClassification(bert), root / "bert"),
        "bert-base": _save(transformers.BertModel(bert), root / "bert-base"),
        "llama": _save(
            transformers.LlamaForCausalLM(
                transformers.LlamaConfig(
                    num_hidden_layers=2,
                    hidden_size=32,
                    num_attention_heads=2,
                    num_key_value_heads=1,
                    intermediate_size=64,
                    vocab_size=VOCAB,
                    max_position_embeddings=POSITIONS,
                )
            ),
            root / "llama",
        ),
        "vit": _save(
            transformers.ViTForImageClassification(
                transformers.ViTConfig(
                    num_hidden_layers=1,
                    hidden_size=32,
                    num_attention_heads=2,
                    intermediate_size=64,
                    image_size=32,
                    patch_size=8,
                    num_labels=5,
                )
            ),
            root / "vit",
        ),
    }


def _load(folder: Path, **options: object):
    return load_hf_workload(f"hf:{folder}", HfOptions(**options))


# ---------------------------------------------------------------------------------------------
# Task inference and the batch each task gets


@pytest.mark.parametrize(
    ("architecture", "task"),
    [
        ("GPT2LMHeadModel", "causal-lm"),
        ("LlamaForCausalLM", "causal-lm"),
        ("BertForMaskedLM", "masked-lm"),
        ("BertForSequenceClassification", "sequence-classification"),
        ("ViTForImageClassification", "image-classification"),
        ("BertModel", None),
        ("BertForQuestionAnswering", None),
    ],
)
def test_task_comes_from_the_architecture_name(architecture: str, task: str | None) -> None:
    assert task_of_architecture(architecture) == task


def test_a_causal_lm_trains_on_its_own_loss_with_keyword_inputs(checkpoints) -> None:
    workload = _load(checkpoints["gpt2"], batch_size=2, sequence_length=16)
    assert workload.task == TASK_LANGUAGE_MODEL and workload.loss_from_output
    assert "GPT2LMHeadModel, task causal-lm (from its architecture" in workload.description
    model = workload.build_model("cpu")
    inputs, targets = workload.batch("cpu", 2)
    assert isinstance(inputs, dict) and inputs["input_ids"].shape == (2, 16)
    assert inputs["input_ids"].max() < VOCAB and torch.equal(inputs["labels"], targets)
    output = workload.forward(model, inputs)
    loss = workload.compute_loss(output, targets)
    # The loss is the one the model computed (shifted next-token cross entropy) ...
    assert loss is output.loss
    logits = output.logits
    expected = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, VOCAB), targets[:, 1:].reshape(-1)
    )
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    # ... and every floating tensor of the ModelOutput is found by name.
    assert [name for name, _ in named_float_tensors(output)] == ["loss", "logits"]
    perplexity = workload.score(output, targets)
    assert 1 < perplexity < 10 * VOCAB


def test_a_classifier_gets_labels_in_its_range_and_scores_accuracy(checkpoints) -> None:
    workload = _load(checkpoints["bert"], batch_size=4, sequence_length=8)
    assert workload.task == TASK_CLASSIFICATION and workload.task_metric_name == "accuracy"
    inputs, targets = workload.batch("cpu", 4)
    assert set(inputs) == {"input_ids", "attention_mask", "labels"}
    assert targets.shape == (4,) and 0 <= int(targets.min()) and int(targets.max()) < 3
    output = workload.forward(workload.build_model("cpu"), inputs)
    assert output.logits.shape == (4, 3)
    assert 0.0 <= workload.score(output, targets) <= 1.0


def test_an_image_classifier_gets_pixel_values_of_the_config_size(checkpoints) -> None:
    workload = _load(checkpoints["vit"], batch_size=2)
    inputs, targets = workload.batch("cpu", 2)
    assert inputs["pixel_values"].shape == (2, 3, 32, 32) and int(targets.max()) < 5
    assert torch.isfinite(
        workload.compute_loss(workload.forward(workload.build_model("cpu"), inputs), targets)
    )


def test_a_headless_checkpoint_is_refused_until_a_task_is_given(checkpoints) -> None:
    with pytest.raises(BadInput) as refused:
        _load(checkpoints["bert-base"])
    message = str(refused.value)
    assert "cannot be inferred from architecture BertModel" in message
    assert "causal-lm, masked-lm, sequence-classification, image-classification" in message
    assert "-p task=NAME" in message
    workload = _load(checkpoints["bert-base"], task="sequence-classification", batch_size=2)
    assert "set with -p task" in workload.description
    assert "newly initialized" in workload.description
    # The new head is drawn under the workload's seed: every build, and every process that
    # re-creates the workload, starts from the same weights.
    first, second = workload.build_model("cpu"), workload.build_model("cpu")
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert (
        workload.describe()["initial_state_sha256"]
        == _load(checkpoints["bert-base"], task="sequence-classification", batch_size=2).describe()[
            "initial_state_sha256"
        ]
    )


def test_a_model_type_builds_offline_with_config_overrides() -> None:
    small = "n_layer=1,n_embd=16,n_head=2,vocab_size=64,n_positions=32"
    workload = load_hf_workload("hf:gpt2", HfOptions(config=small, batch_size=2))
    assert "task causal-lm (the first head transformers has for model type 'gpt2')" in (
        workload.description
    )
    assert workload.sequence_length == 32, "the default 128 is capped at the model's positions"
    model = workload.build_model("cpu")
    assert model.config.n_layer == 1 and model.config.vocab_size == 64
    bert = load_hf_workload(
        "hf:bert",
        HfOptions(
            config="num_hidden_layers=1,hidden_size=16,num_attention_heads=2,intermediate_size=32",
            batch_size=2,
            sequence_length=8,
        ),
    )
    assert "task masked-lm" in bert.description
    inputs, targets = bert.batch("cpu", 2)
    masked = targets != -100
    # Every sample has the same count of masked positions, the rest carry no loss.
    assert masked.sum(dim=1).tolist() == [masked[0].sum().item()] * 2 and masked.any()
    assert torch.isfinite(bert.compute_loss(bert.forward(bert.build_model("cpu"), inputs), targets))


def test_the_spec_recreates_the_same_workload_in_a_child_process(checkpoints) -> None:
    """04's trials and data-parallel ranks rebuild the workload from its spec in a child."""
    spec = WorkloadSpec(f"hf:{checkpoints['llama']}", batch_size=2, sequence_length=8)
    here = spec.load().describe()["initial_state_sha256"]
    code = (
        "import pickle, sys; spec = pickle.loads(bytes.fromhex(sys.argv[1])); "
        "print(spec.load().describe()['initial_state_sha256'])"
    )
    child = subprocess.run(
        [sys.executable, "-c", code, pickle.dumps(spec).hex()],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == here


# ---------------------------------------------------------------------------------------------
# Coverage on an HF model: its own call sites, no noise


def test_coverage_names_transformers_call_sites_and_keeps_int64_noise_out(checkpoints) -> None:
    workload = _load(checkpoints["gpt2"], batch_size=2, sequence_length=16)
    capture = capture_training_step(workload)
    embedding = capture.ops["aten::embedding"]
    assert embedding.first_site is not None and embedding.first_site.in_user_code
    assert embedding.first_site.short().startswith("transformers/models/gpt2/modeling_gpt2.py:")
    assert embedding.first_site.function == "forward"
    assert "transformer.wte (Embedding)" in embedding.first_site.short()
    # Token ids, labels and positions are int64 whose values were read and fit int32: the
    # default downcast changes nothing, so there is no flag to act on.
    int64_ops = [r for r in capture.ops.values() if "int64" in r.dtypes]
    assert int64_ops and all(r.int64_max_abs is not None for r in int64_ops)
    assert max(r.int64_max_abs for r in int64_ops) < VOCAB
    kinds = {f.kind for f in capture_flags(capture)}
    assert INT64 not in kinds and INT64_RANGE not in kinds
    phases = {phase for r in capture.ops.values() for phase in r.calls}
    assert phases == {"forward", "backward", "optimizer"}


# ---------------------------------------------------------------------------------------------
# Bad input: one sentence, exit 2 (the table in test_bad_input.py has the file-only cases)


def _run_refused(capsys, *args: str) -> str:
    code = main(["run", "--only", "01", *args])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("workbench: error: "), err
    assert "Traceback" not in err
    return err


def test_weights_that_do_not_match_the_config_are_one_sentence(
    checkpoints, tmp_path, monkeypatch, capsys
) -> None:
    folder = tmp_path / "wrong"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(
        (checkpoints["gpt2"] / "model.safetensors").read_bytes()
    )
    config = json.loads((checkpoints["gpt2"] / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "n_embd": 64}))
    monkeypatch.chdir(tmp_path)
    err = _run_refused(capsys, "--workload", f"hf:{folder}")
    assert "do not match its config.json" in err and "of another shape" in err
    assert not (tmp_path / "reports").exists()


def test_unreadable_weights_are_one_sentence(tmp_path, checkpoints, monkeypatch, capsys) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text((checkpoints["gpt2"] / "config.json").read_text())
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    monkeypatch.chdir(tmp_path)
    err = _run_refused(capsys, "--workload", f"hf:{folder}")
    assert "do not load into AutoModelForCausalLM" in err


def test_transformers_missing_is_one_sentence_with_the_install_line(
    checkpoints, tmp_path, monkeypatch, capsys
) -> None:
    # None in sys.modules makes `import transformers` raise ImportError, as when it is absent.
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.chdir(tmp_path)
    err = _run_refused(capsys, "--workload", f"hf:{checkpoints['gpt2']}")
    assert "need Hugging Face transformers, which is not installed" in err
    assert "pip install 'workbench[hf]'" in err


# ---------------------------------------------------------------------------------------------
# End to end: the command line through 01, 02 and 03

E2E_SETTINGS = [
    "-p", "batch_size=2",
    "-p", "sequence_length=16",
    "-p", "steady_steps=5",
    "-p", "warmup_window=4",
    "-p", "warmup_max_steps=15",
    "-p", "steps=5",
    "-p", "validation_batches=2",
    "-p", 'precisions=["fp32", "bf16-autocast"]',
]  # fmt: skip
# GPT-2 goes through torch.compile in 01 and 03; BERT and Llama run eager to keep CI short.
E2E_MODELS = {
    "gpt2": ["-p", 'kinds=["train"]', "-p", 'compiled_precisions=["fp32"]'],
    "bert": ["-p", 'modes=["eager"]', "-p", "compiled_precisions=[]"],
    "llama": ["-p", 'modes=["eager"]', "-p", "compiled_precisions=[]"],
}


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(E2E_MODELS))
def test_an_hf_checkpoint_runs_through_01_02_03(name, checkpoints, tmp_path) -> None:
    result = subprocess.run(
        [
            WORKBENCH,
            "run",
            "--only",
            "01,02,03",
            "--workload",
            f"hf:{checkpoints[name]}",
            "--out",
            "run",
            *E2E_SETTINGS,
            *E2E_MODELS[name],
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert [n["status"] for n in summary["notebooks"]] == ["ok"] * 3

    baseline = json.loads((run / "01_baseline.json").read_text())["data"]
    train = [c for c in baseline["configs"] if c["kind"] == "train"]
    assert train and all(c["status"] == "ok" and c["nonfinite_step"] is None for c in train)
    assert all(c["loss_last"] < c["loss_first"] for c in train), "the model learns"

    coverage = json.loads((run / "02_op_coverage.json").read_text())["data"]
    ops = {row["op"]: row for row in coverage["ops"]}
    # Forward, backward and optimizer ops of the model as it comes.
    assert "forward" in ops["aten::embedding"]["calls"]
    assert "backward" in ops["aten::embedding_dense_backward"]["calls"]
    assert any("optimizer" in row["calls"] for row in ops.values())
    assert ops["aten::embedding"]["first_site"]["text"].startswith("transformers/models/")
    assert not [f for f in coverage["flags"] if f["kind"] in (INT64, INT64_RANGE)]
    # Shifted labels (sequence - 1) follow the sequence: no data-dependent shapes; the library
    # is not the user's code, so its CUDA branches are no blocking scan finding.
    assert coverage["shape_stability"]["stable"], coverage["shape_stability"]["sentence"]
    assert coverage["scan"]["blocking"] == 0

    numerics = json.loads((run / "03_numerics.json").read_text())["data"]
    runs = {r["run"]["label"]: r for r in numerics["runs"]}
    fp32 = runs["cpu fp32 eager"]
    # The fp32 eager run is the reference's own computation: it must match it exactly.
    assert fp32["verdict"]["status"] == "pass", fp32["verdict"]
    assert fp32["trajectory_deviation"] == 0.0
    assert {o["metrics"]["name"] for o in fp32["outputs"]} == {"loss", "logits"}
    assert all(o["verdict"]["passed"] for o in fp32["outputs"])
    # GPT-2's and BERT's configs carry dropout, which 03 turns off so the runs compute the
    # same thing; Llama's attention dropout is 0 and it has no Dropout module.
    assert bool(numerics["dropout_disabled"]) == (name != "llama"), numerics["dropout_disabled"]

    # 02's report: counts say what they count, ops are grouped by verdict with the evidence
    # once, and the op-by-op table stays folded.
    page = (run / "02_op_coverage.html").read_text()
    total = len([row for row in coverage["ops"] if SEEN_REFERENCE in row["seen_in"]])
    assert re.search(rf"\b{total} ops \([\d,]+ calls\)", page), total
    assert "Ops grouped by verdict, evidence once per group" in page
    assert "<details><summary>Every op, phase by phase" in page
    for page in ("01_baseline.html", "02_op_coverage.html", "03_numerics.html", "index.html"):
        html = (run / page).read_text()
        assert not network_references(html), page
