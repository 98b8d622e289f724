"""Script workloads in the forms public training scripts take: the loss as `backward` receives
it (divided for gradient accumulation, scaled, summed, computed in a helper), no trace left on
the script's own objects, and copies of models that reach their layers through closures."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.fixtures.user_scripts import trains, write_script
from workbench.errors import BadInput
from workbench.targets import get_target
from workbench.workloads.copies import independent_copy, shared_with
from workbench.workloads.script import load_script_workload, run_script

CPU = get_target("cpu")
TRAINS = trains(3)

# A classifier trained by a loss the script reshapes before `backward`: LOSS is replaced.
LOOP = """
import torch
from torch import nn
import torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.CrossEntropyLoss()
accumulate = 4
def compute_loss(out, y):
    return F.cross_entropy(out, y, label_smoothing=0.1)
for step in range(12):
    x, y = torch.randn(5, 6), torch.randint(3, (5,))
    out = model(x)
    loss = LOSS
    loss.backward()
    if (step + 1) % 2 == 0:
        opt.step()
        opt.zero_grad()
"""


def _first_loss_recomputed(workload) -> float:
    inputs, targets = workload.batch()
    return workload.compute_loss(workload.forward(workload.build_model(), inputs), targets).item()


@pytest.mark.parametrize(
    ("loss", "name"),
    [
        ("criterion(out, y) / accumulate", "1/4 x CrossEntropyLoss"),
        ("criterion(out, y) * 3.0", "3 x CrossEntropyLoss"),
        ("compute_loss(out, y)", "F.cross_entropy"),
        (
            "criterion(out, y) + 0.5 * F.cross_entropy(out, y, label_smoothing=0.2)",
            "1 x CrossEntropyLoss + 1/2 x F.cross_entropy",
        ),
    ],
)
def test_the_loss_backward_receives_is_recomputed_as_the_script_made_it(tmp_path, loss, name):
    """Must pass: a torch loss divided, scaled, computed in a helper, or two of them summed,
    is recomputed on the captured batch to the value `backward` received."""
    spec = write_script(tmp_path, LOOP.replace("LOSS", loss))
    capture, _ = run_script(spec, CPU)
    assert capture.loss_name == name
    workload = load_script_workload(spec, CPU)
    assert _first_loss_recomputed(workload) == pytest.approx(capture.losses[0], rel=1e-5)


@pytest.mark.parametrize(
    ("loss", "reason"),
    [
        ("criterion(out, y) ** 2", "not a constant multiple or sum of CrossEntropyLoss"),
        (
            "criterion(out, y) + 1e-3 * sum((p ** 2).sum() for p in model.parameters())",
            "a penalty on the weights",
        ),
        ("-(F.log_softmax(out, -1)[range(5), y]).mean()", "by its own arithmetic"),
    ],
)
def test_a_loss_that_is_not_a_weighted_sum_of_torch_losses_leaves_a_stand_in_and_its_reason(
    tmp_path, loss, reason
):
    """Must fail to be recomputed: the workload's loss is a stand-in, said with the reason in
    every verdict (its attentions), and the questions that train on the loss are not asked."""
    workload = load_script_workload(write_script(tmp_path, LOOP.replace("LOSS", loss)), CPU)
    assert reason in workload.loss_stand_in and workload.loss_stand_in in workload.attentions[0]
    assert "stand-in loss" in workload.attentions[0]
    assert "03 and 04, which train on the loss, are not answered" in workload.attentions[0]
    inputs, targets = workload.batch()
    model = workload.build_model()
    workload.compute_loss(workload.forward(model, inputs), targets).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_the_models_own_loss_divided_for_accumulation_under_a_grad_scaler(tmp_path):
    """nanoGPT's form: `logits, loss = model(X, Y)`, `loss / steps`, `scaler.scale(loss)`."""
    body = """
import torch
from torch import nn
import torch.nn.functional as F
class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.head = nn.Linear(8, 20, bias=False)
        self.head.weight = self.emb.weight  # tied
    def forward(self, idx, targets=None):
        logits = self.head(self.emb(idx))
        loss = F.cross_entropy(logits.view(-1, 20), targets.view(-1), ignore_index=-1)
        return logits, loss
model = LM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler('cuda', enabled=True)
for step in range(10):
    for micro in range(2):
        x = torch.randint(20, (3, 7)); y = torch.randint(20, (3, 7))
        logits, loss = model(x, y)
        loss = loss / 2
        scaler.scale(loss).backward()
    scaler.step(opt); scaler.update(); opt.zero_grad(set_to_none=True)
"""
    spec = write_script(tmp_path, body)
    capture, _ = run_script(spec, CPU)
    assert capture.loss_name == "1/2 x the model's own (output[1])"
    workload = load_script_workload(spec, CPU)
    assert _first_loss_recomputed(workload) == pytest.approx(capture.losses[0], rel=1e-5)


