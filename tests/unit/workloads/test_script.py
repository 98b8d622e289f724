"""`script:` workloads: an unmodified training script run in-process, watched, its CUDA calls
redirected to the CPU target (real torch throughout; the fixtures are plain scripts)."""

from __future__ import annotations

import pytest
import torch

from tests.fixtures import REPO_ROOT
from tests.fixtures.fresh_python import fresh_python
from tests.fixtures.user_scripts import SCRIPTS, trains, write_script
from workbench.coverage.capture import capture_training_step
from workbench.errors import BadInput
from workbench.scan import scan_workload
from workbench.scan.sources import workload_source_files
from workbench.targets import get_target
from workbench.targets.redirect import DeviceRedirection
from workbench.workload import load_workload
from workbench.workloads.script import (
    CAPTURE_STEPS,
    load_script_workload,
    parse_script_spec,
    run_script,
    script_spec,
)

CPU = get_target("cpu")


@pytest.fixture(scope="module")
def smoke():
    return run_script(script_spec(str(SCRIPTS / "smoke_train.py")), CPU)


@pytest.fixture(scope="module")
def messy():
    return run_script(script_spec(str(SCRIPTS / "messy_train.py"), "--batch-size 16"), CPU)


def _calls(log, mapped=True):
    return {
        (row["call"], int(row["where"].rsplit(":", 1)[1]))
        for row in log.rows()
        if row["mapped"] is mapped
    }


def test_the_smoke_script_is_watched_and_stopped_after_the_steps_asked(smoke):
    capture, redirection = smoke
    assert isinstance(capture.model, torch.nn.Sequential)
    assert type(capture.optimizer).__name__ == "AdamW"
    assert capture.loss_name == "CrossEntropyLoss"
    assert capture.inputs[0].shape == (64, 128) and capture.targets.shape == (64,)
    # The script asks for 20 steps; the watch stops it after CAPTURE_STEPS and says so.
    assert capture.steps == CAPTURE_STEPS and capture.stopped
    assert len(capture.step_seconds()) == CAPTURE_STEPS
    assert [site.rsplit("/", 1)[-1] for site in capture.compile_calls] == ["smoke_train.py:16"]
    assert _calls(redirection.log) == {
        ("torch.cuda.is_available()", 9),
        ("torch.device('cuda')", 9),
    }


def test_the_workload_recomputes_the_scripts_first_loss(smoke):
    """Model factory, batch and loss built from the capture give the loss the script's own
    first backward saw: the capture is the script's step, not a look-alike."""
    capture, redirection = smoke
    workload = load_script_workload(script_spec(str(SCRIPTS / "smoke_train.py")), CPU)
    assert _recomputed_first_loss(workload) == pytest.approx(capture.losses[0], rel=1e-6)
    assert workload.describe()["script"]["stopped_by_workbook"] is True
    assert "stopped after 5 optimizer steps, its first step" in workload.description
    assert "then a median" in workload.description


def test_the_smoke_scripts_ops_equal_seed_mlps():
    script = load_workload(script_spec(str(SCRIPTS / "smoke_train.py")), target="cpu")
    ops = {name: rec.calls for name, rec in capture_training_step(script).ops.items()}
    reference = {
        name: rec.calls
        for name, rec in capture_training_step(load_workload("seed-mlp")).ops.items()
    }
    assert ops == reference


def test_the_messy_script_runs_with_each_redirected_call_listed(messy):
    capture, redirection = messy
    assert capture.inputs[0].shape == (16, 20)  # --batch-size 16 reached argparse
    assert _calls(redirection.log) == {
        ("torch.cuda.is_available()", 31),
        ("module.cuda()", 32),
        ("GradScaler('cuda')", 35),
        ("tensor.cuda()", 40),
    }
    assert _calls(redirection.log, mapped=False) == {("torch.backends.cudnn.benchmark = True", 27)}
    assert "num_workers=2 run in-process" in capture.dataloaders[0]
    assert type(capture.optimizer).__name__ == "SGD"


