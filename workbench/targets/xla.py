"""torch-xla lazy tensors: the legacy torch-neuronx path on Trn1/Inf2, and XLA:CPU in CI.

Written against torch-xla 2.9 (the last release the XLA-based torch-neuronx builds on):
`torch_xla.device()`, `torch_xla.sync()`, `torch_xla.core.xla_model`, `torch_xla.debug.metrics`
(reference: neuron.md sections 2.3 and 2.4, xla_cpu.md). torch_xla is imported only inside this
module's functions: its import registers the PJRT runtime, and on a Trn1 it can claim NeuronCores.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from workbench.targets import detect
from workbench.targets.base import (
    CAUSE_NEW_XLA_GRAPH,
    Availability,
    CacheCounters,
    CompileCounters,
    CompileEvent,
    DeviceMemory,
    InferenceAnalysis,
    MemoryReading,
    PrewarmCommand,
    Target,
    UnsupportedOp,
)
from workbench.targets.dynamo_counters import dynamo_compile_events
from workbench.targets.neuron import NEURON_OUT_OF_MEMORY_PATTERNS, neuron_compiler_host_oom
from workbench.targets.xla_analysis import AnalysisFile, CompileAnalysis

# `.item()`, `.tolist()` and printing a tensor read one value back to the host through this op.
# torch_xla counts it like a fallback, but it is a host sync, not a missing lowering.
HOST_READ_OP = "aten::_local_scalar_dense"

_NS_PER_SECOND = 1e9
# HBM per NeuronCore by torch_xla device kind: a Trn1/Inf2 chip has 32 GiB for its two
# NeuronCore-v2 (neuron.md 4.1). Other kinds are left out rather than guessed.
_CORE_MEMORY_BY_KIND = {"NC_v2": 16 << 30}


def _major_minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


PARALLEL_COMPILE = "neuron_parallel_compile"


def neuron_cache_url(folder: str) -> str:
    """The Neuron compile cache inside a run's stamped cache folder; runs and pre-warming agree
    on it, so what neuron_parallel_compile fills is what the next run looks up."""
    return os.path.join(folder, "neuron")


def neuron_cache_root() -> str | None:
    """The local folder of the Neuron compile cache (neuron.md 2.8): --cache_dir in
    NEURON_CC_FLAGS wins over NEURON_COMPILE_CACHE_URL, whose default is
    /var/tmp/neuron-compile-cache. None for a remote (s3://) cache, which is not counted."""
    flags = re.search(r"--cache_dir[= ](\S+)", os.environ.get("NEURON_CC_FLAGS", ""))
    url = flags.group(1) if flags else os.environ.get("NEURON_COMPILE_CACHE_URL", "")
    url = url or "/var/tmp/neuron-compile-cache"
    return None if "://" in url else url


def _neff_modules(root: str | None) -> set[str]:
    """The cache's compiled modules: neuronxcc-<version>/MODULE_<hash> holding a model.neff."""
    if root is None:
        return set()
    return {str(neff.parent) for neff in Path(root).glob("neuronxcc-*/MODULE_*/model.neff")}


def _pjrt_device() -> str:
    """The PJRT device torch_xla runs on; torch_xla itself fills the variable in when unset."""
    return os.environ.get("PJRT_DEVICE", "").upper()


class XlaTarget(Target):
    name = "xla"
    # torch-xla decides lowering versus CPU fallback the same way on XLA:CPU as on a Trn1.
    neuron_flavour = detect.FLAVOUR_XLA
    eager_description = (
        "lazy tracing: ops are recorded, not run; each step up to torch_xla.sync() becomes one "
        "HLO graph, compiled on first sight of its shape and taken from the graph cache after"
    )
    compile_description = (
        "lazy tracing: every step up to torch_xla.sync() is already traced into one HLO graph "
        "and compiled (cached by graph hash, recompiled for each new graph or shape); "
        "compile() adds Dynamo capture with torch.compile(backend='openxla')"
    )
    # Importing torch_xla starts the PJRT runtime (and on a Trn1 may claim NeuronCores), so each
    # trial process starts as a fresh interpreter.
    trial_start_method = "spawn"
    distributed_backend = "xla"
    # Mixed precision keeps the base autocast_device_type, the device's own "xla":
    # torch.autocast("xla") is the entry point that works everywhere (torch_xla.amp.autocast
    # crashes on XLA:CPU, xla_cpu.md), and Neuron's legacy bf16 recipe (c) is this autocast
    # around the forward with NEURON_CC_FLAGS="--auto-cast=none" (neuron.md 2.3).
    # XLA reports device allocation failures as RESOURCE_EXHAUSTED; on a Trn1 the Neuron runtime
    # and compiler report theirs as on the native path.
    out_of_memory_patterns = (
        *Target.out_of_memory_patterns,
        *NEURON_OUT_OF_MEMORY_PATTERNS,
        r"RESOURCE_EXHAUSTED[^\n]*",
    )

    @classmethod
    def availability(cls) -> Availability:
        xla_version = detect.installed_version("torch-xla")
        if xla_version is None:
            return Availability(
                False,
                "torch-xla is not installed; for XLA:CPU or a Trn1, install torch and torch-xla "
                "of the same release together in a virtualenv of their own",
            )
        wanted = _major_minor(xla_version)
        if wanted != _major_minor(torch.__version__):
            # Importing a torch_xla built for another torch fails deep in its C++ extension;
            # the versions alone already say so, without loading that library.
            return Availability(
                False,
                f"torch-xla {xla_version} needs torch {wanted}; installed torch "
                f"{torch.__version__}; install both pinned in a virtualenv of their own "
                f"(pip install 'torch=={wanted}.*' 'torch-xla=={xla_version}')",
            )
        try:
            import torch_xla  # noqa: F401
        except ImportError as exc:
            if "undefined symbol" in str(exc):
                return Availability(
                    False,
                    f"torch-xla {xla_version} was built against a different torch {wanted} "
                    f"build than the installed torch {torch.__version__} ({exc}); install the "
                    "torch release published together with this torch-xla",
                )
            return Availability(
                False, f"torch-xla {xla_version} is installed but fails to import: {exc}"
            )
        return Availability(
            True,
            f"torch-xla {xla_version} importable, PJRT_DEVICE={_pjrt_device() or 'unset'}",
        )

    def __init__(self) -> None:
        # Before anything is traced: torch_xla reads its debug level once (xla_analysis).
        self._analysis = AnalysisFile()
        # The Neuron compile cache a Trn1 run counts in (use_compile_cache sets both).
        self._neuron_cache: str | None = None
        self._neffs_at_start: set[str] = set()
        import torch_xla

        self._device = torch_xla.device()

    @property
    def device(self) -> torch.device:
        return self._device

    def synchronize(self) -> None:
        import torch_xla
        import torch_xla.core.xla_model as xm

        # sync() cuts the traced graph and launches it; execution is still asynchronous, so
        # wait for the device before anyone reads a clock.
        torch_xla.sync()
        xm.wait_device_ops()

    def manual_seed(self, seed: int) -> None:
        import torch_xla.core.xla_model as xm

        # The XLA device draws from its own generator, which torch.manual_seed does not reach.
        super().manual_seed(seed)
        xm.set_rng_state(seed, device=str(self.device))

    def device_memory(self) -> DeviceMemory | None:
        if not self.is_trainium:
            return None
        kind = self.device_kind()
        if kind not in _CORE_MEMORY_BY_KIND:
            return None
        return DeviceMemory(
            _CORE_MEMORY_BY_KIND[kind],
            f"{kind}: 16 GiB HBM per NeuronCore-v2 (32 GiB per Trn1/Inf2 chip, neuron.md 4.1)",
        )

    def max_data_parallel_workers(self) -> int:
        import torch_xla.runtime as xr

        return xr.global_runtime_device_count()

    def collectives(self) -> Availability:
        if not self.is_trainium:
            return Availability(
                False,
                f"XLA:{_pjrt_device() or 'CPU'} cannot run multi-process collectives: torch-xla's "
                "all_reduce there aborts on a rendezvous timeout, and upstream does not support "
                "collectives on XLA:CPU (pytorch/xla#5005); data-parallel scaling needs a Trn1 "
                "(PJRT_DEVICE=NEURON)",
            )
        return super().collectives()

    def init_process_group(self, timeout: timedelta) -> None:
        # Importing the module registers the "xla" backend with torch.distributed (neuron.md 2.3).
        import torch_xla.distributed.xla_backend  # noqa: F401

        super().init_process_group(timeout)

    def data_parallel(self, model: torch.nn.Module) -> torch.nn.Module:
        # The XLA torch-neuronx path has no DDP: xm.optimizer_step all-reduces the gradients
        # instead (neuron.md 2.3 and 3).
        return model

    def data_parallel_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        import torch_xla.core.xla_model as xm

        xm.optimizer_step(optimizer)

    def peak_memory(self) -> MemoryReading:
        return MemoryReading(
            peak_allocated=None,
            peak_reserved=None,
            source=(
                "torch-xla has no peak-memory API for this path; on a Trn1 read neuron-monitor's "
                "memory_used (neuron_runtime_used_bytes.neuron_device) while the workload runs"
            ),
        )

    def compile(self, fn: Callable) -> Callable:
        return torch.compile(fn, backend="openxla")

    def compile_counters(self) -> CompileCounters:
        import torch_xla.debug.metrics as met

        compile_time = met.metric_data("CompileTime")
        execute_time = met.metric_data("ExecuteTime")
        # metric_data is None until the metric has a sample: nothing compiled or run yet.
        extra: dict[str, Any] = {
            "uncached_compiles": met.counter_value("UncachedCompile") or 0,
            "cached_compiles": met.counter_value("CachedCompile") or 0,
            "executions": int(execute_time[0]) if execute_time else 0,
            "execute_seconds": execute_time[1] / _NS_PER_SECOND if execute_time else 0.0,
        }
        host_reads = met.counter_value(HOST_READ_OP)
        if host_reads:
            extra["host_value_reads"] = host_reads
        return CompileCounters(
            graphs=int(compile_time[0]) if compile_time else 0,
            compile_seconds=compile_time[1] / _NS_PER_SECOND if compile_time else 0.0,
            source=(
                "torch_xla.debug.metrics CompileTime/ExecuteTime (ns) and UncachedCompile/"
                "CachedCompile counters, since process start or the last start_fallback_tracking"
            ),
            extra=extra,
        )

    @classmethod
    def prewarm_command(cls, step: list[str], cache_folder: str) -> PrewarmCommand | str:
        tool = shutil.which(PARALLEL_COMPILE)
        if tool is None:
            return (
                f"{PARALLEL_COMPILE} is not installed here (it comes with the XLA-based "
                "torch-neuronx on a Trn1 host), so nothing was pre-compiled: the first scheduled "
                f"run compiles every graph into {neuron_cache_url(cache_folder)}"
            )
        # neuron_parallel_compile runs the command once in graph-extraction mode (its outputs
        # are garbage), then compiles every graph it saw into NEURON_COMPILE_CACHE_URL
        # (neuron.md 2.5). Flags other than the step count must match the scheduled run's, or
        # its lookups miss: NEURON_CC_FLAGS is inherited unchanged.
        return PrewarmCommand(
            argv=[tool, *step],
            env={
                "NEURON_COMPILE_CACHE_URL": neuron_cache_url(cache_folder),
            },
            description=f"{PARALLEL_COMPILE} into {neuron_cache_url(cache_folder)}",
        )

    @classmethod
    def compiler_host_oom(cls, text: str) -> str | None:
        # On a Trn1, torch-neuronx hands every XLA graph to neuronx-cc.
        return neuron_compiler_host_oom(text)

    def compile_events(self, since: float) -> list[CompileEvent]:
        import torch_xla.debug.metrics as met

        # CompileTime keeps one (end time in epoch seconds, nanoseconds) sample per compile.
        # torch_xla compiles a traced graph only when its hash is not in the computation cache,
        # so every sample is a graph (or shape) it had not seen in this process.
        data = met.metric_data("CompileTime")
        samples = list(data[2]) if data else []
        # torch_xla writes one analysis per compile, in the same order as the samples. The
        # samples restart when the metrics are cleared and the file does not, so the two are
        # matched from the newest end.
        analyses = self._analysis.analyses()
        newest: list[CompileAnalysis | None] = list(analyses[-len(samples) :] if samples else [])
        matched = [None] * (len(samples) - len(newest)) + newest
        events = []
        earlier: dict[str, str] = {}  # user location -> the graph hash last compiled there
        for number, ((ended, nanoseconds), analysis) in enumerate(
            zip(samples, matched, strict=True), 1
        ):
            seconds = nanoseconds / _NS_PER_SECOND
            event = _xla_compile_event(number, ended - seconds, seconds, analysis, earlier)
            if event.started_at >= since:
                events.append(event)
        # compile() captures with Dynamo first (backend openxla): its guard failures and graph
        # breaks are the causes of the XLA graphs that follow them.
        return sorted(events + dynamo_compile_events(since), key=lambda e: e.started_at)

    @classmethod
    def compiler_versions(cls) -> dict[str, str]:
        versions = super().compiler_versions()
        for package in ("torch-xla", "torch-neuronx", "neuronx-cc", "libneuronxla"):
            version = detect.installed_version(package)
            if version:
                versions[package] = version
        return versions

    def use_compile_cache(self, folder: str | None) -> str:
        if _pjrt_device() == "NEURON":
            # On a Trn1 the compile cache is torch-neuronx's: neuronx-cc's NEFFs, keyed by graph
            # hash, compiler version and flags (neuron.md 2.8), also what
            # neuron_parallel_compile fills.
            if folder is not None:
                os.environ["NEURON_COMPILE_CACHE_URL"] = neuron_cache_url(folder)
            self._neuron_cache = neuron_cache_root()
            self._neffs_at_start = _neff_modules(self._neuron_cache)
            if folder is None:
                return (
                    "the Neuron compile cache stays where NEURON_COMPILE_CACHE_URL or "
                    "--cache_dir points (default /var/tmp/neuron-compile-cache)"
                )
            return f"the Neuron compile cache in {os.environ['NEURON_COMPILE_CACHE_URL']}"
        if folder is None:
            return "torch_xla's persistent compilation cache is off"
        import _XLAC  # torch_xla's C extension, loaded by torch_xla itself
        import torch_xla.runtime as xr

        if _XLAC._xla_computation_cache_is_initialized():
            return (
                "torch_xla's persistent compilation cache was not set: something compiled "
                "before the cache folder was given, and it can only be set before that"
            )
        path = os.path.join(folder, "xla")
        xr.initialize_cache(path, readonly=False)
        return f"torch_xla's persistent compilation cache in {path}"

    def cache_counters(self) -> CacheCounters | None:
        if _pjrt_device() == "NEURON":
            return self._neuron_cache_counters()
        import torch_xla.debug.metrics as met

        def count(name: str) -> int:
            return int(met.counter_value(name) or 0)

        return CacheCounters(
            hits=count("PersistentCacheHit"),
            misses=count("PersistentCacheMiss") + count("PersistentCacheDeserializeFailure"),
            saved_seconds=None,
            source=(
                "torch_xla.debug.metrics counters PersistentCacheHit, PersistentCacheMiss and "
                "PersistentCacheDeserializeFailure, since process start or the last "
                "start_fallback_tracking"
            ),
            extra={"deserialize_failures": count("PersistentCacheDeserializeFailure")},
        )

    def _neuron_cache_counters(self) -> CacheCounters | None:
        """On a Trn1 every graph torch_xla compiles is looked up in the Neuron compile cache;
        a lookup that misses runs neuronx-cc and leaves a new MODULE_<hash>/model.neff there
        (neuron.md 2.8). The cache keeps no counters of its own, so: misses are the modules
        this run added; hits are the process's compiles (torch_xla's analyses, one per
        compile, never cleared) that added none."""
        root = self._neuron_cache
        if root is None:
            return None
        added = len(_neff_modules(root) - self._neffs_at_start)
        lookups = len(self._analysis.analyses())
        counted = self._analysis.enabled_here
        return CacheCounters(
            hits=max(lookups - added, 0) if counted else None,
            misses=added,
            saved_seconds=None,
            source=(
                f"MODULE_*/model.neff folders added under {root} during this run (each a "
                "neuronx-cc compile)"
                + (
                    "; hits: torch_xla's compiles of this process (its PT_XLA_DEBUG_LEVEL=1 "
                    "analyses) that added none"
                    if counted
                    else "; hits not counted (PT_XLA_DEBUG_LEVEL is the user's)"
                )
            ),
        )

    def start_fallback_tracking(self) -> None:
        import torch_xla.debug.metrics as met

        # torch_xla has no per-counter reset for the aten:: counters: clear_all also restarts
        # the compile metrics, which compile_counters' source text says.
        met.clear_all()

    def fallback_ops(self) -> Counter[str] | None:
        import torch_xla.debug.metrics as met

        fallbacks: Counter[str] = Counter()
        for counter in met.counter_names():
            if not counter.startswith("aten::") or counter == HOST_READ_OP:
                continue
            # A listed counter may read 0 or None once reset; only ops that ran count.
            count = met.counter_value(counter)
            if count:
                fallbacks[counter] = int(count)
        return fallbacks

    def analyze_inference(
        self, model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]
    ) -> InferenceAnalysis | None:
        """torch_neuronx.analyze (neuron.md section 2.2): neuronx-cc's own per-op verdict on an
        inference call, where the XLA-based torch-neuronx is installed; it compiles on the host,
        so it also answers on a machine without NeuronCores."""
        stack = detect.detect_neuron_stack()
        if stack.flavour != detect.FLAVOUR_XLA:
            return None
        import torch_neuronx

        report = torch_neuronx.analyze(model, example_inputs)
        return InferenceAnalysis(
            supported={op: int(n) for op, n in report.get("supported_operators", {}).items()},
            unsupported=[
                UnsupportedOp(item["kind"], item.get("failureAt", ""), item.get("call", ""))
                for item in report.get("unsupported_operators", [])
            ],
            source=(
                f"torch_neuronx.analyze (torch-neuronx {report.get('torch_neuronx_version')}, "
                f"neuronx-cc {report.get('neuronx_cc_version')}), inference"
            ),
        )

    def device_kind(self) -> str:
        """torch_xla's vendor string for the device, e.g. "NC_v2" on a Trn1, "NC_v3d" on a Trn2."""
        import torch_xla.core.xla_model as xm

        return xm.xla_device_kind(self._device)

    @property
    def is_trainium(self) -> bool:
        return _pjrt_device() == "NEURON" or self.device_kind().startswith("NC_")

    def validation_statement(self) -> str:
        xla_version = detect.installed_version("torch-xla")
        if self.is_trainium:
            return (
                f"validated on Trainium ({self.device_kind()}) through torch-xla {xla_version}, "
                "the legacy torch-neuronx path: neuronx-cc compile and the Neuron runtime ran."
            )
        return (
            f"validated on XLA:{_pjrt_device() or 'CPU'} with torch-xla {xla_version}: this "
            "checks the torch-xla front end that Trn1's torch-neuronx uses (lazy tracing, HLO "
            "lowering, aten fallbacks, recompiles) but not neuronx-cc, the Neuron runtime, "
            "device memory or speed; this is not a Trainium validation."
        )

    def describe(self) -> dict[str, Any]:
        return super().describe() | {
            "torch_xla": detect.installed_version("torch-xla"),
            "torch_neuronx": detect.installed_version("torch-neuronx"),
            "pjrt_device": _pjrt_device() or None,
            "device_kind": self.device_kind(),
        }


