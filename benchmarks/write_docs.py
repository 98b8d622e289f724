"""Run every benchmark in this folder and write what they printed to docs/benchmarks.md.

    nice .venv/bin/python benchmarks/write_docs.py [--out docs/benchmarks.md]

Each benchmark runs as its own process, in a fixed order, with the interpreter running this
script; its standard output is copied into the page verbatim, beside the command that produced
it and how long it took. The page opens with the date and the machine (cores, CPU model, torch
version, load average), since the benchmarks' absolute times mean nothing without them; their
ratios are measured against references taken in the same run, which is what makes them
comparable between machines. A benchmark that exits non-zero is written with its exit code and
the end of its standard error, and this script then exits 1, so a broken benchmark is never
published as a result.

It also rewrites the block between README.md's two benchmark markers with the lines that state
an aim or a ratio against a reference, so the README quotes the same run the page shows.

The benchmarks import the `workbench` package of the checkout this script lives in (it is put
first on PYTHONPATH), whatever checkout the virtualenv's editable install points at; run it in a
clean clone to measure one commit, which the page then names.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "docs" / "benchmarks.md"
README = REPO / "README.md"
README_START = "<!-- benchmarks: written by benchmarks/write_docs.py -->"
README_END = "<!-- /benchmarks -->"
# A printed line the README quotes: one that states its aim, or a ratio against a reference.
KEY_LINE_MARKS = ("aim", "ratio vs torch.utils.benchmark")
STDERR_TAIL_LINES = 30

# notebook_wall_time.py is the helper bench_coverage and bench_retuning use; it has no command
# line of its own, so it is called here for each notebook with the same function they call.
_WALL_TIMES = (
    "import sys; sys.path.insert(0, 'benchmarks'); "
    "from notebook_wall_time import notebook_wall_seconds; "
    "[print(f'workbench run --only {n}: {notebook_wall_seconds(n):.1f} s') "
    "for n in ('00', '01', '02', '03', '04', '05')]"
)


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: the arguments after the interpreter, and what its output answers."""

    name: str
    arguments: tuple[str, ...]
    answers: str


BENCHMARKS = (
    Benchmark(
        "bench_baseline.py",
        ("benchmarks/bench_baseline.py",),
        "How far notebook 01's numbers can be trusted: the default baseline's wall time with a "
        "cold Inductor cache, its steady-state median against `torch.utils.benchmark` (aim "
        "0.95-1.05 on a quiet machine) and a plain 20-step loop against what the phases "
        "predict for it.",
    ),
    Benchmark(
        "bench_coverage.py",
        ("benchmarks/bench_coverage.py",),
        "What notebook 02's op capture costs over the same training step uncaptured (aim at "
        "most 3x), and the time to a whole coverage answer, `workbench run --only 02` on "
        "seed-mlp (aim at most 8 s).",
    ),
    Benchmark(
        "bench_numerics.py",
        ("benchmarks/bench_numerics.py",),
        "What notebook 03's layer-by-layer comparison costs next to the plain passes it "
        "compares, on tiny-transformer, for fp32 and bf16 autocast at two batch sizes (aim at "
        "most 3x).",
    ),
    Benchmark(
        "bench_retuning.py",
        ("benchmarks/bench_retuning.py",),
        "How many trials notebook 04's largest-batch search needs against a known limit, "
        "beside PyTorch Lightning's batch-size finder, and the wall time of the default "
        "retuning notebook.",
    ),
    Benchmark(
        "bench_serving.py",
        ("benchmarks/bench_serving.py",),
        "How far notebook 05's inference timer agrees with `torch.utils.benchmark` on the same "
        "batch-1 call (aim 0.95-1.05 on a quiet machine), and what the whole serving part costs "
        "over the calls it times, on seed-mlp and tiny-transformer (aim at most 1.5x).",
    ),
    Benchmark(
        "bench_planning.py",
        ("benchmarks/bench_planning.py",),
        "How far the memory-fit planner's per-rank peak agrees with FSDP2, tensor-parallel and "
        "ZeRO-1 runs on gloo at 2 and 4 ranks (aim 0.80-1.20), whether the rank-by-rank "
        "numerics check fails a planted wrong sharding, and what `workbench plan` costs on the "
        "Llama-3-8B config (aim under 5 s, beside the imports any plan of an hf: config pays).",
    ),
    Benchmark(
        "bench_compare.py",
        ("benchmarks/bench_compare.py",),
        "How well `workbench compare` tells a planted slowdown (+10%, +30%, 2x of the step's "
        "work) from noise, quiet and beside two busy loops, as a pair, against a history of 4 "
        "runs and by `--remeasure`: false alarms on identical code (aim 0), planted slowdowns "
        "passed silently with exit 0 (aim 0), the smallest slowdown caught in each mode; what a "
        "comparison of 2 and of 20 runs costs in-process (aim under 2 s), and `workbench "
        "compare` of 2 runs from process start to exit against `python -c 'import workbench'` "
        "(aim within 1.5x).",
    ),
    Benchmark(
        "bench_cli.py",
        ("benchmarks/bench_cli.py",),
        "How fast `workbench --help` answers next to `import papermill` (aim 1.0 or less), and "
        "how heavy the reports of notebooks 00 and 01 are.",
    ),
    Benchmark(
        "bench_workbook_cache.py",
        ("benchmarks/bench_workbook_cache.py", "--startup-only"),
        "What each notebook's start-up costs over an empty notebook (aim within 1.5 s), and "
        "over `import torch` alone. Run with its `--startup-only` mode: the full benchmark "
        "also runs the whole workbook twice, cold and warm compile cache, which takes several "
        "minutes more; run it without the flag for the warm/cold ratio.",
    ),
    Benchmark(
        "notebook_wall_time.py",
        ("-c", _WALL_TIMES),
        "The wall time of each notebook started the way a user starts it, `workbench run "
        "--only NN` on the default workload, from launch to exit (kernel start and report "
        "export included).",
    ),
)