def test_redirection_maps_cuda_inside_and_nothing_outside():
    with DeviceRedirection(torch.device("cpu"), lambda: None).active() as redirection:
        assert torch.device("cuda:0").type == "cpu"
        assert isinstance(torch.device("cpu"), torch.device)
        assert torch.zeros(2, device="cuda").device.type == "cpu"
        assert torch.ones(2).to("cuda").device.type == "cpu"
        assert torch.nn.Linear(2, 2).cuda().weight.device.type == "cpu"
        assert torch.cuda.is_available()
        torch.zeros(1, device="cpu").to("cpu")  # not CUDA: not listed
        torch.backends.cuda.matmul.allow_tf32 = False
        assert torch.cuda.max_memory_allocated() == 0
        torch.set_default_device("cuda")
        assert torch.empty(1).device.type == "cpu"
    assert getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None) is None
    assert len(redirection.log.redirected) == 6
    assert [site.call for site in redirection.log.unmapped] == [
        "torch.backends.cuda.matmul.allow_tf32 = False",
        "torch.cuda.max_memory_allocated()",
    ]
    assert torch.device("cuda").type == "cuda"  # restored
    assert torch.cuda.is_available() is False or torch.cuda.device_count() > 0
    assert "to" not in torch.Tensor.__dict__  # the C method is inherited again


def _run_and_load(tmp_path, body: str):
    """The script run once, watched (capture and redirection), and the workload it gives."""
    spec = _script(tmp_path, body)
    capture, redirection = run_script(spec, CPU)
    return capture, redirection, load_script_workload(spec, CPU)


def _recomputed_first_loss(workload) -> float:
    """The loss of the workload's first step on its batch, from its model's first weights."""
    inputs, targets = workload.batch()
    return workload.compute_loss(workload.forward(workload.build_model(), inputs), targets).item()


_script = write_script
TRAINS = trains(3)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("x = 1\ny = (\n", "line 2 has a syntax error"),
        ("import sys\nsys.exit(3)\n", "exited with status 3, before any optimizer was made."),
        (
            "import argparse\np = argparse.ArgumentParser()\np.add_argument('--data', "
            "required=True)\np.parse_args()\n",
            "exited with status 2, before any optimizer was made (its last line: "
            "'train.py: error: the following arguments are required: --data').",
        ),
        (
            TRAINS + "    import sys; sys.exit(3)\n",
            "exited with status 3, after 1 optimizer step(s)",
        ),
        ("print('hello')\n", "ended without an optimizer step"),
        ("import subprocess\nsubprocess.run(['true'])\n", "it starts a process (Popen.__init__ at"),
        (
            "import torch.multiprocessing as mp\ndef work(rank):\n    pass\n"
            "if __name__ == '__main__':\n    mp.spawn(work, nprocs=2)\n",
            "it starts a process (BaseProcess.start at train.py:5)",
        ),
        ("raise ValueError('bad data')\n", "ValueError: bad data"),
        ("name = input('data folder? ')\n", "it raised EOFError"),
    ],
)
def test_bad_scripts_are_one_sentence(tmp_path, body, message):
    with pytest.raises(BadInput) as raised:
        run_script(_script(tmp_path, body), CPU)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_script_that_trains_gives_a_workload(tmp_path, capsys):
    workload = load_script_workload(_script(tmp_path, "print('epoch 1')\n" + TRAINS), CPU)
    shown = capsys.readouterr()
    # The command line keeps stdout for the report's path: the script's output goes to stderr.
    assert shown.out == "" and "epoch 1" in shown.err
    assert workload.describe()["script"]["printed"] == "epoch 1\n"
    assert workload.batch()[0][0].shape == (8, 4)
    assert workload.batch(batch_size=12)[0][0].shape == (12, 4)


def test_a_missing_script_is_named(tmp_path):
    with pytest.raises(BadInput, match="there is no file"):
        run_script(script_spec(str(tmp_path / "nope.py")), CPU)


def test_the_spec_keeps_path_and_arguments(tmp_path):
    spec = script_spec("dir with space/train.py", "--lr 0.1 --name 'a b'", cwd=tmp_path)
    path, args = parse_script_spec(spec)
    assert path == tmp_path / "dir with space" / "train.py"
    assert args == ["--lr", "0.1", "--name", "a b"]
    with pytest.raises(BadInput, match="cannot be split"):
        script_spec("train.py", "--name 'unclosed")


