"""How well `workbench compare` tells a real slowdown from noise, quiet and beside two busy loops,
in each of its modes, and what it costs.

    .venv/bin/python benchmarks/bench_compare.py

Detection: a workload whose forward runs a fixed number of small matrix products (computation,
so a busy machine slows it as it slows a real model) is measured by notebook 01's own measuring
code (first call, adaptive warm-up, 30 steady steps, eager training step); each run is written as
a run folder in the result-file format `workbench run` writes. A slowdown is planted as more
products per forward: +10%, +30% and 2x of the step's work. In each condition (a quiet machine;
beside two processes spinning on the CPU, as a shared 2-core CI runner is) and for each level:
- pairs: PAIRS pairs (baseline, candidate), measured one after the other and compared as a pair;
- history: each candidate against the NIGHTS latest baseline runs, as a nightly run is;
- remeasure: the two workloads timed again, interleaved in pairs until decided (the machinery of
  `compare --remeasure`, budget REMEASURE_BUDGET_S per comparison).
Each comparison's answer is the exit code a CI job would see from the timings: regression (5),
inconclusive (6) or pass (0). The aims: no regression on identical code in any mode (false
alarms: 0), no planted slowdown passed silently (exit 0), and the smallest slowdown caught in each
mode stated.

Cost: `compare_runs` plus writing compare.html/compare.json in this process (its imports already
paid), on two runs and on a history of 20; then `workbench compare` of two runs as a user runs it,
process start to exit, against `python -c "import workbench"` (an interpreter's start and the
package's import) in alternating pairs. Aim: the whole command within 1.5x of that start.
"""

from __future__ import annotations

import multiprocessing
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from notebook_wall_time import WORKBENCH, paired_medians

from workbench.baseline.measure import prepare_step
from workbench.baseline.records import EAGER, TRAIN
from workbench.compare import compare_runs
from workbench.compare.command import exit_code
from workbench.compare.records import Gates
from workbench.compare.remeasure import one_thread_when_loaded, time_in_pairs
from workbench.compare.report import write_comparison
from workbench.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION
from workbench.targets import get_target

# The tests' workload builders serve the benchmarks too: the repository root goes on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.fixtures.planted_steps import products_workload  # noqa: E402
from tests.fixtures.run_folders import measured_run as measured_folder  # noqa: E402

PRODUCTS = 120  # a few milliseconds of training step on one core
PAIRS = 3
LEVELS = (0.0, 0.10, 0.30, 1.0)
NIGHTS = 4
HISTORY = 20
REMEASURE_BUDGET_S = 40.0
COMMAND_PAIRS = 5  # `workbench compare` against `import workbench`, each in a fresh process
COMMAND_AIM = 1.5
STEAL_LIMIT = 0.02  # above this share of CPU time stolen by the hypervisor, the figures are noise
ANSWER = {EXIT_REGRESSION: "regression", EXIT_INCONCLUSIVE: "inconclusive", EXIT_OK: "pass"}


def products(level: float) -> int:
    return round(PRODUCTS * (1 + level))


def measured_run(folder: Path, level: float, index: int) -> Path:
    """One run of the workload with `level` more work per step, as `workbench run` writes it."""
    started = f"2026-01-01T{index // 3600:02d}:{index // 60 % 60:02d}:{index % 60:02d}"
    return measured_folder(folder, products_workload(products(level)), started)


def answer(*runs: Path) -> str:
    """What a CI job running `workbench compare` on these runs would read from its exit code,
    from the timings. Peak memory is left out: every run here shares one process, whose peak RSS
    only grows (a real run is a process of its own)."""
    changes = [
        c for c in compare_runs(list(runs)).changes if c.area == "timing" and c.unit != "MiB"
    ]
    regressed = any(c.status == "regression" for c in changes)
    return ANSWER[exit_code(regressed, any(c.status == "inconclusive" for c in changes))]


def remeasured(level: float) -> tuple[str, str]:
    """The remeasure's answer on the base workload against one with `level` more work."""
    target = get_target("cpu")
    threads = torch.get_num_threads()
    base = prepare_step(products_workload(PRODUCTS), target, TRAIN, EAGER)
    new = prepare_step(products_workload(products(level)), target, TRAIN, EAGER)
    try:
        one_thread_when_loaded(base, target, threads)
        timing, status = time_in_pairs(base, new, target, Gates(), REMEASURE_BUDGET_S)
    finally:
        torch.set_num_threads(threads)
    ratios = sorted(timing.ratios)
    name = (
        ANSWER[EXIT_REGRESSION]
        if status == "regression"
        else (ANSWER[EXIT_OK] if status == "within gate" else ANSWER[EXIT_INCONCLUSIVE])
    )
    detail = f"{ratios[len(ratios) // 2]:.2f}x in {len(ratios)} pairs, {timing.seconds:.0f} s"
    return name, detail


