"""The README and the documentation pages say what the code does: the README stays a short
quickstart with the two commands the Makefile defines and the exit codes errors.py defines; its
links resolve; the commands the pages name exist; and the examples users copy work as they are
(the scheduling scripts parse, the Kubernetes CronJob validates against the API schema as
deploy/ does, the factory example loads as a workload, the config example prepares a run)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import REPO_ROOT
from workbench.errors import EXIT_CODES

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
WORKBENCH = Path(sys.executable).parent / "workbench"
README_LIMIT_BYTES = 15_000
# The factory example leaves MyModel to the reader: here, a model of the input and classes it uses.
MY_MODEL = """

class MyModel(torch.nn.Linear):
    def __init__(self):
        super().__init__(64, 4)
"""


def _section(path: Path, heading: str) -> str:
    """The text under one heading, up to the next heading of its level or above (a `#` line
    inside a fenced code block is a comment, not a heading)."""
    level = len(heading.split(" ", 1)[0])
    lines = path.read_text().splitlines()
    assert heading in lines, f"{path.name} has no heading {heading!r}"
    kept: list[str] = []
    fenced = False
    for line in lines[lines.index(heading) + 1 :]:
        if line.startswith("```"):
            fenced = not fenced
        marks = len(line) - len(line.lstrip("#"))
        if not fenced and 0 < marks <= level and line[marks : marks + 1] == " ":
            break
        kept.append(line)
    return "\n".join(kept) + "\n"


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_the_readme_stays_a_quickstart() -> None:
    assert len(README.read_bytes()) <= README_LIMIT_BYTES


def test_the_two_commands_are_make_targets_that_run_and_test() -> None:
    (block,) = _blocks(_section(README, "## Two commands (Linux, Python 3.11)"), "bash")
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make run", "make test"]
    makefile = (REPO_ROOT / "Makefile").read_text()
    run_recipe = makefile.split("\nrun:", 1)[1].split("\n\n", 1)[0]
    assert "workbench run" in run_recipe
    assert re.search(r"^test: ", makefile, flags=re.M)


def test_the_running_page_lists_every_exit_code() -> None:
    """README's own table is held to errors.EXIT_CODES, meanings included, by tests/unit."""
    table = _section(DOCS / "running.md", "## Exit codes")
    codes = {int(code) for code in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    assert codes == {entry.code for entry in EXIT_CODES}


def test_the_readme_links_resolve_and_name_every_page() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    for link in local:
        assert (REPO_ROOT / link).is_file(), f"README links {link}, which does not exist"
    pages = {f"docs/{page.name}" for page in DOCS.glob("*.md") if page.name != "index.md"}
    assert pages <= set(local), f"pages the README does not link: {sorted(pages - set(local))}"


def _named_subcommands() -> set[str]:
    """Every `workbench <command>` that starts a line of a code block in the README or docs."""
    names: set[str] = set()
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for block in _blocks(page.read_text(), "(?:bash|text)"):
            names.update(re.findall(r"^(?:\S*/)?workbench ([a-z][a-z-]*)", block, flags=re.M))
    return names


def test_every_command_the_pages_name_exists() -> None:
    names = _named_subcommands()
    assert {"run", "compare", "open", "export", "tables", "env", "matrix"} <= names
    for name in sorted(names):
        shown = subprocess.run([WORKBENCH, name, "--help"], capture_output=True, text=True)
        assert shown.returncode == 0, f"`workbench {name}` in the docs: {shown.stderr}"


def test_the_scheduling_shell_examples_parse() -> None:
    scripts = _blocks((DOCS / "scheduling.md").read_text(), "bash")
    assert len(scripts) == 3  # nightly.sh, the crontab line, the Slurm batch script
    for script in scripts:
        checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr + script
    nightly = scripts[0]
    # The job's code is the run's when it failed, else compare's: neither is lost.
    assert "ran=$?" in nightly and "compared=$?" in nightly
    assert nightly.rstrip().endswith('exit "$compared"')


def test_the_kubernetes_cronjob_example_validates(tmp_path: Path) -> None:
    (manifest,) = _blocks((DOCS / "scheduling.md").read_text(), "yaml")
    path = tmp_path / "cronjob.yaml"
    path.write_text(manifest)
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "--kubernetes-version",
         "1.33.0", str(path)],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'exit "$compared"' in manifest


def test_the_factory_example_loads_as_a_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workbench.workload import load_workload

    example = next(
        block
        for block in _blocks((DOCS / "own-models.md").read_text(), "python")
        if block.startswith("# my_models/classifier.py")
    )
    package = tmp_path / "my_models"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "classifier.py").write_text(example + MY_MODEL)
    monkeypatch.syspath_prepend(str(tmp_path))

    workload = load_workload("my_models.classifier:make_workload")
    built = workload.build_model()
    inputs, targets = workload.batch()
    loss = workload.compute_loss(workload.forward(built, inputs), targets)
    assert workload.name == "my-classifier" and workload.batch_size == 32
    assert loss.ndim == 0 and bool(loss.isfinite())


def test_the_config_example_prepares_a_run(tmp_path: Path) -> None:
    (config,) = _blocks(_section(DOCS / "running.md", "## Parameters and config files"), "yaml")
    path = tmp_path / "run.yaml"
    path.write_text(config)
    out = tmp_path / "run"
    prepared = subprocess.run(
        [WORKBENCH, "open", "--config", str(path), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    assert sorted(p.name for p in out.glob("*.ipynb")) == [
        "00_environment.ipynb",
        "01_baseline.ipynb",
        "02_op_coverage.ipynb",
    ]