@dataclass(frozen=True)
class Outcome:
    """What one benchmark printed, how it ended and how long it took."""

    benchmark: Benchmark
    stdout: str
    stderr: str
    returncode: int
    seconds: float


def run(benchmark: Benchmark) -> Outcome:
    print(f"running {benchmark.name} ...", file=sys.stderr, flush=True)
    # Kernels and child processes inherit the variable, so every notebook runs this checkout too.
    search_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    # Commands are timed as Python runs them by default, with its bytecode cache: a
    # PYTHONDONTWRITEBYTECODE set in the calling shell (some containers set it) would make every
    # process compile the package's source again, about 0.1 s of each command's start.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *benchmark.arguments],
        cwd=REPO,
        env={**env, "PYTHONPATH": search_path},
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    print(f"  {benchmark.name}: exit {done.returncode} after {seconds:.0f} s", file=sys.stderr)
    return Outcome(benchmark, done.stdout, done.stderr, done.returncode, seconds)


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it, or the platform's word where none."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def torch_version() -> str:
    """The version the benchmarks import, read from the same interpreter in a child process."""
    done = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else "not importable"


def code_version() -> str:
    """The commit measured, and whether tracked files differed from it."""

    def git(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(REPO), *arguments], capture_output=True, text=True, check=False
        )

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return "not a git checkout"
    changed = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    state = "with uncommitted changes" if changed else "no uncommitted changes"
    return f"commit {head.stdout.strip()} ({state})"


def command_line(benchmark: Benchmark) -> str:
    if benchmark.arguments[0] == "-c":
        return f'.venv/bin/python -c "{benchmark.arguments[1]}"'
    return " ".join([".venv/bin/python", *benchmark.arguments])


def fence(text: str) -> str:
    """A fence longer than any run of backticks in the text, so output never closes it early."""
    longest = 0
    run_length = 0
    for character in text:
        run_length = run_length + 1 if character == "`" else 0
        longest = max(longest, run_length)
    return "`" * max(3, longest + 1)


