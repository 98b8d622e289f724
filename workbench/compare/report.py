"""compare.html and compare.json: headline first, then the changes with their evidence.

The page follows the reports' rules: one self-contained file, the figure inline SVG, no script,
nothing fetched, every string escaped.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from workbench.compare.noise import NOISE_RULE
from workbench.compare.plots import timing_series
from workbench.compare.records import (
    IMPROVEMENT,
    INCONCLUSIVE,
    REGRESSION,
    Change,
    Comparison,
    Gates,
    comparison_data,
)
from workbench.compare.remeasure import REMEASURE_RULE
from workbench.markup import cell_text as _fmt
from workbench.markup import escaped as _e
from workbench.results import write_json_atomic, write_text_atomic
from workbench.timing import samples_for_percentile

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #1f2328; max-width: 80em; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em 0; }
td, th { border: 1px solid #d0d7de; padding: 0.3em 0.7em; text-align: left; vertical-align: top; }
.headline { padding: 0.7em 1em; border-left: 8px solid; font-size: 1.1em; }
.bad { border-color: #c62828; background: #fdecea; }
.good { border-color: #2e8b3a; background: #eaf6ec; }
.unknown { border-color: #b26a00; background: #fff4e0; }
td.regression { color: #c62828; font-weight: 600; }
td.improvement { color: #2e8b3a; font-weight: 600; }
td.inconclusive { color: #b26a00; font-weight: 600; }
.note { color: #57606a; }
"""


def _change_rows(changes: list[Change]) -> str:
    rows = []
    for c in changes:
        ratio = "" if c.ratio is None else f"{c.ratio:.3f}"
        p_value = "" if c.p_value is None else f"{c.p_value:.2g}"
        gate = "" if c.gate is None else f"{c.gate:.0%}"
        rows.append(
            f"<tr><td>{_e(c.area)}</td><td>{_e(c.name)}</td><td>{_e(_fmt(c.base))}</td>"
            f"<td>{_e(_fmt(c.new))}</td><td>{_e(c.unit)}</td><td>{ratio}</td><td>{p_value}</td>"
            f'<td>{gate}</td><td class="{_e(c.status)}">{_e(c.status)}</td>'
            f'<td class="note">{_e(c.note)}</td></tr>'
        )
    head = (
        "<tr><th>area</th><th>what</th><th>baseline</th><th>newest</th><th>unit</th>"
        "<th>ratio</th><th>p (rank test)</th><th>gate</th><th>judged</th><th>how</th></tr>"
    )
    return f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>"


def timing_figure_html(comparison: Comparison) -> str:
    """The timing panels (compare.plots), drawn only here, when a page that shows them is
    written."""
    panels = timing_series(comparison)
    if panels is None:
        return "<p>Fewer than two runs measured timings: nothing to plot.</p>"
    return panels


def _table(headers: str, rows: str) -> str:
    return f"<table><thead><tr>{headers}</tr></thead><tbody>{rows}</tbody></table>"


def _runs_table(comparison: Comparison) -> str:
    rows = "".join(
        f"<tr><td>{i + 1}</td><td>{_e(r.label)}</td><td>{_e(r.started_at)}</td>"
        f"<td>{_e(r.workload)}</td><td>{_e(r.target)}</td><td>{_e(r.verdict or '')}</td>"
        f"<td>{_e(', '.join(f'{k} {v}' for k, v in r.versions.items()))}</td></tr>"
        for i, r in enumerate(comparison.runs)
    )
    headers = (
        "<th>#</th><th>run</th><th>started</th><th>workload</th><th>target</th>"
        "<th>verdict</th><th>versions</th>"
    )
    return _table(headers, rows)


def _environment_table(comparison: Comparison) -> str:
    if not comparison.environment:
        return "<p>None between the baseline and the newest run (or notebook 00 did not run).</p>"
    rows = "".join(
        f"<tr><td>{_e(d['severity'])}</td><td>{_e(d['key'])}</td><td>{_e(d['old'])}</td>"
        f"<td>{_e(d['new'])}</td></tr>"
        for d in comparison.environment
    )
    return _table("<th>severity</th><th>what</th><th>before</th><th>now</th>", rows)


