"""Self-contained HTML reports: executed notebooks exported offline and sanitized, plus the index.

A report must open on an air-gapped machine, run no script and fetch nothing, show no secret, and
never let a string from a workload become markup.
"""

from __future__ import annotations

import html
import re
from datetime import datetime, timezone
from pathlib import Path
from string import Template
from typing import Any

import bleach
import nbformat
from nbconvert import HTMLExporter

from workbench.redact import scrub_text
from workbench.results import write_text_atomic

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
# Output types a report renders. Everything else (widget views, JavaScript, SVG, mermaid...) is
# dropped: each can run code or fetch from the network in a browser.
ALLOWED_MIMETYPES = ("text/plain", "text/html", "text/markdown", "image/png", "image/jpeg")
# Cells that only make sense in a live kernel: the widget panel and papermill's injected values.
REMOVED_CELL_TAGS = {"interactive-only"}
_ALLOWED_TAGS = [
    "a", "b", "br", "caption", "code", "details", "div", "em", "h1", "h2", "h3", "h4", "i",
    "li", "ol", "p", "pre", "span", "strong", "summary", "table", "tbody", "td", "th",
    "thead", "tr", "ul",
]  # fmt: skip
_ALLOWED_ATTRIBUTES = {"*": ["class", "title"], "a": ["href"]}
_NETWORK_REFERENCE = re.compile(
    r"""<(?:script|link|img|iframe|source|video|audio|embed|object)\b[^>]*?"""
    r"""(?:src|href|data)\s*=\s*["']?\s*(?:https?:)?//""",
    re.IGNORECASE,
)
_CSS_NETWORK_REFERENCE = re.compile(r"""(?:url\(\s*["']?\s*(?:https?:)?//|@import)""", re.I)


def network_references(page: str) -> list[str]:
    """Everything in `page` that would make a browser fetch from a network address."""
    found = [m.group(0) for m in _NETWORK_REFERENCE.finditer(page)]
    found += [m.group(0) for m in _CSS_NETWORK_REFERENCE.finditer(page)]
    return found


def _sanitize_markup(markup: str) -> str:
    return bleach.clean(
        markup,
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        protocols=["http", "https", "mailto"],
        strip=True,
    )


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
    data = {k: v for k, v in output.get("data", {}).items() if k in ALLOWED_MIMETYPES}
    for key in ("text/plain", "text/html", "text/markdown"):
        if key in data:
            text = scrub_text(_as_text(data[key]))
            data[key] = _sanitize_markup(text) if key != "text/plain" else text
    if not data:
        return None
    output["data"] = data
    return output


def prepare_for_report(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop live-only cells, widget state and unsafe outputs; scrub secrets from what is left."""
    nb.metadata.pop("widgets", None)
    kept = []
    for cell in nb.cells:
        if REMOVED_CELL_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        if cell.cell_type == "code":
            cell.source = scrub_text(cell.source)
            cell.outputs = [o for o in map(_clean_output, cell.get("outputs", [])) if o is not None]
        kept.append(cell)
    nb.cells = kept
    return nb


def export_html(notebook_path: Path, html_path: Path, *, show_code: bool = False) -> Path:
    """Export an executed notebook to one offline HTML file (code hidden unless `show_code`)."""
    nb = prepare_for_report(nbformat.read(str(notebook_path), as_version=4))
    exporter = HTMLExporter(
        template_name="offline",
        extra_template_basedirs=[str(TEMPLATES_DIR)],
        exclude_input=not show_code,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        # Outputs were sanitized above with a table-friendly allow-list; nbconvert's own
        # sanitizer would escape the tables the workbook shows.
        sanitize_html=False,
    )
    page, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": notebook_path.stem}})
    page = scrub_text(page)
    leaks = network_references(page)
    if leaks:
        raise RuntimeError(f"{html_path.name} would fetch from the network: {leaks[0]!r}")
    write_text_atomic(html_path, page)
    return html_path


_STATUS_CLASS = {"ok": "wb-ok", "failed": "wb-fail", "timeout": "wb-fail", "kernel-died": "wb-fail"}


_VERDICT_SENTENCE = {
    "pass": "no notebook found anything that needs attention.",
    "attention": "nothing blocks the migration, but these need a look:",
    "blocker": "something blocks the migration:",
}


def _verdict_cell(verdict: dict[str, Any] | None) -> str:
    if not verdict:
        return "<td>not judged</td>"
    status = html.escape(verdict["status"])
    return f'<td class="v-{status}" title="{html.escape(verdict.get("reason", ""))}">{status}</td>'


def write_index(out_dir: Path, summary: dict[str, Any]) -> Path:
    """`index.html`: one line per notebook with its status, linking its report."""
    esc = html.escape
    rows = []
    for nb in summary["notebooks"]:
        link = (
            f'<a href="{esc(nb["html"])}">{esc(nb["notebook"])}</a>'
            if nb.get("html")
            else esc(nb["notebook"])
        )
        detail = nb.get("headline") or ""
        if nb["status"] != "ok":
            where = f"cell {nb['failed_cell']}: " if nb.get("failed_cell") is not None else ""
            detail = f"{where}{nb.get('error') or nb['status']}"
        rows.append(
            f'<tr class="{_STATUS_CLASS.get(nb["status"], "")}"><td>{link}</td>'
            f"<td>{esc(nb['status'])}</td>{_verdict_cell(nb.get('verdict'))}"
            f"<td>{nb['seconds']:.1f} s</td><td>{esc(detail)}</td></tr>"
        )
    verdict = summary.get("verdict") or {"status": "attention", "reasons": []}
    reasons = verdict.get("reasons") or []
    page = Template((TEMPLATES_DIR / "index.html").read_text(encoding="utf-8")).substitute(
        workload=esc(summary["workload"]),
        target=esc(summary["target"]),
        target_reason=esc(summary.get("target_reason", "")),
        started_at=esc(summary["started_at"]),
        seconds=f"{summary['seconds']:.1f}",
        generated=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        validation=esc(summary["validation"]),
        verdict_status=esc(verdict["status"]),
        verdict_word=esc(verdict["status"].upper()),
        verdict_sentence=esc(_VERDICT_SENTENCE.get(verdict["status"], "")),
        verdict_reasons=(
            "<ul>" + "".join(f"<li>{esc(r)}</li>" for r in reasons) + "</ul>" if reasons else ""
        ),
        rows="\n".join(rows),
    )
    path = out_dir / "index.html"
    write_text_atomic(path, scrub_text(page))
    return path
