"""Published Neuron releases: which one the installed packages match, package by package."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from workbench.environment.probe import normalize_name
from workbench.targets.detect import FLAVOUR_XLA

# How the installed Neuron stack matches a published release, one definition.
ReleaseStatus = Literal["match", "partial", "no-neuron-stack", "unknown-combination"]


@dataclass(frozen=True)
class NeuronRelease:
    """One published Neuron release (one flavour of it) and the package versions it ships."""

    neuron_release: str
    date: str | None
    flavour: str  # FLAVOUR_XLA or FLAVOUR_NATIVE
    torch_neuronx: tuple[str, ...]
    torch: tuple[str, ...]
    torch_xla: tuple[str, ...]  # PyTorch minor series ("2.9"): torch-xla follows the torch minor
    neuronx_cc: tuple[str, ...]
    runtime_lib: tuple[str, ...]
    dkms: tuple[str, ...]
    python: tuple[str, ...] | None  # None: the reference does not say
    instances: tuple[str, ...] | None
    components: dict[str, str]
    note: str | None
    source: str


@dataclass(frozen=True)
class PackageCheck:
    """One package of a Neuron stack compared with what a release ships."""

    package: str
    expected: str
    installed: str | None
    ok: bool


@dataclass(frozen=True)
class ReleaseMatch:
    """How an environment's Neuron packages relate to the published releases."""

    status: ReleaseStatus
    releases: list[NeuronRelease]
    checks: list[PackageCheck]
    explanation: str


_LIST_FIELDS = ("torch_neuronx", "torch", "torch_xla", "neuronx_cc", "runtime_lib", "dkms")


def _matrix_document() -> dict[str, Any]:
    text = resources.files("workbench").joinpath("data/neuron_releases.json").read_text("utf-8")
    return json.loads(text)


def load_release_matrix() -> list[NeuronRelease]:
    """Published Neuron releases, oldest first (data/neuron_releases.json)."""
    releases = []
    for row in _matrix_document()["releases"]:
        values = dict(row)
        for name in _LIST_FIELDS:
            values[name] = tuple(row[name])
        for name in ("python", "instances"):
            values[name] = None if row[name] is None else tuple(row[name])
        releases.append(NeuronRelease(**values))
    return releases


def _public(version: str) -> str:
    """The version without its local tag: 2.9.0+cpu -> 2.9.0."""
    return version.split("+", 1)[0]


def _minor(version: str) -> str:
    return ".".join(_public(version).split(".")[:2])


def _same_build(installed: str, published: str) -> bool:
    # Native wheels are published as a family, e.g. torch-neuronx==2.14.3.0.* (neuron.md 1.2).
    installed = _public(installed)
    return installed == published or installed.startswith(published + ".")


def _published_build(release: NeuronRelease, torch_neuronx: str) -> str | None:
    return next((v for v in release.torch_neuronx if _same_build(torch_neuronx, v)), None)


def _checks(release: NeuronRelease, build: str, packages: dict[str, str]) -> list[PackageCheck]:
    torch = packages.get("torch")
    if release.flavour == FLAVOUR_XLA:
        # The XLA build number starts with the exact PyTorch it was built for; torch-xla only
        # has to share the PyTorch minor (neuron.md 1.1).
        torch_series = ".".join(build.split(".")[:3])
        checks = [
            PackageCheck(
                "torch", torch_series, torch, bool(torch and _public(torch) == torch_series)
            )
        ]
        xla = packages.get("torch-xla")
        xla_series = _minor(torch_series)
        checks.append(
            PackageCheck(
                "torch-xla", f"{xla_series}.*", xla, bool(xla and _minor(xla) == xla_series)
            )
        )
    else:
        # Native install rule: the torch-neuronx family matches the PyTorch minor (neuron.md 1.2).
        series = _minor(build)
        checks = [
            PackageCheck("torch", f"{series}.*", torch, bool(torch and _minor(torch) == series))
        ]
    compiler = packages.get("neuronx-cc")
    checks.append(
        PackageCheck(
            "neuronx-cc",
            " or ".join(release.neuronx_cc),
            compiler,
            bool(compiler and _public(compiler) in release.neuronx_cc),
        )
    )
    return [PackageCheck("torch-neuronx", build, packages.get("torch-neuronx"), True), *checks]


def _describe(checks: list[PackageCheck]) -> str:
    parts = [f"{c.package} {c.installed}" for c in checks]
    return ", ".join(parts[:-1]) + f" and {parts[-1]}"


def match_release(packages: dict[str, str]) -> ReleaseMatch:
    """Which published Neuron release, if any, this set of installed packages is."""
    packages = {normalize_name(name): version for name, version in packages.items()}
    torch_neuronx = packages.get("torch-neuronx")
    if not torch_neuronx:
        return ReleaseMatch(
            "no-neuron-stack",
            [],
            [],
            "torch-neuronx is not installed, so no Neuron release applies.",
        )
    matrix = load_release_matrix()
    candidates = []
    for release in matrix:
        build = _published_build(release, torch_neuronx)
        if build:
            checks = _checks(release, build, packages)
            candidates.append((sum(not c.ok for c in checks), release, checks))
    if not candidates:
        return ReleaseMatch(
            "unknown-combination",
            [],
            [],
            f"torch-neuronx {torch_neuronx} is in no published Neuron release from "
            f"{matrix[0].neuron_release} to {matrix[-1].neuron_release} "
            f"(release matrix retrieved {_matrix_document()['retrieved']}).",
        )
    exact = [(release, checks) for failures, release, checks in candidates if failures == 0]
    if exact:
        checks = exact[-1][1]
        names = " / ".join(f"Neuron {release.neuron_release}" for release, _ in exact)
        return ReleaseMatch(
            "match",
            [release for release, _ in exact],
            checks,
            f"{_describe(checks)} match the published {names} release.",
        )
    fewest = min(failures for failures, _, _ in candidates)
    # Several releases can list one build (2.9.0.2.15.32035 is in 2.31 and 2.33): compare with
    # the newest of the closest ones.
    _, nearest, checks = [c for c in candidates if c[0] == fewest][-1]
    wrong = "; ".join(
        f"{c.package} is {c.installed or 'not installed'}, expected {c.expected}"
        for c in checks
        if not c.ok
    )
    return ReleaseMatch(
        "partial",
        [nearest],
        checks,
        f"torch-neuronx {torch_neuronx} is published in Neuron {nearest.neuron_release}, "
        f"but {wrong}.",
    )
