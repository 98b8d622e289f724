"""Environment capture, pinning, drift and the Neuron release matrix."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workbench.environment.drift import (
    CRITICAL,
    INFO,
    WARNING,
    Drift,
    diff_manifests,
    worst_severity,
)
from workbench.environment.manifest import capture_manifest, load_manifest, pin
from workbench.environment.releases import load_release_matrix, match_release
from workbench.errors import EXIT_BAD_INPUT, BadInput
from workbench.targets.detect import (
    FLAVOUR_NATIVE,
    FLAVOUR_XLA,
    detect_neuron_stack,
    neuron_flavour,
)

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
HF_TOKEN = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3k"
PIP_PASSWORD = "s3cr3tpass"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
PLANTED = (AWS_SECRET, HF_TOKEN, PIP_PASSWORD, AWS_KEY_ID)


@pytest.fixture(scope="module")
def manifest() -> dict:
    return capture_manifest()


def _plant_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("PIP_INDEX_URL", f"https://user:{PIP_PASSWORD}@example.invalid/simple")
    monkeypatch.setenv("NEURON_CC_FLAGS", f"--auto-cast=none --tag={AWS_KEY_ID}")


def _fake_tool(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_manifest_of_this_environment_is_json_and_lists_torch(manifest: dict) -> None:
    decoded = json.loads(json.dumps(manifest, allow_nan=False))
    assert {
        "schema_version",
        "captured_at",
        "python",
        "platform",
        "libc",
        "cpu",
        "packages",
        "torch",
        "neuron",
        "environment",
    } <= decoded.keys()
    # Metadata, not torch.__version__: PyPI wheels carry no local tag (+cu128) in their metadata.
    assert decoded["packages"]["torch"] == importlib.metadata.version("torch")
    assert decoded["packages"]["pyyaml"]  # names are normalized (PyYAML -> pyyaml)
    assert decoded["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert decoded["torch"]["version"] == torch.__version__
    assert decoded["torch"]["build_config"] == torch.__config__.show()
    assert decoded["torch"]["num_threads"] == torch.get_num_threads()
    assert decoded["torch"]["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert decoded["cpu"]["logical_cores"] >= 1
    assert decoded["cpu"]["memory_total_bytes"] > 0
    assert decoded["neuron"]["summary"] == detect_neuron_stack().summary()


def test_planted_secrets_reach_neither_manifest_nor_lock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _plant_secrets(monkeypatch)
    manifest = capture_manifest()
    manifest_path, lock_path = pin(tmp_path / "env.json", hashes=False)
    written = [json.dumps(manifest), manifest_path.read_text(), lock_path.read_text()]
    for text in written:
        for secret in PLANTED:
            assert secret not in text
    environment = manifest["environment"]
    assert "AWS_SECRET_ACCESS_KEY" not in environment  # not a behaviour variable: never stored
    assert "HF_TOKEN" not in environment
    assert environment["PIP_INDEX_URL"] == "https://[redacted]@example.invalid/simple"
    assert environment["NEURON_CC_FLAGS"] == "--auto-cast=none --tag=[redacted]"


def test_only_allowlisted_environment_variables_are_stored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/dump")
    monkeypatch.setenv("SOME_UNRELATED_SETTING", "visible-only-if-leaked")
    environment = capture_manifest()["environment"]
    assert environment["XLA_FLAGS"] == "--xla_dump_to=/tmp/dump"
    assert "SOME_UNRELATED_SETTING" not in environment
    assert "HOME" not in environment and "PATH" not in environment


def test_neuron_tools_are_read_when_present(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Fakes follow the documented contracts: `neuron-ls --json-output` prints a list of devices
    with neuron_processes (neuron.md 2.9); `dpkg-query -W -f` prints one line per package."""
    devices = [
        {
            "neuron_device": 0,
            "bdf": "cc:00.0",
            "cpu_affinity": "48-95,144-191",
            "numa_node": "1",
            "connected_to": [1, 3],
            "nc_count": 8,
            "logical_neuroncore_config": 2,
            "memory_size": 103079215104,
            "neuroncore_ids": [0, 1, 2, 3],
            "neuron_processes": [
                {
                    "pid": 4242,
                    "command": f"python train.py --hub-token {HF_TOKEN}",
                    "neuron_runtime_version": "2.35.30.0",
                }
            ],
        }
    ]
    _fake_tool(tmp_path, "neuron-ls", f"cat <<'EOF'\n{json.dumps(devices)}\nEOF\n")
    _fake_tool(
        tmp_path,
        "dpkg-query",
        "printf 'aws-neuronx-runtime-lib\\t2.35.30.0-1\\tinstall ok installed\\n"
        "aws-neuronx-dkms\\t2.31.7.0\\tinstall ok installed\\n"
        "aws-neuronx-oldtool\\t1.0\\tdeinstall ok config-files\\n'\n",
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    neuron = capture_manifest()["neuron"]
    assert neuron["neuron_ls"]["status"] == "ok"
    assert neuron["neuron_ls"]["runtime_versions"] == ["2.35.30.0"]
    assert neuron["neuron_ls"]["devices"][0]["nc_count"] == 8
    command = neuron["neuron_ls"]["devices"][0]["neuron_processes"][0]["command"]
    assert command == "python train.py --hub-token [redacted]"
    assert neuron["system_packages"] == {
        "tool": "dpkg-query",
        "packages": {"aws-neuronx-dkms": "2.31.7.0", "aws-neuronx-runtime-lib": "2.35.30.0-1"},
        "error": None,
    }


def test_absent_neuron_tools_are_recorded_not_raised(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no dpkg, rpm or neuron-ls
    neuron = capture_manifest()["neuron"]
    assert neuron["neuron_ls"] == {
        "status": "absent",
        "devices": [],
        "runtime_versions": [],
        "error": None,
    }
    assert neuron["system_packages"] == {"tool": None, "packages": {}, "error": None}


def test_failing_neuron_ls_is_recorded_with_its_message(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_tool(tmp_path, "neuron-ls", "echo 'no neuron device found' >&2\nexit 1\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    neuron_ls = capture_manifest()["neuron"]["neuron_ls"]
    assert neuron_ls["status"] == "failed"
    assert neuron_ls["error"] == "no neuron device found"


def test_pin_writes_manifest_and_sorted_lock(tmp_path: Path) -> None:
    manifest_path, lock_path = pin(tmp_path / "pins" / "trn1.json", hashes=False)
    assert lock_path == tmp_path / "pins" / "trn1.lock.txt"
    manifest = load_manifest(manifest_path)
    lines = lock_path.read_text().splitlines()
    header = [line for line in lines if line.startswith("#")]
    pins = [line for line in lines if not line.startswith("#")]
    assert any(f"python {manifest['python']['version']}" in line for line in header)
    names = [line.split("==")[0] for line in pins]
    assert names == sorted(names)
    assert f"torch=={importlib.metadata.version('torch')}" in pins  # local tag such as +cpu kept
    assert all("==" in line for line in pins)
    assert not any(line.startswith("workbench==") for line in pins)
    assert len(pins) == len(manifest["packages"]) - ("workbench" in manifest["packages"])


def test_load_manifest_rejects_bad_files_with_one_sentence(tmp_path: Path) -> None:
    cases = {
        "missing.json": None,
        "garbled.json": "{not json",
        "list.json": "[1, 2]",
        "result.json": json.dumps({"schema_version": 1, "notebook": "01_baseline", "data": {}}),
        "future.json": json.dumps({"kind": "workbench.environment-manifest", "schema_version": 99}),
    }
    for name, content in cases.items():
        if content is not None:
            (tmp_path / name).write_text(content)
        with pytest.raises(BadInput) as caught:
            load_manifest(tmp_path / name)
        assert caught.value.exit_code == EXIT_BAD_INPUT
        assert name in str(caught.value)
        assert "\n" not in str(caught.value)


def _changed(manifest: dict, **changes: object) -> dict:
    """Copy of `manifest` with dotted keys set (None removes the key)."""
    new = copy.deepcopy(manifest)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        target = new
        for parent in parents:
            target = target.setdefault(parent, {})
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    return new


def _by_key(drifts: list[Drift]) -> dict[str, Drift]:
    return {d.key: d for d in drifts}


def test_diff_classifies_drift_by_what_it_affects(manifest: dict) -> None:
    old = _changed(manifest, environment__NEURON_CC_FLAGS="--auto-cast=matmult")
    new = copy.deepcopy(old)
    new["captured_at"] = "2099-01-01T00:00:00+00:00"
    new["packages"]["torch"] = "1.13.1"
    new["packages"]["papermill"] = "0.0.1"
    new["packages"]["leftpad-example"] = "1.0"
    new["environment"]["NEURON_CC_FLAGS"] = "--auto-cast=none"
    new["environment"]["NEURON_RT_LOG_LEVEL"] = "DEBUG"
    new["environment"]["NEURON_LOGICAL_NC_CONFIG"] = "1"
    new["environment"]["NEURON_RT_VISIBLE_CORES"] = "0-3"
    new["torch"]["float32_matmul_precision"] = "medium"
    new["neuron"]["system_packages"]["packages"]["aws-neuronx-runtime-lib"] = "2.35.30.0"
    new["neuron"]["system_packages"]["packages"]["aws-neuronx-tools"] = "2.33.38.0"
    drifts = diff_manifests(old, new)
    found = _by_key(drifts)
    expected = {
        "packages.torch": CRITICAL,
        "packages.papermill": WARNING,
        "packages.leftpad-example": INFO,
        "environment.NEURON_CC_FLAGS": CRITICAL,
        "environment.NEURON_RT_LOG_LEVEL": INFO,
        "environment.NEURON_LOGICAL_NC_CONFIG": CRITICAL,
        "environment.NEURON_RT_VISIBLE_CORES": INFO,
        "torch.float32_matmul_precision": CRITICAL,
        "neuron.system_packages.packages.aws-neuronx-runtime-lib": CRITICAL,
        "neuron.system_packages.packages.aws-neuronx-tools": INFO,
    }
    assert {key: d.severity for key, d in found.items()} == expected
    assert found["packages.torch"].old == manifest["packages"]["torch"]
    assert found["packages.torch"].new == "1.13.1"
    assert found["packages.leftpad-example"].old is None
    assert found["packages.leftpad-example"].reason.startswith("added")
    order = [d.severity for d in drifts]
    assert order == sorted(order, key=[CRITICAL, WARNING, INFO].index)
    assert worst_severity(drifts) == CRITICAL


def test_diff_of_identical_manifests_is_empty(manifest: dict) -> None:
    later = _changed(manifest, captured_at="2099-01-01T00:00:00+00:00")
    assert diff_manifests(manifest, later) == []
    assert worst_severity([]) is None


def test_diff_reports_removed_package_and_python_change(manifest: dict) -> None:
    new = _changed(manifest, packages__tqdm=None, python__version="3.12.1")
    found = _by_key(diff_manifests(manifest, new))
    assert found["packages.tqdm"].new is None
    assert found["packages.tqdm"].severity == WARNING
    assert found["python.version"].severity == CRITICAL
    assert worst_severity([found["packages.tqdm"]]) == WARNING


def test_release_matrix_covers_2_20_to_2_33_consistently() -> None:
    releases = load_release_matrix()
    labels = [r.neuron_release for r in releases]
    assert labels[0] == "2.20.0" and labels[-1] == "2.33.0"
    assert {"2.31.0/2.31.1", "2.32.0"} <= set(labels)
    for release in releases:
        assert release.source and release.neuronx_cc and release.runtime_lib
        assert release.flavour in (FLAVOUR_XLA, FLAVOUR_NATIVE)
        for build in release.torch_neuronx:
            assert neuron_flavour(build) == release.flavour, build
            torch_series = ".".join(build.split(".")[: 3 if release.flavour == FLAVOUR_XLA else 2])
            assert any(t.startswith(torch_series) for t in release.torch), build
        if release.flavour == FLAVOUR_XLA:
            assert sorted(release.torch_xla) == sorted({t.rsplit(".", 1)[0] for t in release.torch})
        else:
            assert release.torch_xla == ()
    native = [r for r in releases if r.flavour == FLAVOUR_NATIVE]
    assert [r.torch_neuronx for r in native] == [("2.13.3.0", "2.14.3.0")]


def _xla_2_31(changed: dict[str, str] | None = None, xla_key: str = "torch-xla") -> dict[str, str]:
    """Neuron 2.31's XLA stack as installed versions (torch-xla named `xla_key`: distributions
    spell it either way), with `changed` replacing some of them."""
    stack = {"torch-neuronx": "2.9.0.2.15.32035", "torch": "2.9.0", xla_key: "2.9.0"}
    return stack | {"neuronx-cc": "2.26.6360.0"} | (changed or {})


def test_match_release_accepts_the_2_31_xla_combination() -> None:
    result = match_release(_xla_2_31(xla_key="torch_xla"))
    assert result.status == "match"
    assert [r.neuron_release for r in result.releases] == ["2.31.0/2.31.1"]
    assert all(check.ok for check in result.checks)
    assert "2.31" in result.explanation


def test_match_release_tells_2_33_from_2_31_by_compiler() -> None:
    result = match_release(_xla_2_31({"neuronx-cc": "2.28.7631.0"}))
    assert result.status == "match"
    assert [(r.neuron_release, r.flavour) for r in result.releases] == [("2.33.0", FLAVOUR_XLA)]


@pytest.mark.parametrize("build", ["2.14.3.0", "2.14.3.0.1873+gabc"])
def test_match_release_accepts_a_native_2_14_combination(build: str) -> None:
    result = match_release(
        {"torch-neuronx": build, "torch": "2.14.0+cpu", "neuronx-cc": "2.28.7631.0", "nki": "0.7.0"}
    )
    assert result.status == "match"
    assert [(r.neuron_release, r.flavour) for r in result.releases] == [("2.33.0", FLAVOUR_NATIVE)]


def test_match_release_names_each_mismatched_package() -> None:
    result = match_release(_xla_2_31({"torch": "2.8.0", "torch-xla": "2.8.1"}))
    assert result.status == "partial"
    assert [r.neuron_release for r in result.releases] == ["2.31.0/2.31.1"]
    failed = {c.package: (c.expected, c.installed) for c in result.checks if not c.ok}
    assert failed == {"torch": ("2.9.0", "2.8.0"), "torch-xla": ("2.9.*", "2.8.1")}
    assert "torch is 2.8.0, expected 2.9.0" in result.explanation


def test_match_release_flags_native_build_on_the_wrong_torch_minor() -> None:
    result = match_release(
        {"torch-neuronx": "2.14.3.0", "torch": "2.13.0", "neuronx-cc": "2.28.7631.0"}
    )
    assert result.status == "partial"
    assert [c.package for c in result.checks if not c.ok] == ["torch"]


def test_match_release_without_neuron_and_with_an_unpublished_build() -> None:
    assert match_release({"torch": "2.13.0+cpu", "torch-xla": "2.9.0"}).status == (
        "no-neuron-stack"
    )
    unknown = match_release({"torch-neuronx": "2.9.0.2.99.1", "torch": "2.9.0"})
    assert unknown.status == "unknown-combination"
    assert unknown.releases == []
    assert "2.9.0.2.99.1" in unknown.explanation


def test_capture_survives_the_new_fp32_precision_api() -> None:
    """torch >= 2.9 refuses to read legacy TF32 flags once fp32_precision was set; capture must
    still succeed. Runs in a child process so this process's torch settings stay untouched."""
    script = (
        "import json, torch\n"
        "if not hasattr(torch.backends, 'fp32_precision'):\n"
        "    raise SystemExit(3)\n"
        "torch.backends.fp32_precision = 'tf32'\n"
        "torch.backends.cuda.matmul.fp32_precision = 'tf32'\n"
        "from workbench.environment import capture_manifest\n"
        "print(json.dumps(capture_manifest()['torch']))\n"
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    if child.returncode == 3:
        pytest.skip("this torch has no fp32_precision API")
    assert child.returncode == 0, child.stderr
    recorded = json.loads(child.stdout)
    assert recorded["fp32_precision"]["generic"] == "tf32"
    assert recorded["fp32_precision"]["cuda_matmul"] == "tf32"
    assert recorded["cuda_matmul_allow_tf32"] is None


def _fake_package(root: Path, name: str, version: str, body: str) -> None:
    """An installed distribution (dist-info) whose import runs `body`."""
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(body, encoding="utf-8")
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )


def test_a_companion_that_fails_to_import_is_critical_drift(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torchvision built for CUDA beside a CPU torch: installed, listed, broken at import."""
    from workbench.environment import import_failures, records
    from workbench.environment.drift import DriftError, enforce_no_critical_drift
    from workbench.environment.releases import match_release

    _fake_package(
        tmp_path,
        "torchvision",
        "0.99.0",
        "import torch\nraise RuntimeError('operator torchvision::nms does not exist\\nmore')\n",
    )
    _fake_package(tmp_path, "timm", "9.9.9", "import torch\nVERSION = '9.9.9'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    manifest = capture_manifest()
    assert manifest["packages"]["torchvision"] == "0.99.0"
    assert manifest["imports"]["torchvision"] == (
        "RuntimeError: operator torchvision::nms does not exist"
    )
    assert manifest["imports"]["timm"] == "ok"
    broken = import_failures(manifest)
    assert [(d.key, d.severity) for d in broken] == [("imports.torchvision", CRITICAL)]
    assert "0.99.0" in broken[0].reason
    data = records.result_data(manifest, match_release(manifest["packages"]), None, broken)
    assert (
        "CRITICAL: 1 companion package(s) fail to import (torchvision: RuntimeError"
        in (data["headline"])
    )
    with pytest.raises(DriftError, match=r"torchvision fails to import \(RuntimeError: operator"):
        enforce_no_critical_drift(broken, fail_on_drift=True)
    enforce_no_critical_drift(broken, fail_on_drift=False)
    # A pin of the same broken environment does not hide it: import checks are never diffed.
    assert not [d for d in diff_manifests(manifest, manifest) if d.key.startswith("imports.")]
    healthy = {**manifest, "imports": {"timm": "ok"}}
    assert import_failures(healthy) == []


def test_a_hanging_companion_import_is_cut_off_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workbench.environment.companions import check_imports

    _fake_package(tmp_path, "torchaudio", "0.1.0", "import time\ntime.sleep(60)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    [check] = check_imports({"torchaudio": "0.1.0"}, timeout_s=2)
    assert check.status == "the import did not finish within 2 s"
    # Packages that are not companions, or not installed, are not imported at all.
    assert check_imports({"numpy": "2.0"}) == []


def test_pin_scrubs_secrets_by_content_from_manifest_and_lock(tmp_path, monkeypatch):
    from workbench.environment.manifest import pin

    monkeypatch.setenv("NEURON_CC_FLAGS", "--auto-cast=none --password hunter2pin")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://pypi.example/simple?token=tokpin123")
    manifest, lock = pin(tmp_path / "env.json", hashes=False)
    written = manifest.read_text() + lock.read_text()
    assert "hunter2pin" not in written and "tokpin123" not in written
    flags = json.loads(manifest.read_text())["environment"]["NEURON_CC_FLAGS"]
    assert flags == "--auto-cast=none --password [redacted]"
