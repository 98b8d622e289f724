"""ROOT/index.html and ROOT/matrix.json: which models are ready on which target, which regressed,
and why. Offline and escaped like every report: no script, nothing fetched."""

from __future__ import annotations

import html
import os
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from workbench.fleet.collect import COMPLETE, ItemRow
from workbench.redact import scrub_text
from workbench.results import write_json_atomic, write_text_atomic
from workbench.scorecard import ATTENTION, BLOCKER, STATUSES, worst

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #1f2328; }
table { border-collapse: collapse; }
td, th { border: 1px solid #d0d7de; padding: 0.35em 0.7em; text-align: left; vertical-align: top; }
td.pass { color: #2e8b3a; font-weight: 600; }
td.attention { color: #9a6b00; font-weight: 600; }
.verdict-pass { border-left-color: #2e8b3a; }
.verdict-attention { border-left-color: #9a6b00; }
.verdict-blocker { border-left-color: #c62828; }
ul.headlines { margin: 0; padding-left: 1.1em; }
td.blocker, td.regressed, td.incomplete, td.missing { color: #c62828; font-weight: 600; }
.summary { padding: 0.6em 1em; border-left: 8px solid #4a6fa5; background: #eef3fa; }
"""


def _e(value: Any) -> str:
    return html.escape(scrub_text("" if value is None else str(value)))


def _link(href: str | None, text: str) -> str:
    return f'<a href="{_e(relative_href(href))}">{_e(text)}</a>' if href else _e(text)


def relative_href(path: str) -> str:
    """A link to a file inside the fleet root: each segment percent-encoded and the whole path
    begun with "./", so no folder name ("javascript:alert(1)") can be read as a scheme, and a
    path that climbs out of the root is refused."""
    segments = path.replace(os.sep, "/").split("/")
    if path.startswith("/") or ".." in segments:
        raise ValueError(f"{path!r} is not a path inside the fleet root")
    return "./" + "/".join(quote(segment, safe="") for segment in segments)


_VERDICT_RULE = (
    "the worst item's verdict; an item that regressed against its earlier runs is at least "
    "attention, and one without a complete run is a blocker"
)


def dashboard_data(rows: list[ItemRow]) -> dict[str, Any]:
    ready = [r for r in rows if r.state == COMPLETE and r.verdict == "pass"]
    regressed = [r for r in rows if r.regressions]
    not_done = [r for r in rows if r.state != COMPLETE]
    verdicts = [r.verdict for r in rows if r.verdict in STATUSES]
    if regressed:
        verdicts.append(ATTENTION)
    return {
        "headline": (
            f"{len(rows)} item(s): {len(ready)} pass, {len(regressed)} regressed, "
            f"{len(not_done)} without a complete run"
        ),
        "verdict": BLOCKER if not_done else worst(verdicts),
        "verdict_rule": _VERDICT_RULE,
        "items": [asdict(r) for r in rows],
    }


def render(rows: list[ItemRow], root: Path) -> str:
    data = dashboard_data(rows)
    body = []
    for row in rows:
        state = row.state if row.state != COMPLETE else (row.verdict or "not judged")
        report = f"{row.run}/index.html" if row.run else None
        change = "regressed" if row.regressions else ""
        headlines = "".join(f"<li>{_e(line)}</li>" for line in row.headlines)
        body.append(
            "<tr>"
            f"<td>{_e(row.index if row.index is not None else '')}</td>"
            f"<td>{_link(report, row.name)}</td>"
            f"<td>{_e(row.workload)}</td><td>{_e(row.target)}</td>"
            f'<td class="{_e(state)}">{_e(state)}</td>'
            f"<td>{_e('; '.join(row.reasons))}</td>"
            f'<td><ul class="headlines">{headlines}</ul></td>'
            f'<td class="{change}">{_link(row.comparison, row.change)}</td>'
            f"<td>{_e(row.started_at)}</td><td>{_e(row.runs)}</td>"
            f"<td>{_e(', '.join(row.incomplete))}</td>"
            "</tr>"
        )
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Workbench matrix: {_e(root.name)}</title>
<style>{_STYLE}</style></head><body>
<h1>Migration matrix</h1>
<p class="summary verdict-{_e(data["verdict"])}"><strong>Fleet verdict: \
{_e(data["verdict"])}</strong> ({_e(data["verdict_rule"])}). {_e(data["headline"])}.</p>
<table><thead><tr><th>#</th><th>item (latest report)</th><th>workload</th><th>target</th>
<th>verdict</th><th>why</th><th>what its latest run found</th>
<th>change against its earlier runs</th><th>latest run</th><th>runs</th>
<th>incomplete run folders</th></tr></thead>
<tbody>{"".join(body)}</tbody></table>
<p>Machine-readable: <a href="matrix.json">matrix.json</a>. Generated {generated}.</p>
</body></html>
"""


def write_dashboard(rows: list[ItemRow], root: Path) -> Path:
    write_json_atomic(root / "matrix.json", dashboard_data(rows))
    return write_text_atomic(root / "index.html", render(rows, root))
