"""An hf: workload measures the model the user named, or says why not: a task that keeps only
part of the model (Whisper's decoder), an audio model, weights missing from a checkpoint, inputs
the model needs (an end-of-sequence token) and the positions it can embed (RoBERTa's offset).
Every model here is a tiny config built or saved with save_pretrained in a temporary folder;
nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from workbench.cli import main
from workbench.coverage.capture import shorten_sequence
from workbench.errors import BadInput
from workbench.runner import RunRequest, check_request
from workbench.scorecard import ATTENTION, BLOCKER, PASS, Finding, Verdict, judge
from workbench.workload import load_workload, with_workload_attentions

transformers = pytest.importorskip("transformers", reason="transformers is the hf extra")
safetensors_torch = pytest.importorskip("safetensors.torch")

TINY_TEXT = "num_hidden_layers=1,hidden_size=16,num_attention_heads=2,intermediate_size=32"


def _parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _whisper_config():
    return transformers.WhisperConfig(
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        vocab_size=100,
        num_mel_bins=8,
        max_source_positions=16,
        max_target_positions=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=3,
    )


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fidelity")
    torch.manual_seed(0)
    gpt2 = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=64, n_positions=32)
    wav2vec2 = transformers.Wav2Vec2Config(
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        conv_dim=(8, 8),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=4,
        num_conv_pos_embedding_groups=2,
        vocab_size=32,
    )
    models = {
        "whisper": transformers.WhisperForConditionalGeneration(_whisper_config()),
        "gpt2": transformers.GPT2LMHeadModel(gpt2),
        "wav2vec2": transformers.Wav2Vec2ForCTC(wav2vec2),
    }
    for name, model in models.items():
        model.save_pretrained(root / name)
    return {name: root / name for name in models}


def _without_block(source: Path, folder: Path, prefix: str) -> list[str]:
    """A copy of a checkpoint whose safetensors lack every tensor under `prefix`."""
    folder.mkdir()
    (folder / "config.json").write_text((source / "config.json").read_text())
    tensors = safetensors_torch.load_file(source / "model.safetensors")
    removed = sorted(name for name in tensors if name.startswith(prefix))
    kept = {name: t for name, t in tensors.items() if name not in removed}
    safetensors_torch.save_file(kept, folder / "model.safetensors", metadata={"format": "pt"})
    return removed


# ---------------------------------------------------------------------------------------------
# A task that keeps only part of the model


def test_a_decoder_only_task_on_whisper_is_refused_with_the_parameter_counts(folders) -> None:
    with pytest.raises(BadInput) as refused:
        load_workload(f"hf:{folders['whisper']}", task="causal-lm")
    message = str(refused.value)
    config = _whisper_config()
    decoder = _parameters(transformers.WhisperForCausalLM(config))
    whole = _parameters(transformers.WhisperForConditionalGeneration(config))
    assert decoder < whole
    assert f"WhisperForCausalLM holds {decoder:,} of the {whole:,} parameters" in message
    assert "of WhisperForConditionalGeneration (it leaves out encoder)" in message
    assert "-p allow_partial_model=true" in message
    assert len(message.splitlines()) == 1 and message.endswith(".")


def test_the_flag_measures_the_part_and_every_headline_and_verdict_says_so(folders, capsys) -> None:
    workload = load_workload(
        f"hf:{folders['whisper']}",
        task="causal-lm",
        allow_partial_model=True,
        batch_size=2,
        sequence_length=8,
    )
    (attention,) = workload.attentions
    assert attention.startswith("partial model (allow_partial_model): WhisperForCausalLM holds")
    model = workload.build_model("cpu")
    assert f"holds {_parameters(model):,} of the" in attention
    assert "workbench: attention:" in capsys.readouterr().err
    inputs, targets = workload.batch("cpu")
    assert torch.isfinite(workload.compute_loss(workload.forward(model, inputs), targets))

    passed = judge([], "pass if nothing is found", "everything ran")
    data = with_workload_attentions(
        {"verdict": passed, "headline": "All ran."}, workload.attentions
    )
    assert data["verdict"].status == ATTENTION
    assert data["verdict"].reason == f"workload: {attention}"
    assert data["headline"] == f"Workload: {attention}. All ran."
    assert "task that keeps only part of the model" in data["verdict"].rule


def test_a_decoder_only_model_with_causal_lm_is_whole(folders, capsys) -> None:
    workload = load_workload(f"hf:{folders['gpt2']}", task="causal-lm", sequence_length=8)
    assert workload.attentions == []
    assert capsys.readouterr().err == ""
    assert workload.describe()["attentions"] == []


def test_workload_attentions_join_a_notebooks_own_findings_and_leave_a_clean_one_alone() -> None:
    blocked = judge([Finding(BLOCKER, "a step raised")], "the rule", "ran")
    data = with_workload_attentions({"verdict": blocked, "headline": "H."}, ["3 tensors missing"])
    verdict: Verdict = data["verdict"]
    assert verdict.status == BLOCKER and verdict.reason == "a step raised (and 1 more finding)"
    assert [f.reason for f in verdict.findings] == ["a step raised", "workload: 3 tensors missing"]
    noisy = judge([Finding(ATTENTION, "noisy timing")], "the rule", "ran")
    led = with_workload_attentions({"verdict": noisy}, ["3 tensors missing"])["verdict"]
    assert led.reason == "workload: 3 tensors missing (and 1 more finding)"
    passed = judge([], "the rule", "ran")
    untouched = with_workload_attentions({"verdict": passed, "headline": "H."}, [])
    assert untouched == {"verdict": passed, "headline": "H."} and passed.status == PASS


def test_the_cli_refuses_the_partial_model_in_one_sentence_and_accepts_the_flag(
    folders, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    spec = f"hf:{folders['whisper']}"
    code = main(["run", "--only", "01", "--workload", spec, "-p", "task=causal-lm"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "builds only part of the model" in err
    assert not (tmp_path / "reports").exists()
    # The flag is a parameter every workload notebook takes: the same request then checks out.
    checked = check_request(
        RunRequest(
            workload=spec,
            only=["01"],
            parameters={"task": "causal-lm", "allow_partial_model": True, "sequence_length": 8},
        )
    )
    assert checked.workload_name == spec


# ---------------------------------------------------------------------------------------------
# Audio models


def test_an_audio_model_is_refused_as_audio(folders) -> None:
    for task in ("", "masked-lm", "sequence-classification"):
        with pytest.raises(BadInput) as refused:
            load_workload(f"hf:{folders['wav2vec2']}", task=task)
        message = str(refused.value)
        assert "Wav2Vec2Model is an audio model (it takes input_values, raw waveforms)" in message
        assert "hf: workloads feed token ids or images only" in message
        assert "weights" not in message
    with pytest.raises(BadInput) as whisper:
        load_workload(f"hf:{folders['whisper']}")
    assert "WhisperModel is an audio model (it takes input_features" in str(whisper.value)


def test_a_text_model_without_the_head_is_not_called_audio(folders) -> None:
    with pytest.raises(BadInput) as refused:
        load_workload(f"hf:{folders['gpt2']}", task="masked-lm")
    message = str(refused.value)
    assert "model type 'gpt2' has no masked-lm head" in message
    assert "audio" not in message and "weights" not in message


# ---------------------------------------------------------------------------------------------
# Inputs the model needs


def test_an_encoder_decoder_classifier_gets_one_end_of_sequence_token_per_sample() -> None:
    workload = load_workload(
        "hf:t5",
        task="sequence-classification",
        hf_config="num_layers=1,d_model=16,d_kv=8,d_ff=32,num_heads=2,vocab_size=64",
        batch_size=4,
        sequence_length=12,
    )
    eos = workload.build_model("cpu").config.eos_token_id
    inputs, targets = workload.batch("cpu")
    ids = inputs["input_ids"]
    assert (ids == eos).sum(dim=1).tolist() == [2] * 4
    assert (ids[:, -1] == eos).all() and (ids[:, 0] == eos).all()
    model = workload.build_model("cpu")
    assert torch.isfinite(workload.compute_loss(workload.forward(model, inputs), targets))
    # Notebook 02 cuts the batch to half its sequence: every sample still holds one.
    short, short_targets = shorten_sequence((inputs, targets), 12, 6)
    assert torch.isfinite(workload.compute_loss(workload.forward(model, short), short_targets))
    # The same batch without its closing token is what the model refuses.
    unclosed = {**inputs, "input_ids": torch.where(ids == eos, eos + 1, ids)}
    with pytest.raises(ValueError, match="eos"):
        model(**unclosed)


def test_a_decoder_classifier_keeps_plain_random_tokens(folders) -> None:
    workload = load_workload(
        f"hf:{folders['gpt2']}", task="sequence-classification", batch_size=64, sequence_length=32
    )
    ids = workload.batch("cpu")[0]["input_ids"]
    # Drawn over the whole vocabulary: the eos id appears anywhere, the last column varies.
    assert ids[:, -1].unique().numel() > 1


# ---------------------------------------------------------------------------------------------
# Weights missing from the checkpoint


def test_a_checkpoint_missing_a_block_is_an_attention_with_count_and_names(
    folders, tmp_path, capsys
) -> None:
    removed = _without_block(folders["gpt2"], tmp_path / "cut", "transformer.h.1.")
    assert len(removed) > 3
    workload = load_workload(f"hf:{tmp_path / 'cut'}", sequence_length=8)
    (attention,) = workload.attentions
    assert attention.startswith(
        f"{len(removed)} tensor(s) of GPT2LMHeadModel are not in the checkpoint"
    )
    assert ", ".join(removed[:3]) in attention
    err = capsys.readouterr().err
    assert f"workbench: attention: hf:{tmp_path / 'cut'}: {attention}" in err
    assert f"{len(removed)} tensor(s) missing from the checkpoint" in workload.description


def test_a_complete_checkpoint_and_a_new_head_are_no_attention(folders, tmp_path, capsys) -> None:
    assert load_workload(f"hf:{folders['gpt2']}", sequence_length=8).attentions == []
    # A new task head on a checkpoint saved without it starts from random weights by design.
    bert = transformers.BertConfig(
        num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=32
    )
    transformers.BertModel(bert).save_pretrained(tmp_path / "bert-base")
    headed = load_workload(
        f"hf:{tmp_path / 'bert-base'}", task="sequence-classification", sequence_length=8
    )
    assert headed.attentions == [] and "of a new head newly initialized" in headed.description
    assert capsys.readouterr().err == ""


# ---------------------------------------------------------------------------------------------
# Positions


@pytest.mark.parametrize(("model_type", "usable"), [("roberta", 18), ("bert", 20)])
def test_the_default_sequence_stops_at_the_positions_the_model_can_use(
    model_type: str, usable: int
) -> None:
    overrides = f"{TINY_TEXT},max_position_embeddings=20,vocab_size=64,pad_token_id=1"
    workload = load_workload(f"hf:{model_type}", hf_config=overrides, batch_size=2)
    assert workload.sequence_length == usable == workload.max_sequence_length
    inputs, targets = workload.batch("cpu")
    model = workload.build_model("cpu")
    assert torch.isfinite(workload.compute_loss(workload.forward(model, inputs), targets))


def test_a_sequence_past_roberta_s_offset_is_one_sentence() -> None:
    overrides = f"{TINY_TEXT},max_position_embeddings=20,vocab_size=64,pad_token_id=1"
    with pytest.raises(BadInput) as refused:
        load_workload("hf:roberta", hf_config=overrides, sequence_length=19)
    message = str(refused.value)
    assert "sequence_length 19 is longer than the 18 positions the model can use" in message
    assert "20 position embeddings less 2" in message and "padding_idx 1" in message
    assert len(message.splitlines()) == 1
    # What the sentence spares the user: the model itself cannot embed 19 positions.
    model = load_workload("hf:roberta", hf_config=overrides, sequence_length=18).build_model()
    with pytest.raises((IndexError, RuntimeError), match="out of bounds"):
        model(input_ids=torch.full((1, 19), 5))
