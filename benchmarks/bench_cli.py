"""How fast the command line answers, and how heavy a report's page is.

    .venv/bin/python benchmarks/bench_cli.py [RUN_FOLDER]

`workbench --help` is timed against `python -c 'import papermill'` in the same run, each in a
fresh interpreter, in alternating pairs (load changes hit both alike); the aim is a ratio of 1.0
or less: the help must not wait for torch. The page weight is every report in RUN_FOLDER (a
`workbench run` folder), with and without the base64 images it embeds; without a folder, notebooks
00 and 01 run on seed-mlp (cpu) into a temporary folder first.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAIRS = 7
_IMAGE = re.compile(rb"data:image/[a-z]+;base64,[A-Za-z0-9+/=]*")


def _wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def help_against_papermill() -> None:
    help_command = [sys.executable, "-m", "workbench.cli", "--help"]
    run_help_command = [sys.executable, "-m", "workbench.cli", "run", "--help"]
    papermill_command = [sys.executable, "-c", "import papermill"]
    _wall(help_command)  # both warm the file-system cache before anything counts
    _wall(papermill_command)
    helps, run_helps, papermills = [], [], []
    for _ in range(PAIRS):
        helps.append(_wall(help_command))
        run_helps.append(_wall(run_help_command))
        papermills.append(_wall(papermill_command))
    reference = statistics.median(papermills)
    for name, samples in (("workbench --help", helps), ("workbench run --help", run_helps)):
        ratios = ", ".join(f"{h / p:.2f}" for h, p in zip(samples, papermills, strict=True))
        print(
            f"{name}: {statistics.median(samples):.2f} s against {reference:.2f} s for "
            f"`python -c 'import papermill'`, {statistics.median(samples) / reference:.2f}x "
            f"(median of {PAIRS} pairs: {ratios}; aim: 1.00 or less)"
        )


def page_weights(folder: Path) -> None:
    for page in sorted(folder.glob("[0-9][0-9]_*.html")):
        data = page.read_bytes()
        images = sum(len(m) for m in _IMAGE.findall(data))
        print(
            f"{page.name}: {len(data) / 1024:.1f} KB, {(len(data) - images) / 1024:.1f} KB "
            "without its embedded images (aim for seed-mlp: under 150 KB)"
        )


def main() -> None:
    help_against_papermill()
    if len(sys.argv) > 1:
        page_weights(Path(sys.argv[1]))
        return
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "run"
        command = [sys.executable, "-m", "workbench.cli", "run", "--only", "00,01"]
        subprocess.run([*command, "--target", "cpu", "--out", str(out)], check=True)
        page_weights(out)


if __name__ == "__main__":
    main()
