"""HTML export: offline, sanitized, secrets scrubbed, user strings escaped."""

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from workbench.report import export_html, network_references, write_index

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzEXAMPLEKEY"


@pytest.fixture()
def hostile_notebook(tmp_path, monkeypatch):
    """An executed notebook whose outputs try every way to run code, fetch, or leak."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    nb = new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    panel = new_code_cell("control_panel('00_environment', globals())")
    panel.metadata["tags"] = ["skip-execution", "interactive-only"]
    panel.outputs = [new_output("display_data", data={"text/plain": "PANEL-OUTPUT"})]
    cell = new_code_cell("show_hostile_outputs()")
    cell.outputs = [
        new_output(
            "display_data",
            data={
                "text/html": (
                    '<table class="wb-table"><tr><td>model &lt;b&gt;x&lt;/b&gt;</td></tr></table>'
                    '<script>alert(1)</script><img src="https://example.com/p.png">'
                    '<a href="https://docs.example.com/x">docs</a>'
                    '<div onclick="steal()">kept text</div>'
                ),
                "text/plain": "table",
            },
        ),
        new_output("display_data", data={"application/javascript": "alert(2)"}),
        new_output(
            "display_data",
            data={"application/vnd.jupyter.widget-view+json": {"model_id": "x"}, "text/plain": "w"},
        ),
        new_output("display_data", data={"image/svg+xml": "<svg onload='x()'></svg>"}),
        new_output("display_data", data={"text/vnd.mermaid": "</pre><img src=x onerror=alert(9)>"}),
        new_output("stream", name="stdout", text=f"key is {SECRET}\n"),
        new_output(
            "error", ename="RuntimeError", evalue=f"bad {SECRET}", traceback=[f"tb {SECRET}"]
        ),
    ]
    nb.cells = [new_markdown_cell("# Title"), panel, cell]
    path = tmp_path / "01_baseline.ipynb"
    nbformat.write(nb, path)
    return path


def test_export_is_offline_sanitized_and_scrubbed(hostile_notebook):
    html_path = export_html(hostile_notebook, hostile_notebook.with_suffix(".html"))
    page = html_path.read_text()
    assert network_references(page) == []
    assert "<script" not in page.lower()
    # A stripped <script> leaves its body as inert text; no tag or handler may survive.
    assert "onclick" not in page and "onerror" not in page and "alert(2)" not in page
    assert "svg" not in page.split("<body", 1)[1].lower()
    assert "PANEL-OUTPUT" not in page, "interactive-only cells are dropped"
    assert SECRET not in page
    assert "[redacted]" in page
    assert "model &lt;b&gt;x&lt;/b&gt;" in page, "escaped user text stays escaped"
    assert '<table class="wb-table">' in page, "workbook tables survive sanitizing"
    assert "kept text" in page
    assert "control_panel" not in page, "code is hidden by default"


def test_show_code_option(hostile_notebook):
    hidden = export_html(hostile_notebook, hostile_notebook.with_suffix(".html")).read_text()
    shown = export_html(hostile_notebook, hostile_notebook.with_suffix(".html"), show_code=True)
    assert "show_hostile_outputs" not in hidden and "show_hostile_outputs" in shown.read_text()


def test_network_reference_detector_catches_the_usual_forms():
    assert network_references('<script src="https://cdn.x/require.js"></script>')
    assert network_references("<link rel=stylesheet href='//fonts.x/css'>")
    assert network_references('<div style="background:url(http://x/y.png)">')
    assert network_references("<style>@import 'x.css';</style>")
    assert not network_references('<a href="https://docs.example.com">docs</a>')
    assert not network_references('<img src="data:image/png;base64,AAAA">')


def test_index_escapes_names_and_errors(tmp_path):
    summary = {
        "workload": "<script>alert(1)</script>",
        "target": "cpu",
        "started_at": "2026-12-02T12:00:00+00:00",
        "seconds": 3.0,
        "validation": "validated on cpu: this is not a Trainium validation.",
        "notebooks": [
            {
                "notebook": "00_environment",
                "status": "ok",
                "seconds": 1.0,
                "html": "00_environment.html",
                "headline": "torch 2.13",
            },
            {
                "notebook": "01_baseline",
                "status": "failed",
                "seconds": 2.0,
                "html": "01_baseline.html",
                "error": "ValueError: bad <img src=x onerror=y>",
                "failed_cell": 7,
            },
        ],
    }
    page = write_index(tmp_path, summary).read_text()
    assert "<script>alert" not in page and "<img" not in page
    assert "&lt;script&gt;" in page and "cell 7: ValueError" in page
    assert 'href="00_environment.html"' in page
    assert network_references(page) == []
    json.dumps(summary)


def test_images_embed_their_own_data_never_a_file_reference(tmp_path):
    nb = new_notebook()
    cell = new_code_cell("plot()")
    pixel = (  # a 1x1 PNG
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    cell.outputs = [
        new_output(
            "display_data",
            data={"image/png": pixel, "text/plain": "<Figure size 640x480 with 1 Axes>"},
            metadata={"filenames": {"image/png": "https://example.com/leak.png"}},
        )
    ]
    nb.cells = [cell]
    nbformat.write(nb, tmp_path / "fig.ipynb")
    page = export_html(tmp_path / "fig.ipynb", tmp_path / "fig.html").read_text()
    assert f'src="data:image/png;base64,{pixel}"' in page
    assert 'alt="&lt;Figure size 640x480 with 1 Axes&gt;"' in page
    assert "leak.png" not in page
