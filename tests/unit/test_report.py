"""HTML export: offline, sanitized, secrets scrubbed, user strings escaped."""

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from workbench.report import (
    UnsafeReport,
    export_html,
    network_references,
    script_references,
    write_index,
)
from workbench.results import SCHEMA_VERSION
from workbench.summary import read_summary

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
        "schema_version": SCHEMA_VERSION,
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
    page = write_index(tmp_path, read_summary(summary, "summary.json")).read_text()
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


def _export_outputs(tmp_path, outputs, cells=()):
    nb = new_notebook()
    cell = new_code_cell("show()")
    cell.outputs = outputs
    nb.cells = [*cells, cell]
    nbformat.write(nb, tmp_path / "out.ipynb")
    return export_html(tmp_path / "out.ipynb", tmp_path / "out.html").read_text()


PIXEL = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


@pytest.mark.parametrize("where", ["output", "cell"])
def test_markdown_is_sanitized_after_it_is_rendered(tmp_path, where):
    markdown = (
        "[js](javascript:alert(1)) [case](JaVaScRiPt:alert(2)) [vb](vbscript:x) "
        "[data](data:text/html,hi) [docs](https://docs.example.com/x) [mail](mailto:a@b.example)"
        "\n\n![remote](//203.0.113.7/a.png) ![upper](HTTPS://203.0.113.7/b.png) "
        f"![rel](c.png) ![embedded](data:image/png;base64,{PIXEL})"
    )
    if where == "output":
        page = _export_outputs(
            tmp_path, [new_output("display_data", data={"text/markdown": markdown})]
        )
    else:
        page = _export_outputs(tmp_path, [], cells=[new_markdown_cell(markdown)])
    body = page.split("<body", 1)[1]
    assert 'href="https://docs.example.com/x"' in body and 'href="mailto:a@b.example"' in body
    for gone in ("javascript", "JaVaScRiPt", "vbscript", "data:text", "203.0.113.7", "c.png"):
        assert gone not in body, gone
    assert f'src="data:image/png;base64,{PIXEL}"' in body, "an embedded image is kept"
    assert network_references(page) == [] and script_references(page) == []


def test_text_that_looks_like_css_is_shown_not_refused(tmp_path):
    text = "Parses @import lines and url( patterns: background:url(//203.0.113.7/x)"
    page = _export_outputs(
        tmp_path,
        [
            new_output("stream", name="stdout", text=text),
            new_output("display_data", data={"text/html": f"<p>{text}</p>"}),
            new_output("display_data", data={"text/markdown": f"**{text}**"}),
        ],
    )
    assert page.count("Parses @import lines") == 3


def test_a_page_that_would_still_fetch_is_not_written(tmp_path, monkeypatch):
    """The parsed check behind the sanitizer: if sanitizing ever lets something through, the page
    is refused (and the runner says so) rather than written."""
    monkeypatch.setattr("workbench.report.sanitize_html", lambda markup: markup)
    with pytest.raises(UnsafeReport, match="out.html would still run or fetch"):
        _export_outputs(tmp_path, [new_output("display_data", data={"text/html": "<img src=//x>"})])
    assert not (tmp_path / "out.html").exists()


@pytest.mark.parametrize(
    "markup",
    [
        '<img src="//203.0.113.7/a.png">',
        '<img src="HTTPS://203.0.113.7/a.png">',
        '<img src="local.png">',
        '<img srcset="a.png 1x">',
        '<svg><image href="//203.0.113.7/a.png"/></svg>',
        '<video poster="//203.0.113.7/p.png"></video>',
        '<object data="x.swf"></object>',
        '<form action="//203.0.113.7/f"></form>',
        '<table background="//203.0.113.7/bg.png"></table>',
        '<link rel="icon" href="favicon.ico">',
        '<meta http-equiv="Refresh" content="0;url=//203.0.113.7/">',
        '<div style="background:url(//203.0.113.7/a.png)">',
        '<div style="background:u\\72l(//203.0.113.7/a.png)">',
        "<div style=\"background-image:image-set('a.png' 1x)\">",
        "<style>@import 'x.css';</style>",
        "<style>@IMPORT url(x.css);</style>",
        "<style>@font-face{src:url('font.woff')}</style>",
        "<style>a{background:URL( 'http://203.0.113.7/a' )}</style>",
    ],
)
def test_fetch_check_parses_attributes_and_css(markup):
    assert network_references(markup), markup


