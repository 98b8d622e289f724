"""The top of every report: the answer first, then what ran, then where the numbers come from.

A reader who never opens a notebook sees, in the first screen, the notebook's question, its
scorecard verdict and its headline (both read from the notebook's result file, so they are the
ones `workbench compare` and the index use), then the target and why it was chosen, then the
run's provenance: date, versions that change results, parameter values and a link to the index.
Every string is escaped here; a workload's name or a parameter value never becomes markup.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from workbench.scorecard import verdict_from_data

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
    return text if len(text) <= 120 else f"{text[:117]}..."


def _verdict(data: Mapping[str, Any]) -> str:
    verdict = verdict_from_data(data)
    if verdict is None:
        return '<div class="wb-banner wb-warn">Not judged: this result has no verdict.</div>'
    return (
        f'<div class="wb-banner wb-verdict {_BANNER[verdict.status]}">'
        f'<span class="wb-word">{_esc(verdict.status.upper())}</span> {_esc(verdict.reason)}'
        f'<div class="wb-rule">Rule: {_esc(verdict.rule)}</div></div>'
    )


def _what_ran(result: Mapping[str, Any]) -> str:
    target = result.get("target") or {}
    workload = result.get("workload") or {}
    rows = [("target", f"{target.get('name', 'unknown')} ({target.get('chosen_because', '')})")]
    if target.get("compiled_means"):
        rows.append(("compiled means", target["compiled_means"]))
    if workload:
        rows.append(("workload", f"{workload.get('name', '')}: {workload.get('description', '')}"))
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
    return (
        f'<h2>Provenance</h2><table class="wb-table"><tbody>{body}</tbody></table>'
        f"<details><summary>parameter values ({len(params)})</summary>"
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
        data = result.get("data") or {}
        parts.append(_verdict(data))
        if data.get("headline"):
            parts.append(f'<p class="wb-headline">{_esc(data["headline"])}</p>')
        parts.append(_what_ran(result))
        parts.append(_provenance(result))
    parts.append("<h2>The evidence</h2></header>")
    return "\n".join(parts)