SAVES = """
import copy, io, pickle, torch
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 3)
    def forward(self, x):
        return self.body(x)
model = Net()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for step in range(3):
    loss = nn.functional.cross_entropy(model(torch.randn(6, 4)), torch.randint(3, (6,)))
    loss.backward(); opt.step(); opt.zero_grad()
    torch.save(model, io.BytesIO())
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, io.BytesIO())
    pickle.dumps(model); pickle.dumps(opt)
    twin = copy.deepcopy(model); twin.load_state_dict(model.state_dict())
    copy.deepcopy(opt)
    torch.jit.script(model)
    assert not model._forward_hooks and not model._forward_pre_hooks
"""


def test_the_scripts_own_saves_copies_and_scripting_of_its_objects_work_under_the_watch(
    tmp_path,
):
    """torch.save of the whole model, pickle, deepcopy, a state_dict round trip and
    torch.jit.script behave as they would without the workbook: it leaves no hook on them."""
    capture, _ = run_script(write_script(tmp_path, SAVES), CPU)
    assert capture.steps == 3


class ClosureMLP(nn.Module):
    """minGPT's form: the MLP's forward is a lambda over a ModuleDict of its layers."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.ModuleDict({"fc": nn.Linear(4, 8), "proj": nn.Linear(8, 2)})
        m = self.mlp
        self.mlpf = lambda x: m.proj(torch.relu(m.fc(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlpf(x)


def test_a_copy_of_a_model_reaching_its_layers_through_a_closure_is_independent():
    """Must pass: change the copy, the original does not move (a plain deepcopy shares)."""
    original = ClosureMLP()
    assert "reaches the original's modules" in shared_with(original, copy.deepcopy(original))
    twin = independent_copy(original)
    assert shared_with(original, twin) == ""
    x = torch.randn(3, 4)
    before = original(x).detach().clone()
    with torch.no_grad():
        twin.mlp["fc"].weight.add_(1.0)
    assert torch.equal(original(x), before) and not torch.equal(twin(x), before)


def test_a_copy_whose_forward_still_reads_the_originals_weights_is_refused(tmp_path):
    """Must fail: a model reaching its layer through a global registry; its copy's forward
    reads the original's weights, which no copy of its attributes can change."""
    body = """
import torch
from torch import nn
LAYERS = {}
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        LAYERS['fc'] = self.fc
    def forward(self, x):
        return LAYERS['fc'](x)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for _ in range(2):
    loss = nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(2, (8,)))
    loss.backward(); opt.step(); opt.zero_grad()
"""
    with pytest.raises(BadInput, match="a copy's forward still reads the original's fc.weight"):
        load_script_workload(write_script(tmp_path, body), CPU)
    layer = nn.Linear(2, 2)
    assert "is the original's memory" in shared_with(layer, copy.copy(layer))


