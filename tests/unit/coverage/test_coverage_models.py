"""Notebook 02's findings on models the workbench did not write: an nn.LSTM language model,
a model whose own code makes a data-dependent shape, and a Hugging Face BERT with an MLM head
that computes its own loss from labels. Everything runs for real on the CPU from tiny configs;
nothing is downloaded.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.coverage.analyze import analyze_coverage
from workbench.coverage.capture import (
    PHASES,
    capture_training_step,
    is_profiler_marker,
    shorten_sequence,
)
from workbench.coverage.records import SEEN_REFERENCE, coverage_verdict
from workbench.coverage.shapes import compare_captures
from workbench.targets.cpu import CpuTarget
from workbench.targets.detect import FLAVOUR_XLA
from workbench.workload import (
    TASK_LANGUAGE_MODEL,
    Workload,
    parse_input_description,
    workload_from_module,
)

VOCAB = 50
SEQUENCE = 12
ONLY_XLA = {"flavours": [FLAVOUR_XLA], "measure": False}


class LstmLanguageModel(nn.Module):
    """Embedding, a two-layer nn.LSTM (oneDNN kernel with a workspace on the CPU), a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.lstm = nn.LSTM(16, 24, num_layers=2, batch_first=True)
        self.head = nn.Linear(24, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.lstm(self.embed(tokens))
        return self.head(hidden)


class KeepsPositiveFeatures(nn.Module):
    """Boolean-mask indexing in the model's own code: how many values it keeps is the data's."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = x[x > 0.5]  # MARK-mask
        return self.lin(x) + kept.sum() * 0


def _lstm_workload() -> Workload:
    """The LSTM as a user hands over a plain nn.Module: token ids in, logits out."""
    description = parse_input_description(str(SEQUENCE), "int64", VOCAB)
    return workload_from_module(LstmLanguageModel, description, "lstm-lm", 8)


def _classifier(model_factory) -> Workload:
    return Workload(
        name="classifier",
        model_factory=model_factory,
        batch_maker=lambda n, g: ((torch.randn(n, 6, generator=g),), torch.randint(3, (n,))),
        loss_fn=nn.functional.cross_entropy,
        optimizer_factory=lambda params: torch.optim.AdamW(params, lr=1e-3),
        batch_size=8,
    )


def test_an_lstm_language_model_runs_eager_and_its_kernel_workspace_is_no_shape_finding() -> None:
    report = analyze_coverage(_lstm_workload(), CpuTarget(), **ONLY_XLA)
    compiled = report.compiled
    # Dynamo declines nn.LSTM: no graph, and no count read off explain's raw -1.
    assert compiled.error is None and compiled.graph_count == 0
    assert compiled.runs_eager and compiled.graph_break_count is None
    assert any("LSTM" in skipped.reason for skipped in compiled.skipped)
    assert compiled.sentence().startswith("Dynamo did not capture the forward: it runs eager")
    assert "runs eager (Dynamo skipped it)" in report.headline()
    assert "-1" not in report.headline() and "graph break" not in report.headline()

    # The oneDNN workspace changes size otherwise than the batch and the sequence: it ran,
    # inside nn.LSTM, and is not what the model's code sees.
    assert "aten::mkldnn_rnn_layer" in report.reference.ops
    workspace_calls = [e for e in report.reference.trace if e.op == "aten::mkldnn_rnn_layer"]
    assert workspace_calls and not any(e.model_code for e in workspace_calls)
    lstm_boundary = [e for e in report.reference.trace if e.op == "module lstm (LSTM)"]
    assert lstm_boundary and all(e.model_code for e in lstm_boundary)
    assert [c.dimension for c in report.shapes.comparisons] == ["batch", "sequence"]
    assert all(c.uncompared_calls > 0 for c in report.shapes.comparisons)
    assert report.shapes.stable, report.shapes.sentence()
    assert "shapes follow batch/sequence only" in report.headline()
    # Its recurrence is a loop over the sequence all the same: without a fused RNN kernel
    # (torch-xla has none) ATen's decomposition steps it per position, unrolled.
    assert report.shapes.recurrent_modules == ["lstm (LSTM)"]
    assert "lstm (LSTM) unroll(s) per position without a fused RNN kernel" in report.headline()
    assert "steps the sequence one cell per position" in report.shapes.sentence()
    reasons = [f.reason for f in coverage_verdict(report, None).findings]
    assert report.shapes.unrolled_status() in reasons


def test_a_forward_dynamo_captures_does_not_read_as_eager() -> None:
    compiled = analyze_coverage(_classifier(lambda: nn.Linear(6, 3)), CpuTarget(), **ONLY_XLA)
    assert not compiled.shapes.recurrent_modules and not compiled.shapes.unrolls
    assert "unroll" not in compiled.headline()
    assert compiled.compiled.graph_count == 1 and not compiled.compiled.runs_eager
    assert not compiled.compiled.skipped
    assert "runs eager" not in compiled.compiled.sentence()
    assert "runs eager" not in compiled.headline()


def test_a_data_dependent_shape_in_the_models_own_code_is_still_found() -> None:
    report = analyze_coverage(_classifier(KeepsPositiveFeatures), CpuTarget(), **ONLY_XLA)
    assert not report.shapes.stable
    assert "shapes change beyond batch/sequence" in report.headline()
    changed = [change for c in report.shapes.comparisons for change in c.unexplained]
    assert changed and all(change.site is not None for change in changed)
    assert any(change.site.in_user_code and change.site.path == __file__ for change in changed)


def test_profiler_markers_are_in_no_table_and_every_total_agrees() -> None:
    report = analyze_coverage(_classifier(lambda: nn.Linear(6, 3)), CpuTarget(), **ONLY_XLA)
    # AdamW wraps its step in record_function: the capture saw marker "ops" ...
    markers = [op for op in report.reference.ops if is_profiler_marker(op)]
    assert markers and set(report.bookkeeping) == set(markers)
    # ... and not one table counts them: per phase, per op and in the headline alike.
    captured = [r for r in report.rows if SEEN_REFERENCE in r.seen_in]
    totals = report.reference.phase_totals()
    assert sum(t["calls"] for t in totals.values()) == sum(r.total_calls for r in captured)
    for phase in PHASES:
        in_phase = [r for r in captured if phase in r.calls]
        assert totals[phase] == {
            "ops": len(in_phase),
            "calls": sum(r.calls[phase] for r in in_phase),
        }
    calls = sum(r.total_calls for r in captured)
    assert f"runs {len(captured)} distinct ATen ops ({calls} calls" in report.headline()
    summary = report.summaries()[FLAVOUR_XLA]
    assert sum(summary.calls.values()) == calls and sum(summary.distinct.values()) == len(captured)


@pytest.mark.parametrize(
    ("name", "marker"),
    [
        ("profiler::_record_function_enter_new", True),
        ("profiler::_record_function_exit._RecordFunction", True),
        ("Optimizer.step#AdamW.step", True),
        ("ProfilerStep#3", True),
        ("aten::add.Tensor", False),
        ("wbtest::double_it", False),
        ("aten::_foreach_add_.List", False),
    ],
)
def test_what_counts_as_a_profiler_marker(name: str, marker: bool) -> None:
    assert is_profiler_marker(name) is marker


BERT_SEQUENCE = 16


def _tiny_bert_mlm() -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return BertForMaskedLM(config)


def _masked_tokens(size: int, generator: torch.Generator):
    """Token ids, an attention mask, and MLM labels: -100 (ignored) except where masked."""
    tokens = torch.randint(100, (size, BERT_SEQUENCE), generator=generator)
    chosen = torch.rand(size, BERT_SEQUENCE, generator=generator) < 0.3
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    inputs = {"input_ids": tokens, "attention_mask": torch.ones_like(tokens), "labels": labels}
    return inputs, labels


def _bert_workload() -> Workload:
    return Workload(
        name="tiny-bert-mlm",
        model_factory=_tiny_bert_mlm,
        batch_maker=_masked_tokens,
        loss_fn=nn.functional.cross_entropy,  # unused: the model computes its own loss
        optimizer_factory=lambda params: torch.optim.AdamW(params, lr=1e-3),
        batch_size=4,
        task=TASK_LANGUAGE_MODEL,
        sequence_length=BERT_SEQUENCE,
        task_metric=None,
        loss_from_output=True,
    )


def test_bert_with_an_mlm_head_passes_the_shape_check_with_labels() -> None:
    pytest.importorskip("transformers", reason="transformers is a test-only extra")
    workload = _bert_workload()
    batch = workload.batch("cpu")
    half = BERT_SEQUENCE // 2
    # The cut the shape check makes is what a data loader would hand over: contiguous, so
    # BERT's labels.view(-1) works; a bare narrow of the labels is not, and BERT raises on it.
    cut_inputs, cut_targets = shorten_sequence(batch, BERT_SEQUENCE, half)
    assert cut_inputs["labels"].shape == (4, half) and cut_inputs["labels"].is_contiguous()
    assert cut_targets.is_contiguous()
    narrowed = {k: t.narrow(1, 0, half) for k, t in batch[0].items()}
    assert not narrowed["labels"].is_contiguous()
    with pytest.raises(RuntimeError, match="view"):
        workload.build_model("cpu")(**narrowed)

    reference = capture_training_step(workload)
    shorter = capture_training_step(workload, sequence_length=half)
    smaller = capture_training_step(workload, batch_size=2)
    assert reference.failure is None
    assert shorter.failure is None, shorter.failure.summary()
    sequence = compare_captures(reference, shorter, "sequence", BERT_SEQUENCE, half)
    batch_size = compare_captures(reference, smaller, "batch", 4, 2)
    for comparison in (sequence, batch_size):
        assert comparison.failure is None
        assert comparison.compared_calls > 0
        assert comparison.unexplained_calls == 0, comparison.unexplained
        assert not comparison.call_count_changes, comparison.call_count_changes
