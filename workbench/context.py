"""The first and last thing every notebook does: validate its parameters, resolve the target,
load the workload, say plainly what the run validates, and save its result file."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from IPython.display import display

import workbench
from workbench import markup as show
from workbench.compile_cache.cache import (
    STATUS_IN_USE,
    STATUS_OFF,
    CompileCache,
    open_compile_cache,
)
from workbench.errors import NotAnswered
from workbench.params import NOTEBOOKS_DIR, coerce, notebook_parameters
from workbench.questions import Registered, question
from workbench.results import save_result
from workbench.scorecard import Verdict
from workbench.targets import get_target, resolve_target_name
from workbench.targets.base import Target
from workbench.workload import Workload, WorkloadSpec, with_workload_attentions


@dataclass
class RunContext:
    notebook: str
    params: dict[str, Any]
    target: Target
    target_reason: str
    workload_spec: WorkloadSpec | None  # what child processes load the workload from
    workload: Workload | None
    out_dir: Path
    facts: dict[str, Any] = field(default_factory=dict)
    compile_cache: CompileCache | None = None  # None: the notebook compiles nothing

    def read_compile_cache(self) -> CompileCache | None:
        """The run's compile cache with its own hit/miss counters read now; None where the
        notebook compiles nothing."""
        if self.compile_cache is not None:
            self.compile_cache.counters = self.target.cache_counters()
        return self.compile_cache

    def cache_record(self) -> dict[str, Any] | None:
        """What the result file keeps of the compile cache, counters read at save time."""
        cache = self.read_compile_cache()
        if cache is None:
            return None
        return asdict(cache) | {"misses_explained": cache.miss_explanation()}

    def header(self) -> dict[str, Any]:
        """What every result file carries besides its own data."""
        return {
            "target": {**self.target.describe(), "chosen_because": self.target_reason},
            "workload": self.workload.describe() if self.workload else None,
            "validation": self.target.validation_statement(),
            "parameters": self.params,
            "compile_cache": self.cache_record(),
            "versions": {
                "workbench": workbench.__version__,
                "python": platform.python_version(),
                "torch": _torch_version(),
                **{name: _installed(name) for name in ("torch-neuronx", "torch-xla", "neuronx-cc")},
            },
        }

    def save(self, data: dict[str, Any]) -> Path:
        """Write `<out_dir>/<notebook>.json` atomically; the path is shown for interactive users."""
        if self.workload is not None:
            data = with_workload_attentions(data, self.workload.attentions)
        path = save_result(self.out_dir, self.notebook, data, **self.header())
        verdict = data.get("verdict")
        if isinstance(verdict, Verdict):
            # The report shows the verdict on top, from the result file; this is for the live view.
            display(show.verdict_banner(verdict), metadata=show.LIVE_ONLY)
        print(f"result saved: {path}")
        return path


def _installed(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _torch_version() -> str:
    import torch

    return torch.__version__


def _check_answerable(notebook: str, registered: Registered, workload: Workload) -> None:
    """NotAnswered, with the reason, for a question this workload cannot answer."""
    if workload.loss_stand_in and registered.needs_the_loss:
        raise NotAnswered(
            f"{notebook}: not answered: {workload.loss_stand_in}, and this question trains on it"
        )
    if workload.fixed_batch and registered.varies_the_batch:
        raise NotAnswered(
            f"{notebook}: not answered: {workload.fixed_batch}, and this question varies it"
        )


def start(notebook: str, namespace: dict[str, Any], *, with_workload: bool = True) -> RunContext:
    """Read the notebook's parameters from `namespace` (its globals), checked against the
    notebook's own parameters cell, so an edited or string-typed value fails here, clearly."""
    declared = notebook_parameters(NOTEBOOKS_DIR / f"{notebook}.ipynb")
    params = {name: coerce(p, namespace.get(name, p.default)) for name, p in declared.items()}
    _use_png_figures()

    target_name, reason = resolve_target_name(params.get("target", "auto"))
    target = get_target(target_name)
    spec = WorkloadSpec.from_params(params) if with_workload else None
    workload = spec.load() if spec else None
    registered = question(notebook)
    if workload is not None and registered is not None:
        _check_answerable(notebook, registered, workload)
    out_dir = Path(params.get("out_dir") or ".").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    # Wired before anything compiles: the caches read their folders on first use.
    cache = (
        open_compile_cache(params["compile_cache"], target) if "compile_cache" in params else None
    )
    ctx = RunContext(notebook, params, target, reason, spec, workload, out_dir, compile_cache=cache)

    facts = {"target": f"{target.name} ({reason})", "device": str(target.device)}
    if workload is not None:
        facts["workload"] = f"{workload.name}: {workload.description}"
    facts["python"] = f"{platform.python_version()} on {sys.platform}, pid {os.getpid()}"
    if cache is not None:
        facts["compile cache"] = f"{cache.sentence}; {cache.wiring}"
    # Banners and tables keep their look in JupyterLab too (reports inline the same rules).
    display(show.Rich(f"<style>{show.stylesheet()}</style>", ""), metadata=show.LIVE_ONLY)
    # The report's lead says what ran from the result file; the table is for the live view.
    display(show.key_values(facts, caption="This run"), metadata=show.LIVE_ONLY)
    if cache is not None and cache.status not in (STATUS_IN_USE, STATUS_OFF):
        print(f"warning: {cache.sentence}")  # the console line a headless run shows
        display(show.banner(cache.sentence, "warn"))
    kind = "ok" if target.is_trainium else "warn"
    display(show.banner(target.validation_statement(), kind), metadata=show.LIVE_ONLY)
    return ctx


def _use_png_figures() -> None:
    """Figures display as the palette PNG the reports embed (markup.figure_png). The formatter
    is registered by the figure's class name, so matplotlib (half a second to import) is loaded
    only by a notebook that draws; 00 draws nothing."""
    try:
        from IPython import get_ipython
    except ImportError:  # outside IPython there is nothing to configure
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    formatters = shell.display_formatter.formatters
    for mime in ("image/svg+xml", "application/pdf", "image/jpeg"):
        formatters[mime].pop("matplotlib.figure.Figure", None)
    formatters["image/png"].for_type_by_name("matplotlib.figure", "Figure", show.figure_png_base64)