def test_a_scripts_closure_model_gives_a_workload_whose_copies_train_apart(tmp_path):
    body = """
import torch
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.ModuleDict(dict(fc=nn.Linear(4, 8), proj=nn.Linear(8, 2)))
        m = self.mlp
        self.mlpf = lambda x: m.proj(torch.relu(m.fc(x)))
    def forward(self, x):
        return self.mlpf(x)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
for _ in range(3):
    loss = nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(2, (8,)))
    loss.backward(); opt.step(); opt.zero_grad()
"""
    workload = load_script_workload(write_script(tmp_path, body), CPU)
    first, second = workload.build_model(), workload.build_model()
    inputs, targets = workload.batch()
    before = second(*inputs).detach().clone()
    optimizer = torch.optim.SGD(first.parameters(), lr=0.5)
    workload.compute_loss(first(*inputs), targets).backward()
    optimizer.step()
    assert torch.equal(second(*inputs), before)
    assert not torch.equal(first(*inputs), before)


def test_what_the_scripts_torch_save_writes_names_no_workbench_object(tmp_path):
    body = SAVES.replace(
        "torch.save(model, io.BytesIO())",
        "buf = io.BytesIO(); torch.save(model, buf); open('saved.bin', 'wb').write(buf.getvalue())",
    )
    run_script(write_script(tmp_path, body), CPU)
    assert b"workbench" not in (tmp_path / "saved.bin").read_bytes()


RNN_LM = """
import argparse
import torch
from torch import nn
parser = argparse.ArgumentParser()
parser.add_argument('--batch_size', type=int, default=6)
args = parser.parse_args()
torch.manual_seed(0)
class RNNModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(30, 8)
        self.rnn = nn.LSTM(8, 16)
        self.out = nn.Linear(16, 30)
    def forward(self, x, hidden):
        y, hidden = self.rnn(self.emb(x), hidden)
        return self.out(y).view(-1, 30), hidden
model = RNNModel()
opt = torch.optim.SGD(model.parameters(), lr=0.5)
data = torch.randint(30, (400,))
columns = data[: (400 // args.batch_size) * args.batch_size].view(args.batch_size, -1).t()
hidden = (torch.zeros(1, args.batch_size, 16), torch.zeros(1, args.batch_size, 16))
for i in range(0, min(50, columns.size(0) - 8), 7):
    x, y = columns[i : i + 7], columns[i + 1 : i + 8].reshape(-1)
    hidden = tuple(h.detach() for h in hidden)
    out, hidden = model(x, hidden)
    loss = nn.functional.cross_entropy(out, y)
    loss.backward(); opt.step(); opt.zero_grad()
"""


def test_a_sequence_batch_rnn_has_its_batch_dimension_read_from_its_batch_size(tmp_path):
    """Must pass: `(sequence, batch)` inputs: the batch is dimension 1, found from the
    script's --batch_size; another batch size runs the script with that option."""
    workload = load_script_workload(write_script(tmp_path, RNN_LM), CPU)
    assert workload.batch_dim == 1 and workload.batch_size == 6
    assert "batch dimension 1: the script's batch size 6" in workload.description
    inputs, targets = workload.batch(batch_size=3)
    assert inputs[0].shape == (7, 3) and inputs[1][0].shape == (1, 1, 16)[:1] + (3, 16)
    assert (
        workload.compute_loss(workload.forward(workload.build_model(), inputs), targets).dim() == 0
    )


def test_a_leading_batch_stays_dimension_0_and_key_value_overrides_set_the_batch():
    """Must fail to move: a batch-first script keeps dimension 0; a configurator's
    `--batch_size=4` is the option 04 sets, in the same form."""
    from workbench.workloads.script import ScriptCapture, batch_dimension, with_batch_size

    capture = ScriptCapture(Path("train.py"), ["--batch_size=4", "--lr=0.1"])
    capture.inputs = (torch.zeros(4, 7, dtype=torch.long),)
    assert capture.batch_size_flag == "--batch_size" and batch_dimension(capture)[0] == 0
    assert with_batch_size(capture.args, "--batch_size", 16) == ["--batch_size=16", "--lr=0.1"]
    nested = ScriptCapture(Path("chargpt.py"), ["--trainer.batch_size=8"])
    assert nested.batch_size_flag == "--trainer.batch_size" and nested.declared_batch_size() == 8
    assert with_batch_size(["--batch-size", "8"], "--batch-size", 2) == ["--batch-size", "2"]