def test_the_command_line_joins_script_args_and_refuses_them_elsewhere(tmp_path, monkeypatch):
    from workbench.cli import _workload_spec

    monkeypatch.chdir(tmp_path)
    spec = _workload_spec("script:train.py --lr 1", "--batch-size 8")
    assert parse_script_spec(spec) == (tmp_path / "train.py", ["--lr", "1", "--batch-size", "8"])
    with pytest.raises(BadInput, match="--script-args applies to a script: workload"):
        _workload_spec("seed-mlp", "--batch-size 8")


def test_another_batch_size_runs_the_script_with_its_batch_size_option():
    workload = load_script_workload(
        script_spec(str(SCRIPTS / "messy_train.py"), "--batch-size 16"), CPU
    )
    assert "with --batch-size" in workload.description
    (features,), labels = workload.batch(batch_size=8)
    assert features.shape == (8, 20) and labels.shape == (8,)


def test_a_batch_larger_than_the_scripts_data_repeats_its_samples_and_says_so(capsys):
    workload = load_script_workload(
        script_spec(str(SCRIPTS / "messy_train.py"), "--batch-size 16"), CPU
    )
    (features,), labels = workload.batch(batch_size=300)  # its dataset holds 256
    assert features.shape == (300, 20) and torch.equal(features[256:], features[:44])
    assert "--batch-size 300 gives a batch of 256; its samples are repeated" in (
        capsys.readouterr().err
    )


def test_a_dataloader_without_an_option_has_its_batch_size_set(tmp_path):
    body = TRAINS.replace(
        "for _ in range(3):\n"
        "    loss = torch.nn.functional.cross_entropy("
        "model(torch.randn(8, 4)), torch.randint(2, (8,)))",
        "data = torch.utils.data.TensorDataset(torch.randn(40, 4), torch.randint(2, (40,)))\n"
        "for x, y in torch.utils.data.DataLoader(data, 8):\n"
        "    loss = torch.nn.functional.cross_entropy(model(x), y)",
    )
    workload = load_script_workload(_script(tmp_path, body), CPU)
    assert "DataLoader's batch_size set" in workload.description
    assert workload.batch(batch_size=5)[0][0].shape == (5, 4)


def test_a_script_with_neither_repeats_its_samples_and_says_so(tmp_path):
    workload = load_script_workload(_script(tmp_path, TRAINS), CPU)
    assert "repeats its captured samples" in workload.description
    inputs = workload.batch(batch_size=12)[0][0]
    assert torch.equal(inputs[8:], inputs[:4])


# A token embedding and a vocabulary head: the body of the language-model scripts below, each
# of which adds its own forward.
EMBED_AND_HEAD = """
import torch
from torch import nn

class Tiny(nn.Module):
    def __init__(self, vocab, width):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab)
"""
LANGUAGE_MODEL = (
    EMBED_AND_HEAD
    + """
    def forward(self, ids):
        return {"logits": self.head(self.embed(ids))}

model = Tiny(50, 16)
opt = torch.optim.Adam(model.parameters())
ids = torch.randint(50, (4, 12))
labels = torch.randint(50, (4, 12))
for _ in range(2):
    logits = model(ids)["logits"]
    loss = nn.functional.cross_entropy(logits.view(-1, 50), labels.view(-1))
    loss.backward()
    opt.step()
"""
)


def test_a_language_models_flattened_logits_loss_is_recomputed(tmp_path):
    capture, _, workload = _run_and_load(tmp_path, LANGUAGE_MODEL)
    assert capture.targets.shape == (4, 12)  # the batch's targets, not their .view(-1)
    assert _recomputed_first_loss(workload) == pytest.approx(capture.losses[0], rel=1e-6)


OWN_LOSS = """
import torch
from torch import nn

class WithLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(6, 3)

    def forward(self, features, labels):
        logits = self.head(features)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}

model = WithLoss()
opt = torch.optim.AdamW(model.parameters())
for _ in range(2):
    out = model(features=torch.randn(5, 6), labels=torch.randint(3, (5,)))
    out["loss"].backward()
    opt.step()
"""