def page(outcomes: list[Outcome], started: datetime.datetime, machine: str, code: str) -> str:
    total = sum(outcome.seconds for outcome in outcomes)
    lines = [
        "# Benchmarks",
        "",
        "This page is written by `benchmarks/write_docs.py`, which runs every benchmark in",
        "`benchmarks/` and copies what each printed; nothing below is edited by hand. Absolute",
        "times depend on the machine and on whatever else ran on it; each benchmark states its",
        "ratios against a reference measured in the same run, and marks a measurement taken on a",
        "loaded machine as such. To refresh the page:",
        "",
        "```bash",
        "nice .venv/bin/python benchmarks/write_docs.py",
        "```",
        "",
        f"- **Date**: {started:%Y-%m-%d %H:%M} UTC",
        f"- **Machine**: {machine}",
        f"- **Code**: {code}",
        f"- **All benchmarks**: {total / 60:.1f} min",
        "",
        "What the measurements mean, and what the workbook does to keep them cheap, is in",
        "[What the measurements cost](measurement-cost.md).",
        "",
    ]
    for outcome in outcomes:
        benchmark = outcome.benchmark
        output = outcome.stdout.rstrip("\n") or "(no output)"
        marks = fence(output)
        lines += [
            f"## {benchmark.name}",
            "",
            benchmark.answers,
            "",
            f"Took {outcome.seconds:.0f} s; exit code {outcome.returncode}.",
            "",
            "```bash",
            command_line(benchmark),
            "```",
            "",
            f"{marks}text",
            output,
            marks,
            "",
        ]
        if outcome.returncode != 0:
            tail = "\n".join(outcome.stderr.rstrip("\n").splitlines()[-STDERR_TAIL_LINES:])
            lines += [
                "It failed; the end of its standard error:",
                "",
                f"{fence(tail)}text",
                tail,
                fence(tail),
                "",
            ]
    return "\n".join(lines)


def key_lines(outcome: Outcome) -> list[str]:
    """The lines of a benchmark's output that state an aim or a ratio against a reference."""
    return [
        line.strip()
        for line in outcome.stdout.splitlines()
        if any(mark in line for mark in KEY_LINE_MARKS)
    ]


def readme_block(outcomes: list[Outcome], started: datetime.datetime, code: str) -> str:
    lines = [line for outcome in outcomes for line in key_lines(outcome)]
    marks = fence("\n".join(lines))
    return "\n".join(
        [
            README_START,
            f"From the run of {started:%Y-%m-%d}, {code}; each line with its context in",
            "[docs/benchmarks.md](docs/benchmarks.md):",
            "",
            f"{marks}text",
            *lines,
            marks,
            README_END,
        ]
    )


def with_readme_block(readme: str, block: str) -> str:
    """README.md's text with the block between the markers replaced; the markers must exist."""
    start, end = readme.find(README_START), readme.find(README_END)
    if start < 0 or end < start:
        raise SystemExit(
            f"README.md has no '{README_START}' ... '{README_END}' block to write the figures into."
        )
    return readme[:start] + block + readme[end + len(README_END) :]


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the page to write")
    args = parser.parse_args()
    # A page written elsewhere is a trial run: the README keeps the figures it quotes.
    update_readme = args.out.resolve() == DEFAULT_OUT
    if update_readme:
        with_readme_block(README.read_text(), "")  # missing markers fail now, not after the run
    started = datetime.datetime.now(datetime.timezone.utc)
    load = os.getloadavg()[0]
    machine = (
        f"{os.cpu_count()} cores, {cpu_model()}, {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, torch {torch_version()}, "
        f"load average {load:.2f} at the start"
    )
    code = code_version()
    outcomes = [run(benchmark) for benchmark in BENCHMARKS]
    write_atomically(args.out, page(outcomes, started, machine, code))
    failed = [outcome.benchmark.name for outcome in outcomes if outcome.returncode != 0]
    total = sum(outcome.seconds for outcome in outcomes)
    print(f"wrote {args.out} after {total:.0f} s", file=sys.stderr)
    if failed:  # the page shows the failure; the README keeps the last complete figures
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    if update_readme:
        write_atomically(
            README, with_readme_block(README.read_text(), readme_block(outcomes, started, code))
        )
        print(f"updated the figures in {README.name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
