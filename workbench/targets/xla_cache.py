"""The XLA target's compile caches: torch_xla's persistent compilation cache on XLA:CPU, and on
a Trn1 the Neuron compile cache of neuronx-cc's NEFFs, which neuron_parallel_compile pre-warms
(reference: neuron.md 2.5 and 2.8).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from workbench.targets import detect
from workbench.targets.base import Target
from workbench.targets.caching import CacheCounters, PrewarmCommand
from workbench.targets.xla_analysis import AnalysisFile

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


class XlaCaching(Target):
    """torch_xla's persistent cache on XLA:CPU; the Neuron compile cache on a Trn1."""

    # torch_xla's analyses of this process's compiles: on a Trn1, each is one cache lookup.
    _analysis: AnalysisFile
    # The Neuron compile cache a Trn1 run counts in, and its modules when counting began.
    _neuron_cache: str | None
    _neffs_at_start: set[str]

    @classmethod
    def compiler_versions(cls) -> dict[str, str]:
        versions = super().compiler_versions()
        for package in ("torch-xla", "torch-neuronx", "neuronx-cc", "libneuronxla"):
            version = detect.installed_version(package)
            if version:
                versions[package] = version
        return versions

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

    def use_compile_cache(self, folder: str | None) -> str:
        if detect.pjrt_device() == "NEURON":
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
        if detect.pjrt_device() == "NEURON":
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