def test_a_model_that_computes_its_own_loss_from_keyword_inputs(tmp_path):
    capture, _, workload = _run_and_load(tmp_path, OWN_LOSS)
    assert capture.loss_from_output and set(capture.inputs) == {"features", "labels"}
    assert _recomputed_first_loss(workload) == pytest.approx(capture.losses[0], rel=1e-6)


def test_positional_and_keyword_inputs_at_once_are_refused(tmp_path):
    body = OWN_LOSS.replace(
        "model(features=torch.randn(5, 6), labels=", "model(torch.randn(5, 6), labels="
    )
    with pytest.raises(BadInput, match="positional and keyword inputs at once"):
        run_script(_script(tmp_path, body), CPU)


def test_process_wide_settings_the_script_changes_are_restored(tmp_path):
    body = "import torch\ntorch.set_default_dtype(torch.float64)\n" + TRAINS
    run_script(_script(tmp_path, body), CPU)
    assert torch.get_default_dtype() == torch.float32


RETURNS_LOGITS_AND_LOSS = (
    EMBED_AND_HEAD
    + """
    def forward(self, idx, targets=None):
        logits = self.head(self.embed(idx))
        loss = nn.functional.cross_entropy(logits.view(-1, 30), targets.view(-1))
        return logits, loss

model = Tiny(30, 8)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
for _ in range(2):
    x, y = torch.randint(30, (3, 7)), torch.randint(30, (3, 7))
    logits, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
"""
)


def test_a_model_returning_logits_and_loss_is_recomputed(tmp_path):
    capture, _, workload = _run_and_load(tmp_path, RETURNS_LOGITS_AND_LOSS)
    assert capture.loss_name == "the model's own (output[1])"
    assert _recomputed_first_loss(workload) == pytest.approx(capture.losses[0], rel=1e-6)
    assert workload.batch(batch_size=6)[0][1].shape == (6, 7)


MIXED_PRECISION = """
import torch
model = torch.nn.Linear(4, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(torch.randn(8, 4))
    loss = torch.nn.functional.cross_entropy(out.float(), torch.randint(3, (8,)))
    loss.backward()
    opt.step()
"""


def test_a_loss_on_the_widened_output_of_an_autocast_forward_is_recognised(tmp_path):
    capture, redirection, workload = _run_and_load(tmp_path, MIXED_PRECISION)
    assert capture.loss_name == "F.cross_entropy"
    assert ("autocast('cuda')", 6) in _calls(redirection.log)
    # The workload's step runs in fp32 (the notebooks set precision), the script's in bf16.
    assert _recomputed_first_loss(workload) == pytest.approx(capture.losses[0], rel=2e-2)


def test_an_evaluation_pass_before_training_is_not_taken_for_the_batch(tmp_path):
    body = TRAINS.replace(
        "for _ in range(3):",
        "with torch.no_grad():\n    model(torch.randn(2, 4))\nfor _ in range(3):",
    )
    capture, _ = run_script(_script(tmp_path, body), CPU)
    assert capture.inputs[0].shape == (8, 4)


def test_each_run_collects_the_scripts_log_lines(tmp_path):
    body = "import logging\nlogging.basicConfig(level=logging.INFO)\nlogging.info('hello')\n"
    spec = _script(tmp_path, body + TRAINS)
    first, _ = run_script(spec, CPU)
    second, _ = run_script(spec, CPU)
    assert "INFO:root:hello" in first.printed and "INFO:root:hello" in second.printed


def test_the_docs_show_what_the_fixture_scripts_print(smoke, messy, capsys):
    """docs/own-models.md quotes the console lines of both fixture scripts: they are these."""
    from workbench.workloads.script import show_capture

    docs = (REPO_ROOT / "docs" / "own-models.md").read_text().split("## A training script")[1]
    quoted = [block.split("\n", 1)[1] for block in docs.split("```text")[1:3]]
    for (capture, redirection), block in zip((smoke, messy), quoted, strict=True):
        show_capture(capture, redirection)
        shown = capsys.readouterr().err.splitlines()
        for line in block.split("```")[0].strip().splitlines():
            assert line in shown


