"""What the compile cache saves a scheduled run, and what each notebook's start-up costs.

    .venv/bin/python benchmarks/bench_workbook_cache.py [--workload seed-mlp] [--startup-only]

1. `warm/cold`: the whole workbook (`workbench run`, all five notebooks) twice in this process's
   run, on the CPU: first with an empty compile cache folder, then with the folder the first run
   filled, as a nightly job with `--compile-cache` on a persistent volume would. Both wall times
   are from launch to exit; each run's compile ledger says what compiled and what the cache
   served. Before the cold run, `import torch` in a throwaway process warms the OS file cache, so
   the ratio is about compiling, not about reading libraries from disk. Issue aim: R <= 0.6.
2. `start-up overhead`: per notebook, its parameters cell, imports and `context.start` (target,
   workload, compile cache, the "this run" table) executed by papermill in a fresh kernel,
   against an empty notebook executed the same way, interleaved A B B A in 3 pairs; the median
   difference is printed, and what is left of it beyond a notebook whose one cell imports torch
   (measured the same way). Notebooks 01-05 draw, so a notebook importing torch and matplotlib
   is printed too: their floor. Two kernels never start alike on a shared machine, so the
   same start-up is also split inside one kernel, 3 times per notebook: `import torch` timed
   first, then the notebook's own imports and `context.start`. Issue aim: within 1.5 s of the
   empty notebook.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import papermill

from workbench.execution.kernel import private_kernelspec
from workbench.params import NOTEBOOKS_DIR
from workbench.summary import read_summary

REPO = Path(__file__).resolve().parent.parent
WORKBENCH = str(Path(sys.executable).parent / "workbench")
STARTUP_PAIRS = 3


def workbook_seconds(out: Path, cache: Path, workload: str) -> tuple[float, dict]:
    """Launch-to-exit seconds of a whole `workbench run`, and its summary and 01 ledger."""
    start = time.perf_counter()
    done = subprocess.run(
        [WORKBENCH, "run", "--workload", workload, "--target", "cpu", "--out", str(out)]
        + ["--compile-cache", str(cache)],
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):  # 1: a notebook's verdict may fail; timings still hold
        sys.exit(f"workbench run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    summary = read_summary(json.loads((out / "summary.json").read_text()), str(out))
    baseline = json.loads((out / "01_baseline.json").read_text())
    return elapsed, {"summary": summary, "baseline": baseline}


def describe(label: str, seconds: float, facts: dict) -> None:
    per_notebook = ", ".join(
        f"{n.notebook[:2]} {n.seconds or 0:.1f} s" for n in facts["summary"].notebooks
    )
    ledger = facts["baseline"]["data"]["compile_ledger"]
    compile_s = sum(e["seconds"] or 0 for e in ledger)
    hits = sum(1 for e in ledger if e["cache"] == "hit")
    cache = facts["baseline"]["compile_cache"]["counters"]
    print(
        f"{label}: {seconds:.1f} s ({per_notebook}); 01 compiled {len(ledger)} graph(s) in "
        f"{compile_s:.1f} s, {hits} served by the cache (cache counters: {cache['hits']} hits, "
        f"{cache['misses']} misses, {cache['saved_seconds'] or 0:.1f} s saved)"
    )


def startup_notebook(path: Path, folder: Path) -> Path:
    """The notebook's cells up to and including `context.start`, nothing after."""
    notebook = nbformat.read(path, as_version=4)
    cut = next(i for i, c in enumerate(notebook.cells) if "context.start(" in c.source)
    notebook.cells = notebook.cells[: cut + 1]
    target = folder / f"startup-{path.name}"
    nbformat.write(notebook, target)
    return target


# Cells put around a start-up notebook's own cells: torch is imported and timed first, then what
# the notebook itself imports and runs up to context.start, in the same kernel, so the split does
# not depend on two kernels starting alike.
_CLOCK_START = "import sys as _sys, time as _time\n_t0 = _time.perf_counter()\nimport torch\n"
_CLOCK_TORCH = "_t1 = _time.perf_counter()\n"
_CLOCK_END = "_t2 = _time.perf_counter()\nprint(f'SPLIT {_t1 - _t0:.3f} {_t2 - _t1:.3f}')\n"


def split_notebook(path: Path, folder: Path) -> Path:
    """The start-up notebook with a clock: torch's import timed apart from the workbook's own."""
    notebook = nbformat.read(startup_notebook(path, folder), as_version=4)
    tagged = [i for i, c in enumerate(notebook.cells) if "parameters" in c.metadata.get("tags", [])]
    at = tagged[0] + 1 if tagged else 0
    clock = [nbformat.v4.new_code_cell(_CLOCK_START + _CLOCK_TORCH)]
    notebook.cells[at:at] = clock
    notebook.cells.append(nbformat.v4.new_code_cell(_CLOCK_END))
    target = folder / f"split-{path.name}"
    nbformat.write(notebook, target)
    return target


def in_kernel_split(path: Path, params: dict, kernel: str, folder: Path) -> tuple[float, float]:
    """(import torch, the notebook's own imports and context.start) in one fresh kernel."""
    out = folder / f"out-split-{path.name}"
    papermill.execute_notebook(
        str(split_notebook(path, folder)),
        str(out),
        parameters=params,
        kernel_name=kernel,
        cwd=str(folder),
        progress_bar=False,
        start_timeout=120,
    )
    printed = "".join(o.get("text", "") for o in nbformat.read(out, as_version=4).cells[-1].outputs)
    _, torch_s, own_s = printed.split()
    return float(torch_s), float(own_s)


