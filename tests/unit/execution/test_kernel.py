"""The runner's private kernelspec: found by Jupyter for the run's duration, starts a real kernel
on this interpreter with the user's folder importable, and leaves nothing behind."""

import os
import sys
from pathlib import Path

import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
from jupyter_client.manager import start_new_kernel

from workbench.execution.kernel import KERNEL_NAME, private_kernelspec


def _find(name: str):
    return KernelSpecManager().get_kernel_spec(name)


def test_spec_points_at_this_interpreter_and_is_gone_afterwards(monkeypatch, tmp_path):
    monkeypatch.delenv("JUPYTER_PATH", raising=False)
    monkeypatch.setenv("PYTHONPATH", "/already/set")
    with private_kernelspec([str(tmp_path)]) as name:
        assert name == KERNEL_NAME
        spec = _find(name)
        root = Path(spec.resource_dir).parent.parent
        assert spec.argv[0] == sys.executable
        assert spec.env["PYTHONPATH"].split(os.pathsep) == [str(tmp_path), "/already/set"]
        assert os.environ["JUPYTER_PATH"] == str(root)
    assert "JUPYTER_PATH" not in os.environ
    assert not root.exists(), "the temporary kernelspec folder is removed"
    with pytest.raises(NoSuchKernel):
        _find(KERNEL_NAME)


def test_an_earlier_jupyter_path_is_kept_behind_it_and_restored(monkeypatch, tmp_path):
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    with private_kernelspec([]):
        entries = os.environ["JUPYTER_PATH"].split(os.pathsep)
        assert entries[1:] == [str(tmp_path)] and entries[0] != str(tmp_path)
    assert os.environ["JUPYTER_PATH"] == str(tmp_path)


def test_a_real_kernel_starts_from_it_and_imports_from_the_run_folder(tmp_path):
    (tmp_path / "users_model.py").write_text("ANSWER = 42\n")
    printed: list[str] = []
    with private_kernelspec([str(tmp_path)]) as name:
        manager, client = start_new_kernel(kernel_name=name, startup_timeout=120)
        try:
            reply = client.execute_interactive(
                "import sys, users_model; print(sys.executable, users_model.ANSWER)",
                timeout=60,
                output_hook=lambda msg: printed.append(msg["content"].get("text", "")),
            )
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok"
    assert "".join(printed).split() == [sys.executable, "42"]


@pytest.mark.parametrize("start_method", [None, "spawn", "forkserver"])
def test_a_kernel_shut_down_gracefully_still_runs_its_exit_handlers(tmp_path, start_method):
    # The runner's kernels skip the garbage collections at exit (execution.fast_exit), and stop
    # multiprocessing's helpers before ipykernel signals its process group (the resource tracker
    # ignores SIGTERM: jupyter_client used to kill such a kernel before its exit handlers ran).
    marker = tmp_path / "exit-handler-ran"
    code = (
        f"import atexit, pathlib\natexit.register(pathlib.Path({str(marker)!r}).write_text, 'y')\n"
    )
    if start_method:
        code += (
            "import multiprocessing\n"
            f"context = multiprocessing.get_context({start_method!r})\n"
            "child = context.Process(target=abs, args=(1,))\n"
            "child.start(); child.join()\n"
        )
    with private_kernelspec([]) as name:
        assert _find(name).argv[1:3] == ["-m", "workbench.execution.kernel_launcher"]
        manager, client = start_new_kernel(kernel_name=name, startup_timeout=120)
        try:
            reply = client.execute_interactive(code, timeout=120)
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=False)
    assert reply["content"]["status"] == "ok"
    assert marker.read_text() == "y"
