"""What notebooks show: escaped HTML tables and banners, each with a plain-text fallback, and
figures as the PNG the reports embed.

Every string passes through html.escape here, so names and error messages that come from a
workload or a user can never become markup in a report.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.redact import scrub_text

if TYPE_CHECKING:  # matplotlib is imported only by code that draws
    from matplotlib.figure import Figure

BANNER_KINDS = ("info", "ok", "warn", "fail")
# The look of banners and tables: inlined by the report template, shown live by the notebook.
STYLESHEET = Path(__file__).resolve().parent / "templates" / "offline" / "workbench.css"
# Display metadata of outputs that only a live notebook shows; reports drop them.
LIVE_ONLY = {"workbench": {"live_only": True}}
# The report's page is 1100 px wide: the workbook's figures are 7.5-14 inches wide, so at 100 dpi
# most were drawn wider than the page and shrunk by the browser. At 80 dpi a 13-inch figure is
# shown at its own size, ticks at 8-10 px, for two thirds of the pixels (with zlib's best, the
# figures of a seed-mlp run's reports went from 356 KB to 263 KB). SVG would balloon the page for
# dense plots.
FIGURE_DPI = 80
PALETTE_COLOURS = 256


@cache
def stylesheet() -> str:
    return STYLESHEET.read_text(encoding="utf-8")


class Rich:
    """An object Jupyter renders as HTML, with text for logs and text-only frontends."""

    def __init__(self, html_text: str, plain: str) -> None:
        self.html_text = html_text
        self.plain = plain

    def _repr_html_(self) -> str:
        return self.html_text

    def __repr__(self) -> str:
        return self.plain


def cell_text(value: Any) -> str:
    """A value as a table cell shows it: floats to 4 significant digits, None as empty."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


def escaped(value: Any) -> str:
    """`value` as page text: secrets masked (redact.scrub_text), then HTML-escaped; for pages
    built as strings rather than from markup.table and markup.banner."""
    return html.escape(scrub_text(str(value)))


def table(
    rows: Iterable[Mapping[str, Any] | Sequence[Any]],
    headers: Sequence[str] | None = None,
    caption: str = "",
) -> Rich:
    """A table from dicts (keys become headers) or sequences (with `headers`)."""
    rows = list(rows)
    if headers is None:
        headers = list(rows[0].keys()) if rows and isinstance(rows[0], Mapping) else []
    cells = [
        [cell_text(r.get(h)) for h in headers]
        if isinstance(r, Mapping)
        else [cell_text(v) for v in r]
        for r in rows
    ]
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    thead = f"<thead><tr>{head}</tr></thead>" if any(headers) else ""
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in cells
    )
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    markup = f'<table class="wb-table">{cap}{thead}<tbody>{body}</tbody></table>'
    widths = [max([len(str(h))] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    lines = [caption] if caption else []
    if any(headers):
        lines.append("  ".join(str(h).ljust(w) for h, w in zip(headers, widths, strict=True)))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return Rich(markup, "\n".join(lines))


def collapsed(summary: str, parts: Sequence[Rich]) -> Rich:
    """`parts` folded under a one-line summary (open in a browser with a click)."""
    inner = "".join(part.html_text for part in parts)
    markup = f"<details><summary>{html.escape(summary)}</summary>{inner}</details>"
    return Rich(markup, "\n\n".join([summary, *(part.plain for part in parts)]))


def key_values(pairs: Mapping[str, Any], caption: str = "") -> Rich:
    return table(([k, v] for k, v in pairs.items()), headers=["", ""], caption=caption)


def banner(text: str, kind: str = "info") -> Rich:
    """A one-sentence coloured statement: verdicts and what a run does not validate."""
    if kind not in BANNER_KINDS:
        raise ValueError(f"banner kind must be one of {BANNER_KINDS}")
    return Rich(f'<div class="wb-banner wb-{kind}">{html.escape(text)}</div>', f"[{kind}] {text}")


# The banner colour of each scorecard status, wherever a verdict or its headline is shown.
VERDICT_BANNER = {"pass": "ok", "attention": "warn", "blocker": "fail"}


def verdict_banner(verdict: Any) -> Rich:
    """The notebook's scorecard verdict (a workbench.scorecard.Verdict), with the rule it used."""
    text = f"Verdict: {verdict.status.upper()}: {verdict.reason}. Rule: {verdict.rule}."
    return banner(text, VERDICT_BANNER[verdict.status])


def seconds_cell(value: float | None) -> str:
    """A duration for a table cell ("1.23 ms"), "n/a" where nothing was measured."""
    from workbench.timing import format_seconds  # timing imports psutil: only when a cell asks

    return "n/a" if value is None else format_seconds(value)


def mib_cell(value: int | None) -> str:
    """Bytes for a table cell in MiB ("12.3 MiB"), "n/a" where nothing was measured."""
    return "n/a" if value is None else f"{value / 2**20:.1f} MiB"


ELLIPSIS = "…"


def cut_at_word(text: str, limit: int) -> str:
    """`text` within `limit` characters, cut at the last word boundary with an ellipsis: a
    headline or an error is never cut mid-word (one longer word is cut, ellipsis and all)."""
    if len(text) <= limit:
        return text
    room = text[: limit - len(ELLIPSIS) + 1]
    boundary = room.rfind(" ")
    kept = room[:boundary] if boundary > 0 else room[:-1]
    return kept.rstrip(" ,;:.-") + ELLIPSIS


NAMED_AT_MOST = 5


def named_list(names: list[str], at_most: int = NAMED_AT_MOST) -> str:
    """'a, b, c' or 'a, b, c, d, e and 3 more': a list is never cut without saying so."""
    shown = ", ".join(names[:at_most])
    rest = len(names) - at_most
    return f"{shown} and {rest} more" if rest > 0 else shown


def figure_png(figure: Figure, dpi: int = FIGURE_DPI) -> bytes:
    """The figure as a palette PNG. Plots are a few flat colours and their anti-aliased edges,
    so 256 colours look the same as matplotlib's RGBA PNG at about a third of its bytes (01's
    three figures: 148 KB as RGBA, 50 KB as a palette), which is what a shared report weighs."""
    from PIL import Image

    rendered = io.BytesIO()
    figure.savefig(rendered, format="png", dpi=dpi, bbox_inches="tight")
    rendered.seek(0)
    image = Image.open(rendered)
    flat = Image.new("RGB", image.size, "white")  # transparency becomes the page's white
    flat.paste(image, mask=image.getchannel("A") if image.mode == "RGBA" else None)
    palette = flat.quantize(colors=PALETTE_COLOURS, method=Image.Quantize.FASTOCTREE)
    out = io.BytesIO()
    palette.save(out, format="PNG", optimize=True)  # zlib's best: a tenth fewer bytes, same pixels
    return out.getvalue()


def figure_png_base64(figure: Figure, dpi: int = FIGURE_DPI) -> str | None:
    """What Jupyter's image/png formatter returns; None for a figure with nothing drawn."""
    if not figure.axes:
        return None
    return base64.b64encode(figure_png(figure, dpi)).decode("ascii")
