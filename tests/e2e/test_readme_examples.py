"""The README's scheduling examples are copied as they are: each shell block parses, and the
Kubernetes CronJob validates against the API schema (kubernetes-validate, as for deploy/)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.fixtures import REPO_ROOT

README = REPO_ROOT / "README.md"


def _blocks(language: str) -> list[str]:
    section = README.read_text().split("## Scheduling headless runs")[1].split("\n## ")[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def test_the_scheduling_shell_examples_parse() -> None:
    scripts = _blocks("bash")
    assert len(scripts) == 3  # nightly.sh, the crontab line, the Slurm batch script
    for script in scripts:
        checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr + script
    nightly = scripts[0]
    # The job's code is the run's when it failed, else compare's: neither is lost.
    assert "ran=$?" in nightly and "compared=$?" in nightly
    assert nightly.rstrip().endswith('exit "$compared"')


def test_the_kubernetes_cronjob_example_validates(tmp_path: Path) -> None:
    (manifest,) = _blocks("yaml")
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
