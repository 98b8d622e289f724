"""`workbench compare` on run folders built here: a planted slowdown must be flagged, the same
distribution must not, and every bad input is one sentence with exit 2."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.compare import Gates, compare_runs
from workbench.compare.plots import timing_series
from workbench.compare.records import IMPROVEMENT, NOISE, REGRESSION, WITHIN_GATE
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


def _samples(seed: int, median: float, n: int = 30) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.gauss(0, 0.02)) for _ in range(n)]


def write_run(
    folder: Path,
    *,
    started: str,
    step: float = 0.010,
    seed: int = 0,
    workload: str = "seed-mlp",
    op_status: str = "supported",
    numerics_pass: bool = True,
    verdict: str = "pass",
    schema: int = SCHEMA_VERSION,
    steady: list[float] | None = None,
) -> Path:
    """A run folder as `workbench run` leaves one, with the fields compare reads."""
    folder.mkdir(parents=True)

    def phase(name: str, times: list[float]) -> dict:
        return {
            "phase": name,
            "measurement": {"times": times, "median": sorted(times)[len(times) // 2]},
            "memory": {"host_peak_rss": 500 * 2**20, "device_peak_allocated": None},
        }

    config = {
        "kind": "train",
        "mode": "eager",
        "status": "ok",
        "failure": None,
        "items_per_step": 64,
        "phases": [
            phase("first_call", [step * 5]),
            phase("steady", steady or _samples(seed, step)),
        ],
    }
    results = {
        "01_baseline": {"configs": [config]},
        "02_op_coverage": {
            "ops": [
                {"op": "aten::addmm", "verdicts": {"xla": {"status": op_status}}},
                {"op": "aten::relu", "verdicts": {"xla": {"status": "supported"}}},
            ]
        },
        "03_numerics": {
            "runs": [
                {
                    "run": {"label": "cpu bf16-autocast eager"},
                    "verdict": {"passed": numerics_pass},
                    "outputs": [{"metrics": {"relative_l2": 0.004}}],
                }
            ]
        },
    }
    notebooks = []
    for name, data in results.items():
        record = {"schema_version": schema, "notebook": name, "target": {}, "data": data}
        (folder / f"{name}.json").write_text(json.dumps(record))
        notebooks.append(
            {
                "notebook": name,
                "status": "ok",
                "result": f"{name}.json",
                "verdict": {"status": verdict if name == "01_baseline" else "pass", "reason": "r"},
            }
        )
    summary = {
        "schema_version": schema,
        "workload": workload,
        "target": "cpu",
        "started_at": started,
        "notebooks": notebooks,
        "verdict": {"status": verdict, "reasons": []},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def _status(comparison, name: str) -> str:
    return next(c.status for c in comparison.changes if c.name == name)


def test_a_quarter_slower_step_is_a_regression_and_the_same_step_is_not(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", started="2026-11-01T02:00:00", seed=1)
    same = write_run(tmp_path / "same", started="2026-11-02T02:00:00", seed=2)
    slow = write_run(tmp_path / "slow", started="2026-11-03T02:00:00", seed=3, step=0.0125)
    quiet = compare_runs([base, same])
    assert _status(quiet, "train/eager steady median") in (WITHIN_GATE, NOISE)
    assert not quiet.regressions
    flagged = compare_runs([base, slow])
    median = next(c for c in flagged.changes if c.name == "train/eager steady median")
    assert median.status == REGRESSION and median.ratio == pytest.approx(1.25, rel=0.03)
    assert median.p_value < 0.01
    assert _status(flagged, "train/eager throughput") == REGRESSION
    assert _status(compare_runs([slow, base]), "train/eager steady median") == IMPROVEMENT


def test_a_slowdown_beyond_the_gate_but_within_noise_is_not_a_regression(tmp_path: Path) -> None:
    base = write_run(tmp_path / "base", started="2026-11-01", seed=1)
    slower = write_run(tmp_path / "slower", started="2026-11-02", seed=2, step=0.0103)
    strict = compare_runs([base, slower], Gates(step_time=0.0, p_value=1e-12))
    assert _status(strict, "train/eager steady median") == NOISE


def test_a_burst_of_load_over_most_of_a_run_is_noise_and_a_shift_is_not(tmp_path: Path) -> None:
    """Measured on this kind of machine: a burst slowed 18 of a run's 30 steps by 60%. The rank
    test calls that significant and the median moves 60%; the quartiles still overlap."""
    base = write_run(tmp_path / "base", started="2026-11-01", seed=1, step=0.005)
    burst = _samples(2, 0.005, 12) + _samples(3, 0.008, 18)
    loaded = write_run(tmp_path / "loaded", started="2026-11-02", steady=burst)
    change = next(
        c for c in compare_runs([base, loaded]).changes if c.name == "train/eager steady median"
    )
    assert change.ratio > 1.5 and change.p_value < 0.01
    assert change.status == NOISE and "interquartile ranges overlap" in change.note
    shifted = write_run(tmp_path / "shifted", started="2026-11-03", seed=4, step=0.0055)
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
    a change must also leave the band the earlier runs' values spread over."""
    nights = tmp_path / "reports"
    for night, step in enumerate((0.0100, 0.0109, 0.0094, 0.0102)):
        write_run(nights / f"night{night}", started=f"2026-11-0{night + 1}", seed=night, step=step)
    write_run(nights / "tonight", started="2026-11-09", seed=9, step=0.0108)
    change = next(
        c for c in compare_runs([nights]).changes if c.name == "train/eager steady median"
    )
    assert change.ratio > 1.05 and change.p_value < 0.01, "beyond the gate, and significant"
    assert change.status == NOISE and "within the band of the 4 earlier runs" in change.note
    write_run(nights / "tomorrow", started="2026-11-10", seed=10, step=0.0125)
    assert _status(compare_runs([nights]), "train/eager steady median") == REGRESSION


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
        verdict="blocker",
    )
    comparison = compare_runs([base, worse])
    assert _status(comparison, "aten::addmm on xla") == REGRESSION
    assert _status(comparison, "cpu bf16-autocast eager verdict") == REGRESSION
    assert _status(comparison, "01_baseline verdict") == REGRESSION


def test_cli_exit_codes_and_an_offline_escaped_report(tmp_path: Path, capsys) -> None:
    base = write_run(tmp_path / "base", started="2026-11-01", seed=1, workload="<b>mlp</b>")
    slow = write_run(tmp_path / "slow", started="2026-11-02", seed=2, step=0.0125,
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
    figure = timing_series(comparison)
    assert figure is not None
    titles = {ax.get_title().split(" (")[0] for ax in figure.axes if ax.get_visible()}
    expected = {c.name for c in comparison.changes if c.area == "timing"}
    assert titles == expected
    assert any(t.endswith("steady p99") for t in titles)
    assert any(t.endswith("throughput") for t in titles)
    assert any(t.endswith("peak host memory") for t in titles)
