"""Execution targets behind one interface, and the `auto` choice between them.

Names are imported on first use (workbench.lazy_exports): importing a module of this package, as
every reader of a result file does for its records, must not import the others; and importing
workbench.targets must never import torch_xla or torch_neuronx, whose imports have side effects
(PJRT start-up, NeuronCore claims).
"""

from typing import TYPE_CHECKING

from workbench.lazy_exports import lazy_exports

__all__ = [
    "Availability",
    "CompileCounters",
    "MemoryReading",
    "Target",
    "TARGET_MODULES",
    "TARGET_NAMES",
    "target_class",
    "resolve_target_name",
    "get_target",
]

if TYPE_CHECKING:
    from workbench.targets.availability import Availability
    from workbench.targets.base import MemoryReading, Target
    from workbench.targets.compiling import CompileCounters
    from workbench.targets.registry import (
        TARGET_MODULES,
        TARGET_NAMES,
        get_target,
        resolve_target_name,
        target_class,
    )

__getattr__ = lazy_exports(
    __name__,
    {
        "Availability": "workbench.targets.availability",
        "CompileCounters": "workbench.targets.compiling",
        "MemoryReading": "workbench.targets.base",
        "Target": "workbench.targets.base",
        **{
            name: "workbench.targets.registry"
            for name in (
                "TARGET_MODULES",
                "TARGET_NAMES",
                "target_class",
                "resolve_target_name",
                "get_target",
            )
        },
    },
)
