"""The settings in effect in this process that change numerics: Neuron's compiler flags and
rounding, XLA's bf16 switches and torch's matmul and determinism settings."""

from __future__ import annotations

import os
import re
from typing import Any

import torch

from workbench.environment.manifest import legacy_setting
from workbench.redact import redact_environment
from workbench.targets.base import Target

# Environment variables that change numerics (neuron.md 2.3, 2.8), read through the redaction.
NUMERICS_VARIABLES = (
    "NEURON_CC_FLAGS",
    "NEURON_RT_STOCHASTIC_ROUNDING_EN",
    "NEURON_RT_STOCHASTIC_ROUNDING_SEED",
    "XLA_USE_BF16",
    "XLA_DOWNCAST_BF16",
)


def _flag_value(flags: str, flag: str) -> str | None:
    # `--auto-cast` must not match `--auto-cast-type`; both `=value` and `value` forms occur.
    match = re.search(rf"{re.escape(flag)}(?![\w-])(?:=|\s+)(\S+)", flags)
    return match.group(1) if match else None


def numerics_settings(target: Target) -> dict[str, Any]:
    """The settings that change numerics, as in effect in this process (environment redacted)."""
    environment = redact_environment(os.environ)
    variables = {name: environment.get(name) for name in NUMERICS_VARIABLES}
    flags = variables["NEURON_CC_FLAGS"] or ""
    rounding = variables["NEURON_RT_STOCHASTIC_ROUNDING_EN"]
    return {
        "environment": {
            name: value if value is not None else "unset" for name, value in variables.items()
        },
        "neuronx_cc": {
            "in_effect": target.is_trainium,
            "auto_cast": _flag_value(flags, "--auto-cast")
            or "not set (neuronx-cc default: none since Neuron 2.27, matmult before)",
            "auto_cast_type": _flag_value(flags, "--auto-cast-type")
            or "not set (neuronx-cc default: bf16)",
        },
        "stochastic_rounding": (
            "on: bf16 results vary from run to run" if rounding == "1" else "off or unset"
        ),
        "torch": {
            "float32_matmul_precision": legacy_setting(torch.get_float32_matmul_precision),
            "cuda_matmul_allow_tf32": legacy_setting(lambda: torch.backends.cuda.matmul.allow_tf32),
            "cudnn_allow_tf32": legacy_setting(lambda: torch.backends.cudnn.allow_tf32),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "default_dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        },
    }
