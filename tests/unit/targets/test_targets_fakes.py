"""NeuronTarget and XlaTarget logic against fakes of their documented APIs.

Neither real part runs here: native torch-neuronx needs Trainium hardware, and torch-xla needs a
torch 2.9 virtualenv of its own (reference/xla_cpu.md). Each fake implements only what
reference/neuron.md documents, and each test names the section whose contract it checks. These
tests prove the targets' logic (what they call, in which order, how they turn raw readings into
counts and seconds), not that the real libraries behave as documented.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import torch

from tests.fixtures import neuron_fakes
from tests.fixtures.fresh_python import fresh_python
from tests.fixtures.neuron_fakes import (
    FakeTorchNeuron,
    fake_installed_versions,
    install_fake_neuron,
)
from workbench.errors import BadInput
from workbench.targets import detect, get_target, resolve_target_name
from workbench.targets import xla as xla_module
from workbench.targets.base import Target
from workbench.targets.neuron import NeuronTarget
from workbench.targets.out_of_memory import NEURON_COMPILER_HOST_OOM_PATTERNS
from workbench.targets.xla import XlaTarget
from workbench.targets.xla_analysis import parse as parse_xla_analysis

TORCH_MAJOR_MINOR = ".".join(torch.__version__.split("+")[0].split(".")[:2])
MiB = 1 << 20


def compile_record(nth: int, fx_us: int, lower_us: int, compile_us: int) -> SimpleNamespace:
    """One NeuronCompilationMetrics entry with the fields neuron.md 2.6 lists."""
    return SimpleNamespace(
        graph_id=nth,
        graph_name=f"model_0_forward_{nth}",
        model_name="model",
        has_collectives=False,
        graph_node_count=10 + nth,
        timestamp=1_800_000_000.0 + nth,
        torch_neuronx_fx_passes_us=fx_us,
        torch_neuronx_lower_us=lower_us,
        torch_neuronx_compile_us=compile_us,
    )


@pytest.fixture
def fake_neuron(monkeypatch: pytest.MonkeyPatch) -> FakeTorchNeuron:
    runtime = FakeTorchNeuron()
    install_fake_neuron(runtime, monkeypatch)
    return runtime


def test_auto_picks_neuron_when_native_torch_neuronx_sees_a_device(
    fake_neuron: FakeTorchNeuron,
) -> None:
    """neuron.md 1.4 (native flavour = 4-part torch-neuronx version) and 2.6 (torch.neuron)."""
    name, reason = resolve_target_name("auto")
    assert name == "neuron"
    assert "4 Neuron device(s)" in reason and "trn2.3xlarge" in reason
    assert "torch-neuronx 2.14.3.0" in reason
    assert isinstance(get_target("auto"), NeuronTarget)


def test_auto_passes_over_neuron_without_a_visible_device(fake_neuron: FakeTorchNeuron) -> None:
    """neuron.md 2.6: torch.neuron.is_available() False when no NeuronCore is visible."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA, so auto would pick cuda")
    fake_neuron.available = False
    assert resolve_target_name("auto")[0] == "cpu"
    with pytest.raises(BadInput, match="no NeuronCore is visible"):
        resolve_target_name("neuron")


