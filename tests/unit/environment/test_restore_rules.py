"""env restore's rules that need no environment: the plan (what is installed, removed, left
alone), and the refusals made before any change. The Neuron driver check runs against a fake host
driver version, as `dpkg-query -W aws-neuronx-dkms` reports it on a Neuron host (neuron.md); the
real driver is not validated here."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.environment.releases import load_release_matrix
from workbench.environment.restore import check_driver, check_interpreter, plan_restore
from workbench.errors import BadInput


def _facts(packages: dict[str, str], editable: dict[str, str] | None = None) -> dict:
    return {
        "python": {"version": "3.11.7", "implementation": "CPython", "executable": "/v/bin/python"},
        "platform": {"system": "Linux", "machine": "x86_64"},
        "packages": packages,
        "editable": editable or {},
    }


def test_the_plan_installs_pins_removes_extras_and_leaves_the_checkout_and_pip_alone() -> None:
    manifest = _facts({"a": "1.0", "b": "2.0", "workbench": "0.1", "pip": "24.0"})
    now = _facts(
        {"a": "1.1", "c": "3.0", "workbench": "0.2", "pip": "24.0", "setuptools": "70"},
        editable={"workbench": "file:///src/workbench"},
    )
    plan = plan_restore(manifest, now)
    assert plan.install == {"a": "1.0", "b": "2.0"}
    assert plan.remove == {"c": "3.0"}
    assert set(plan.left_alone) == {"workbench", "setuptools"} and plan.unchanged == 1
    assert "install a==1.0 (now 1.1)" in plan.lines() and "remove c 3.0" in plan.lines()
    assert plan_restore(manifest, _facts(manifest["packages"])).install == {}


def test_another_python_or_platform_is_refused() -> None:
    pinned = _facts({})
    check_interpreter(pinned, _facts({}))  # must pass: the same interpreter
    other = _facts({})
    other["python"] = {**other["python"], "version": "3.12.1"}
    with pytest.raises(BadInput, match="pins CPython 3.11.7"):
        check_interpreter(pinned, other)
    arm = _facts({})
    arm["platform"] = {"system": "Linux", "machine": "aarch64"}
    with pytest.raises(BadInput, match="machine x86_64 and this is aarch64"):
        check_interpreter(pinned, arm)


def test_a_pinned_neuron_release_needs_its_driver_on_a_neuron_host() -> None:
    release = load_release_matrix()[-1]
    pinned = {"torch-neuronx": release.torch_neuronx[0]}
    needed = min(release.dkms, key=lambda v: tuple(int(p) for p in v.split(".")))
    newer = ".".join(str(int(p) + 1) for p in needed.split("."))
    assert "fits" in check_driver(pinned, newer)  # must pass: the host's driver is newer
    with pytest.raises(BadInput, match="will not start on an older driver"):
        check_driver(pinned, "1.0.0.0")  # must fail: an older driver
    assert "not a Neuron host" in check_driver(pinned, None)
    assert "no Neuron release pinned" in check_driver({"torch": "2.9.0"}, "1.0.0.0")


def test_the_probe_runs_in_another_interpreter(tmp_path: Path) -> None:
    import sys

    from workbench.environment.manifest import interpreter_facts

    found = interpreter_facts(Path(sys.executable))
    assert found["packages"]["torch"].startswith("2.")
    with pytest.raises(BadInput, match="could not be run"):
        interpreter_facts(tmp_path / "no-python")


def test_a_pins_hashes_and_another_interpreters_unread_torch_settings_are_not_drift() -> None:
    from workbench.environment.drift import diff_manifests
    from workbench.environment.manifest import capture_manifest

    here = capture_manifest()
    pinned = {**here, "hashes": {"torch": ["ab" * 32]}, "unhashed": {}, "torch": None}
    assert diff_manifests(pinned, here) == []  # must pass: the same environment
    older = {**pinned, "packages": {**here["packages"], "torch": "1.13.1"}}
    keys = {d.key: d.severity for d in diff_manifests(older, here)}
    assert keys == {"packages.torch": "critical"}  # must fail: its torch version still drifts


def test_a_package_named_like_a_secret_keeps_its_version_and_a_secret_is_still_scrubbed() -> None:
    """`google-auth` names a package: its version was redacted by its name, and a restore then
    asked pip for google-auth==[redacted]. Maps keyed by package are scrubbed by content."""
    from workbench.environment.manifest import scrub_manifest

    manifest = {
        "packages": {"google-auth": "2.40.1", "odd": "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e"},
        "hashes": {"google-auth": ["ab" * 32]},
        "environment": {"DB_PASSWORD": "hunter2pin"},
    }
    scrubbed = scrub_manifest(manifest)
    assert scrubbed["packages"]["google-auth"] == "2.40.1"  # must pass: a package's version
    assert scrubbed["hashes"]["google-auth"] == ["ab" * 32]
    assert scrubbed["packages"]["odd"] == "[redacted]"  # must fail: a token is still a token
    assert scrubbed["environment"]["DB_PASSWORD"] == "[redacted]"
