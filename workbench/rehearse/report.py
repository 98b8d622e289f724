"""rehearse.html: one offline page that says whether to move the pin, then what changed in the
stack, in speed, in numerics and in op coverage, each change with the stack changes beside it.

Like every report: one self-contained file, figures inline (SVG), no script, nothing fetched,
every string escaped (markup.table and markup.banner escape; markup.escaped for the rest).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from workbench.compare.environment import environment_note
from workbench.compare.records import UNCHANGED, WITHIN_GATE, Change, Comparison
from workbench.compare.report import timing_figure_html
from workbench.markup import banner, stylesheet, table
from workbench.markup import cell_text as _fmt
from workbench.markup import escaped as _e
from workbench.rehearse.environments import ROLLBACK, Environment
from workbench.rehearse.verdict import HOLD, MOVE, PinVerdict
from workbench.results import write_text_atomic

# Which of compare's areas each section shows; an area not named here goes under "Other".
SECTIONS = (
    ("Speed", ("timing", "serving")),
    ("Numerics", ("numerics",)),
    ("Op coverage", ("coverage",)),
)
_BANNER = {MOVE: "ok", HOLD: "fail"}
VERSION_KEYS = ("torch", "torch-xla", "torch-neuronx", "neuronx-cc", "workbench")


def _change_table(changes: list[Change], stack: str, labels: tuple[str, str]) -> str:
    if not changes:
        return (
            "<p>No metric of this area was compared (its notebook did not run on both sides).</p>"
        )
    moved = [c for c in changes if c.status not in (UNCHANGED, WITHIN_GATE)]
    quiet = [c.name for c in changes if c.status in (UNCHANGED, WITHIN_GATE)]
    rows = [
        [
            c.name,
            _fmt(c.base),
            _fmt(c.new),
            c.unit,
            "" if c.ratio is None else f"{c.ratio:.3f}",
            c.status,
            c.note,
            "" if stack in c.note else stack,
        ]
        for c in moved
    ]
    headers = ["what", *labels, "unit", "ratio", "judged", "how", "stack changes"]
    shown = table(rows, headers).html_text if rows else "<p>No change beyond its gate.</p>"
    if not quiet:
        return shown
    # Named, not only counted: a reader checks that the metric they care about was compared.
    return shown + (
        f"<p class='note'>Unchanged or within their gate ({len(quiet)}): "
        f"{_e(', '.join(quiet))}.</p>"
    )


def _stack_section(comparison: Comparison | None, labels: tuple[str, str]) -> str:
    if comparison is None or not comparison.environment:
        return (
            "<p>Notebook 00 did not record a change that matters between the two environments "
            "(or it did not run in both).</p>"
        )
    rows = [
        [d["severity"], d["key"], _fmt(d["old"]), _fmt(d["new"]), d.get("reason", "")]
        for d in comparison.environment
    ]
    return table(rows, ["severity", "what", *labels, "why it matters"]).html_text


def _environment_rows(
    environments: tuple[Environment, Environment], comparison: Comparison | None
) -> str:
    runs = comparison.runs if comparison else []
    rows = []
    for index, environment in enumerate(environments):
        versions = runs[index].versions if index < len(runs) else {"torch": environment.torch}
        rows.append(
            [
                environment.role,
                str(environment.python),
                *(versions.get(key, "") for key in VERSION_KEYS),
                (runs[index].verdict or "") if index < len(runs) else "no run",
            ]
        )
    return table(rows, ["", "interpreter", *VERSION_KEYS, "run verdict"]).html_text


def render(
    environments: tuple[Environment, Environment],
    comparison: Comparison | None,
    verdict: PinVerdict,
) -> str:
    first, second = environments
    labels = (first.role, second.role)
    if second.role == ROLLBACK:
        heading = (
            f"Rolling back from torch {first.torch} (in use now) to the pinned torch {second.torch}"
        )
    else:
        heading = f"Moving the pin from torch {first.torch} to torch {second.torch}"
    decision = banner(
        f"{verdict.decision.upper()}: {'; '.join(verdict.reasons)}",
        _BANNER.get(verdict.decision, "warn"),
    ).html_text
    parts = [
        f"<h1>{_e(heading)}</h1>",
        decision,
        f"<p class='note'>Rule: {_e(verdict.rule)}.</p>",
        "<h2>The two environments</h2>",
        _environment_rows(environments, comparison),
        "<h2>What changed in the stack</h2>",
        _stack_section(comparison, labels),
    ]
    if comparison is not None:
        stack = environment_note(comparison.environment)
        named = {area for _, areas in SECTIONS for area in areas}
        for title, areas in SECTIONS:
            chosen = [c for c in comparison.changes if c.area in areas]
            parts += [f"<h2>{_e(title)}</h2>", _change_table(chosen, stack, labels)]
        rest = [c for c in comparison.changes if c.area not in named]
        parts += ["<h2>Verdicts, notebooks and retuning</h2>", _change_table(rest, stack, labels)]
        parts += [
            f"<h2>Timings, {first.role} then {second.role}</h2>",
            timing_figure_html(comparison),
        ]
        parts.append(
            "<p class='note'>Every metric with its evidence: "
            "<a href='compare/compare.html'>compare.html</a> and "
            "<a href='compare/compare.json'>compare.json</a>; the runs: "
            f"<a href='{first.role}/index.html'>{first.role}</a>, "
            f"<a href='{second.role}/index.html'>{second.role}</a>.</p>"
        )
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = "\n".join(parts)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(heading)}</title>
<style>{stylesheet()}
body {{ font-family: system-ui, sans-serif; margin: 2em; max-width: 90em; }}
.note {{ color: #57606a; }}</style></head><body>
{body}
<p class="note">Generated {generated}.</p>
</body></html>
"""


def write_rehearsal(
    out: Path,
    environments: tuple[Environment, Environment],
    comparison: Comparison | None,
    verdict: PinVerdict,
) -> Path:
    return write_text_atomic(out / "rehearse.html", render(environments, comparison, verdict))
