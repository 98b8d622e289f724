"""Which target a name means: the target modules by name, and the `auto` choice between them.

Target modules are imported when a target is asked for: a target's import may load torch_xla or
torch_neuronx, whose imports have side effects (PJRT start-up, NeuronCore claims).
"""

from __future__ import annotations

import importlib

from workbench.errors import BadInput
from workbench.targets.base import Target
from workbench.targets.detect import FLAVOUR_NATIVE, detect_neuron_stack, torch_has_gpu_build

TARGET_MODULES = {
    "cpu": ("workbench.targets.cpu", "CpuTarget"),
    "cuda": ("workbench.targets.cuda", "CudaTarget"),
    "xla": ("workbench.targets.xla", "XlaTarget"),
    "neuron": ("workbench.targets.neuron", "NeuronTarget"),
}
TARGET_NAMES = ("auto", *TARGET_MODULES)


def target_class(name: str) -> type[Target]:
    if name not in TARGET_MODULES:
        raise BadInput(f"Unknown target {name!r}; choose one of: {', '.join(TARGET_NAMES)}.")
    module_name, class_name = TARGET_MODULES[name]
    return getattr(importlib.import_module(module_name), class_name)


def resolve_target_name(requested: str) -> tuple[str, str]:
    """The concrete target for `requested` and why it was chosen.

    `auto` tries native Neuron, then XLA (only with a Neuron PJRT plugin, so a bare torch-xla
    install does not turn a laptop run into an "XLA" run), then CUDA, then CPU.
    """
    if requested != "auto":
        availability = target_class(requested).availability()
        if not availability.available:
            raise BadInput(f"Target {requested!r} is not available here: {availability.reason}")
        return requested, f"requested explicitly ({availability.reason})"
    stack = detect_neuron_stack()
    if stack.flavour == FLAVOUR_NATIVE:
        availability = target_class("neuron").availability()
        if availability.available:
            return "neuron", f"auto: {availability.reason}"
    if stack.has_neuron_pjrt_plugin:
        availability = target_class("xla").availability()
        if availability.available:
            return "xla", f"auto: {stack.summary()} with the Neuron PJRT plugin"
    if torch_has_gpu_build():
        cuda = target_class("cuda").availability()
        if cuda.available:
            return "cuda", f"auto: {cuda.reason}"
    return "cpu", f"auto: no Neuron device, no Neuron PJRT plugin, no CUDA ({stack.summary()})"


def get_target(name: str) -> Target:
    """An instance of the named target (`auto` resolved first); BadInput if unavailable."""
    concrete, _ = resolve_target_name(name)
    return target_class(concrete)()
