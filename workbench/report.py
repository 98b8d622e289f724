"""Self-contained HTML reports: executed notebooks exported offline and sanitized, plus the index.

A report must open on an air-gapped machine, run no script and fetch nothing, show no secret, and
never let a string from a workload become markup. Rich output is sanitized where it enters the
page, after Markdown has been rendered, so what the sanitizer sees is what the browser gets; the
finished page is then parsed (tags, attributes and CSS) and refused if anything would still run
or fetch.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from html.parser import HTMLParser
from itertools import takewhile
from pathlib import Path
from string import Template
from typing import Any

import bleach
import nbformat
import tinycss2
from nbconvert import HTMLExporter
from traitlets.config import Config

from workbench.markup import cut_at_word
from workbench.redact import scrub_text
from workbench.results import LEAD, ResultLead, load_result, write_text_atomic
from workbench.scorecard import ATTENTION, Verdict
from workbench.summary import (
    NOT_ANSWERED,
    NOT_RUN,
    NotebookOutcome,
    OutcomeStatus,
    RunStatus,
    RunSummary,
    RunVerdict,
)

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
# Output types a report renders. Everything else (widget views, JavaScript, SVG, mermaid...) is
# dropped: each can run code or fetch from the network in a browser.
ALLOWED_MIMETYPES = ("text/plain", "text/html", "text/markdown", "image/png", "image/jpeg")
# Cells that only make sense in a live kernel: the widget panel and papermill's injected values.
REMOVED_CELL_TAGS = {"interactive-only"}
_ALLOWED_TAGS = [
    "a", "b", "blockquote", "br", "caption", "code", "del", "details", "div", "em", "h1", "h2",
    "h3", "h4", "h5", "h6", "hr", "i", "img", "li", "ol", "p", "pre", "s", "span", "strong",
    "sub", "summary", "sup", "table", "tbody", "td", "th", "thead", "tr", "ul",
]  # fmt: skip
_HEADINGS = {"h1", "h2", "h3", "h4", "h5", "h6"}
# The only links a reader can follow; everything else (javascript:, vbscript:, data:, file
# paths) loses its href and stays as text.
_CLICKABLE_SCHEMES = ("http://", "https://", "mailto:", "#")
# Images travel inside the page; a URL, even a relative one, would be fetched on load.
_EMBEDDED_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/=]*")
# Browsers drop ASCII whitespace and control characters inside a URL ("java\tscript:").
_URL_IGNORED = re.compile(r"[\x00-\x20\x7f]+")


def _normalized_url(value: str) -> str:
    return _URL_IGNORED.sub("", value).lower()


def _is_clickable(url: str) -> bool:
    return _normalized_url(url).startswith(_CLICKABLE_SCHEMES)


def _is_embedded_image(url: str) -> bool:
    return _EMBEDDED_IMAGE.fullmatch(_URL_IGNORED.sub("", url)) is not None


def _allowed_attribute(tag: str, name: str, value: str) -> bool:
    if name in ("class", "title"):
        return True
    if tag == "a" and name == "href":
        return _is_clickable(value)
    if tag == "img":
        return name == "alt" or (name == "src" and _is_embedded_image(value))
    # Heading anchors from the Markdown renderer.
    return tag in _HEADINGS and name == "id"


def sanitize_html(markup: str) -> str:
    """Rendered HTML from a notebook, reduced to inert tables, text, links and embedded images."""
    return bleach.clean(
        markup,
        tags=_ALLOWED_TAGS,
        attributes=_allowed_attribute,
        # bleach checks these schemes too; _allowed_attribute is the stricter rule per tag.
        protocols=["http", "https", "mailto", "data"],
        strip=True,
        strip_comments=True,
    )


# Attributes that make a browser fetch on load (or on submit) whatever element carries them.
_FETCHING_ATTRIBUTES = {
    "src", "srcset", "data", "poster", "background", "action", "formaction", "ping",
    "manifest", "longdesc", "lowsrc", "dynsrc", "codebase", "archive", "imagesrcset", "icon",
    "xlink:href", "profile",
}  # fmt: skip
# Elements that run code, embed another document or rewrite how the page resolves URLs.
_ACTIVE_TAGS = {
    "script",
    "iframe",
    "frame",
    "frameset",
    "object",
    "embed",
    "applet",
    "base",
    "portal",
}
# CSS functions whose string arguments are fetched.
_CSS_FETCHING_FUNCTIONS = {"url", "src", "image", "image-set", "-webkit-image-set", "cross-fade"}
_ACTIVE_SCHEMES = ("javascript:", "vbscript:", "data:")


def _css_fetches(css: str, nodes: list[Any] | None = None) -> list[str]:
    """Every URL that `css` (a stylesheet or a style attribute) would load.

    Tokenized rather than parsed as rules, so a style attribute, a stylesheet and a broken
    fragment are read the same way, with CSS escapes (`u\\72l(`) already decoded.
    """
    found = []
    for node in tinycss2.parse_component_value_list(css) if nodes is None else nodes:
        kind = getattr(node, "type", "")
        if kind == "at-keyword" and node.lower_value == "import":
            found.append("@import")
        elif kind == "url" and not _is_inert_reference(node.value):
            found.append(f"url({node.value})")
        elif kind == "function" and node.lower_name in _CSS_FETCHING_FUNCTIONS:
            found += [
                f"{node.lower_name}({arg.value!r})"
                for arg in node.arguments
                if arg.type == "string" and not _is_inert_reference(arg.value)
            ]
        for part in ("content", "arguments"):
            children = getattr(node, part, None)
            if children:
                found += _css_fetches(css, children)
    return found


def _is_inert_reference(url: str) -> bool:
    """A URL that loads nothing: embedded data or a fragment of this page."""
    normalized = _normalized_url(url)
    return normalized.startswith(("data:", "#")) or normalized == ""


class _PageAudit(HTMLParser):
    """Walks a finished page and notes what would fetch and what would run."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.fetches: list[str] = []
        self.scripts: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_style = tag == "style"
        if tag in _ACTIVE_TAGS:
            self.scripts.append(f"<{tag}>")
        for name, value in attrs:
            value = value or ""
            if name.startswith("on"):
                self.scripts.append(f"<{tag} {name}>")
            elif name == "style":
                self.fetches += _css_fetches(value)
            elif name == "href" and tag in ("a", "area"):
                if _normalized_url(value).startswith(_ACTIVE_SCHEMES):
                    self.scripts.append(f"<{tag} href={value[:60]!r}>")
            elif name == "href" and tag == "link":
                self.fetches.append(f"<link href={value[:60]!r}>")
            elif name in _FETCHING_ATTRIBUTES or name == "href":
                if not (tag == "img" and name == "src" and _is_embedded_image(value)):
                    if not _is_inert_reference(value) or name in ("srcset", "imagesrcset"):
                        self.fetches.append(f"<{tag} {name}={value[:60]!r}>")
            if tag == "meta" and name == "http-equiv" and value.lower() == "refresh":
                self.fetches.append("<meta http-equiv=refresh>")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self._in_style = False

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.fetches += _css_fetches(data)


