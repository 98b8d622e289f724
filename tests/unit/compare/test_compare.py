"""`workbench compare` on run folders built here: a planted slowdown must be flagged, the same
distribution must not, and every bad input is one sentence with exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fixtures.run_folders import loaded_host, quiet_host, samples, write_run
from workbench.cli import main
from workbench.compare import compare_runs
from workbench.compare.plots import timing_series
from workbench.compare.records import (
    IMPROVEMENT,
    INCONCLUSIVE,
    NOT_COMPARABLE,
    ONE_SIDE,
    REGRESSION,
    WITHIN_GATE,
    WITHIN_NOISE,
)
from workbench.compare.stats import mann_whitney_u
from workbench.errors import BadInput
from workbench.report import network_references
from workbench.results import SCHEMA_VERSION


def test_mann_whitney_matches_the_textbook_normal_approximation() -> None:
    u, p = mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert u == 0 and p == pytest.approx(0.0808, abs=1e-3)
    assert mann_whitney_u([2.0] * 5, [2.0] * 7)[1] == 1.0
    low = [1.0 + 0.01 * i for i in range(30)]
    assert mann_whitney_u(low, [x + 1 for x in low])[1] < 1e-6


def _status(comparison, name: str) -> str:
    return next(c.status for c in comparison.changes if c.name == name)


def test_a_pair_flags_a_2x_slowdown_and_leaves_smaller_moves_inconclusive(tmp_path: Path) -> None:
    """A pair cannot measure run-to-run variation: +25% is inconclusive (exit 6, never a silent
    0), 2.5x is a regression (identical runs differed by up to 1.5x)."""
    base = write_run(tmp_path / "base", started="2026-11-01T02:00:00", seed=1)
    same = write_run(tmp_path / "same", started="2026-11-02T02:00:00", seed=2)
    quarter = write_run(tmp_path / "quarter", started="2026-11-03T02:00:00", seed=3, step=0.0125)
    double = write_run(tmp_path / "double", started="2026-11-04T02:00:00", seed=4, step=0.025)
    quiet = compare_runs([base, same])
    assert _status(quiet, "train/eager steady median") == WITHIN_GATE
    assert not quiet.regressions and not quiet.inconclusive
    unsettled = next(
        c for c in compare_runs([base, quarter]).changes if c.name == "train/eager steady median"
    )
    assert unsettled.ratio == pytest.approx(1.25, rel=0.03) and unsettled.p_value < 0.01
    assert unsettled.status == INCONCLUSIVE and "--remeasure" in unsettled.note
    assert main(["compare", str(base), str(quarter), "--out", str(tmp_path / "q")]) == 6
    assert main(["compare", str(base), str(quarter), "--out", str(tmp_path / "q"),
                 "--inconclusive", "pass"]) == 0  # fmt: skip
    assert main(["compare", str(base), str(quarter), "--out", str(tmp_path / "q"),
                 "--inconclusive", "fail"]) == 5  # fmt: skip
    flagged = compare_runs([base, double])
    median = next(c for c in flagged.changes if c.name == "train/eager steady median")
    assert median.status == REGRESSION and median.ratio == pytest.approx(2.5, rel=0.03)
    assert _status(flagged, "train/eager steady best") == REGRESSION
    assert _status(flagged, "train/eager throughput") == REGRESSION
    assert _status(compare_runs([double, base]), "train/eager steady median") == IMPROVEMENT


def test_identical_code_pair_with_tiny_noisy_steps_does_not_exit_5(tmp_path: Path) -> None:
    """Two identical runs one after the other on a quiet machine: tiny steps (0.3 ms), each run
    with its own IQR of about 10%, medians 24% apart: inconclusive, exit 6. At 3x: exit 5."""
    base = write_run(tmp_path / "base", started="2026-11-01", steady=samples(1, 3e-4, 30, 0.08))
    again = write_run(
        tmp_path / "again", started="2026-11-02", steady=samples(2, 3.72e-4, 30, 0.08)
    )
    comparison = compare_runs([base, again])
    median = next(c for c in comparison.changes if c.name == "train/eager steady median")
    # What the old pair rule called a regression: beyond the gate, significant, IQRs apart.
    assert 1.15 < median.ratio < 1.35 and median.p_value < 0.01 and median.status == INCONCLUSIVE
    assert main(["compare", str(base), str(again), "--out", str(tmp_path / "c1")]) == 6
    slow = write_run(tmp_path / "slow", started="2026-11-03", steady=samples(3, 9e-4, 30, 0.08))
    assert main(["compare", str(base), str(slow), "--out", str(tmp_path / "c2")]) == 5


def test_a_burst_of_load_over_most_of_a_run_is_inconclusive_and_a_shift_is_not(
    tmp_path: Path,
) -> None:
    """A burst of load slowed 18 of a run's 30 steps 2.3x. The rank test calls that significant
    and the median moves beyond a pair's 2x; the quartiles still overlap, and the steady best
    (the steps the burst spared) did not move."""
    base = write_run(tmp_path / "base", started="2026-11-01", seed=1, step=0.005)
    burst = samples(2, 0.005, 12) + samples(3, 0.0115, 18)
    loaded = write_run(tmp_path / "loaded", started="2026-11-02", steady=burst)
    burst_run = compare_runs([base, loaded])
    change = next(c for c in burst_run.changes if c.name == "train/eager steady median")
    assert change.ratio > 1.5 and change.p_value < 0.01
    assert change.status == INCONCLUSIVE and "interquartile ranges overlap" in change.note
    assert _status(burst_run, "train/eager steady best") == WITHIN_GATE
    shifted = write_run(tmp_path / "shifted", started="2026-11-03", seed=4, step=0.013)
    assert _status(compare_runs([base, shifted]), "train/eager steady median") == REGRESSION


def test_history_judges_the_newest_run_against_the_median_of_the_others(tmp_path: Path) -> None:
    nights = tmp_path / "reports"
    for night in range(4):
        write_run(nights / f"night{night}", started=f"2026-11-0{night + 1}", seed=night)
    write_run(nights / "tonight", started="2026-11-09", seed=9, step=0.012)
    (nights / "interrupted").mkdir()  # no summary.json: listed, not fatal
    comparison = compare_runs([nights])
    assert comparison.mode == "history" and [r.label for r in comparison.runs][-1] == "tonight"
    assert _status(comparison, "train/eager steady median") == REGRESSION
    assert len(comparison.skipped) == 1 and "interrupted" in comparison.skipped[0]
    median = next(c for c in comparison.changes if c.name == "train/eager steady median")
    assert len(median.series) == 5 and median.series[-1] == pytest.approx(0.012, rel=0.03)


def test_history_calls_a_shift_within_the_earlier_runs_own_spread_noise(tmp_path: Path) -> None:
    """Measured on this kind of machine: identical runs one after the other differ by up to
    19% in median, each run tight, so a rank test on steps calls them apart. Against a history,
    a change must also leave the prediction interval the earlier runs' values give."""
    nights = tmp_path / "reports"
    for night, step in enumerate((0.0100, 0.0103, 0.0097, 0.0101, 0.0099)):
        write_run(nights / f"night{night}", started=f"2026-11-0{night + 1}", seed=night, step=step)
    write_run(nights / "tonight", started="2026-11-09", seed=9, step=0.0107)
    change = next(
        c for c in compare_runs([nights]).changes if c.name == "train/eager steady median"
    )
    assert change.ratio > 1.05 and change.p_value < 0.01, "beyond the gate, and significant"
    assert change.status == WITHIN_NOISE and "the 5 earlier runs' prediction" in change.note
    # Nights spread wider than three gates cannot clear the same move: inconclusive.
    wide = tmp_path / "wide"
    for night, step in enumerate((0.0100, 0.0109, 0.0094, 0.0102)):
        write_run(wide / f"night{night}", started=f"2026-11-0{night + 1}", seed=night, step=step)
    write_run(wide / "tonight", started="2026-11-09", seed=9, step=0.0108)
    assert _status(compare_runs([wide]), "train/eager steady median") == INCONCLUSIVE
    write_run(nights / "tomorrow", started="2026-11-10", seed=10, step=0.0160)
    assert _status(compare_runs([nights]), "train/eager steady median") == REGRESSION


