"""How the XLA target tracks op coverage: torch_xla's per-op aten:: counters name the ops that
fell back to the host CPU, and torch_neuronx.analyze (the XLA-based torch-neuronx) gives
neuronx-cc's own per-op verdict on an inference call (reference: neuron.md 2.2 and 2.4).
"""

from __future__ import annotations

from collections import Counter

import torch

from workbench.targets import detect
from workbench.targets.base import Target
from workbench.targets.op_coverage import InferenceAnalysis, UnsupportedOp

# `.item()`, `.tolist()` and printing a tensor read one value back to the host through this op.
# torch_xla counts it like a fallback, but it is a host sync, not a missing lowering.
HOST_READ_OP = "aten::_local_scalar_dense"


class XlaOpTracking(Target):
    """Fallback ops from torch_xla's metrics; the inference analyzer where torch-neuronx is."""

    # torch-xla decides lowering versus CPU fallback the same way on XLA:CPU as on a Trn1.
    neuron_flavour = detect.FLAVOUR_XLA

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
