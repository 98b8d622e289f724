"""Reports opened in a real headless Chromium: nothing fetched, nothing executed, content shown."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from workbench.report import export_html

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install chromium (see .ci/run): the report checks need it")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(
            executable_path=CHROMIUM,
            # Chromium's own update and sync traffic would pollute the request log.
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield instance
        instance.close()


def open_report(browser, path: Path) -> dict:
    page = browser.new_page()
    seen = {"requests": [], "dialogs": [], "errors": []}
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    seen["text"] = page.inner_text("body")
    seen["broken_images"] = page.evaluate(
        "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).length"
    )
    seen["images"] = page.evaluate("document.images.length")
    page.close()
    return seen


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("browser") / "run"
    result = subprocess.run(
        [str(Path(sys.executable).parent / "workbench"), "run", "--only", "00", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    return out


def test_reports_fetch_nothing_and_show_their_content(browser, run_dir):
    pages = sorted(run_dir.glob("*.html"))
    assert {p.name for p in pages} >= {"index.html", "00_environment.html"}
    for path in pages:
        seen = open_report(browser, path)
        assert seen["requests"] == [path.as_uri()], f"{path.name} fetched {seen['requests']}"
        assert seen["dialogs"] == [] and seen["errors"] == []
        assert seen["broken_images"] == 0
        assert "this is not a Trainium validation" in seen["text"]
    environment = open_report(browser, run_dir / "00_environment.html")["text"]
    assert "Key packages" in environment and "torch" in environment


def test_hostile_outputs_do_not_run_in_a_browser(browser, tmp_path):
    nb = new_notebook()
    cell = new_code_cell("x")
    cell.outputs = [
        new_output("display_data", data={"text/html": "<img src=x onerror=alert(1)><b>bold</b>"}),
        new_output("display_data", data={"text/html": "<script>alert(2)</script>"}),
        new_output("display_data", data={"application/javascript": "alert(3)"}),
        new_output("display_data", data={"text/markdown": "[x](javascript:alert(4))"}),
        new_output("display_data", data={"text/vnd.mermaid": "</pre><img src=x onerror=alert(5)>"}),
    ]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "hostile.ipynb")
    page = export_html(tmp_path / "hostile.ipynb", tmp_path / "hostile.html")
    seen = open_report(browser, page)
    assert seen["dialogs"] == [] and seen["errors"] == []
    assert seen["requests"] == [page.as_uri()]
    assert "bold" in seen["text"]
