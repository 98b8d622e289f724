"""Targets that really run here: cpu always, cuda where a GPU exists; registry and detection."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.fixtures.fresh_python import fresh_python
from workbench.errors import BadInput
from workbench.targets import TARGET_NAMES, detect, get_target, resolve_target_name, target_class
from workbench.targets.cpu import CpuTarget
from workbench.targets.detect import (
    FLAVOUR_NATIVE,
    FLAVOUR_XLA,
    neuron_flavour,
    torch_has_gpu_build,
)


class _TinyNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def test_cpu_device_and_synchronize() -> None:
    target = CpuTarget()
    assert target.device == torch.device("cpu")
    target.synchronize()
    assert torch.ones(2, device=target.device).sum().item() == 2.0


def test_cpu_compile_runs_and_counts_graphs() -> None:
    torch._dynamo.reset()
    target = CpuTarget()
    model = _TinyNet()
    x = torch.randn(3, 8)
    compiled = target.compile(model)
    torch.testing.assert_close(compiled(x), model(x))
    counters = target.compile_counters()
    assert counters.graphs is not None and counters.graphs >= 1
    assert counters.compile_seconds is not None and counters.compile_seconds > 0
    assert "dynamo" in counters.source


def test_cpu_has_no_fallback_or_memory_reading_and_is_not_trainium() -> None:
    target = CpuTarget()
    target.start_fallback_tracking()
    assert target.fallback_ops() is None
    assert target.executed_ops() is None
    target.reset_peak_memory()
    reading = target.peak_memory()
    assert reading.peak_allocated is None and reading.peak_reserved is None
    assert target.is_trainium is False
    assert "not a Trainium validation" in target.validation_statement()
    facts = target.describe()
    assert facts["name"] == "cpu" and facts["is_trainium"] is False


def test_auto_resolves_to_cpu_here_with_a_reason() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA, so auto resolves to cuda")
    name, reason = resolve_target_name("auto")
    assert name == "cpu"
    assert reason.startswith("auto:") and "no CUDA" in reason
    assert isinstance(get_target("auto"), CpuTarget)


def test_explicit_cpu_is_accepted() -> None:
    name, reason = resolve_target_name("cpu")
    assert name == "cpu" and "requested explicitly" in reason


@pytest.mark.parametrize("name", ["neuron", "xla"])
def test_explicit_unavailable_target_is_one_sentence_of_bad_input(name: str) -> None:
    if target_class(name).availability().available:
        pytest.skip(f"{name} is available on this machine")
    with pytest.raises(BadInput) as raised:
        resolve_target_name(name)
    message = str(raised.value)
    assert message.startswith(f"Target {name!r} is not available here:")
    assert "\n" not in message


def test_explicit_cuda_without_gpu_is_bad_input() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(BadInput, match="'cuda' is not available here"):
        get_target("cuda")


def test_unknown_target_name_is_rejected() -> None:
    with pytest.raises(BadInput, match="Unknown target 'tpu'; choose one of: auto, cpu"):
        resolve_target_name("tpu")
    assert TARGET_NAMES[0] == "auto"


@pytest.mark.parametrize(
    ("version", "flavour"),
    [
        ("2.9.0.2.15.32035", FLAVOUR_XLA),
        ("1.13.1.1.16.0", FLAVOUR_XLA),
        ("2.14.3.0", FLAVOUR_NATIVE),
        ("2.13.3.0+abc", FLAVOUR_NATIVE),
        ("1.0", None),
        (None, None),
    ],
)
def test_neuron_flavour_from_documented_version_formats(
    version: str | None, flavour: str | None
) -> None:
    assert neuron_flavour(version) == flavour


def test_importing_targets_and_resolving_auto_imports_no_neuron_or_xla_module() -> None:
    script = (
        "import sys\n"
        "import workbench.targets as targets\n"
        "import workbench.targets.cuda, workbench.targets.xla, workbench.targets.neuron\n"
        "targets.resolve_target_name('auto')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch_xla', 'torch_neuronx'))\n"
        "print(loaded)\n"
    )
    assert fresh_python(script).strip().splitlines()[-1] == "[]"


def test_a_gpu_build_of_torch_is_told_from_its_files_as_torch_itself_tells_it(
    tmp_path, monkeypatch
) -> None:
    built_for_gpu = torch.version.cuda is not None or torch.version.hip is not None
    assert torch_has_gpu_build() == built_for_gpu
    # A CUDA build's layout, in a folder of its own: the same check must answer yes there.
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libtorch_cuda.so").write_bytes(b"")
    spec = SimpleNamespace(submodule_search_locations=[str(tmp_path)])
    monkeypatch.setattr(detect, "find_spec", lambda name: spec)
    assert torch_has_gpu_build()
    (tmp_path / "lib" / "libtorch_cuda.so").unlink()
    assert not torch_has_gpu_build()


cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda_only
def test_cuda_availability_names_the_device() -> None:
    from workbench.targets.cuda import CudaTarget

    availability = CudaTarget.availability()
    assert availability.available
    assert torch.cuda.get_device_name(torch.cuda.current_device()) in availability.reason
    assert resolve_target_name("auto")[0] in ("cuda", "neuron", "xla")


@cuda_only
def test_cuda_peak_memory_sees_an_allocation() -> None:
    from workbench.targets.cuda import CudaTarget

    target = CudaTarget()
    assert target.device.type == "cuda"
    target.reset_peak_memory()
    block = torch.empty(1 << 20, dtype=torch.float32, device=target.device)
    block.fill_(1.0)
    target.synchronize()
    reading = target.peak_memory()
    assert reading.peak_allocated is not None and reading.peak_allocated >= block.nbytes
    assert reading.peak_reserved is not None and reading.peak_reserved >= reading.peak_allocated
    del block


@cuda_only
def test_cuda_compile_counts_graphs_and_describes_the_gpu() -> None:
    from workbench.targets.cuda import CudaTarget

    torch._dynamo.reset()
    target = CudaTarget()
    model = _TinyNet().to(target.device)
    x = torch.randn(3, 8, device=target.device)
    torch.testing.assert_close(target.compile(model)(x), model(x))
    counters = target.compile_counters()
    assert counters.graphs is not None and counters.graphs >= 1
    facts = target.describe()
    assert facts["total_memory_bytes"] > 0
    assert facts["compute_capability"].count(".") == 1
    assert target.is_trainium is False
