"""The conda environment files parse, install this checkout and pin published Neuron releases."""

from __future__ import annotations

from importlib.metadata import requires
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.fixtures import REPO_ROOT
from workbench.environment.releases import NeuronRelease, load_release_matrix
from workbench.targets.detect import FLAVOUR_NATIVE, FLAVOUR_XLA

ROOT = REPO_ROOT
ENVIRONMENT_FILES = [ROOT / "environment.yml", *sorted((ROOT / "environments").glob("*.yml"))]
NEURON_INDEX = "https://pip.repos.neuron.amazonaws.com"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _pip_lines(path: Path) -> list[str]:
    for entry in _load(path)["dependencies"]:
        if isinstance(entry, dict) and "pip" in entry:
            return entry["pip"]
    raise AssertionError(f"{path.name} has no pip section")


def _requirements(path: Path) -> dict[str, Requirement]:
    lines = [line for line in _pip_lines(path) if not line.startswith("-")]
    parsed = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r for r in parsed}


def _python(path: Path) -> str:
    specs = [
        d for d in _load(path)["dependencies"] if isinstance(d, str) and d.startswith("python")
    ]
    assert len(specs) == 1, specs
    return specs[0].split("=", 1)[1]


def _indexes(path: Path) -> list[str]:
    return [
        line.split(maxsplit=1)[1] for line in _pip_lines(path) if line.startswith("--extra-index")
    ]


def _admits(requirement: Requirement, version: str) -> bool:
    return requirement.specifier.contains(version, prereleases=True)


def _pinned(requirement: Requirement) -> str:
    (spec,) = requirement.specifier
    assert spec.operator == "==", requirement
    return spec.version


@pytest.mark.parametrize("path", ENVIRONMENT_FILES, ids=lambda p: p.name)
def test_environment_file_parses_and_installs_this_checkout(path: Path) -> None:
    """conda runs pip in the yml's own folder, so `-e` must point from there to the checkout."""
    document = _load(path)
    assert document["name"].startswith("workbench")
    editable = [line for line in _pip_lines(path) if line.startswith("-e ")]
    assert len(editable) == 1
    target = (path.parent / editable[0].split(maxsplit=1)[1]).resolve()
    assert target == ROOT
    assert (target / "pyproject.toml").is_file()


@pytest.mark.parametrize("path", ENVIRONMENT_FILES, ids=lambda p: p.name)
def test_environment_file_lists_every_workbench_dependency(path: Path) -> None:
    declared = [Requirement(r) for r in requires("workbench") or [] if "extra ==" not in r]
    assert declared, "workbench's installed metadata lists no dependencies"
    listed = _requirements(path)
    for requirement in declared:
        name = canonicalize_name(requirement.name)
        assert name in listed, f"{path.name} lacks {name}"
        if name != "torch":  # torch is pinned per target below
            assert listed[name].specifier == requirement.specifier, name


def _rows_admitting(requirements: dict[str, Requirement]) -> list[NeuronRelease]:
    """Release rows that ship versions satisfying every Neuron pin of an environment file."""
    rows = []
    for release in load_release_matrix():
        for build in release.torch_neuronx:
            torch_ok = any(_admits(requirements["torch"], v) for v in release.torch)
            if (
                _admits(requirements["torch-neuronx"], build)
                and torch_ok
                and any(_admits(requirements["neuronx-cc"], v) for v in release.neuronx_cc)
            ):
                rows.append(release)
                break
    return rows


def test_trn1_environment_is_one_published_xla_release() -> None:
    path = ROOT / "environment.yml"
    requirements = _requirements(path)
    rows = _rows_admitting(requirements)
    assert [(r.neuron_release, r.flavour) for r in rows] == [("2.31.0/2.31.1", FLAVOUR_XLA)]
    (release,) = rows
    # torch-xla follows the PyTorch minor the XLA build was made for.
    torch_xla = Version(_pinned(requirements["torch-xla"]))
    assert f"{torch_xla.major}.{torch_xla.minor}" in release.torch_xla
    assert _pinned(requirements["torch"]) in release.torch
    assert _python(path) in release.python
    assert NEURON_INDEX in _indexes(path)
    if "libneuronxla" in requirements:
        shipped = release.components.get("libneuronxla")
        assert shipped and _admits(requirements["libneuronxla"], shipped)


def test_trn2_environment_is_a_native_release_on_one_torch_minor() -> None:
    path = ROOT / "environments" / "trn2.yml"
    requirements = _requirements(path)
    rows = _rows_admitting(requirements)
    assert rows and all(r.flavour == FLAVOUR_NATIVE for r in rows)
    neuronx_family = str(requirements["torch-neuronx"].specifier).removeprefix("==")
    torch_family = str(requirements["torch"].specifier).removeprefix("==")
    assert neuronx_family == torch_family  # the install rule: same PyTorch minor
    assert all(_python(path) in r.python for r in rows)
    assert "nki" in requirements and "torch-xla" not in requirements
    assert _indexes(path) == [NEURON_INDEX, TORCH_CPU_INDEX]


def test_cpu_environment_pins_torch_2_13_without_neuron() -> None:
    path = ROOT / "environments" / "cpu.yml"
    requirements = _requirements(path)
    assert _pinned(requirements["torch"]) == "2.13.0"
    assert {"pytest", "ruff"} <= requirements.keys()
    assert not {"torch-neuronx", "torch-xla", "neuronx-cc", "nki"} & requirements.keys()
    assert _python(path) == "3.11"