def unavailable_because(
    target: type[Target], versions: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> str:
    """Why `target` is unavailable where package metadata lists only `versions`."""
    monkeypatch.setattr(detect, "installed_version", fake_installed_versions(versions))
    availability = target.availability()
    assert not availability.available, availability.reason
    return availability.reason


def test_neuron_is_unavailable_without_torch_neuron(monkeypatch: pytest.MonkeyPatch) -> None:
    """neuron.md 1.4: torch.neuron only exists once torch has autoloaded native torch_neuronx."""
    monkeypatch.delattr(torch, "neuron", raising=False)
    reason = unavailable_because(NeuronTarget, {}, monkeypatch)
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in reason
    assert "no Neuron stack installed" in reason


def test_neuron_rejects_the_lite_runtime(
    fake_neuron: FakeTorchNeuron, monkeypatch: pytest.MonkeyPatch
) -> None:
    """neuron.md 1.1: libtorch-neuronx-lite registers a "neuron" device too; not TorchNeuron."""
    lite = {"libtorch-neuronx-lite": "2.12.0"}
    assert "libtorch-neuronx-lite 2.12.0" in unavailable_because(NeuronTarget, lite, monkeypatch)


def test_neuron_peak_memory_synchronizes_before_reading(fake_neuron: FakeTorchNeuron) -> None:
    """neuron.md 2.6: the allocator is asynchronous; synchronize before reading memory stats."""
    target = NeuronTarget()
    fake_neuron.run(allocates=5 * MiB)
    reading = target.peak_memory()
    assert reading.peak_allocated == 5 * MiB
    assert reading.peak_reserved == 6 * MiB
    assert fake_neuron.calls[:3] == ["synchronize", "max_memory_allocated", "max_memory_reserved"]
    assert "after synchronize" in reading.source


def test_neuron_reset_peak_memory_keeps_earlier_work_out_of_the_window(
    fake_neuron: FakeTorchNeuron,
) -> None:
    """neuron.md 2.6: reset_peak_memory_stats; queued work lands when it runs, not when queued."""
    target = NeuronTarget()
    fake_neuron.run(allocates=64 * MiB)
    target.reset_peak_memory()
    fake_neuron.run(allocates=MiB)
    assert target.peak_memory().peak_allocated == MiB


def test_neuron_fallback_ops_are_counted_per_op_after_a_synchronize(
    fake_neuron: FakeTorchNeuron,
) -> None:
    """neuron.md 2.7: clear_op_tracking, run, synchronize, get_fallback_ops (one name per call)."""
    target = NeuronTarget()
    fake_neuron.run(fallback_ops=("aten::nonzero",))
    target.start_fallback_tracking()
    fake_neuron.run(fallback_ops=("aten::sort", "aten::_unique2"))
    fake_neuron.run(fallback_ops=("aten::sort",))
    assert target.fallback_ops() == Counter({"aten::sort": 2, "aten::_unique2": 1})
    assert fake_neuron.calls[-2:] == ["synchronize", "get_fallback_ops"]


def test_neuron_executed_ops_are_counted_per_op_after_a_synchronize(
    fake_neuron: FakeTorchNeuron,
) -> None:
    """neuron.md 2.7: get_executed_ops after the same clear_op_tracking and synchronize; work
    queued before the window is not counted."""
    target = NeuronTarget()
    fake_neuron.run(executed_ops=("aten::mm",))
    target.start_fallback_tracking()
    fake_neuron.run(executed_ops=("aten::addmm", "aten::relu"), fallback_ops=("aten::sort",))
    fake_neuron.run(executed_ops=("aten::addmm",))
    assert target.executed_ops() == Counter({"aten::addmm": 2, "aten::relu": 1, "aten::sort": 1})
    assert fake_neuron.calls[-2:] == ["synchronize", "get_executed_ops"]


def test_neuron_compile_counters_sum_microseconds_per_graph(
    fake_neuron: FakeTorchNeuron,
) -> None:
    """neuron.md 2.6: get_dynamo_metrics() records carry fx_passes/lower/compile times in us."""
    fake_neuron.compile_records = [
        compile_record(0, fx_us=120_000, lower_us=380_000, compile_us=41_500_000),
        compile_record(1, fx_us=80_000, lower_us=220_000, compile_us=17_800_000),
    ]
    counters = NeuronTarget().compile_counters()
    assert counters.graphs == 2
    assert counters.compile_seconds == pytest.approx(42.0 + 18.1)
    assert [graph["compile_seconds"] for graph in counters.extra["per_graph"]] == pytest.approx(
        [42.0, 18.1]
    )
    assert counters.extra["per_graph"][1]["graph_name"] == "model_0_forward_1"
    assert "graph_breaks" in counters.extra
    assert "get_dynamo_metrics" in counters.source


def test_neuron_compile_counters_fall_back_to_dynamo(monkeypatch: pytest.MonkeyPatch) -> None:
    """neuron.md 2.6: without get_dynamo_metrics, Dynamo's own counters still count graphs."""
    install_fake_neuron(FakeTorchNeuron(with_dynamo_metrics=False), monkeypatch)
    counters = NeuronTarget().compile_counters()
    assert "torch._dynamo" in counters.source
    assert counters.graphs is not None and counters.graphs >= 0


def test_neuron_compile_uses_the_neuron_backend_without_mode_or_dynamic(
    fake_neuron: FakeTorchNeuron, monkeypatch: pytest.MonkeyPatch
) -> None:
    """neuron.md 2.6: backend="neuron"; dynamic=True is rejected and mode is ignored."""
    seen: list[tuple[Any, dict[str, Any]]] = []

    def recording_compile(fn: Any, **kwargs: Any) -> Any:
        seen.append((fn, kwargs))
        return fn

    monkeypatch.setattr(torch, "compile", recording_compile)
    model = torch.nn.Linear(2, 2)
    assert NeuronTarget().compile(model) is model
    assert seen == [(model, {"backend": "neuron"})]


def test_neuron_device_and_describe_in_a_fresh_process() -> None:
    """neuron.md 1.4 and 2.6: torch_neuronx's autoload names PrivateUse1 "neuron" and registers
    torch.neuron; the fake does the same, in a child process because the rename is permanent."""
    script = f"""
import importlib.util, json, sys, torch
spec = importlib.util.spec_from_file_location("fakes", {neuron_fakes.__file__!r})
fakes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fakes)
runtime = fakes.FakeTorchNeuron()
torch.utils.rename_privateuse1_backend("neuron")
torch._register_device_module("neuron", runtime.torch_neuron_namespace())
sys.modules["torch_neuronx"] = runtime.torch_neuronx_module()
from workbench.targets import detect, get_target
detect.installed_version = fakes.fake_installed_versions({{"torch-neuronx": "2.14.3.0"}})
print(json.dumps(get_target("auto").describe()))
"""
    facts = json.loads(fresh_python(script).strip().splitlines()[-1])
    assert facts["name"] == "neuron" and facts["device"] == "neuron"
    assert facts["is_trainium"] is True
    assert facts["validation"] == "validated on neuron (Trainium hardware)."
    assert facts["device_name"] == "trn2.3xlarge"
    assert facts["total_memory_bytes"] == 24 * 1024 * MiB
    assert facts["device_count"] == 4
    assert facts["torch_neuronx"] == "2.14.3.0"


# neuron.md section 6 item 7: the compiler killed for host RAM, "[F137] ... insufficient system
# memory" or -9 (the F137 wording of the reports peers_and_pain_points.md P4 cites). neuron.md
# documents no device out-of-memory text; the device forms are those methods.md e2 lists.
DOCUMENTED_COMPILER_HOST_OOM = (
    "[F137] neuronx-cc was forcibly killed - insufficient system memory",
    "Command '['neuronx-cc', 'compile']' died with <Signals.SIGKILL: 9>.",
    "neuronx-cc returned non-zero exit status -9.",
)
DOCUMENTED_DEVICE_OOM = (
    'nrt_tensor_allocate status=4 message="Allocation Failure" on nc 0',
    "Failed to allocate 1073741824 bytes on DEVICE",
    "NRT_RESOURCE",
    "Allocated memory out of bound for the graph",
)


@pytest.mark.parametrize("target", [NeuronTarget, XlaTarget])
def test_neuron_oom_patterns_are_the_device_s_and_host_ram_is_the_compiler_s(
    target: type[NeuronTarget] | type[XlaTarget],
) -> None:
    """The two pattern lists read disjoint failures: a device out-of-memory text marks a batch
    that does not fit, the compiler's host-RAM kill is named by compiler_host_oom with its
    remedy and is no device OOM (notebook 04 must not bound its search by it)."""
    for pattern in NEURON_COMPILER_HOST_OOM_PATTERNS:
        assert pattern not in target.out_of_memory_patterns, pattern
    for text in DOCUMENTED_COMPILER_HOST_OOM:
        assert target.out_of_memory_evidence(text) is None, text
        assert "more host RAM" in (target.compiler_host_oom(text) or ""), text
    for text in DOCUMENTED_DEVICE_OOM:
        assert target.out_of_memory_evidence(text), text
        assert target.compiler_host_oom(text) is None, text


# --------------------------------------------------------------------------------------------
# Legacy XLA path: torch_xla 2.9 (neuron.md 2.3 and 2.4, measured on XLA:CPU in xla_cpu.md 2.2)


class FakeTorchXla:
    """torch_xla, torch_xla.core.xla_model and torch_xla.debug.metrics as neuron.md 2.3/2.4
    document them: counter_value and metric_data give None for a name never hit, metric_data is
    (total samples, accumulator in ns, samples), and clear_all empties counters and metrics."""

    def __init__(self, device_kind: str = "CPU") -> None:
        self.device_kind = device_kind
        self.calls: list[str] = []
        self.counters: dict[str, int] = {}
        self.metrics: dict[str, tuple[int, float, tuple[tuple[float, float], ...]]] = {}

    def sync(self, wait: bool = False) -> None:
        self.calls.append("sync")

    def wait_device_ops(self, devices: list[str] | None = None) -> None:
        self.calls.append("wait_device_ops")

    def set_rng_state(self, seed: int, device: str | None = None) -> None:
        self.calls.append(f"set_rng_state({seed}, {device})")

    def clear_all(self) -> None:
        self.counters.clear()
        self.metrics.clear()

    def modules(self) -> dict[str, ModuleType]:
        root = ModuleType("torch_xla")
        root.device = lambda index=None: torch.device("xla", 0)
        root.sync = self.sync
        xla_model = ModuleType("torch_xla.core.xla_model")
        xla_model.wait_device_ops = self.wait_device_ops
        xla_model.set_rng_state = self.set_rng_state
        xla_model.xla_device_kind = lambda device=None: self.device_kind
        metrics = ModuleType("torch_xla.debug.metrics")
        metrics.counter_names = lambda: list(self.counters)
        metrics.counter_value = self.counters.get
        metrics.metric_data = self.metrics.get
        metrics.clear_all = self.clear_all
        core, debug = ModuleType("torch_xla.core"), ModuleType("torch_xla.debug")
        root.core, core.xla_model = core, xla_model
        root.debug, debug.metrics = debug, metrics
        return {module.__name__: module for module in (root, core, xla_model, debug, metrics)}


def install_fake_xla(
    fake: FakeTorchXla, monkeypatch: pytest.MonkeyPatch, versions: dict[str, str]
) -> None:
    for name, module in fake.modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(detect, "installed_version", fake_installed_versions(versions))


@pytest.fixture
def fake_xla(monkeypatch: pytest.MonkeyPatch) -> FakeTorchXla:
    fake = FakeTorchXla()
    install_fake_xla(fake, monkeypatch, {"torch-xla": f"{TORCH_MAJOR_MINOR}.0"})
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    # XlaTarget switches torch_xla's compile analysis on through the environment: undone after.
    for name in ("PT_XLA_DEBUG_LEVEL", "PT_XLA_DEBUG_FILE", "WORKBENCH_XLA_ANALYSIS"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return fake


def analysis_block(cause: str, graph_hash: str, *frames: str) -> str:
    """One Compilation Analysis block as torch-xla 2.9 writes it at PT_XLA_DEBUG_LEVEL=1
    (xla_cpu.md 2.4; the layout copied from a real XLA:CPU run)."""
    lines = [
        "=" * 80,
        "Compilation Cause",
        f"  {cause}",
        "Graph Info: ",
        f"  Graph Hash: {graph_hash}",
        "  Number of Graph Inputs: 3",
        "  Number of Graph Outputs: 2",
        "Python Frame Triggered Execution: ",
        *(f"  {frame}" for frame in frames),
        "-" * 80,
        "=" * 80,
    ]
    body = "\n".join(f"Compilation Analysis: {line}" for line in lines)
    return f"\n{body}\n\nComputation hash: 0123456789abcdef0123456789abcdef\n"


XLA_SYNC = "sync (/venv/lib/python3.11/site-packages/torch_xla/torch_xla.py:87)"
WORKBOOK_STEP = f"synchronize ({Path(xla_module.__file__).resolve()}:150)"
USER_READ = "forward (/home/me/model.py:41)"


def test_xla_compile_analysis_names_the_hash_the_cause_and_only_the_users_line() -> None:
    """xla_cpu.md 2.4: PT_XLA_DEBUG_LEVEL's blocks give the cause, the graph hash and the Python
    frames, innermost first. A graph the workbook's own step end cut has no user line; a
    value read inside the model's forward names that line."""
    text = analysis_block("user torch_xla.sync", "b73714bec594f894", XLA_SYNC, WORKBOOK_STEP)
    text += analysis_block(
        "most likely user code trying to access tensor value before torch_xla.sync",
        "22e4b54d1d001893",
        "item (/venv/lib/python3.11/site-packages/torch/_tensor.py:10)",
        USER_READ,
        WORKBOOK_STEP,
    )
    # Dynamo's generated FX module is no one's line either (seen on XLA:CPU).
    text += analysis_block(
        "most likely user code trying to access tensor value before torch_xla.sync",
        "33e4b54d1d001893",
        "optimized_mod (/home/me/.cache/workbench/venv/torch_xla/_dynamo/dynamo_bridge.py:524)",
        "forward (<eval_with_key>.4:5)",
        WORKBOOK_STEP,
    )
    # Notebook 02's op capture stands between the op and the model's line.
    capture = Path(xla_module.__file__).resolve().parent.parent / "coverage" / "capture.py"
    text += analysis_block(
        "most likely user code trying to access tensor value before torch_xla.sync",
        "44e4b54d1d001893",
        f"__torch_dispatch__ ({capture}:120)",
        USER_READ,
    )
    step_end, value_read, generated, captured = parse_xla_analysis(text)
    assert captured.user_frame() == value_read.user_frame()
    assert generated.user_frame() is None
    assert (step_end.cause, step_end.graph_hash) == ("user torch_xla.sync", "b73714bec594f894")
    assert step_end.user_frame() is None
    assert value_read.cause.startswith("most likely user code")
    frame = value_read.user_frame()
    assert frame is not None and frame.label() == "model.py:41 in forward"
    assert parse_xla_analysis("Execution Analysis: Graph Hash: 1\n") == []


def xla_events(target: XlaTarget, since: float) -> list:
    """The target's XLA compiles only: compile_events adds Dynamo's own records, which hold
    whatever this test process compiled before (real epoch times, after the fake ones)."""
    return [e for e in target.compile_events(since) if e.cause == "new XLA graph hash"]


def test_xla_ledger_events_carry_hash_cause_and_what_changed_at_the_same_line(
    fake_xla: FakeTorchXla,
) -> None:
    """neuron.md 2.4 (CompileTime samples: end time, ns) matched with xla_cpu.md 2.4's blocks
    from the newest end: the clear_all of fallback tracking restarts the samples, not the file."""
    target = XlaTarget()
    path = os.environ["PT_XLA_DEBUG_FILE"]
    assert os.environ["PT_XLA_DEBUG_LEVEL"] == "1" and target._analysis.enabled_here
    with open(path, "a") as handle:  # what torch_xla appends, one block per compile
        handle.write(analysis_block("user torch_xla.sync", "aaaa0000aaaa0000", XLA_SYNC))
        handle.write(analysis_block("user code read a value", "1111bbbb1111bbbb", USER_READ))
        handle.write(analysis_block("user code read a value", "2222cccc2222cccc", USER_READ))
    # Only the two newest compiles are still in the metrics.
    fake_xla.metrics["CompileTime"] = (2, 3e8, ((1000.2, 1e8), (1001.2, 2e8)))
    first, second = xla_events(target, since=0.0)
    assert first.graph_id == "xla 1111bbbb1111bbbb" and first.location == "model.py:41 in forward"
    assert "user code read a value" in first.detail and "before" not in first.detail
    assert second.graph_id == "xla 2222cccc2222cccc" and second.seconds == pytest.approx(0.2)
    assert "compiled graph 1111bbbb1111 before" in second.detail
    assert [e.graph_id for e in xla_events(target, since=1000.5)] == ["xla 2222cccc2222cccc"]


def test_xla_without_analysis_blocks_still_lists_every_compile(fake_xla: FakeTorchXla) -> None:
    """Where the user set PT_XLA_DEBUG_LEVEL themselves (to the console), the workbook leaves
    it alone and the ledger keeps torch_xla's metrics only."""
    os.environ["PT_XLA_DEBUG_LEVEL"] = "2"
    target = XlaTarget()
    assert not target._analysis.enabled_here and "PT_XLA_DEBUG_FILE" not in os.environ
    fake_xla.metrics["CompileTime"] = (1, 1e8, ((1000.2, 1e8),))
    (event,) = xla_events(target, since=0.0)
    assert event.graph_id == "xla compile 1" and "UncachedCompile" in event.detail


def test_xla_fallback_ops_are_aten_counters_without_host_reads(fake_xla: FakeTorchXla) -> None:
    """neuron.md 2.4: counters named aten::<op> are CPU fallbacks; xla_cpu.md 2.2: .item() shows
    up as aten::_local_scalar_dense, a host read rather than a missing lowering."""
    target = XlaTarget()
    target.start_fallback_tracking()
    fake_xla.counters.update(
        {
            "aten::nonzero": 3,
            "aten::histc": 1,
            "aten::_local_scalar_dense": 5,
            "xla::addmm": 10,
            "UncachedCompile": 2,
            "MarkStep": 5,
        }
    )
    assert target.fallback_ops() == Counter({"aten::nonzero": 3, "aten::histc": 1})
    assert target.compile_counters().extra["host_value_reads"] == 5


def test_xla_start_fallback_tracking_clears_earlier_counters(fake_xla: FakeTorchXla) -> None:
    """neuron.md 2.4: clear_all() resets every counter and metric."""
    fake_xla.counters["aten::histc"] = 4
    target = XlaTarget()
    target.start_fallback_tracking()
    assert target.fallback_ops() == Counter()


def test_xla_compile_counters_convert_nanoseconds(fake_xla: FakeTorchXla) -> None:
    """neuron.md 2.4: graphs = metric_data('CompileTime')[0], accumulators in ns; the values are
    the ones xla_cpu.md 2.2 recorded for 5 MLP steps on XLA:CPU."""
    fake_xla.metrics["CompileTime"] = (
        2,
        486851121.0,
        ((1796213655.107868, 253984609.0), (1796213655.3820944, 232866512.0)),
    )
    fake_xla.metrics["ExecuteTime"] = (5, 36201259.0, ())
    fake_xla.counters.update({"UncachedCompile": 2, "CachedCompile": 3})
    counters = XlaTarget().compile_counters()
    assert counters.graphs == 2
    assert counters.compile_seconds == pytest.approx(0.486851121)
    assert counters.extra["uncached_compiles"] == 2 and counters.extra["cached_compiles"] == 3
    assert counters.extra["executions"] == 5
    assert counters.extra["execute_seconds"] == pytest.approx(0.036201259)
    assert "host_value_reads" not in counters.extra


def test_xla_compile_counters_before_any_compile(fake_xla: FakeTorchXla) -> None:
    """neuron.md 2.4: metric_data returns None for a metric with no sample yet."""
    counters = XlaTarget().compile_counters()
    assert (counters.graphs, counters.compile_seconds) == (0, 0.0)
    assert counters.extra["uncached_compiles"] == 0 and counters.extra["executions"] == 0


def test_xla_synchronize_cuts_the_graph_then_waits(fake_xla: FakeTorchXla) -> None:
    """neuron.md 2.3: torch_xla.sync() ends the step; xm.wait_device_ops() waits for execution."""
    XlaTarget().synchronize()
    assert fake_xla.calls == ["sync", "wait_device_ops"]


def test_xla_manual_seed_seeds_the_xla_generator_and_torch(fake_xla: FakeTorchXla) -> None:
    """neuron.md's GPU-to-Neuron table: torch.cuda.manual_seed becomes xm.set_rng_state on the
    XLA path (its device draws from its own generator), alongside torch.manual_seed."""
    XlaTarget().manual_seed(1234)
    assert fake_xla.calls == ["set_rng_state(1234, xla:0)"]
    assert torch.initial_seed() == 1234


def test_xla_cpu_is_not_trainium_and_says_what_it_validates(fake_xla: FakeTorchXla) -> None:
    """xla_cpu.md 8: XLA:CPU exercises the torch-xla front end, not neuronx-cc or the runtime."""
    target = XlaTarget()
    assert target.device == torch.device("xla", 0)
    assert target.is_trainium is False
    statement = target.validation_statement()
    for claim in ("XLA:CPU", "lazy tracing", "HLO lowering", "aten fallbacks", "recompiles"):
        assert claim in statement
    for not_claimed in ("neuronx-cc", "Neuron runtime", "device memory", "speed"):
        assert not_claimed in statement.split(" but not ")[1]
    assert statement.endswith("this is not a Trainium validation.")
    facts = target.describe()
    assert facts["device"] == "xla:0" and facts["pjrt_device"] == "CPU"
    assert facts["device_kind"] == "CPU" and facts["torch_xla"] == f"{TORCH_MAJOR_MINOR}.0"
    assert "neuron-monitor" in target.peak_memory().source
    assert target.peak_memory().peak_allocated is None


@pytest.mark.parametrize(
    ("pjrt_device", "device_kind"), [("NEURON", "NC_v2"), (None, "NC_v3d"), ("NEURON", "")]
)
def test_xla_on_a_neuron_pjrt_device_is_trainium(
    monkeypatch: pytest.MonkeyPatch, pjrt_device: str | None, device_kind: str
) -> None:
    """neuron.md 1.4: PJRT_DEVICE=NEURON, or xla_device_kind() NC_v2 / NC_v3 / NC_v3d."""
    install_fake_xla(
        FakeTorchXla(device_kind), monkeypatch, {"torch-xla": f"{TORCH_MAJOR_MINOR}.0"}
    )
    if pjrt_device is None:
        monkeypatch.delenv("PJRT_DEVICE", raising=False)
    else:
        monkeypatch.setenv("PJRT_DEVICE", pjrt_device)
    target = XlaTarget()
    assert target.is_trainium is True
    assert target.validation_statement().startswith("validated on Trainium")


def test_xla_compile_uses_openxla(fake_xla: FakeTorchXla, monkeypatch: pytest.MonkeyPatch) -> None:
    """neuron.md 1.4 / xla_cpu.md 4: torch.compile(backend="openxla") is torch-xla's Dynamo path."""
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: seen.append(kwargs) or fn)
    XlaTarget().compile(torch.nn.Identity())
    assert seen == [{"backend": "openxla"}]


def test_xla_available_when_installed_matching_and_importable(fake_xla: FakeTorchXla) -> None:
    """xla_cpu.md 1: torch-xla X.Y runs only with torch X.Y."""
    availability = XlaTarget.availability()
    assert availability.available, availability.reason
    assert "PJRT_DEVICE=CPU" in availability.reason


def test_xla_unavailable_when_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """neuron.md 1.4: detection reads package metadata, never imports."""
    reason = unavailable_because(XlaTarget, {}, monkeypatch)
    assert reason.startswith("torch-xla is not installed;")


def test_xla_unavailable_for_another_torch_minor(monkeypatch: pytest.MonkeyPatch) -> None:
    """xla_cpu.md 2.1: torch-xla 2.9.0 installs next to torch 2.13 but cannot work with it."""
    major, minor = TORCH_MAJOR_MINOR.split(".")
    other = f"{major}.{int(minor) + 1}.0"
    reason = unavailable_because(XlaTarget, {"torch-xla": other}, monkeypatch)
    expected = f"torch-xla {other} needs torch {major}.{int(minor) + 1}; installed torch "
    assert reason.startswith(f"{expected}{torch.__version__}; install both pinned")
    assert f"'torch-xla=={other}'" in reason


class _UndefinedSymbolFinder:
    """Makes `import torch_xla` fail the way xla_cpu.md 2.1 saw it fail against another torch."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch_xla":
            raise ImportError(
                "/venv/torch_xla/_XLAC.cpython-311-x86_64-linux-gnu.so: undefined symbol: "
                "_ZN5torch8autograd10deleteNodeEPNS0_4NodeE"
            )


def test_xla_unavailable_on_an_undefined_symbol(monkeypatch: pytest.MonkeyPatch) -> None:
    """xla_cpu.md 2.1: a torch-xla built for another torch build fails to import its _XLAC."""
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_UndefinedSymbolFinder(), *sys.meta_path])
    reason = unavailable_because(XlaTarget, {"torch-xla": torch.__version__}, monkeypatch)
    assert "was built against a different torch" in reason
    assert "undefined symbol" in reason


def test_auto_picks_xla_on_a_legacy_neuron_stack(
    fake_xla: FakeTorchXla, monkeypatch: pytest.MonkeyPatch
) -> None:
    """neuron.md 1.1/1.4: XLA torch-neuronx (6-part version) + torch-xla + libneuronxla."""
    versions = {
        "torch-neuronx": "2.9.0.2.15.32035",
        "torch-xla": f"{TORCH_MAJOR_MINOR}.0",
        "libneuronxla": "2.2.14584.0",
    }
    monkeypatch.setattr(detect, "installed_version", fake_installed_versions(versions))
    name, reason = resolve_target_name("auto")
    assert name == "xla"
    assert "Neuron PJRT plugin" in reason


def _neff(cache: Path, module: str) -> None:
    """A compiled module as neuron.md 2.8 lays the cache out: neuronxcc-<ver>/MODULE_<hash>."""
    folder = cache / "neuronxcc-2.21.0" / f"MODULE_{module}"
    folder.mkdir(parents=True)
    (folder / "model.hlo.pb").write_bytes(b"hlo")
    (folder / "model.neff").write_bytes(b"neff")


def test_xla_on_a_trn1_counts_neuron_cache_hits_and_misses(
    fake_xla: FakeTorchXla, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """neuron.md 2.8: on a Trn1 each graph torch_xla compiles is looked up in the Neuron
    compile cache (NEURON_COMPILE_CACHE_URL), and a miss leaves a new MODULE_<hash>/model.neff.
    Three compiles in the run, one new module: two lookups were served by the cache. A module
    an earlier run left, or a failed compile's folder without a NEFF, is not this run's miss."""
    monkeypatch.setenv("PJRT_DEVICE", "NEURON")
    monkeypatch.delenv("NEURON_CC_FLAGS", raising=False)
    monkeypatch.setenv("NEURON_COMPILE_CACHE_URL", "")
    target = XlaTarget()
    _neff(tmp_path / "neuron", "earlier")
    assert "Neuron compile cache" in target.use_compile_cache(str(tmp_path))
    assert os.environ["NEURON_COMPILE_CACHE_URL"] == str(tmp_path / "neuron")
    with open(os.environ["PT_XLA_DEBUG_FILE"], "a") as handle:
        for graph in ("a1", "b2", "c3"):
            handle.write(analysis_block("user torch_xla.sync", graph * 8, XLA_SYNC))
    _neff(tmp_path / "neuron", "new")
    (tmp_path / "neuron" / "neuronxcc-2.21.0" / "MODULE_failed").mkdir()
    counters = target.cache_counters()
    assert counters is not None and (counters.hits, counters.misses) == (2, 1)
    assert str(tmp_path / "neuron") in counters.source


def test_xla_on_a_trn1_reads_cache_dir_first_and_leaves_a_remote_cache_uncounted(
    fake_xla: FakeTorchXla, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """neuron.md 2.8: --cache_dir in NEURON_CC_FLAGS wins over NEURON_COMPILE_CACHE_URL, which
    may be an s3:// URL: no local folder to count in."""
    monkeypatch.setenv("PJRT_DEVICE", "NEURON")
    monkeypatch.setenv("NEURON_COMPILE_CACHE_URL", "s3://bucket/cache")
    monkeypatch.setenv("NEURON_CC_FLAGS", f"--model-type=transformer --cache_dir={tmp_path}")
    target = XlaTarget()
    target.use_compile_cache(None)
    _neff(tmp_path, "new")
    counters = target.cache_counters()
    assert counters is not None and counters.misses == 1 and str(tmp_path) in counters.source
    monkeypatch.delenv("NEURON_CC_FLAGS")
    remote = XlaTarget()
    remote.use_compile_cache(None)
    assert remote.cache_counters() is None
