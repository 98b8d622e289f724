"""Hugging Face models as they come: tiny GPT-2, BERT, Llama and ViT built here from configs,
saved with save_pretrained to a temporary folder and loaded back through `hf:FOLDER`, with no
wrapper code. They load here in-process; tests/e2e/test_huggingface_e2e.py runs them through
notebooks 01, 02 and 03 with the real command line, papermill and kernels.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from tests.fixtures.hf_checkpoints import VOCAB, save_tiny_checkpoints
from workbench.cli import main
from workbench.coverage.capture import capture_training_step
from workbench.coverage.risks import INT64, INT64_RANGE, capture_flags
from workbench.errors import BadInput
from workbench.workload import (
    TASK_CLASSIFICATION,
    TASK_LANGUAGE_MODEL,
    named_float_tensors,
)
from workbench.workloads.huggingface import HfOptions, load_hf_workload, task_of_architecture

transformers = pytest.importorskip("transformers", reason="transformers is the hf extra")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return save_tiny_checkpoints(tmp_path_factory.mktemp("hf"))


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