def _audit(page: str) -> _PageAudit:
    audit = _PageAudit()
    audit.feed(page)
    audit.close()
    return audit


def network_references(page: str) -> list[str]:
    """Everything in `page` that would make a browser fetch: element attributes and CSS, parsed."""
    return _audit(page).fetches


def script_references(page: str) -> list[str]:
    """Everything in `page` that would run code: script-like elements, handlers, script URLs."""
    return _audit(page).scripts


def _as_text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _clean_output(output: dict[str, Any]) -> dict[str, Any] | None:
    kind = output.get("output_type")
    if kind == "stream":
        output["text"] = scrub_text(_as_text(output.get("text", "")))
        return output
    if kind == "error":
        output["evalue"] = scrub_text(str(output.get("evalue", "")))
        output["traceback"] = [scrub_text(line) for line in output.get("traceback", [])]
        return output
    if output.get("metadata", {}).get("workbench", {}).get("live_only"):
        return None  # shown in a live notebook only; the report's lead says it once, on top
    # HTML and Markdown are sanitized by the template (the `report_html` filter), after
    # Markdown rendering; here they are only scrubbed of secrets.
    data = {k: v for k, v in output.get("data", {}).items() if k in ALLOWED_MIMETYPES}
    for key in ("text/plain", "text/html", "text/markdown"):
        if key in data:
            data[key] = scrub_text(_as_text(data[key]))
    if not data:
        return None
    output["data"] = data
    return output