# Scripts in the styles teams bring, each run once through the capture: the workload they give
# must recompute the script's own first loss, and every CUDA call must be listed by its line.
REALISTIC = ("main_function", "cuda_heavy", "trainer_class", "distributed_ready")


@pytest.fixture(scope="module")
def realistic():
    return {
        name: load_script_workload(script_spec(str(SCRIPTS / f"{name}_train.py")), CPU)
        for name in REALISTIC
    }


def _rows(workload, mapped=True):
    return {
        (row["call"], int(row["where"].rsplit(":", 1)[1]))
        for row in workload.script_run["device_calls"]
        if row["mapped"] is mapped
    }


@pytest.mark.parametrize("name", REALISTIC)
def test_a_realistic_script_gives_a_workload_that_recomputes_its_first_loss(realistic, name):
    workload = realistic[name]
    run = workload.script_run
    assert run["steps_run"] == CAPTURE_STEPS and run["stopped_by_workbook"]
    # cuda_heavy's step runs under bf16 autocast; the workload's in fp32.
    assert _recomputed_first_loss(workload) == pytest.approx(
        run["losses"][0], rel=2e-2 if name == "cuda_heavy" else 1e-6
    )


def test_a_main_function_scripts_argparse_batch_size_and_seeding_are_seen(realistic):
    workload = realistic["main_function"]
    assert workload.batch_maker.flag == "--batch_size"
    assert workload.batch()[0][0].shape == (24, 12)  # its default, not the evaluation pass's 96
    assert _rows(workload) == {
        ("torch.cuda.manual_seed_all() (torch.manual_seed seeds the target)", 28),
        ("torch.cuda.is_available()", 73),
        ("torch.device('cuda')", 74),
    }
    assert "'batch_size': 24" in workload.script_run["printed"]


def test_a_script_written_for_one_gpu_has_each_cuda_call_mapped_or_named(realistic):
    workload = realistic["cuda_heavy"]
    assert _rows(workload) == {
        ("torch.cuda.manual_seed_all() (torch.manual_seed seeds the target)", 9),
        ("torch.device('cuda:0')", 11),
        ("torch.cuda.get_device_name()", 13),
        ("torch.cuda.get_device_properties()", 14),
        ("GradScaler('cuda')", 32),
        ("torch.cuda.is_available()", 36),
        ("torch.cuda.Event()", 39),
        ("torch.cuda.Event()", 40),
        ("tensor.to('cuda')", 42),
        ("autocast('cuda')", 45),
        ("torch.cuda.synchronize()", 52),
        ("torch.cuda.empty_cache()", 57),
    }
    assert _rows(workload, mapped=False) == {
        ("torch.backends.cudnn.benchmark = True", 10),
        ("torch.cuda.get_device_capability()", 15),
        ("tensor.pin_memory()", 37),
        ("torch.cuda.memory_allocated()", 55),
    }
    printed = workload.script_run["printed"]
    assert "GPU cpu" in printed and "compute capability 8.0" in printed
    # The events timed the step on the host clock: a positive time in milliseconds.
    step_ms = float(printed.split("step 0 loss ")[1].split()[1])
    assert step_ms > 0


def test_a_trainer_class_keeps_its_model_as_an_attribute(realistic):
    workload = realistic["trainer_class"]
    assert type(workload.build_model()).__name__ == "TinyLM"
    inputs, targets = workload.batch()
    assert inputs[0].shape == (8, 10) and targets.shape == (8, 10)  # before .view(-1)
    assert "DataLoader's batch_size set" in workload.description
    assert _rows(workload) == {
        ("torch.cuda.is_available()", 51),
        ("module.to('cuda')", 52),
        ("tensor.to('cuda')", 61),
    }