ACCELERATOR = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
if torch.backends.mps.is_available():
    device = torch.device("mps")
elif torch.accelerator.is_available():
    device = torch.accelerator.current_accelerator()
else:
    device = torch.device("cpu")
use_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
model = nn.Linear(6, 3).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device.type == "cpu" and use_bf16)
data = DataLoader(TensorDataset(torch.randn(40, 6), torch.randint(3, (40,))), batch_size=8,
                  pin_memory=True)
for x, y in data:
    x, y = x.to(device), y.to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward(); opt.step(); opt.zero_grad()
"""


def test_device_selection_beyond_torch_cuda_is_redirected_or_listed_with_its_effects(
    tmp_path, capsys
):
    """torch.accelerator answers the target; an MPS check is listed as not mapped; pinned
    DataLoader memory is named; and what the answers changed (bf16 autocast, a fused
    optimizer) is said in the workload's description."""
    spec = write_script(tmp_path, ACCELERATOR)
    capture, redirection = run_script(spec, CPU)
    calls = {row["call"]: row for row in redirection.log.rows()}
    assert calls["torch.accelerator.is_available()"]["mapped"]
    assert calls["torch.accelerator.current_accelerator()"]["mapped"]
    assert not calls["torch.backends.mps.is_available()"]["mapped"]
    assert "pin_memory=True not applied" in capture.dataloaders[0]
    assert capture.autocast_dtype == "bfloat16"
    workload = load_script_workload(spec, CPU)
    assert "the script trained under bfloat16 autocast (after the redirection answered" in (
        workload.description
    )
    assert "the script chose a fused AdamW" in workload.description
    assert workload.script_run is not None and len(workload.script_run["effects"]) == 2


def test_the_scan_reads_the_modules_the_script_imports_from_its_own_project(tmp_path):
    """Scan and redirection agree: the model's module beside the script, which calls
    `.cuda()`, is scanned too (02 said "No CUDA-specific code found" of such a project)."""
    from workbench.scan.sources import workload_source_files

    (tmp_path / "netlib.py").write_text(
        "import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.fc = torch.nn.Linear(4, 2).cuda()\n"
        "    def forward(self, x):\n        return self.fc(x)\n"
    )
    body = """
import torch
from netlib import Net
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    loss = torch.nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(2, (8,)))
    loss.backward(); opt.step(); opt.zero_grad()
"""
    workload = load_script_workload(write_script(tmp_path, body), CPU)
    assert workload.script_run is not None and workload.script_run["own_files"] == ["netlib.py"]
    scanned = {source.path.name for source in workload_source_files(workload)}
    assert scanned == {"train.py", "netlib.py"}


def test_a_config_files_script_path_is_read_from_the_config_files_folder(tmp_path, monkeypatch):
    """Must pass: `workload: script:train.py` in configs/run.yaml is configs/train.py, from
    any working folder; a --workload on the command line stays relative to the working folder."""
    import workbench.runner
    from workbench.cli import main
    from workbench.workloads.script import parse_script_spec

    seen = []
    monkeypatch.setattr(
        workbench.runner, "run", lambda request, progress: seen.append(request) or 0
    )
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "run.yaml").write_text("workload: script:train.py\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--config", "configs/run.yaml"]) == 0
    assert parse_script_spec(seen[0].workload)[0] == tmp_path / "configs" / "train.py"
    assert main(["run", "--config", "configs/run.yaml", "--workload", "script:train.py"]) == 0
    assert parse_script_spec(seen[1].workload)[0] == tmp_path / "train.py"