def _joined_streams(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent prints to the same stream as one output: one folded console log, not dozens."""
    joined: list[dict[str, Any]] = []
    for output in outputs:
        previous = joined[-1] if joined else None
        if (
            previous is not None
            and output.get("output_type") == "stream"
            and previous.get("output_type") == "stream"
            and previous.get("name") == output.get("name")
        ):
            previous["text"] = _as_text(previous["text"]) + _as_text(output["text"])
            continue
        joined.append(output)
    return joined


def prepare_for_report(nb: nbformat.NotebookNode, show_code: bool = False) -> nbformat.NotebookNode:
    """Drop live-only cells, widget state and unsafe outputs; scrub secrets from what is left.

    The title cell (tagged `report-title`) leaves the body too: the report's lead shows it. With
    code hidden, a heading with nothing under it leaves as well (notebook start's section, whose
    run table and validation banner the lead shows).
    """
    nb.metadata.pop("widgets", None)
    kept = []
    for cell in nb.cells:
        if (REMOVED_CELL_TAGS | {TITLE_TAG}) & set(cell.get("metadata", {}).get("tags", [])):
            continue
        cell.source = scrub_text(cell.source)
        if cell.cell_type == "code":
            cleaned = [o for o in map(_clean_output, cell.get("outputs", [])) if o is not None]
            cell.outputs = _joined_streams(cleaned)
        kept.append(cell)
    nb.cells = kept if show_code else _without_empty_sections(kept)
    return nb


def _without_empty_sections(cells: list[Any]) -> list[Any]:
    """The cells less each heading-only markdown cell over nothing to see: no prose cell right
    under it, and no output from the code cells up to the next markdown cell. With code hidden
    the reader would otherwise see a heading over an empty section."""

    def heading_only(cell: Any) -> bool:
        lines = [line for line in cell.source.splitlines() if line.strip()]
        return (
            cell.cell_type == "markdown"
            and bool(lines)
            and all(line.lstrip().startswith("#") for line in lines)
        )

    kept = []
    for index, cell in enumerate(cells):
        if heading_only(cell):
            after = cells[index + 1 :]
            section = list(takewhile(lambda c: c.cell_type != "markdown", after))
            prose_under = not section and bool(after) and not heading_only(after[0])
            if not prose_under and not any(c.get("outputs") for c in section):
                continue
        kept.append(cell)
    return kept


def _result_beside(notebook_path: Path) -> dict[str, Any] | None:
    """The notebook's result file, saved next to it by ctx.save; None when it never saved one."""
    try:
        return load_result(notebook_path.with_suffix(".json"))
    except (OSError, ValueError):
        return None


class UnsafeReport(Exception):
    """The finished page would still run code or fetch something; it is not written."""


def export_html(notebook_path: Path, html_path: Path, *, show_code: bool = False) -> Path:
    """Export an executed notebook to one offline HTML file (code hidden unless `show_code`)."""
    nb = nbformat.read(str(notebook_path), as_version=4)
    title = next(
        (c.source for c in nb.cells if TITLE_TAG in c.get("metadata", {}).get("tags", [])), ""
    )
    lead = lead_html(scrub_text(title), _result_beside(notebook_path))
    nb = prepare_for_report(nb, show_code)
    exporter = HTMLExporter(
        template_name="offline",
        extra_template_basedirs=[str(TEMPLATES_DIR)],
        exclude_input=not show_code,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        # The offline template runs rendered HTML and Markdown through `report_html`, whose
        # allow-list keeps the workbook's tables; nbconvert's own sanitizer would escape them.
        sanitize_html=False,
        # Pygments' colours for code cells (4.5 KB a page) only where code is shown.
        config=Config({"CSSHTMLHeaderPreprocessor": {"enabled": show_code}}),
    )
    exporter.register_filter("report_html", sanitize_html)
    resources = {"metadata": {"name": notebook_path.stem}, "report_lead": lead}
    page, _ = exporter.from_notebook_node(nb, resources=resources)
    page = scrub_text(page)
    audit = _audit(page)
    if audit.scripts or audit.fetches:
        found = (audit.scripts + audit.fetches)[0]
        raise UnsafeReport(f"{html_path.name} would still run or fetch {found}")
    write_text_atomic(html_path, page)
    return html_path


_STATUS_CLASS: dict[OutcomeStatus, str] = {
    "ok": "wb-ok",
    "not-run": "wb-not-run",
    "not-answered": "wb-not-run",
}


_VERDICT_SENTENCE: dict[RunStatus, str] = {
    "pass": "no notebook found anything that needs attention.",
    "attention": "nothing blocks the migration, but these need a look:",
    "blocker": "something blocks the migration:",
    "not run": "not every notebook ran, so the run has no migration verdict:",
}
# Notebook statuses as the index words them.
_STATUS_WORDS: dict[OutcomeStatus, str] = {"not-run": "not run", "not-answered": "not answered"}


def _verdict_cell(entry: NotebookOutcome) -> str:
    if entry.status == NOT_RUN:
        return "<td>not run</td>"
    if entry.status == NOT_ANSWERED:
        reason = html.escape(entry.error or "")
        return f'<td class="v-attention" title="{reason}">not answered</td>'
    if entry.unreadable_result is not None:
        return (
            f'<td class="v-blocker" title="{html.escape(entry.unreadable_result)}">unreadable</td>'
        )
    if entry.verdict is None:
        return "<td>not judged</td>"
    status = html.escape(entry.verdict.status)
    return f'<td class="v-{status}" title="{html.escape(entry.verdict.reason)}">{status}</td>'


def _seconds(value: float | None) -> str:
    return "not timed" if value is None else f"{value:.1f} s"


def _log_sentence(out_dir: Path) -> str:
    """Where every cell's output is: run.log when the run wrote one (a headless run), otherwise
    the reports themselves (copies stepped through in JupyterLab); never a link to nothing."""
    if (out_dir / "run.log").is_file():
        return 'every cell\'s output is in <a href="run.log">run.log</a>.'
    return "every cell's output is in the notebook copies and their reports (no run.log)."


def _index_row(entry: NotebookOutcome) -> str:
    """One notebook's line of the index: its report, status, verdict, time and headline (or
    where it failed, or why its result could not be read)."""
    esc = html.escape
    link = f'<a href="{esc(entry.html)}">{esc(entry.notebook)}</a>' if entry.html else None
    detail = entry.headline or entry.unreadable_result or ""
    if entry.status != "ok":
        where = f"cell {entry.failed_cell}: " if entry.failed_cell is not None else ""
        detail = f"{where}{entry.error or entry.status}"
    status = entry.status
    return (
        f'<tr class="{_STATUS_CLASS.get(status, "wb-fail")}"><td>{link or esc(entry.notebook)}'
        f"</td><td>{esc(_STATUS_WORDS.get(status, status))}</td>{_verdict_cell(entry)}"
        f"<td>{_seconds(entry.seconds)}</td><td>{esc(detail)}</td></tr>"
    )


def write_index(out_dir: Path, summary: RunSummary) -> Path:
    """`index.html`: one line per notebook with its status, linking its report."""
    esc = html.escape
    rows = [_index_row(entry) for entry in summary.notebooks]
    rows += [
        f'<tr class="wb-not-run"><td>{esc(name)}</td><td>not run</td><td>not run</td>'
        "<td>not timed</td><td>not part of this run (--only)</td></tr>"
        for name in summary.not_run
    ]
    verdict = summary.verdict or RunVerdict(ATTENTION)
    page = Template((TEMPLATES_DIR / "index.html").read_text(encoding="utf-8")).substitute(
        workload=esc(summary.workload),
        target=esc(summary.target),
        target_reason=esc(summary.target_reason),
        started_at=esc(summary.started_at),
        seconds=_seconds(summary.seconds),
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        validation=esc(summary.validation),
        verdict_status=esc(verdict.status.replace(" ", "-")),
        verdict_word=esc(verdict.status.upper()),
        verdict_sentence=esc(_VERDICT_SENTENCE[verdict.status]),
        verdict_reasons=(
            "<ul>" + "".join(f"<li>{esc(r)}</li>" for r in verdict.reasons) + "</ul>"
            if verdict.reasons
            else ""
        ),
        rows="\n".join(rows),
        log=_log_sentence(out_dir),
        unwritten="\n".join(
            f'<p class="unwritten">{esc(name)} was not written: {esc(reason)}.</p>'
            for name, reason in summary.unwritten.items()
        ),
    )
    path = out_dir / "index.html"
    write_text_atomic(path, scrub_text(page))
    return path


# The top of every report: the answer first, then what ran, then where the numbers come from.
#
# A reader who never opens a notebook sees, in the first screen, the notebook's question, its
# scorecard verdict and its headline (both read from the notebook's result file, so they are the
# ones `workbench compare` and the index use), then the target and why it was chosen, then the
# run's provenance: date, versions that change results, parameter values and a link to the index.
# Every string is escaped here; a workload's name or a parameter value never becomes markup.

# The cell whose heading and question open the report (the rest of that cell says how to run
# the notebook, which the provenance below covers).
TITLE_TAG = "report-title"
# Versions that change what a report measures, in the order a reader looks for them.
KEY_VERSIONS = ("workbench", "python", "torch", "torch-neuronx", "torch-xla", "neuronx-cc")
_BANNER = {"pass": "wb-ok", "attention": "wb-warn", "blocker": "wb-fail"}


def _esc(value: Any) -> str:
    return html.escape(str(value))


def title_and_question(source: str) -> tuple[str, str]:
    """The `# heading` and the bold question line of a notebook's title cell, as plain text."""
    heading, question = "", ""
    for line in source.splitlines():
        text = line.strip()
        if text.startswith("# ") and not heading:
            heading = text[2:].strip()
        elif text.startswith("**") and text.endswith("**") and not question:
            question = text.strip("*").strip()
    return heading, question


def _shown(value: Any) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return cut_at_word(text, 120)


def _lead(record: Mapping[str, Any]) -> ResultLead:
    """The headline and verdict of a result file, read by the reader every result shares."""
    try:
        return LEAD.read(record, str(record.get("notebook", "result")))
    except ValueError:  # an unreadable lead reads as no verdict, which the banner says
        return ResultLead()


def _verdict(verdict: Verdict | None) -> str:
    if verdict is None:
        return '<div class="wb-banner wb-warn">Not judged: this result has no verdict.</div>'
    return (
        f'<div class="wb-banner wb-verdict {_BANNER[verdict.status]}">'
        f'<span class="wb-word">{_esc(verdict.status.upper())}</span> {_esc(verdict.reason)}'
        f'<details class="wb-rule"><summary>the rule</summary>{_esc(verdict.rule)}</details></div>'
    )


def _what_ran(result: Mapping[str, Any]) -> str:
    target = result.get("target") or {}
    workload = result.get("workload") or {}
    rows = [("target", f"{target.get('name', 'unknown')} ({target.get('chosen_because', '')})")]
    if target.get("device"):
        rows.append(("device", target["device"]))
    if target.get("compiled_means"):
        rows.append(("compiled means", target["compiled_means"]))
    if workload:
        rows.append(("workload", f"{workload.get('name', '')}: {workload.get('description', '')}"))
    cache = result.get("compile_cache") or {}
    if cache.get("sentence"):
        wiring = f"; {cache['wiring']}" if cache.get("wiring") else ""
        rows.append(("compile cache", f"{cache['sentence']}{wiring}"))
    body = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in rows)
    validation = result.get("validation") or target.get("validation") or ""
    kind = "wb-ok" if target.get("is_trainium") else "wb-warn"
    banner = f'<div class="wb-banner {kind}">{_esc(validation)}</div>' if validation else ""
    return f'<h2>What ran</h2><table class="wb-table"><tbody>{body}</tbody></table>{banner}'