def test_a_torchrun_ready_script_runs_alone_and_refuses_a_process_group(realistic, monkeypatch):
    assert _rows(realistic["distributed_ready"]) == {
        ("torch.cuda.set_device()", 19),
        ("torch.device('cuda:0')", 20),
    }
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(BadInput) as raised:
        run_script(script_spec(str(SCRIPTS / "distributed_ready_train.py")), CPU)
    message = str(raised.value)
    assert "it joins a process group (torch.distributed.init_process_group at " in message
    assert "distributed_ready_train.py:18" in message and "\n" not in message


def test_events_and_streams_on_the_target_time_the_work_between_them():
    synchronized = []
    with DeviceRedirection(torch.device("cpu"), lambda: synchronized.append(1)).active():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        assert isinstance(start, torch.cuda.Event)
        with pytest.raises(RuntimeError, match="must be recorded"):
            start.elapsed_time(end)
        start.record()
        with torch.cuda.stream(torch.cuda.Stream()):
            torch.randn(64, 64) @ torch.randn(64, 64)
        end.record()
        torch.cuda.current_stream().synchronize()
        assert start.elapsed_time(end) > 0
        assert torch.cuda.get_device_properties(0).total_memory > 0
    assert len(synchronized) == 3  # each record and the stream's synchronize waited on it