def test_a_rank_the_workbook_launched_runs_a_torchrun_ready_script_as_one_process(monkeypatch):
    """Must pass: inside 04's data-parallel ranks (torchrun's RANK/WORLD_SIZE set by the
    workbook's own launch), nanoGPT-style `ddp = RANK in os.environ` scripts take their
    single-process path; set by the user for the whole run, the same variables are refused."""
    import os

    from tests.fixtures.user_scripts import SCRIPTS
    from workbench.processes import launcher_environment_hidden
    from workbench.workloads.script import script_spec

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    spec = script_spec(str(SCRIPTS / "distributed_ready_train.py"))
    with launcher_environment_hidden():
        assert "WORLD_SIZE" not in os.environ
        capture, _ = run_script(spec, CPU)
    assert capture.steps >= 1 and os.environ["WORLD_SIZE"] == "2"
    with pytest.raises(BadInput, match="it joins a process group"):
        run_script(spec, CPU)


@pytest.mark.parametrize(
    ("starts", "call"),
    [
        ("import os\nos.execv('/bin/true', ['true'])", "os.execv"),
        ("import os\nos.posix_spawn('/bin/true', ['true'], {})", "os.posix_spawn"),
        ("import pty\npty.fork()", "pty.fork"),
        ("import os\nos.spawnv(os.P_WAIT, '/bin/true', ['true'])", "os.spawnv"),
        ("import ctypes\nctypes.CDLL(None).system(b'true')", "ctypes system"),
        ("import ctypes\nctypes.CDLL(None)['fork']()", "ctypes fork"),
    ],
)
def test_every_way_to_start_or_replace_a_process_is_refused(tmp_path, starts, call):
    """Must fail: exec replaced the run (exit 0, nothing written), spawn, pty and ctypes
    started children the watch cannot see."""
    with pytest.raises(BadInput) as refused:
        run_script(write_script(tmp_path, starts + "\n"), CPU)
    assert f"it starts a process ({call} at train.py:2)" in str(refused.value)


def test_a_c_function_that_starts_nothing_is_looked_up_as_usual(tmp_path):
    """Must pass: ctypes itself is not refused, only the C functions that start processes."""
    body = "import ctypes\nassert ctypes.CDLL(None).strlen(b'abc') == 3\n" + TRAINS
    capture, _ = run_script(write_script(tmp_path, body), CPU)
    assert capture.steps == 3


def test_a_script_that_sleeps_is_stopped_at_the_time_limit_in_one_sentence(tmp_path):
    body = "import time\ntime.sleep(60)\n"
    with pytest.raises(BadInput, match=r"it ran past the 0.5 s a capture may take"):
        run_script(write_script(tmp_path, body), CPU, time_limit_s=0.5)


