"""The screenshots in docs/trackers.md: a run exported to MLflow and TensorBoard, each tracker's
own UI served on 127.0.0.1, photographed by headless Chromium (launched as tests/e2e/
test_browser.py launches it), saved as small palette PNGs in docs/img/.

    python tools/tracker_screenshots.py RUN_FOLDER --mlflow PATH/TO/mlflow

RUN_FOLDER is a finished run (reports/latest). MLflow's UI ships with the full `mlflow` package,
not with `mlflow-skinny` (the export extra): --mlflow names the `mlflow` command of an
environment that has it (`pip install mlflow` in a virtualenv of its own). Nothing leaves the
machine: both servers listen on 127.0.0.1, and Chromium is kept off the network otherwise.
"""

from __future__ import annotations

import argparse
import io
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
VIEWPORT = {"width": 1280, "height": 760}
COLOURS = 96  # palette size: the pages are flat UI colours and text
START_S = 120
WAIT_MS = 120_000  # a page's first load on a busy machine
SETTLE_MS = 4_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def _server(command: list[str], health: str, log: Path) -> Iterator[None]:
    """A server in its own process group, up when `health` answers 200, stopped at the end."""
    with open(log, "w") as stream:
        process = subprocess.Popen(
            command, stdout=stream, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + START_S
            while True:
                try:
                    with urllib.request.urlopen(health, timeout=2) as answer:
                        if answer.status == 200:
                            break
                except OSError:
                    pass
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{command[0]} did not start: {log.read_text()[-2000:]}")
                time.sleep(0.5)
            yield
        finally:
            signal_group(process.pid)
            process.wait(timeout=30)


def signal_group(pid: int) -> None:
    import os

    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _save(page: Any, name: str) -> Path:
    """The page as a palette PNG: a screenshot's flat colours fit a small palette."""
    from PIL import Image

    image = Image.open(io.BytesIO(page.screenshot(full_page=False)))
    small = image.convert("RGB").quantize(colors=COLOURS, method=Image.Quantize.MEDIANCUT)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    small.save(path, optimize=True)
    print(f"{path.relative_to(ROOT)}: {path.stat().st_size // 1024} KiB")
    return path


def _shot(page: Any, url: str, shown: str, name: str) -> None:
    """The page once `shown` is on it and the UI has settled (its charts drawn)."""
    page.goto(url, wait_until="load")
    page.get_by_text(shown).first.wait_for(state="visible")
    assistant = page.get_by_text("MLflow Assistant")
    if assistant.count():  # MLflow's chat panel covers a third of the page: closed
        panel = assistant.first.locator("xpath=ancestor::div[.//button][1]")
        panel.locator("button").last.click()
    page.wait_for_timeout(SETTLE_MS)
    _save(page, name)


def _local_only(route: Any) -> None:
    if route.request.url.startswith("http://127.0.0.1:"):
        route.continue_()
    else:
        route.abort()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--mlflow", required=True, help="an mlflow command with its UI")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed (apt-get install chromium)")

    from mlflow import MlflowClient
    from playwright.sync_api import sync_playwright

    from workbench.export.command import ExportOptions, export
    from workbench.export.to_mlflow import LAYOUT_QUERY, run_page

    work = Path(tempfile.mkdtemp(prefix="tracker-shots-"))
    store, logdir = f"sqlite:///{work / 'mlflow.db'}", work / "tensorboard"
    for line in export([args.run], ExportOptions(["mlflow", "tensorboard"], store, logdir=logdir)):
        print(line)
    client = MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("workbench")
    parent = next(
        r
        for r in client.search_runs([experiment.experiment_id])
        if "mlflow.parentRunId" not in r.data.tags
    )
    mlflow_port, board_port = _free_port(), _free_port()
    mlflow_url, board_url = f"http://127.0.0.1:{mlflow_port}", f"http://127.0.0.1:{board_port}"
    tensorboard = str(Path(sys.executable).with_name("tensorboard"))
    with (
        _server(
            [args.mlflow, "server", "--host", "127.0.0.1", "--port", str(mlflow_port),
             "--workers", "1", "--backend-store-uri", store],
            f"{mlflow_url}/health",
            work / "mlflow.log",
        ),
        _server(
            [tensorboard, "--logdir", str(logdir), "--host", "127.0.0.1",
             "--port", str(board_port)],
            f"{board_url}/data/runs",
            work / "tensorboard.log",
        ),
        sync_playwright() as playwright,
    ):  # fmt: skip
        browser = playwright.chromium.launch(
            executable_path=chromium,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(WAIT_MS)
        page.route("**/*", _local_only)
        # The pages the export's link opens: the machine-learning layout, not GenAI's.
        runs = f"{mlflow_url}/#/experiments/{experiment.experiment_id}/runs?{LAYOUT_QUERY}"
        _shot(page, runs, parent.info.run_name, "trackers-mlflow-runs.png")
        one = run_page(mlflow_url, experiment.experiment_id, parent.info.run_id)
        _shot(page, one, "workbench run of", "trackers-mlflow-run.png")
        board = f"{board_url}/#scalars&tagFilter=losses%7Csteady%2Fmeasurement%2Ftimes"
        _shot(page, board, "losses", "trackers-tensorboard-scalars.png")
        browser.close()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