def _spin(stop: float) -> None:
    while time.monotonic() < stop:
        pass


@contextmanager
def busy_loops(count: int) -> Iterator[None]:
    stop = time.monotonic() + 3600
    loops = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(count)]
    for loop in loops:
        loop.start()
    try:
        yield
    finally:
        for loop in loops:
            loop.terminate()
            loop.join()


def condition(
    root: Path, name: str, start: int
) -> tuple[dict[float, dict[str, Counter[str]]], int]:
    """Every level in every mode, in the machine's present state; the answers by level and mode."""
    index = start
    history = []
    for night in range(NIGHTS):
        history.append(measured_run(root / f"{name}-night{night}", 0.0, index))
        index += 1
    found: dict[float, dict[str, Counter[str]]] = {}
    for level in LEVELS:
        modes: dict[str, Counter[str]] = {"pair": Counter(), "history": Counter()}
        for pair in range(PAIRS):
            base = measured_run(root / f"{name}-{level}-{pair}-base", 0.0, index)
            new = measured_run(root / f"{name}-{level}-{pair}-new", level, index + 1)
            index += 2
            modes["pair"][answer(base, new)] += 1
            modes["history"][answer(*history[-NIGHTS:], new)] += 1
            history.append(base)
        verdict, detail = remeasured(level)
        modes["remeasure"] = Counter({verdict: 1})
        found[level] = modes
        print(
            f"  {'identical' if level == 0 else f'+{level:.0%}':>9}: "
            + "; ".join(f"{mode} {_counts(counts)}" for mode, counts in modes.items())
            + f" ({detail})",
            flush=True,
        )
    return found, index


def _counts(counts: Counter[str]) -> str:
    return ", ".join(f"{counts[a]} {a}" for a in ANSWER.values() if counts[a]) or "none"


def summary(results: dict[str, dict[float, dict[str, Counter[str]]]]) -> None:
    for name, found in results.items():
        alarms = sum(found[0.0][mode]["regression"] for mode in found[0.0])
        judged = sum(sum(found[0.0][mode].values()) for mode in found[0.0])
        silent = sum(found[level][mode]["pass"] for level in LEVELS[1:] for mode in found[level])
        planted = sum(
            sum(found[level][mode].values()) for level in LEVELS[1:] for mode in found[level]
        )
        smallest = {
            mode: next(
                (
                    f"{level:.0%}"
                    for level in LEVELS[1:]
                    if found[level][mode]["regression"] == sum(found[level][mode].values())
                ),
                "none",
            )
            for mode in found[0.0]
        }
        print(
            f"{name}: false alarms on identical code {alarms}/{judged} (aim: 0); planted slowdowns "
            f"passed silently (exit 0) {silent}/{planted} (aim: 0); smallest planted slowdown "
            "caught every time: " + ", ".join(f"{mode} {level}" for mode, level in smallest.items())
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
    seconds, start_s, ratios = paired_medians(command, reference, COMMAND_PAIRS, ok=(0, 5, 6))
    print(
        f"  `workbench compare` of 2 runs, process start to exit: {seconds:.2f} s against "
        f"{start_s:.2f} s for `python -c 'import workbench'`, {seconds / start_s:.1f}x (median "
        f"of {COMMAND_PAIRS} pairs: {', '.join(f'{r:.1f}' for r in ratios)}; aim: within "
        f"{COMMAND_AIM}x)"
    )


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-compare-"))
    steal_before, total_before = cpu_ticks()
    results = {}
    try:
        print(f"planted slowdowns of a {PRODUCTS}-product training step, {PAIRS} pairs per level:")
        print("quiet machine:")
        results["quiet"], index = condition(root, "quiet", 0)
        print("beside two busy loops:")
        with busy_loops(2):
            results["beside two busy loops"], index = condition(root, "busy", index)
        summary(results)
        history = sorted(p for p in root.iterdir() if p.name.startswith("quiet-"))[:HISTORY]
        for label, runs in (("2 runs", history[:2]), (f"{len(history)} runs", history)):
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