@pytest.mark.parametrize(
    "markup",
    [
        '<a href="https://docs.example.com">docs</a>',
        '<a href="summary.json">summary</a>',
        f'<img src="data:image/png;base64,{PIXEL}">',
        "<p>@import x; url(//203.0.113.7/x) <code>src=//x</code></p>",
        "<style>.a{background:url(data:image/png;base64,AAAA)} .b{color:red}</style>",
        '<svg><use href="#icon"/></svg>',
    ],
)
def test_fetch_check_ignores_text_embedded_data_and_links(markup):
    assert network_references(markup) == [], markup


@pytest.mark.parametrize(
    ("markup", "expected"),
    [
        ("<script>x</script>", True),
        ('<b onclick="x()">b</b>', True),
        ('<a href=" javascript:x()">a</a>', True),
        ('<a href="VBScript:x">a</a>', True),
        ('<a href="data:text/html,x">a</a>', True),
        ('<iframe src="#"></iframe>', True),
        ('<a href="https://x.example">a</a>', False),
        ("<p>onclick= javascript: text</p>", False),
    ],
)
def test_script_check(markup, expected):
    assert bool(script_references(markup)) is expected


def test_index_shows_what_could_not_be_written(tmp_path):
    summary = {
        "schema_version": SCHEMA_VERSION,
        "workload": "w",
        "target": "cpu",
        "started_at": "2026-12-02T12:00:00+00:00",
        "seconds": 3.0,
        "validation": "validated on cpu",
        "notebooks": [
            {
                "notebook": "01_baseline",
                "status": "report-failed",
                "seconds": 2.0,
                "html": None,
                "error": "report not written (No space left on device)",
                "failed_cell": None,
            }
        ],
        "unwritten": {"run.log": "No space left on device"},
    }
    page = write_index(tmp_path, read_summary(summary, "summary.json")).read_text()
    assert 'class="wb-fail"' in page and "report-failed" in page
    assert "report not written (No space left on device)" in page
    assert "run.log was not written: No space left on device." in page


def _led_notebook(tmp_path, *, with_result: bool = True):
    """A notebook shaped like the workbook's, with its result file beside it (or none)."""
    nb = new_notebook()
    title = new_markdown_cell("# 09 · Sample\n\n**Does the <sample> run?**")
    title.metadata["tags"] = ["report-title"]
    how = new_markdown_cell("Interactive: set values in the panel below, then run the cells.")
    how.metadata["tags"] = ["interactive-only"]
    cell = new_code_cell("work()")
    cell.outputs = [
        new_output("stream", name="stdout", text="phase 1 done\n"),
        new_output("stream", name="stdout", text="phase 2 done\n"),
        new_output("display_data", data={"text/html": "<p>EVIDENCE-TABLE</p>", "text/plain": ""}),
    ]
    save = new_code_cell("ctx.save(data)")
    save.outputs = [
        new_output(
            "display_data",
            data={"text/html": '<div class="wb-banner">LIVE-VERDICT</div>', "text/plain": ""},
            metadata={"workbench": {"live_only": True}},
        )
    ]
    nb.cells = [title, how, cell, save]
    path = tmp_path / "09_sample.ipynb"
    nbformat.write(nb, path)
    if with_result:
        record = {
            "schema_version": 1,
            "notebook": "09_sample",
            "created_at": "2026-12-02T10:00:00+00:00",
            "target": {
                "name": "cpu",
                "chosen_because": "auto: <no device>",
                "is_trainium": False,
                "device": "cpu",
            },
            "workload": {"name": "<b>mlp</b>", "description": "tiny"},
            "compile_cache": {"sentence": "compile cache: /c/<v>", "wiring": "Inductor in /c"},
            "validation": "validated on cpu: this is not a Trainium validation.",
            "parameters": {"steady_steps": 7, "note": "<script>x</script>"},
            "versions": {"workbench": "0.1.0", "torch": "2.13.0", "torch-xla": "2.9.0"},
            "data": {
                "headline": "HEADLINE <i>sentence</i>",
                "verdict": {"status": "attention", "reason": "noisy <b>", "rule": "RULE-TEXT"},
            },
        }
        (tmp_path / "09_sample.json").write_text(json.dumps(record))
    return path