@pytest.mark.parametrize("slowdown", [0.10, 0.25])
def test_a_planted_slowdown_is_flagged_against_a_history(tmp_path: Path, slowdown: float) -> None:
    """Five quiet nights within 2% of each other; tonight's step is 10% or 25% slower."""
    nights = tmp_path / "reports"
    for night, step in enumerate((0.0100, 0.0102, 0.0099, 0.0101, 0.0100)):
        write_run(nights / f"night{night}", started=f"2026-11-0{night + 1}", seed=night, step=step)
    write_run(nights / "tonight", started="2026-11-09", seed=9, step=0.0100 * (1 + slowdown))
    comparison = compare_runs([nights])
    assert _status(comparison, "train/eager steady median") == REGRESSION
    assert _status(comparison, "train/eager throughput") == REGRESSION
    assert main(["compare", str(nights), "--out", str(tmp_path / "cmp")]) == 5


def test_a_loaded_side_is_inconclusive_and_a_quiet_pair_is_judged(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", started="2026-11-01", seed=1)
    loaded = write_run(
        tmp_path / "loaded", started="2026-11-02", seed=2, step=0.02, host=loaded_host()
    )
    quiet = write_run(tmp_path / "quiet", started="2026-11-03", seed=3, step=0.025)
    same = write_run(tmp_path / "same", started="2026-11-04", seed=4, step=0.02)
    for pair in ([base, loaded], [loaded, same]):
        comparison = compare_runs(pair)
        change = next(c for c in comparison.changes if c.name == "train/eager steady median")
        assert change.status == INCONCLUSIVE and "loaded" in change.note and "60%" in change.note
        assert not [c for c in comparison.regressions if c.area == "timing"]
        assert "inconclusive" in comparison.headline()
    assert main(["compare", str(base), str(loaded), "--out", str(tmp_path / "c")]) == 6
    assert _status(compare_runs([base, quiet]), "train/eager steady median") == REGRESSION


def test_history_leaves_out_an_earlier_loaded_run_and_says_so(tmp_path: Path) -> None:
    nights = tmp_path / "reports"
    for night in range(4):
        host = loaded_host() if night == 1 else None
        write_run(nights / f"n{night}", started=f"2026-11-0{night + 1}", seed=night, host=host)
    write_run(nights / "tonight", started="2026-11-09", seed=9, step=0.0125)
    change = next(
        c for c in compare_runs([nights]).changes if c.name == "train/eager steady median"
    )
    assert change.status == REGRESSION and "n1 (other processes 60%" in change.note


def test_different_thread_counts_are_not_comparable(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", started="2026-11-01", seed=1, host=quiet_host(4))
    fewer = write_run(
        tmp_path / "fewer", started="2026-11-02", seed=2, step=0.02, host=quiet_host(2)
    )
    same = write_run(
        tmp_path / "same", started="2026-11-03", seed=3, step=0.025, host=quiet_host(4)
    )
    change = next(
        c for c in compare_runs([base, fewer]).changes if c.name == "train/eager steady median"
    )
    assert change.status == NOT_COMPARABLE and "base ran 4 thread(s), the newest 2" in change.note
    assert _status(compare_runs([base, same]), "train/eager steady median") == REGRESSION


def test_notebooks_on_one_side_only_are_named_in_the_headline(tmp_path: Path) -> None:
    full = write_run(tmp_path / "full", started="2026-11-01", seed=1)
    only = write_run(tmp_path / "only", started="2026-11-02", seed=2, notebooks=("02_op_coverage",))
    comparison = compare_runs([full, only])
    assert not comparison.regressions
    headline = comparison.headline()
    assert "not compared, in the baseline only: 01_baseline, 03_numerics" in headline
    assert {c.name for c in comparison.with_status(ONE_SIDE)} == {"01_baseline", "03_numerics"}
    both = compare_runs([full, write_run(tmp_path / "again", started="2026-11-03", seed=3)])
    assert not both.with_status(ONE_SIDE) and "not compared" not in both.headline()


def test_the_tail_is_a_p99_only_with_the_samples_to_support_it(tmp_path: Path) -> None:
    short = compare_runs(
        [write_run(tmp_path / f"s{i}", started=f"2026-11-0{i + 1}", seed=i) for i in range(2)]
    )
    names = {c.name for c in short.changes}
    assert "train/eager steady max" in names and "train/eager steady p99" not in names
    assert _status(short, "train/eager steady max") == "shown, not gated"
    long = compare_runs(
        [
            write_run(tmp_path / f"l{i}", started=f"2026-11-0{i + 1}", steady=samples(i, 0.01, 662))
            for i in range(2)
        ]
    )
    names = {c.name for c in long.changes}
    assert "train/eager steady p99" in names and "train/eager steady max" not in names


def test_a_newly_falling_back_op_a_failing_run_and_a_blocker_are_regressions(
    tmp_path: Path,
) -> None:
    base = write_run(tmp_path / "base", started="2026-11-01", seed=1)
    worse = write_run(
        tmp_path / "worse",
        started="2026-11-02",
        seed=1,
        op_status="falls back or fails",
        numerics_pass=False,
        token_match="fail",
        verdict="blocker",
    )
    comparison = compare_runs([base, worse])
    assert _status(comparison, "aten::addmm on xla") == REGRESSION
    assert _status(comparison, "cpu bf16-autocast eager verdict") == REGRESSION
    assert _status(comparison, "cpu bf16-autocast eager token match") == REGRESSION
    # Back the other way, the same gate is an improvement; an unchanged gate is no change.
    back = compare_runs([worse, base])
    assert _status(back, "cpu bf16-autocast eager token match") == IMPROVEMENT
    same = write_run(tmp_path / "same", started="2026-11-03", seed=2)
    names = {c.name for c in compare_runs([base, same]).changes}
    assert "cpu bf16-autocast eager verdict" in names
    assert "cpu bf16-autocast eager token match" not in names
    assert _status(comparison, "01_baseline verdict") == REGRESSION


def test_cli_exit_codes_and_an_offline_escaped_report(tmp_path: Path, capsys) -> None:
    base = write_run(tmp_path / "base", started="2026-11-01", seed=1, workload="<b>mlp</b>")
    slow = write_run(tmp_path / "slow", started="2026-11-02", seed=2, step=0.025,
                     workload="<b>mlp</b>")  # fmt: skip
    assert main(["compare", str(base), str(base)]) == 2  # one run, named twice
    assert main(["compare", str(base), str(slow), "--out", str(tmp_path / "cmp")]) == 5
    err = capsys.readouterr().err
    assert "regression: timing train/eager steady median" in err and "p=" in err
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert network_references(page) == [] and "<b>mlp</b>" not in page
    assert page.index("regression") < page.index("Timings over the runs")
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert data["regressions"] >= 1 and data["runs"][0]["label"] == "base"
    same = write_run(tmp_path / "same", started="2026-11-03", seed=3, workload="<b>mlp</b>")
    assert main(["compare", str(base), str(same), "--out", str(tmp_path / "cmp2")]) == 0
    # A run folder's name reaches the console: its control sequences do not.
    capsys.readouterr()
    odd = write_run(tmp_path / "odd\x1b]0;title\x07\x1b[2J", started="2026-11-04", seed=4,
                    workload="<b>mlp</b>")  # fmt: skip
    assert main(["compare", str(base), str(odd), "--out", str(tmp_path / "cmp3")]) == 0
    out = capsys.readouterr().out
    assert "odd" in out and "\x1b" not in out and "\x07" not in out


def test_bad_run_folders_are_one_sentence_each(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", started="2026-11-01")
    other = write_run(tmp_path / "other", started="2026-11-02", workload="tiny-cnn")
    old = write_run(tmp_path / "old", started="2026-11-03", schema=SCHEMA_VERSION + 1)
    with pytest.raises(BadInput, match="different workloads"):
        compare_runs([base, other])
    assert len(compare_runs([base, other], allow_different_workloads=True).runs) == 2
    with pytest.raises(BadInput, match="schema"):
        compare_runs([base, old])
    with pytest.raises(BadInput, match="does not exist"):
        compare_runs([base, tmp_path / "missing"])
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "summary.json").write_text("{half")
    with pytest.raises(BadInput, match="not readable JSON"):
        compare_runs([base, tmp_path / "torn"])
    with pytest.raises(BadInput, match="at least two readable runs"):
        compare_runs([base])


def test_the_figure_plots_every_timing_metric_the_runs_share(tmp_path: Path) -> None:
    runs = [
        write_run(tmp_path / f"night{i}", started=f"2026-11-0{i + 1}", seed=i) for i in range(3)
    ]
    comparison = compare_runs(runs)
    panels = timing_series(comparison)
    assert panels is not None
    titles = set(re.findall(r'<text class="wb-panel-title"[^>]*>([^<]*)</text>', panels))
    expected = {c.name for c in comparison.changes if c.area == "timing"}
    assert titles == expected
    assert any(t.endswith("steady max") for t in titles)
    assert any(t.endswith("throughput") for t in titles)
    assert any(t.endswith("peak host memory") for t in titles)
    assert 'stroke="#c62828"' not in panels  # no regression, nothing ringed red
    # A planted slowdown: its newest point is ringed red, in its own panel.
    slow = write_run(tmp_path / "slow", started="2026-11-09", seed=9, step=0.02)
    slowed = timing_series(compare_runs([*runs, slow]))
    assert slowed is not None
    regressed = [p for p in slowed.split("</svg>") if "(regression)" in p]
    assert regressed and all('stroke="#c62828"' in p for p in regressed)
