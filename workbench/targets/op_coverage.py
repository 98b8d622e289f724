"""The op-coverage group of the target interface: which ops ran on the device, which fell back
to the host, and the target's own analyzer's per-op verdict (notebook 02 reads these).

The defaults are those of a target that tracks no ops: every reading is None.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class UnsupportedOp:
    """An op a target's analyzer rejects, where it failed, and the Python call that made it."""

    op: str
    failure_at: str
    call: str


@dataclass
class InferenceAnalysis:
    """A target's own verdict on every op of an inference call (torch_neuronx.analyze)."""

    supported: dict[str, int]  # op -> occurrences
    unsupported: list[UnsupportedOp]
    source: str


class OpCoverage:
    """Op tracking (executed and fallback ops) and the inference analyzer."""

    # The Neuron software path whose op support this target's fallback readings measure
    # (detect.FLAVOUR_NATIVE or detect.FLAVOUR_XLA); None where its readings say nothing of it.
    neuron_flavour: ClassVar[str | None] = None

    def start_fallback_tracking(self) -> None:  # noqa: B027 - no-op without fallback tracking
        """Reset the target's record of ops that ran on the host instead of the device."""

    def fallback_ops(self) -> Counter[str] | None:
        """Ops that fell back to the host since `start_fallback_tracking`; None: no such reading."""
        return None

    def executed_ops(self) -> Counter[str] | None:
        """Ops the target's own tracking saw execute since `start_fallback_tracking` (calls per
        op); None where it keeps no such record."""
        return None

    def analyze_inference(
        self, model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]
    ) -> InferenceAnalysis | None:
        """The target's own per-op verdict on `model(*example_inputs)` (CPU model and inputs);
        None where the target has no such analyzer."""
        return None