def test_report_leads_with_verdict_headline_what_ran_and_provenance(tmp_path):
    path = _led_notebook(tmp_path)
    page = export_html(path, path.with_suffix(".html")).read_text()
    body = page.split("<main>", 1)[1]
    order = [
        "09 · Sample",
        "ATTENTION",
        "noisy &lt;b&gt;",
        "HEADLINE &lt;i&gt;sentence&lt;/i&gt;",
        "What ran",
        "auto: &lt;no device&gt;",
        "compile cache: /c/&lt;v&gt;; Inductor in /c",
        "Provenance",
        "2026-12-02T10:00:00+00:00",
        "torch-xla",
        "EVIDENCE-TABLE",
    ]
    positions = [body.index(text) for text in order]
    assert positions == sorted(positions), list(zip(order, positions, strict=True))
    assert '<a href="index.html">' in body
    assert "&lt;script&gt;x&lt;/script&gt;" in body and "<script" not in page
    assert "torch-neuronx</th><td>not installed" in body
    assert body.count("# 09") == 0 and body.count("Does the &lt;sample&gt; run?") == 1
    assert "set values in the panel" not in page
    assert "LIVE-VERDICT" not in page, "the live banner gives way to the lead's verdict"
    assert body.count("noisy &lt;b&gt;") == 1, "the verdict is said once"
    assert "<summary>the rule</summary>RULE-TEXT</details>" in body, "its rule folded under it"
    assert body.count('<details class="wb-log') == 1, "adjacent prints are one folded log"
    assert body.index("phase 2 done") > body.index("<summary>console output</summary>")
    assert network_references(page) == [] and script_references(page) == []
    assert len(page.encode()) < 20_000, "only the rules the report uses are inlined"


def test_report_without_a_result_says_so_on_top(tmp_path):
    path = _led_notebook(tmp_path, with_result=False)
    page = export_html(path, path.with_suffix(".html")).read_text()
    body = page.split("<main>", 1)[1]
    assert body.index("No result: the notebook stopped") < body.index("EVIDENCE-TABLE")


def test_a_figure_is_embedded_as_a_palette_png_that_keeps_its_pixels_and_loses_bytes():
    import io

    from matplotlib.figure import Figure
    from PIL import Image

    from workbench.markup import FIGURE_DPI, figure_png, figure_png_base64

    figure = Figure(figsize=(8, 3))
    axes = figure.add_subplot()
    for shift in range(4):
        axes.plot(
            [i * 0.1 for i in range(200)], [((i + shift * 7) % 23) ** 0.5 for i in range(200)]
        )
    rgba = io.BytesIO()
    figure.savefig(rgba, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
    palette = figure_png(figure)
    shown, original = Image.open(io.BytesIO(palette)), Image.open(rgba)
    assert shown.mode == "P" and shown.size == original.size
    assert len(palette) < 0.6 * len(rgba.getvalue())
    # Colour for colour, no pixel drifts far: the quantized image is the same picture.
    pixels = zip(shown.convert("RGB").tobytes(), original.convert("RGB").tobytes(), strict=True)
    diff = sorted(abs(a - b) for a, b in pixels)  # 256 colours: mean 1.5, 99.9% <= 15 here
    assert sum(diff) / len(diff) < 2.5 and diff[int(len(diff) * 0.999)] <= 24  # 32 fail both
    assert figure_png_base64(Figure()) is None  # nothing drawn: Jupyter shows nothing


def test_a_heading_over_nothing_to_see_leaves_the_report_and_one_over_content_stays(tmp_path):
    def executed(source, *texts):
        cell = new_code_cell(source)
        cell.outputs = [new_output("stream", name="stdout", text=t) for t in texts]
        return cell

    nb = new_notebook()
    nb.cells = [
        new_markdown_cell("## Where does this run?"),  # start's table moved to the lead
        executed("ctx = context.start()"),
        new_markdown_cell("## What does it measure?"),
        executed("run()", "MEASURED-OUTPUT\n"),
        new_markdown_cell("## Why this rule?"),
        new_markdown_cell("PROSE under the heading, no code."),
        new_markdown_cell("## Nothing after this"),
    ]
    path = tmp_path / "01_baseline.ipynb"
    nbformat.write(nb, path)
    hidden = export_html(path, tmp_path / "hidden.html").read_text()
    assert "Where does this run?" not in hidden and "Nothing after this" not in hidden
    assert "What does it measure?" in hidden and "MEASURED-OUTPUT" in hidden
    assert "Why this rule?" in hidden and "PROSE under the heading" in hidden
    # With the code shown, every section has something under it: nothing leaves.
    shown = export_html(path, tmp_path / "shown.html", show_code=True).read_text()
    assert "Where does this run?" in shown and "Nothing after this" in shown
