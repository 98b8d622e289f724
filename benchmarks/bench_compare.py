"""How well `workbench compare` tells a real slowdown from noise on this machine, and what it costs.

    .venv/bin/python benchmarks/bench_compare.py

Detection power: a workload whose forward spins for a fixed time (plus a small Linear) is measured
by notebook 01's own measuring code (first call, adaptive warm-up, 30 steady steps, eager training
step); each run is written as a run folder in the result-file format `workbench run` writes. For a
planted slowdown of 0%, 5%, 10%, 25% and 100% (2x) of the step (of the whole step, as the first
base runs measure it, not of the busy wait alone), PAIRS pairs of runs (baseline, slowed) are
compared and the share flagged as a regression is printed. Runs are interleaved (base, slow,
base, slow...) so that a change in machine load hits both sides alike. Each slowed run is also
compared against the 4 latest base runs, as a nightly run is against the nights before: there
the earlier runs' own spread measures the machine's run-to-run variation. Aim: 0% flags nothing;
2x flags every pair (a pair allows for run-to-run variation it cannot measure, so smaller changes
are left to a history); 10% and 25% are flagged against the latest base runs.

Cost: `compare_runs` plus writing compare.html/compare.json in this process (its imports already
paid), on two runs and on a history of 20; then `workbench compare` of two runs as a user runs it,
process start to exit, against `python -c "import workbench"` (an interpreter's start and the
package's import) in alternating pairs. Aim: the whole command within 1.5x of that start.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from notebook_wall_time import WORKBENCH, paired_medians
from torch import nn

from workbench.baseline.measure import run_baseline
from workbench.baseline.reader import RESULT_FILE
from workbench.baseline.records import EAGER, TRAIN, BaselineSettings, result_data
from workbench.compare import compare_runs
from workbench.compare.records import LOADED
from workbench.compare.report import write_comparison
from workbench.compare.timing import steady_samples
from workbench.results import save_result
from workbench.summary import NotebookOutcome, RunSummary, write_summary
from workbench.targets import get_target
from workbench.timing import WarmupRule
from workbench.workload import Workload

# The tests' workload builders serve the benchmarks too: the repository root goes on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fixtures.user_workloads import classifier_workload  # noqa: E402

PAIRS = 5
LEVELS = (0.0, 0.05, 0.10, 0.25, 1.0)
BASE_SLEEP_S = 0.02
HISTORY = 20
NIGHTS = 4  # base runs a slowed run is also compared against, as a nightly run is
COMMAND_PAIRS = 5  # `workbench compare` against `import workbench`, each in a fresh process
COMMAND_AIM = 1.5
STEAL_LIMIT = 0.02  # above this share of CPU time stolen by the hypervisor, the figures are noise
SETTINGS = BaselineSettings(
    steady_steps=30, warmup=WarmupRule(6, 0.1, 30), kinds=(TRAIN,), modes=(EAGER,)
)


class Sleeper(nn.Module):
    """A step of known length: the planted slowdown scales a busy wait (time.sleep would add the
    scheduler's wake-up latency, tens of milliseconds on a loaded machine, to every step)."""

    def __init__(self, sleep_s: float) -> None:
        super().__init__()
        self.linear = nn.Linear(32, 4)
        self.sleep_s = sleep_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        end = time.perf_counter() + self.sleep_s
        while time.perf_counter() < end:
            pass
        return self.linear(x)


def workload(extra_s: float) -> Workload:
    def sleeper() -> nn.Module:
        return Sleeper(BASE_SLEEP_S + extra_s)

    return classifier_workload(sleeper, "sleeper", features=32, classes=4, batch_size=16)


def measured_run(folder: Path, extra_s: float, index: int) -> Path:
    """One run whose forward busy-waits `extra_s` longer than the base step's."""
    result = run_baseline(workload(extra_s), get_target("cpu"), SETTINGS, log=lambda _: None)
    folder.mkdir(parents=True)
    save_result(folder, "01_baseline", result_data(result), target=result.target)
    summary = RunSummary(
        workload="sleeper",
        target="cpu",
        started_at=f"2026-01-01T00:{index // 60:02d}:{index % 60:02d}",
        notebooks=[NotebookOutcome("01_baseline", "ok", result="01_baseline.json")],
    )
    write_summary(folder / "summary.json", summary)
    return folder


def _steady_median(run: Path) -> float:
    data = RESULT_FILE.load(run / "01_baseline.json")
    return statistics.median(steady_samples(data.configs[0]))


def flagged(*runs: Path) -> bool:
    comparison = compare_runs(list(runs))
    return any(
        c.area == "timing" and c.name.endswith("steady median") for c in comparison.regressions
    )


def loaded(*runs: Path) -> bool:
    """Whether compare left the steady median unjudged because a side was measured loaded."""
    return any(
        c.name.endswith("steady median") for c in compare_runs(list(runs)).with_status(LOADED)
    )


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) jiffies from /proc/stat: time the hypervisor gave to other guests is
    invisible to this VM's process list, but the kernel counts it as steal."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[7], sum(fields)


