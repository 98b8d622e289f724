"""Reports opened in a real headless Chromium: nothing fetched, nothing executed, content shown."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from tests.fixtures import REPO_ROOT
from tests.fixtures.injection_payloads import PAYLOADS
from tests.fixtures.user_workloads import CSS_LOOKING_TEXT
from workbench.report import export_html

pytestmark = pytest.mark.browser

REPO = REPO_ROOT
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


def _intercept(route, seen: dict, own: str) -> None:
    """Every request passes through here: the page itself loads, anything else is refused."""
    seen["requests"].append(route.request.url)
    if route.request.url == own:
        route.continue_()
    else:
        route.abort()


def open_report(browser, path: Path, *, click_links: bool = False) -> dict:
    page = browser.new_page()
    seen = {"requests": [], "dialogs": [], "errors": []}
    page.route("**/*", lambda route: _intercept(route, seen, path.as_uri()))
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    if click_links:
        # A script link only fires when clicked; a followable one must not navigate away.
        page.evaluate(
            "document.querySelectorAll('a[href]').forEach(a => {"
            " if (!['http:', 'https:', 'file:', 'mailto:'].includes(a.protocol)) a.click(); })"
        )
        page.wait_for_timeout(200)
    seen["links"] = page.evaluate("Array.from(document.links).map(a => a.getAttribute('href'))")
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


def test_every_injection_family_is_inert_in_a_browser(browser, tmp_path):
    """Each payload as HTML output, as Markdown output and in a Markdown cell; links clicked."""
    nb = new_notebook()
    cell = new_code_cell("show()")
    cell.outputs = [new_output("display_data", data={"text/html": p}) for _, p in PAYLOADS]
    cell.outputs += [new_output("display_data", data={"text/markdown": p}) for _, p in PAYLOADS]
    cell.outputs.append(
        new_output("display_data", data={"text/markdown": "[docs](https://docs.example.com/x)"})
    )
    nb.cells = [new_markdown_cell(p) for _, p in PAYLOADS] + [cell]
    nbformat.write(nb, tmp_path / "payloads.ipynb")
    page = export_html(tmp_path / "payloads.ipynb", tmp_path / "payloads.html")
    seen = open_report(browser, page, click_links=True)
    executed = {family for family, _ in PAYLOADS if any(family in d for d in seen["dialogs"])}
    assert len(PAYLOADS) >= 13
    assert seen["dialogs"] == [] and executed == set(), f"ran: {seen['dialogs']}"
    assert seen["requests"] == [page.as_uri()], f"fetched or navigated: {seen['requests']}"
    assert seen["errors"] == []
    assert "https://docs.example.com/x" in seen["links"], "an http(s) link stays clickable"
    # Besides the payloads' safe links, only the report's own link back to its run's index.
    assert seen["links"].count("index.html") == 1
    others = [h for h in seen["links"] if h != "index.html"]
    assert all(h.startswith(("https://", "http://", "mailto:", "#")) for h in others)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """A real run of notebook 01 with a workload that displays Markdown and HTML payloads."""
    out = tmp_path_factory.mktemp("hostile") / "run"
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "workbench"), "run", "--only", "01",
            "--out", str(out), "--workload", "tests.fixtures.user_workloads:hostile_output",
            "-p", "steady_steps=3", "-p", "modes=eager", "-p", "kinds=train",
            "-p", "warmup_max_steps=6", "-p", "warmup_window=4",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    return out, result


def test_a_workload_displaying_payloads_gets_its_report_and_nothing_runs(browser, hostile_run):
    out, result = hostile_run
    assert result.returncode == 0, result.stderr
    for name in ("01_baseline.html", "index.html"):
        seen = open_report(browser, out / name, click_links=True)
        assert seen["dialogs"] == [] and seen["errors"] == [], name
        assert seen["requests"] == [(out / name).as_uri()], f"{name}: {seen['requests']}"
    # Control sequences from the workload's name and output reach no terminal, log or index.
    written = [(out / n).read_text() for n in ("run.log", "summary.json", "index.html")]
    for text in [result.stderr, *written]:
        assert "\x1b" not in text and "\x07" not in text
    assert "hostile-workload" in result.stderr
    report = open_report(browser, out / "01_baseline.html")["text"]
    assert CSS_LOOKING_TEXT in report, "text that looks like CSS is shown, not refused"
    assert "safe docs" in report


def test_fleet_dashboard_links_named_like_scripts_stay_inert(browser, tmp_path):
    """Folders under a fleet root named like script links become links to themselves: clicking
    runs nothing, and every link resolves inside the root."""
    from tests.fixtures.run_folders import write_run
    from workbench.fleet.collect import collect
    from workbench.fleet.dashboard import write_dashboard

    root = tmp_path / "root"
    for name in ("javascript:alert('fleet')", "vbscript:msgbox(1)", "JaVaScRiPt:alert(2)"):
        write_run(root / name / "night1", started="2026-11-01T02:00:00")
    page = write_dashboard(collect(root), root)
    seen = open_report(browser, page, click_links=True)
    assert seen["dialogs"] == [] and seen["errors"] == []
    assert len(seen["links"]) >= 3
    assert all(href.startswith("./") or href == "matrix.json" for href in seen["links"])
