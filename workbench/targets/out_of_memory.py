"""The out-of-memory group of the target interface: how a failed run's error or output says it
ran out of memory on this target (the batch-size search reads these), and how to tell a
compiler that ran out of host memory from a batch that does not fit the device.
"""

from __future__ import annotations

import re
from typing import ClassVar

# Host memory can run out on every target: Python's MemoryError, torch's CPU allocator, C++
# allocations, and ENOMEM from the OS (strerror text).
HOST_OUT_OF_MEMORY_PATTERNS: tuple[str, ...] = (
    r"\bMemoryError\b",
    r"DefaultCPUAllocator: can't allocate memory",
    r"std::bad_alloc",
    r"Cannot allocate memory",
)
# How the Neuron runtime and compiler report running out of device memory, on both
# torch-neuronx paths (reference: methods.md e2 and neuron.md section 6, item 13): a batch that
# raises one of these does not fit the device.
NEURON_OUT_OF_MEMORY_PATTERNS: tuple[str, ...] = (
    r"Failed to allocate[^\n]*DEVICE",  # runtime: device memory
    r"nrt_tensor_allocate[^\n]*Allocation Failure",
    r"\bNRT_RESOURCE\b",
    r"\bNERR_RESOURCE\b",
    r"Allocated memory out of bound",  # compiler: the graph needs more device memory than exists
)
# neuronx-cc out of host RAM: its own F137 error, or the kernel's OOM killer (-9 / SIGKILL)
# (neuron.md section 6, item 7). Not in the list above: the compiler ran out of the host's
# memory, which says nothing about whether the batch fits the device.
NEURON_COMPILER_HOST_OOM_PATTERNS: tuple[str, ...] = (
    r"\[F137\][^\n]*",
    r"insufficient system memory",
    r"neuronx-cc[^\n]*(?:-9\b|SIGKILL|[Kk]illed)",
)


def neuron_compiler_host_oom(text: str) -> str | None:
    """neuronx-cc killed for host RAM, named as such with its remedy; None otherwise."""
    for pattern in NEURON_COMPILER_HOST_OOM_PATTERNS:
        match = re.search(pattern, text)
        if match:
            return (
                f"neuronx-cc ran out of host memory ({match.group(0).strip()[:120]}): the "
                "compiler needs host RAM, not device memory; run fewer compiles at once (fewer "
                "parallel compile jobs or training processes compiling on this host) or use an "
                "instance with more host RAM"
            )
    return None


class OutOfMemory:
    """Reading out-of-memory failures from a run's error or output."""

    # Regular expressions that, found in a failed run's error or output, mean it ran out of
    # memory; targets add their device's own forms to the host ones.
    out_of_memory_patterns: ClassVar[tuple[str, ...]] = HOST_OUT_OF_MEMORY_PATTERNS

    @classmethod
    def out_of_memory_evidence(cls, text: str) -> str | None:
        """The text that marks `text` (an error message, a process's output) as an
        out-of-memory failure on this target; None when nothing does."""
        for pattern in cls.out_of_memory_patterns:
            match = re.search(pattern, text)
            if match:
                return match.group(0)
        return None

    @classmethod
    def compiler_host_oom(cls, text: str) -> str | None:
        """One sentence naming `text` (a compile's error or output) as the compiler killed for
        lack of host memory, with the remedy; None when it is not that."""
        return None


class NeuronOutOfMemory(OutOfMemory):
    """Both torch-neuronx paths: the Neuron runtime's and compiler's out-of-memory forms, and
    neuronx-cc (which compiles every graph on either path) killed for host RAM."""

    out_of_memory_patterns = (*OutOfMemory.out_of_memory_patterns, *NEURON_OUT_OF_MEMORY_PATTERNS)

    @classmethod
    def compiler_host_oom(cls, text: str) -> str | None:
        return neuron_compiler_host_oom(text)
