"""Packages export their names on first use: importing one (a notebook's first cell, compare's
result-file readers) must not load torch or matplotlib before anything needs them."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.fresh_python import fresh_python
from workbench.lazy_exports import lazy_exports
from workbench.questions import QUESTIONS
from workbench.results import SCHEMA_VERSION

# A run folder the real writers wrote (notebooks 00 to 04), committed for the contract test.
COMMITTED_RUN = Path(__file__).parents[1] / "contract" / f"schema_{SCHEMA_VERSION}"

PACKAGES = ("baseline", "coverage", "numerics", "serving", "tuning", "planning", "environment")


def test_importing_the_packages_loads_neither_torch_nor_matplotlib() -> None:
    probe = (
        "import json, sys\n"
        + "".join(f"import workbench.{name}\n" for name in PACKAGES)
        + "before = {m: m in sys.modules for m in ('torch', 'matplotlib')}\n"
        + "import workbench.compare.report\n"  # the comparison page draws its own SVG
        + "after = 'matplotlib' in sys.modules\n"
        + "from workbench.baseline import run_baseline\n"  # a name still resolves, on use
        + "print(json.dumps([before, after, callable(run_baseline), 'torch' in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    before, matplotlib_after_compare, resolved, torch_after_use = json.loads(done.stdout)
    assert before == {"torch": False, "matplotlib": False}
    assert not matplotlib_after_compare
    assert resolved and torch_after_use


def test_a_name_the_package_does_not_export_is_an_attribute_error() -> None:
    import workbench.baseline as baseline

    getattr_hook = lazy_exports(
        "workbench.baseline", {"run_baseline": "workbench.baseline.measure"}
    )
    with pytest.raises(AttributeError, match="has no attribute 'run_basline'"):
        getattr_hook("run_basline")
    assert getattr_hook("run_baseline") is baseline.run_baseline
    assert "run_baseline" in vars(baseline), "kept in the package after the first read"


def test_reading_every_registered_result_file_loads_no_torch() -> None:
    """compare, collect and export-metrics read result files through the registry: every
    registered reader, and a run read through them, stay torch-free (torch alone is ~1.2 s of a
    `workbench compare` that otherwise starts in about the time `import workbench` takes)."""
    probe = (
        "import json, sys\n"
        "from workbench.compare.runs import load_run\n"
        "from workbench.questions import QUESTIONS, result_file\n"
        "readers = [result_file(entry.notebook).notebook for entry in QUESTIONS]\n"
        f"run = load_run({str(COMMITTED_RUN)!r})\n"
        "import workbench.compare.judge, workbench.cli\n"
        f"heavy = [m for m in {MEASURING_ONLY!r} if m in sys.modules]\n"
        "print(json.dumps([readers, sorted(run.results), 'torch' in sys.modules, heavy]))"
    )
    readers, read, torch_loaded, heavy = json.loads(fresh_python(probe))
    assert readers == [entry.notebook for entry in QUESTIONS]
    assert read == sorted(path.stem for path in COMMITTED_RUN.glob("0*.json"))
    assert not torch_loaded
    assert heavy == [], "what only measuring, capturing or drawing a bar needs is imported there"


# Modules a run's measuring code uses and a reader of its results never does: each is imported
# inside the function that measures, captures, asks the metadata service or draws a bar.
MEASURING_ONLY = (
    "psutil",
    "tqdm",
    "ipywidgets",
    "yaml",
    "urllib.request",
    "importlib.metadata",
    "platform",
    "matplotlib",
)
