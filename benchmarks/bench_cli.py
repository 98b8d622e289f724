"""How fast the command line answers, and how heavy a report's page is.

    .venv/bin/python benchmarks/bench_cli.py [RUN_FOLDER]

`workbench --help` is timed against `python -c 'import papermill'` in the same run, each in a
fresh interpreter, in alternating pairs (load changes hit both alike); the aim is a ratio of 1.0
or less: the help must not wait for torch. The page weight is every report in RUN_FOLDER (a
`workbench run` folder), with and without the base64 images it embeds, and its height in headless
Chromium where Chromium is installed; without a folder, notebooks 00 and 01 run on seed-mlp (cpu)
into a temporary folder first.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from notebook_wall_time import paired_medians

PAIRS = 7
_IMAGE = re.compile(rb"data:image/[a-z]+;base64,[A-Za-z0-9+/=]*")


def help_against_papermill() -> None:
    papermill_command = [sys.executable, "-c", "import papermill"]
    for name, arguments in (
        ("workbench --help", ["--help"]),
        ("workbench run --help", ["run", "--help"]),
    ):
        command = [sys.executable, "-m", "workbench.cli", *arguments]
        help_s, reference, ratios = paired_medians(command, papermill_command, PAIRS)
        print(
            f"{name}: {help_s:.2f} s against {reference:.2f} s for "
            f"`python -c 'import papermill'`, {help_s / reference:.2f}x "
            f"(median of {PAIRS} pairs: {', '.join(f'{r:.2f}' for r in ratios)}; "
            "aim: 1.00 or less)"
        )


def page_heights(pages: list[Path]) -> dict[Path, int]:
    """Each page's height in CSS pixels in headless Chromium at a 1280 px wide window, or
    nothing where Chromium is not installed."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return {}
    from playwright.sync_api import sync_playwright

    heights = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1280, "height": 800})
        for page in pages:
            tab.goto(page.as_uri())
            heights[page] = tab.evaluate("document.documentElement.scrollHeight")
        browser.close()
    return heights


def page_weights(folder: Path) -> None:
    pages = sorted(folder.glob("[0-9][0-9]_*.html"))
    heights = page_heights(pages)
    for page in pages:
        data = page.read_bytes()
        images = sum(len(m) for m in _IMAGE.findall(data))
        tall = f", {heights[page]:,} px tall at 1280 px wide" if page in heights else ""
        print(
            f"{page.name}: {len(data) / 1024:.1f} KB, {(len(data) - images) / 1024:.1f} KB "
            f"without its embedded images{tall} (aim for seed-mlp: under 150 KB)"
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