_COST_KEYS = (
    "run", "target", "instance", "usd_per_hour", "items_per_second",
    "items_per_dollar", "hours_for_items", "infer_p99_s",
)  # fmt: skip


def _cost_table(comparison: Comparison) -> str:
    rows = "".join(
        "<tr>" + "".join(f"<td>{_e(_fmt(r[key]) or 'unknown')}</td>" for key in _COST_KEYS)
        + "</tr>"
        for r in comparison.cost
    )  # fmt: skip
    headers = (
        "<th>run</th><th>target</th><th>instance</th><th>$/hour</th><th>items/s</th>"
        "<th>items per $</th><th>hours for the items priced</th>"
        f"<th>inference p99 (s; unknown under {samples_for_percentile(0.99)} steps)</th>"
    )
    return f"<p>{_e(comparison.cost_note)}</p>{_table(headers, rows)}"


def _rule(gates: Gates) -> str:
    return (
        f"A timing is a regression when it is worse by more than its gate (steady state and "
        f"throughput {gates.step_time:.0%}, first call {gates.compile_time:.0%}, memory "
        f"{gates.memory:.0%}), beyond its noise and, where raw samples exist, a Mann-Whitney U "
        f"test on them gives p < {gates.p_value}: {NOISE_RULE}. {REMEASURE_RULE}. Timings "
        "taken with different thread counts are not comparable. An op that newly falls back, a "
        "numerics run that newly fails and a notebook verdict that became a blocker are "
        "regressions too."
    )


def _headline_class(comparison: Comparison) -> str:
    if comparison.regressions:
        return "bad"
    return "unknown" if comparison.inconclusive else "good"


def render(comparison: Comparison) -> str:
    """The page, answer first: the headline, then what moved beyond noise, then the evidence."""
    flagged = [c for c in comparison.changes if c.status in (REGRESSION, IMPROVEMENT)]
    unsettled = comparison.inconclusive
    others = [
        c for c in comparison.changes if c.status not in (REGRESSION, IMPROVEMENT, INCONCLUSIVE)
    ]
    unsettled_section = (
        "<h2>Inconclusive: beyond the gate, not beyond the noise this comparison can measure</h2>"
        + _change_rows(unsettled)
        if unsettled
        else ""
    )
    flagged_table = (
        _change_rows(flagged) if flagged else "<p>Nothing moved beyond its gate and its noise.</p>"
    )
    skipped = "".join(f"<li>{_e(s)}</li>" for s in comparison.skipped)
    skipped_section = f"<h2>Run folders skipped</h2><ul>{skipped}</ul>" if skipped else ""
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Workbench comparison</title>
<style>{_STYLE}</style></head><body>
<h1>Runs compared</h1>
<p class="headline {_headline_class(comparison)}">{_e(comparison.headline())}</p>
<p>{_e(_rule(comparison.gates))}</p>
<h2>What changed beyond noise</h2>
{flagged_table}
{unsettled_section}
<h2>Timings over the runs</h2>
{timing_figure_html(comparison)}
<h2>Runs (oldest first; the last is judged)</h2>
{_runs_table(comparison)}
<h2>Environment changes recorded by notebook 00</h2>
{_environment_table(comparison)}
<h2>What a sample costs, per run, on the hardware it ran on</h2>
{_cost_table(comparison)}
<details><summary>Every other metric compared ({len(others)}: within gate, within measured
noise, unchanged, shown and not gated, replaced by the remeasure, not comparable or on one side
only)</summary>
{_change_rows(others)}</details>
{skipped_section}
<p class="note">Machine-readable: <a href="compare.json">compare.json</a>.
Generated {generated}.</p>
</body></html>
"""


def write_comparison(comparison: Comparison, out_dir: Path) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "compare.json", comparison_data(comparison))
    return write_text_atomic(out_dir / "compare.html", render(comparison))