def _provenance(result: Mapping[str, Any]) -> str:
    versions = result.get("versions") or {}
    rows = [("date", result.get("created_at", "unknown"))]
    rows += [(name, versions.get(name, "not installed")) for name in KEY_VERSIONS]
    body = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in rows)
    params = result.get("parameters") or {}
    param_rows = "".join(
        f"<tr><th>{_esc(k)}</th><td>{_esc(_shown(v))}</td></tr>" for k, v in params.items()
    )
    # Folded: provenance answers "which run was this", not the notebook's question.
    return (
        f"<details><summary>Provenance: {_esc(rows[0][1])}, versions, parameter values "
        f'({len(params)})</summary><table class="wb-table"><tbody>{body}</tbody></table>'
        f'<table class="wb-table"><tbody>{param_rows}</tbody></table></details>'
    )


def lead_html(title_source: str, result: Mapping[str, Any] | None) -> str:
    """The report's opening section; `result` is the notebook's result file (None if the
    notebook stopped before saving one)."""
    heading, question = title_and_question(title_source)
    parts = [
        '<header class="wb-lead">',
        '<p class="wb-nav"><a href="index.html">&larr; all reports of this run (index)</a></p>',
    ]
    if heading:
        parts.append(f"<h1>{_esc(heading)}</h1>")
    if question:
        parts.append(f'<p class="wb-question">{_esc(question)}</p>')
    if result is None:
        parts.append(
            '<div class="wb-banner wb-fail">No result: the notebook stopped before it saved '
            "its result file; the cell that failed is shown below.</div>"
        )
    else:
        lead = _lead(result)
        parts.append(_verdict(lead.verdict))
        if lead.headline:
            parts.append(f'<p class="wb-headline">{_esc(lead.headline)}</p>')
        parts.append(_what_ran(result))
        parts.append(_provenance(result))
    parts.append("<h2>The evidence</h2></header>")
    return "\n".join(parts)