def _xla_compile_event(
    number: int,
    started_at: float,
    seconds: float,
    analysis: CompileAnalysis | None,
    earlier: dict[str, str],
) -> CompileEvent:
    """One CompileTime sample, with torch_xla's analysis of it where there is one. `earlier`
    maps each user location to the hash last compiled there, so a second graph cut at the same
    line says what it replaced."""
    if analysis is None or not analysis.graph_hash:
        detail = (
            "the traced graph's hash was not in torch_xla's computation cache (UncachedCompile)"
        )
        return CompileEvent(
            started_at, seconds, f"xla compile {number}", CAUSE_NEW_XLA_GRAPH, detail
        )
    frame = analysis.user_frame()
    location = frame.label() if frame else ""
    detail = (
        f"graph {analysis.graph_hash[:12]} not in the computation cache; torch_xla: "
        f"{analysis.cause or 'no cause given'}"
    )
    previous = earlier.get(location) if location else None
    if previous and previous != analysis.graph_hash:
        detail += (
            f"; this place compiled graph {previous[:12]} before, so the traced graph changed "
            "(a new input shape, or different ops)"
        )
    if location:
        earlier[location] = analysis.graph_hash
    return CompileEvent(
        started_at,
        seconds,
        f"xla {analysis.graph_hash[:16]}",
        CAUSE_NEW_XLA_GRAPH,
        detail,
        location,
    )
