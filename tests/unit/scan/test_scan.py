"""Static scan: syntax-tree findings (never comments or docstrings), imports resolved, flavour
severities, text files by regular expression, notebooks, exit codes, the workload's own files."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from workbench import scan
from workbench.cli import main
from workbench.errors import EXIT_BLOCKING_FINDINGS, BadInput
from workbench.scan.rules import BLOCKING, INFO
from workbench.workload import load_workload

TRAIN = '''
"""Docstring that says .cuda() and torch.cuda.synchronize(): documentation, not code."""
import os
import torch
import torch.distributed as dist
from torch import cuda as gpu
from torch.cuda.amp import GradScaler
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
import torch_xla.core.xla_model as xm
import flash_attn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
os.environ["CUDA_VISIBLE_DEVICES"] = "0"
torch.backends.cudnn.benchmark = True
# model.cuda() in a comment
NOTE = "call model.cuda() first"


def train(model, data):
    model = model.cuda()
    dist.init_process_group(backend="nccl")
    model = DDP(model, device_ids=[0])
    loader = DataLoader(data, batch_size=8)
    scaler = GradScaler()
    for x, y in loader:
        x = x.to(f"cuda:{0}")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        print(loss.item())
        gpu.synchronize()
        xm.mark_step()
    loss.item()
    return torch.compile(model, mode="max-autotune")
'''


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def _hits(report: scan.ScanReport) -> set[tuple[int, str]]:
    return {(f.line, f.rule) for f in report.findings}


def test_python_findings_resolve_imports_and_skip_comments_and_strings(tmp_path: Path) -> None:
    report = scan.scan_paths([_write(tmp_path / "train.py", TRAIN)])
    hits = _hits(report)
    expected = {
        (9, "legacy-xla"),
        (10, "cuda-library"),
        (12, "cuda-device"),
        (12, "cuda-check"),
        (13, "nvidia-tools"),
        (14, "cuda-backend-flags"),
        (20, "cuda-call"),
        (21, "nccl"),
        (22, "ddp-device-ids"),
        (23, "dataloader-shapes"),
        (24, "grad-scaler"),
        (26, "cuda-device"),
        (27, "cuda-autocast"),
        (27, "fp16"),
        (29, "host-sync"),
        (30, "cuda-sync"),
        (31, "legacy-xla-renamed"),
        (33, "torch-compile-options"),
    }
    assert expected <= hits
    # The docstring (line 1), the comment (line 15) and the plain string (line 16) are text.
    assert not {h for h in hits if h[0] in (1, 15, 16)}
    # .item() after the loop is not a per-step sync.
    assert (32, "host-sync") not in hits
    assert all(f.how == "ast" for f in report.findings)
    call = next(f for f in report.findings if f.rule == "cuda-call")
    assert call.code == "model = model.cuda()"
    assert call.native.startswith('.to("neuron")')
    assert call.xla == ".to(torch_xla.device())"
    assert call.location() == f"{tmp_path / 'train.py'}:20"


def test_flavours_decide_severity(tmp_path: Path) -> None:
    path = _write(tmp_path / "train.py", TRAIN)
    both = {(f.line, f.rule): f for f in scan.scan_paths([path]).findings}
    xla_only = {(f.line, f.rule): f for f in scan.scan_paths([path], ["xla"]).findings}
    native_only = {(f.line, f.rule): f for f in scan.scan_paths([path], ["native"]).findings}
    # Importing torch_xla blocks a native migration and is no finding on the XLA path.
    assert both[(9, "legacy-xla")].severity == BLOCKING
    assert (9, "legacy-xla") not in xla_only
    # mark_step still works on XLA (newer spelling torch_xla.sync()); native has no such thing.
    assert xla_only[(31, "legacy-xla-renamed")].severity == INFO
    assert native_only[(31, "legacy-xla-renamed")].severity == BLOCKING
    assert both[(31, "legacy-xla-renamed")].severity == BLOCKING
    assert xla_only[(31, "legacy-xla-renamed")].native == ""
    # A plain torch.compile is right for native and wrong for XLA torch-neuronx.
    plain = _write(tmp_path / "plain.py", "import torch\nm = torch.compile(model)\n")
    assert not scan.scan_paths([plain], ["native"]).findings
    assert [f.rule for f in scan.scan_paths([plain], ["xla"]).findings] == ["torch-compile"]
    with pytest.raises(BadInput, match="flavours"):
        scan.scan_paths([path], ["cuda"])


def test_text_files_cuda_sources_broken_python_and_notebooks(tmp_path: Path) -> None:
    _write(tmp_path / "requirements.txt", "torch==2.4\nflash-attn==2.5\n# xformers\n")
    _write(tmp_path / "launch.sh", "export CUDA_VISIBLE_DEVICES=0,1\ntorchrun train.py\n")
    _write(tmp_path / "kernel.cu", "__global__ void k() {}\n")
    _write(tmp_path / "old.py", "def broken(:\n    x.cuda()\n")
    hidden = tmp_path / ".venv" / "lib"
    hidden.mkdir(parents=True)
    _write(hidden / "vendored.py", "x.cuda()\n")
    notebook = {
        "cells": [
            {"cell_type": "markdown", "source": "model.cuda() in prose"},
            {"cell_type": "code", "source": ["%pip install flash-attn\n", "y = x.cuda()\n"]},
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (tmp_path / "explore.ipynb").write_text(json.dumps(notebook))

    report = scan.scan_paths([tmp_path])
    found = {(Path(f.path.split(" cell ")[0]).name, f.line, f.rule, f.how) for f in report.findings}
    assert found == {
        ("requirements.txt", 2, "cuda-library", "regex"),
        ("launch.sh", 1, "nvidia-tools", "regex"),
        ("kernel.cu", 1, "cuda-extension", "file"),
        ("old.py", 2, "cuda-call", "regex"),
        ("explore.ipynb", 2, "cuda-call", "ast"),
    }
    assert any(f.path.endswith("explore.ipynb cell 2") for f in report.findings)
    assert report.files == 5
    assert "5 finding(s) in 5 file(s)" in report.sentence()


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    blocking = _write(tmp_path / "a.py", "import torch\nx = torch.zeros(2).cuda()\n")
    assert main(["scan", str(blocking)]) == EXIT_BLOCKING_FINDINGS
    out = capsys.readouterr().out
    assert f"{blocking}:2: blocking [cuda-call]" in out
    assert "-> native:" in out and "-> xla:" in out

    clean = _write(tmp_path / "b.py", "import torch\nx = torch.zeros(2)\n")
    assert main(["scan", str(clean)]) == 0
    assert "No CUDA-specific code found in 1 file(s)." in capsys.readouterr().out

    changes_only = _write(tmp_path / "c.py", "import torch\nx = torch.zeros(2).half()\n")
    assert main(["scan", str(changes_only)]) == 0

    assert main(["scan", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_workload_sources_are_the_workloads_own_files() -> None:
    sources = scan.workload_sources(load_workload("tiny-transformer"))
    assert [p.name for p in sources] == ["tiny_transformer.py"]
    user = scan.workload_sources(
        load_workload(
            "tests.fixtures.user_workloads:token_module",
            input_shape="6",
            input_dtype="int64",
            num_classes=50,
        )
    )
    assert [p.name for p in user] == ["user_workloads.py"]


def test_guarded_imports_and_cuda_checks_are_not_blocking(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "guarded.py",
        """
        import torch
        try:
            import torch_xla.core.xla_model as xm
            from torch.cuda.amp import GradScaler
        except ImportError:
            xm = None
        try:
            import flash_attn
        except (ModuleNotFoundError, OSError):
            flash_attn = None
        import triton

        if torch.cuda.is_available():
            pass
        while torch.cuda.device_count() > 1:
            break
        count = torch.cuda.device_count()
        """,
    )
    findings = {(f.line, f.rule): f for f in scan.scan_paths([path]).findings}
    assert findings[(3, "guarded-import")].severity == INFO
    assert findings[(8, "guarded-import")].severity == INFO
    assert not {k for k in findings if k[0] in (3, 4, 8) and k[1] != "guarded-import"}
    # Unguarded, the same kind of import stays blocking.
    assert findings[(11, "triton")].severity == BLOCKING
    assert findings[(13, "cuda-check")].severity == "change"
    assert findings[(15, "cuda-check")].severity == "change"
    # A device query outside a test is still a query: the code depends on CUDA's answer.
    assert findings[(17, "cuda-query")].severity == BLOCKING


def test_repeat_interleave_is_flagged_only_when_its_repeats_may_be_a_tensor(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "repeats.py",
        """
        import torch
        def f(x, counts):
            a = x.repeat_interleave(2, dim=1)
            b = torch.repeat_interleave(x, 4 * 2, dim=0)
            c = x.repeat_interleave(repeats=3)
            d = x.repeat_interleave(counts, dim=0)
            e = torch.repeat_interleave(counts)
            return a, b, c, d, e
        """,
    )
    lines = {f.line for f in scan.scan_paths([path]).findings if f.rule == "dynamic-shape-op"}
    assert lines == {6, 7}


def test_a_module_holding_two_models_reports_only_the_workloads_own() -> None:
    workload = load_workload(
        "tests.fixtures.two_models:small_classifier", input_shape="8", num_classes=3
    )
    report = scan.scan_workload(workload)
    assert [Path(r).name for r in report.roots] == ["two_models.py"]
    assert {f.rule for f in report.findings} == {"guarded-import", "cuda-check"}
    assert not report.blocking
    assert report.left_out == [f"{report.roots[0]}: BigGpuModel, big_gpu_model"]
    # The whole module holds the other model's blocking CUDA code; a file the user names is
    # scanned whole.
    named = scan.scan_workload(workload, extra_paths=[report.roots[0]])
    assert {"cuda-call", "cuda-sync"} <= {f.rule for f in named.blocking}


def test_an_hf_model_is_scanned_without_its_library() -> None:
    pytest.importorskip("transformers", reason="transformers is a test-only extra")
    for spec, params in (
        ("tests.fixtures.hf_workloads:gpt2_causal_lm", {}),
        ("tests.fixtures.hf_workloads:gpt2_module", {"input_shape": "16", "input_dtype": "int64",
                                                      "num_classes": 128}),
    ):  # fmt: skip
        report = scan.scan_workload(load_workload(spec, **params))
        assert [Path(r).name for r in report.roots] == ["hf_workloads.py"]
        assert not any("site-packages" in r for r in report.roots)
        assert not report.blocking


def test_a_device_type_derived_from_the_device_and_a_guarded_bf16_question_are_not_blocking(
    tmp_path: Path,
) -> None:
    """nanoGPT's forms: `device_type = 'cuda' if 'cuda' in device else 'cpu'` follows the
    device the script is given, and `is_bf16_supported()` in a test after `is_available()`
    chooses a branch; a hard `device = 'cuda'` stays blocking (it fails on Neuron as written)."""
    path = _write(
        tmp_path / "nano.py",
        """
        import torch
        device = 'cuda'
        dtype = 'bf16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'f16'
        device_type = 'cuda' if 'cuda' in device else 'cpu'
        supported = torch.cuda.is_bf16_supported()
        """,
    )
    findings = {(f.line, f.rule): f for f in scan.scan_paths([path]).findings}
    assert findings[(2, "cuda-device")].severity == BLOCKING
    assert findings[(3, "cuda-check")].severity == "change"
    assert not [k for k in findings if k[0] == 3 and findings[k].severity == BLOCKING]
    assert not [k for k in findings if k[0] == 4]
    # Outside a test, the same question is a query whose answer the code depends on.
    assert findings[(5, "cuda-api")].severity == BLOCKING