def test_the_command_ends_when_the_steps_are_done_whatever_threads_remain(tmp_path):
    """A non-daemon thread the script leaves running kept `workbench` alive after its last
    line: the command now ends with its own exit code."""
    import subprocess
    import sys

    body = "import threading, time\nthreading.Thread(target=time.sleep, args=(120,)).start()\n"
    spec = write_script(tmp_path, body + TRAINS)
    code = (
        "import sys, threading, time\n"
        "from workbench import cli\n"
        "from workbench.targets import get_target\n"
        "from workbench.workloads.script import run_script\n"
        f"capture, _ = run_script({spec!r}, get_target('cpu'))\n"
        "print(capture.stray_threads)\n"
        "cli.main = lambda: 0\n"
        "cli.entry()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "Thread-" in done.stdout, done.stderr


def test_a_batch_size_whose_data_leaves_no_step_repeats_the_captured_samples(tmp_path, capsys):
    """Must pass: at --batch_size 500 the RNN script's 400 tokens make no column, so it takes
    no step; the batch is the captured samples repeated along the batch dimension, said so.
    Must fail: a script that breaks at that size for another reason still fails."""
    workload = load_script_workload(write_script(tmp_path, RNN_LM), CPU)
    inputs, _ = workload.batch(batch_size=500)
    assert inputs[0].shape == (7, 500)
    assert "with --batch_size 500 the script takes no optimizer step" in capsys.readouterr().err
    broken = RNN_LM.replace(
        "args = parser.parse_args()",
        "args = parser.parse_args()\nassert args.batch_size < 100, 'too big'",
    )
    (tmp_path / "b").mkdir()
    other = load_script_workload(write_script(tmp_path / "b", broken), CPU)
    with pytest.raises(BadInput, match="too big"):
        other.batch(batch_size=500)


def test_output_past_sys_stdout_is_collected_scrubbed_and_stripped_of_escapes(tmp_path, capfd):
    """Must refuse to leak: `sys.__stdout__`, `os.write(1|2, ...)` and terminal escapes from a
    script reach the console only through the scrubbed, stripped collection."""
    token = "glpat-" + "xY3zA9bC7dE5fG1hJ2kL"
    body = (
        "import os, sys\n"
        f"sys.__stdout__.write('dunder {token}\\n')\n"
        f"os.write(1, b'raw fd {token}\\n')\n"
        "os.write(2, b'\\x1b]0;title\\x07\\x1b[31mred\\x1b[0m\\n')\n" + TRAINS
    )
    capture, redirection = run_script(write_script(tmp_path, body), CPU)
    assert "dunder" in capture.printed and "raw fd" in capture.printed
    assert token not in capture.printed
    from workbench.workloads.script import show_capture

    show_capture(capture, redirection)
    out, err = capfd.readouterr()
    assert token not in out + err and "\x1b" not in out + err
    assert "red" in err


def test_an_oversized_or_utf16_script_is_one_sentence_naming_why(tmp_path):
    big = tmp_path / "big.py"
    with big.open("wb") as handle:
        handle.truncate(17 * 2**20)  # sparse: no 17 MiB written
    with pytest.raises(BadInput, match=r"big.py is 17 MiB; a training script is read only up"):
        run_script(f"script:{big}", CPU)
    wide = tmp_path / "wide.py"
    wide.write_text("print('hi')\n", encoding="utf-16")
    with pytest.raises(
        BadInput, match="encoded as UTF-16 or UTF-32; Python reads scripts as UTF-8"
    ):
        run_script(f"script:{wide}", CPU)


def test_a_relative_script_path_in_a_subfolder_is_run_from_where_it_is_named(tmp_path, monkeypatch):
    """`plan --workload script:sub/x.py` looked for sub/sub/x.py: the path is made absolute
    before the run moves into the script's folder."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.py").write_text(TRAINS)
    monkeypatch.chdir(tmp_path)
    capture, _ = run_script("script:sub/x.py", CPU)
    assert capture.steps == 3 and capture.path == tmp_path / "sub" / "x.py"


def test_a_whole_graph_batch_has_one_size_and_04_is_not_answered_for_it():
    """Must pass: a graph's features beside its N x N adjacency (pytorch/examples' GAT) have no
    batch size to vary: the workload says so, 04 (which varies it) is not answered, 05 serves
    that size. Must fail to be taken for one: per-sample inputs keep their batch dimension."""
    from workbench.context import _check_answerable
    from workbench.errors import NotAnswered
    from workbench.questions import question
    from workbench.workload import load_workload
    from workbench.workloads.script import whole_batch_reason

    graph = (torch.randn(50, 8), torch.ones(50, 50))
    assert "holds 50 along more than one dimension" in whole_batch_reason(graph, 0)
    assert "share no batch dimension" in whole_batch_reason(
        (torch.randn(50, 8), torch.zeros(2, 300, dtype=torch.long)), 0
    )
    assert whole_batch_reason((torch.randn(16, 8), torch.randn(16, 3)), 0) == ""
    workload = dataclasses.replace(load_workload("seed-mlp"), fixed_batch="a whole graph")
    retuning, serving = question("04_retuning"), question("05_serving")
    assert retuning is not None and serving is not None
    with pytest.raises(NotAnswered, match="04_retuning: not answered: a whole graph"):
        _check_answerable("04_retuning", retuning, workload)
    _check_answerable("05_serving", serving, workload)  # answered, at the one size