def one_cell_notebook(folder: Path, name: str, source: str) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source)]
    target = folder / f"{name}.ipynb"
    nbformat.write(notebook, target)
    return target


def paired_difference(
    base: Path, other: Path, params: dict, kernel: str, folder: Path
) -> tuple[float, float, list[float]]:
    """Median of `other` minus `base` over interleaved pairs, the median of `base`, and every
    pair's difference."""
    differences, bases = [], []
    for pair in range(STARTUP_PAIRS):
        order = [(base, {}), (other, params)]
        if pair % 2:
            order.reverse()
        timed = {p: papermill_seconds(p, kernel, q, folder) for p, q in order}
        differences.append(timed[other] - timed[base])
        bases.append(timed[base])
    return statistics.median(differences), statistics.median(bases), differences


def papermill_seconds(path: Path, kernel: str, params: dict, folder: Path) -> float:
    start = time.perf_counter()
    papermill.execute_notebook(
        str(path),
        str(folder / f"out-{path.name}"),
        parameters=params,
        kernel_name=kernel,
        cwd=str(folder),
        progress_bar=False,
        start_timeout=120,
    )
    return time.perf_counter() - start


def startup_overheads(workload: str, cache: Path) -> None:
    with tempfile.TemporaryDirectory() as name, private_kernelspec([str(REPO)]) as kernel:
        folder = Path(name)
        empty = one_cell_notebook(folder, "empty", "pass")
        # Every notebook needs torch; what importing it costs in a kernel is printed apart, so
        # the workbook's own share of the start-up can be read off.
        torch_only = one_cell_notebook(folder, "import-torch", "import torch")
        torch_cost, empty_s, pairs = paired_difference(empty, torch_only, {}, kernel, folder)
        print(
            f"`import torch` alone: {torch_cost:.2f} s over an empty notebook ({empty_s:.2f} s; "
            f"pairs: {', '.join(f'{d:.2f}' for d in pairs)})"
        )
        # Notebooks 01-05 draw figures, so matplotlib is part of their floor as well; 00 does not.
        drawing = one_cell_notebook(folder, "import-torch-mpl", "import torch, matplotlib.figure")
        drawing_cost, _, pairs = paired_difference(empty, drawing, {}, kernel, folder)
        print(
            f"`import torch, matplotlib.figure` alone: {drawing_cost:.2f} s over an empty "
            f"notebook (pairs: {', '.join(f'{d:.2f}' for d in pairs)})"
        )
        for path in sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb")):
            trimmed = startup_notebook(path, folder)
            params = {"target": "cpu", "out_dir": str(folder), "progress_bars": False}
            if path.stem != "00_environment":
                params |= {"workload": workload, "compile_cache": str(cache)}
            declared = nbformat.read(path, as_version=4).cells
            source = next(c.source for c in declared if "parameters" in c.metadata.get("tags", []))
            params = {k: v for k, v in params.items() if f"\n{k}:" in f"\n{source}"}
            overhead, empty_s, pairs = paired_difference(empty, trimmed, params, kernel, folder)
            splits = [in_kernel_split(path, params, kernel, folder) for _ in range(STARTUP_PAIRS)]
            torch_s = statistics.median(t for t, _ in splits)
            own_s = statistics.median(o for _, o in splits)
            print(
                f"in one kernel, {path.stem}: `import torch` {torch_s:.2f} s, then the "
                f"notebook's own imports and context.start {own_s:.2f} s (median of "
                f"{STARTUP_PAIRS} kernels: {', '.join(f'{o:.2f}' for _, o in splits)}; aim: "
                "the two within 1.5 s)"
            )
            print(
                f"start-up overhead {path.stem}: {overhead:.2f} s over an empty notebook "
                f"({empty_s:.2f} s; pairs: {', '.join(f'{d:.2f}' for d in pairs)}; aim <= 1.5 s), "
                f"{overhead - torch_cost:.2f} s beyond `import torch`"
                + ("" if path.stem == "00_environment" else
                   f", {overhead - drawing_cost:.2f} s beyond torch and matplotlib")
            )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="seed-mlp")
    parser.add_argument("--startup-only", action="store_true")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f}")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # Kernels inherit it: a module whose bytecode was never cached compiles its source at
        # every start, which a user's second start does not.
        print("PYTHONDONTWRITEBYTECODE is set: modules without cached bytecode compile each start")
    with tempfile.TemporaryDirectory() as name:
        root = Path(name)
        cache = root / "cache"
        if not args.startup_only:
            subprocess.run([sys.executable, "-c", "import torch, torch._inductor"], check=True)
            cold, cold_facts = workbook_seconds(root / "cold", cache, args.workload)
            warm, warm_facts = workbook_seconds(root / "warm", cache, args.workload)
            describe("cold cache", cold, cold_facts)
            describe("warm cache", warm, warm_facts)
            print(f"warm/cold: {warm / cold:.2f} (whole workbook on {args.workload}; aim <= 0.6)")
        startup_overheads(args.workload, cache)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