def whole_command(runs: list[Path], out: Path) -> None:
    """`workbench compare` of two runs from process start to exit, beside an interpreter that
    only imports the package; exit 5 (a regression found) is a finished comparison too."""
    command = [WORKBENCH, "compare", *map(str, runs), "--out", str(out)]
    reference = [sys.executable, "-c", "import workbench"]
    seconds, start_s, ratios = paired_medians(command, reference, COMMAND_PAIRS, ok=(0, 5))
    print(
        f"  `workbench compare` of 2 runs, process start to exit: {seconds:.2f} s against "
        f"{start_s:.2f} s for `python -c 'import workbench'`, {seconds / start_s:.1f}x (median "
        f"of {COMMAND_PAIRS} pairs: {', '.join(f'{r:.1f}' for r in ratios)}; aim: within "
        f"{COMMAND_AIM}x)"
    )


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    steal_before, total_before = cpu_ticks()
    try:
        # A slowdown is planted as a share of the whole step (busy wait, Linear, backward,
        # optimizer and the loop), so the base step is measured first, on NIGHTS runs.
        # Each slowed run is also judged as a nightly run is: against the latest base runs.
        history = [measured_run(root / f"night{night}", 0.0, night) for night in range(NIGHTS)]
        count = NIGHTS
        step_s = statistics.median(_steady_median(run) for run in history)
        print(
            f"planted slowdown of a {step_s * 1e3:.2f} ms step (median of {NIGHTS} base runs' "
            f"steady medians; {BASE_SLEEP_S * 1e3:.0f} ms of it a busy wait), {PAIRS} pairs "
            "each (5% gate, p < 0.01; a pair also beyond its run-to-run allowance):"
        )
        for level in LEVELS:
            hits = nightly_hits = unjudged = 0
            for pair in range(PAIRS):
                base = measured_run(root / f"l{level}-p{pair}-base", 0.0, count)
                slow = measured_run(root / f"l{level}-p{pair}-new", level * step_s, count + 1)
                count += 2
                history.append(base)
                hits += flagged(base, slow)
                nightly_hits += flagged(*history[-NIGHTS:], slow)
                unjudged += loaded(base, slow)
            print(
                f"  slowdown {level:4.0%}: {hits}/{PAIRS} pairs flagged ({hits / PAIRS:.0%}); "
                f"against the {NIGHTS} latest base runs: {nightly_hits}/{PAIRS}; "
                f"pairs measured loaded, not judged: {unjudged}/{PAIRS}"
            )
        while len(history) < HISTORY:
            history.append(measured_run(root / f"extra{len(history)}", 0.0, count))
            count += 1
        for label, runs in (("2 runs", history[:2]), (f"{HISTORY} runs", history[:HISTORY])):
            out = root / f"out-{len(runs)}"
            start = time.perf_counter()
            write_comparison(compare_runs(runs), out)
            seconds = time.perf_counter() - start
            print(f"  compare on {label}: {seconds:.2f} s (aim: under 2 s for {HISTORY} runs)")
        whole_command(history[:2], root / "out-command")
        steal_after, total_after = cpu_ticks()
        steal = (steal_after - steal_before) / max(total_after - total_before, 1)
        print(
            f"  hypervisor steal during the benchmark: {steal:.1%} of CPU time"
            + (" [LOADED: not a quiet-machine measurement]" if steal > STEAL_LIMIT else "")
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
