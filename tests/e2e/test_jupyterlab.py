"""Stepping through in a real JupyterLab, driven by headless Chromium: the README's flow on a copy
`workbench open` prepared, with the control panel run first, one panel value changed and the cells
below it run again; the checkout stays clean throughout."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT
from workbench.runner import RunRequest

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # the test skips below with the reason
    PlaywrightTimeout = TimeoutError  # type: ignore[misc,assignment]
from workbench.workcopy import open_run

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

REPO = REPO_ROOT
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NOTEBOOK = "00_environment.ipynb"


def _missing_part() -> str | None:
    if CHROMIUM is None:
        return "chromium is not installed (apt-get install chromium)"
    try:
        import jupyterlab  # noqa: F401
    except ImportError:
        return "JupyterLab is not installed (pip install -e '.[test]' installs it)"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _checkout_state() -> str:
    """Tracked changes and untracked files, as git sees them (ignored files excluded)."""
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


@pytest.fixture
def lab(tmp_path) -> Iterator[tuple[str, Path]]:
    missing = _missing_part()
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must have every part of this test: {missing}")
        pytest.skip(missing)
    folder = open_run(RunRequest(only=["00"], out=tmp_path / "work")).folder
    port, token = _free_port(), secrets.token_hex(16)
    home = tmp_path / "jupyter-home"
    _write_settings(home / "settings")
    env = {
        **os.environ,
        # A server of its own: no user settings, workspaces or extensions leak in or out.
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}", f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={folder}", "--ServerApp.port_retries=0",
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # as on an instance where the shell is root
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.flush()
                    pytest.fail(f"JupyterLab did not start: {(tmp_path / 'lab.log').read_text()}")
                time.sleep(0.5)
        yield f"{base}/lab/tree/{NOTEBOOK}?token={token}", folder
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


# A cell queued or running shows the busy prompt `[*]`.
_BUSY_PROMPT = (
    "[...document.querySelectorAll('.jp-InputPrompt')].some(p => p.textContent.includes('*'))"
)


def _wait_idle(page, timeout_ms: int = 240_000) -> None:
    """Until the kernel has run everything queued: no cell shows the busy prompt `[*]`."""
    page.wait_for_function(
        f"""() => {{
            const status = document.querySelector('.jp-Notebook-ExecutionIndicator');
            return !({_BUSY_PROMPT}) && (!status || status.getAttribute('data-status') !== 'busy');
        }}""",
        timeout=timeout_ms,
    )


# Dialogs JupyterLab may raise on its own while a loaded machine is still settling the session;
# a person answers them with the default button. Any other dialog fails the test with its text.
_EXPECTED_DIALOGS = ("Select Kernel", "Kernel not ready", "Server Connection Error")


def _answer_dialog(page) -> None:
    dialog = page.locator(".jp-Dialog")
    if not dialog.count():
        return
    text = " ".join(dialog.first.inner_text().split())
    if not any(title in text for title in _EXPECTED_DIALOGS):
        pytest.fail(f"JupyterLab showed an unexpected dialog: {text!r}")
    dialog.first.locator(".jp-mod-accept").first.click()
    try:
        dialog.first.wait_for(state="detached", timeout=10_000)
    except PlaywrightTimeout:
        # A busy server can answer the first accept with the same dialog again: the caller's
        # next attempt reads and answers it once more.
        return


def _click(page, locator) -> None:
    """Click as a person would: a dialog in the way is read and answered first."""
    for _ in range(12):
        try:
            locator.click(timeout=5_000)
            return
        except PlaywrightTimeout:
            _answer_dialog(page)
    pytest.fail("a click never landed in 60 s")


def _menu(page, menu: str, item: str) -> None:
    """Click a menu item by its exact label, as a person would."""
    _click(page, page.locator(".lm-MenuBar-itemLabel", has_text=menu).first)
    page.wait_for_selector(".lm-Menu", state="visible")
    _click(page, page.locator(".lm-Menu-itemLabel").get_by_text(item, exact=True))


def _run_all(page) -> None:
    """Run > Run All Cells; a click that lands while the session is still connecting does
    nothing, so it is repeated until a cell is queued or running."""
    started = (
        "() => [...document.querySelectorAll('.jp-InputPrompt')]"
        ".some(p => /\\d|\\*/.test(p.textContent))"
    )
    for _ in range(10):
        _menu(page, "Run", "Run All Cells")
        try:
            page.wait_for_function(started, timeout=5_000)
            return
        except PlaywrightTimeout:
            page.keyboard.press("Escape")
    pytest.fail("Run All Cells never started a cell")


def _wait_for_panel(page, seconds: float = 120, rerun_after: float = 45) -> None:
    """The panel's widgets appear once the cells above it ran; a dialog JupyterLab raises on the
    way (the kernel still connecting) is answered, as a person would, instead of waited out.
    On a loaded machine the widget manager can miss a model created while the kernel connection
    was still settling (ipywidgets' "model not found" race: the cell ran, no widget shows); a
    person runs the cells again, and so does this, once, after `rerun_after` seconds idle."""
    start = time.monotonic()
    rerun = False
    while time.monotonic() - start < seconds:
        try:
            page.wait_for_selector(".widget-checkbox input", timeout=5_000)
            return
        except PlaywrightTimeout:
            _answer_dialog(page)
        if not rerun and time.monotonic() - start > rerun_after and _kernel_idle(page):
            rerun = True
            _run_all(page)
    errors = page.locator(".jp-OutputArea-output[data-mime-type*='error']").all_inner_texts()
    shown = [
        " ".join(t.split())[:200] for t in page.locator(".jp-OutputArea-output").all_inner_texts()
    ]
    pytest.fail(
        f"the panel never appeared in {seconds:g} s (cells run again: {rerun}); cell errors: "
        f"{errors[:2]}; first outputs: {shown[:3]}"
    )


def _kernel_idle(page) -> bool:
    return page.evaluate(f"() => !({_BUSY_PROMPT})")


# Every cell stays in the page (JupyterLab 4 otherwise renders only the cells in view), and no
# news prompt covers the notebook.
_LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"},
}


def _write_settings(settings_dir: Path) -> None:
    for name, values in _LAB_SETTINGS.items():
        path = settings_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def test_step_through_a_prepared_copy_in_jupyterlab(lab):
    url, folder = lab
    before = _checkout_state()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url)
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_function(
            "() => document.querySelector('.jp-Notebook-ExecutionIndicator')"
            "?.getAttribute('data-status') === 'idle'",
            timeout=120_000,
        )
        _run_all(page)
        _wait_for_panel(page)
        _wait_idle(page)
        result = folder / "00_environment.json"
        assert result.exists(), "results land beside the copy"
        assert json.loads(result.read_text())["parameters"]["fail_on_drift"] is False

        # The panel's labels are whole, and its stylesheet gives banners their colour.
        for label in page.locator(".widget-label").all():
            assert label.evaluate("e => e.scrollWidth <= e.clientWidth"), label.inner_text()
        banner = page.locator(".wb-banner").first
        assert banner.evaluate("e => getComputedStyle(e).backgroundColor") not in (
            "rgba(0, 0, 0, 0)",
            "transparent",
        )

        # Change one value in the panel, then run the cells below it, as the panel's hint says.
        page.locator(".widget-checkbox input").first.check()
        below = page.locator(".jp-Cell", has_text="Where does this run").first
        below.click()
        _menu(page, "Run", "Run Selected Cell and All Below")
        page.wait_for_timeout(500)
        _wait_idle(page)
        deadline = time.monotonic() + 60
        while json.loads(result.read_text())["parameters"]["fail_on_drift"] is not True:
            assert time.monotonic() < deadline, "the panel's value did not reach the result"
            time.sleep(0.5)
        errors = page.locator(".jp-OutputArea-output[data-mime-type*='error']").count()
        assert errors == 0
        browser.close()
    assert _checkout_state() == before, "stepping through left the checkout as it was"