@pytest.mark.parametrize(
    "line", ["script_args: \"--lr 0.1 --name 'a b'\"", "script_args: [--lr, '0.1', --name, a b]"]
)
def test_a_config_file_gives_a_scripts_arguments(tmp_path, monkeypatch, line):
    import workbench.runner
    from workbench.cli import main

    seen = []
    monkeypatch.setattr(
        workbench.runner, "run", lambda request, progress: seen.append(request) or 0
    )
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text(f"workload: script:train.py\n{line}\n")
    assert main(["run", "--config", "run.yaml"]) == 0
    assert parse_script_spec(seen[0].workload)[1] == ["--lr", "0.1", "--name", "a b"]
    # The command line wins over the config, as for every key.
    assert main(["run", "--config", "run.yaml", "--script-args", "--lr 1"]) == 0
    assert parse_script_spec(seen[1].workload)[1] == ["--lr", "1"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("script_args: 3", "'script_args' must be a string or a list, not 3."),
        ("script_args: [--epochs, 1]", "'script_args' must be a string or a list of strings."),
    ],
)
def test_a_config_files_script_arguments_of_the_wrong_type_are_one_sentence(
    tmp_path, monkeypatch, capsys, line, message
):
    from workbench.cli import main
    from workbench.errors import EXIT_BAD_INPUT

    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text(f"workload: script:train.py\n{line}\n")
    assert main(["run", "--config", "run.yaml", "--out", "run"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(message)
    assert not (tmp_path / "run").exists()


def test_the_docs_quote_the_one_gpu_scripts_calls_as_they_are_listed(realistic):
    docs = (REPO_ROOT / "docs" / "own-models.md").read_text().split("## A training script")[1]
    quoted = docs.split("```text")[3].split("```")[0].strip().splitlines()
    listed = {
        f"{'redirected' if row['mapped'] else 'not mapped'}: {row['call']} at {row['where']} "
        f"({row['times']}x): {row['outcome']}"
        for row in realistic["cuda_heavy"].script_run["device_calls"]
    }
    assert quoted and set(quoted) <= listed


CUDA_ONLY = """
import torch
with torch.cuda.device(0):
    torch.cuda.nvtx.range_push("step")
    torch.cuda.nvtx.range_pop()
    with torch.cuda.nvtx.range("forward"):
        free, total = torch.cuda.mem_get_info()
    torch.cuda.set_per_process_memory_fraction(0.9)
    print(f"free {free <= total} {torch.cuda.memory_summary()}")
""" + trains(2)


def test_cuda_only_calls_are_named_and_answered_without_effect(tmp_path):
    capture, redirection = run_script(_script(tmp_path, CUDA_ONLY), CPU)
    assert _calls(redirection.log) == {("torch.cuda.device()", 3)}
    assert _calls(redirection.log, mapped=False) == {
        ("torch.cuda.nvtx.range_push()", 4),
        ("torch.cuda.nvtx.range_pop()", 5),
        ("torch.cuda.nvtx.range()", 6),
        ("torch.cuda.mem_get_info()", 7),
        ("torch.cuda.set_per_process_memory_fraction()", 8),
        ("torch.cuda.memory_summary()", 9),
    }
    assert "free True no CUDA allocator" in capture.printed


def test_a_grad_scalers_scaled_loss_is_recorded_as_the_loss_it_scaled(tmp_path):
    body = (
        trains(2)
        .replace("opt = torch", "scaler = torch.amp.GradScaler('cuda')\nopt = torch")
        .replace("loss.backward()", "scaler.scale(loss).backward()")
        .replace("opt.step()", "scaler.step(opt)\n    scaler.update()")
    )
    capture, _, workload = _run_and_load(tmp_path, body)
    # The scaler multiplies by 65536 on the target as on a GPU; the script's loss is unscaled.
    assert _recomputed_first_loss(workload) == pytest.approx(capture.losses[0], rel=1e-6)


REGRESSION = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.Adam(model.parameters())
for _ in range(2):
    x, y = torch.randn(6, 5), torch.randn(6)
    loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
    loss.backward()
    opt.step()
"""


def test_a_loss_on_the_output_regrouped_is_recomputed_at_any_batch(tmp_path):
    capture, _, workload = _run_and_load(tmp_path, REGRESSION)
    assert capture.loss_name == "F.mse_loss" and capture.targets.shape == (6,)
    assert _recomputed_first_loss(workload) == pytest.approx(capture.losses[0], rel=1e-6)
    model = workload.build_model()
    inputs, targets = workload.batch(batch_size=9)
    assert workload.compute_loss(workload.forward(model, inputs), targets).dim() == 0


def test_a_loss_on_a_slice_of_the_output_is_refused(tmp_path):
    body = REGRESSION.replace("model(x).squeeze(-1)", "model(x)[:3, 0]").replace(
        "torch.randn(6)", "torch.randn(3)"
    )
    workload = load_script_workload(_script(tmp_path, body), CPU)
    assert "by its own arithmetic, not through a torch loss" in workload.loss_stand_in


def test_a_loss_over_the_classes_of_transposed_logits_is_recomputed(tmp_path):
    body = LANGUAGE_MODEL.replace(
        "nn.functional.cross_entropy(logits.view(-1, 50), labels.view(-1))",
        "nn.functional.cross_entropy(logits.transpose(1, 2), labels)",
    )
    assert "transpose" in body
    capture, _, workload = _run_and_load(tmp_path, body)
    assert capture.loss_name == "F.cross_entropy" and capture.targets.shape == (4, 12)
    assert _recomputed_first_loss(workload) == pytest.approx(capture.losses[0], rel=1e-6)


@pytest.mark.parametrize("name", ["main_function", "cuda_heavy"])
def test_the_scan_reads_a_scripts_whole_file_even_where_its_model_is_defined_in_it(realistic, name):
    """A script runs as __main__, which is gone once it ends: its own model class is still
    traced to its file, and the file is scanned whole (its loop holds the device calls)."""
    script = SCRIPTS / f"{name}_train.py"
    sources = workload_source_files(realistic[name])
    assert [s.path for s in sources] == [script.resolve()]
    assert sources[0].left_out == {}
    report = scan_workload(realistic[name])
    assert {f.line for f in report.findings} >= {line for _, line in _rows(realistic[name])}


def test_a_device_context_inside_the_redirection_leaves_meta_builds_working_after_it():
    """torch remembers its tensor constructors once per process; first asked under the
    redirection's stand-ins, every later `with torch.device("meta")` built real tensors (a 70B
    plan's meta build then filled the host). A fresh interpreter, so nothing asked before."""
    out = fresh_python(
        "import torch\n"
        "from workbench.targets.redirect import DeviceRedirection\n"
        "with DeviceRedirection(torch.device('cpu'), lambda: None).active():\n"
        "    with torch.device('cpu'):\n"
        "        torch.zeros(1)\n"
        "with torch.device('meta'):\n"
        "    layer = torch.nn.Linear(4, 4)\n"
        "print(layer.weight.device.type)\n"
    )
    assert out.split() == ["meta"]
