"""The CUDA-to-Neuron rules: what each pattern means on each Neuron path, and its replacement."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from workbench.targets.detect import FLAVOUR_NATIVE, FLAVOUR_XLA

BLOCKING = "blocking"


CHANGE = "change"


INFO = "info"


SEVERITIES = (BLOCKING, CHANGE, INFO)


FLAVOURS = (FLAVOUR_NATIVE, FLAVOUR_XLA)


@dataclass(frozen=True)
class Rule:
    """One row of neuron.md section 5: a pattern, its severity and replacement per flavour.
    A severity of None means the pattern is no problem on that flavour."""

    id: str
    pattern: str
    native_severity: str | None
    xla_severity: str | None
    native: str
    xla: str


_RULES = (
    Rule(
        "cuda-call",
        ".cuda()",
        BLOCKING,
        BLOCKING,
        '.to("neuron") (or torch.accelerator.current_accelerator())',
        ".to(torch_xla.device())",
    ),
    Rule(
        "cuda-device",
        'a "cuda" device string (device=, .to(), torch.device(), map_location=)',
        BLOCKING,
        BLOCKING,
        '"neuron" (or torch.accelerator.current_accelerator())',
        "torch_xla.device()",
    ),
    Rule(
        "cuda-check",
        "a CUDA check: torch.cuda.is_available(), or a device query in an if/while test",
        CHANGE,
        CHANGE,
        "False on Neuron, so the other branch runs: make it pick torch.accelerator's device "
        '("neuron"), or the work stays on the CPU',
        "False on Neuron, so the other branch runs: make it pick torch_xla.device(), or the "
        "work stays on the CPU",
    ),
    Rule(
        "guarded-import",
        "an optional import of a CUDA or XLA package inside try/except ImportError",
        INFO,
        INFO,
        "nothing to change: where the package is missing the except branch runs",
        "nothing to change: where the package is missing the except branch runs",
    ),
    Rule(
        "cuda-query",
        "torch.cuda.device_count / current_device / set_device / get_device_name",
        BLOCKING,
        BLOCKING,
        "torch.neuron.* or torch.accelerator.* (without CUDA these report no device, so the "
        "code silently stays on the CPU)",
        "xm.get_xla_supported_devices(); rank via torch_xla.runtime",
    ),
    Rule(
        "cuda-sync",
        "torch.cuda.synchronize()",
        BLOCKING,
        BLOCKING,
        "torch.neuron.synchronize()",
        "torch_xla.sync() then xm.wait_device_ops()",
    ),
    Rule(
        "cuda-memory",
        "torch.cuda memory statistics / empty_cache",
        CHANGE,
        CHANGE,
        "the same name under torch.neuron (synchronize first)",
        "no framework API: read neuron-monitor's memory_used",
    ),
    Rule(
        "cuda-event",
        "torch.cuda.Event",
        BLOCKING,
        BLOCKING,
        "torch.neuron.Event(enable_timing=True)",
        "host timers around torch_xla.sync() + xm.wait_device_ops()",
    ),
    Rule(
        "cuda-seed",
        "torch.cuda.manual_seed(_all)",
        CHANGE,
        CHANGE,
        "torch.neuron.manual_seed(_all) (device RNG may run on the CPU)",
        "xm.set_rng_state / torch.manual_seed",
    ),
    Rule(
        "cuda-api",
        "another torch.cuda API",
        BLOCKING,
        BLOCKING,
        "torch.neuron mirrors much of torch.cuda (streams, events, memory stats); else "
        "torch.accelerator",
        "no equivalent: remove it or guard it",
    ),
    Rule(
        "cuda-autocast",
        'CUDA autocast (torch.cuda.amp.autocast, autocast("cuda"))',
        CHANGE,
        CHANGE,
        'torch.autocast(device_type="neuron", dtype=torch.bfloat16)',
        'NEURON_CC_FLAGS="--auto-cast=none" + torch.autocast("xla", dtype=torch.bfloat16)',
    ),
    Rule(
        "grad-scaler",
        "GradScaler",
        CHANGE,
        CHANGE,
        "usually drop it with bf16 (fp16 is among the supported amp dtypes)",
        "drop it: bf16 needs no loss scaling",
    ),
    Rule("fp16", ".half() / torch.float16", INFO, INFO, "prefer bfloat16", "prefer bfloat16"),
    Rule(
        "fp64",
        ".double() / torch.float64",
        CHANGE,
        CHANGE,
        "float32 (float64 is cast to float32 anyway: no FP64 on NeuronCores)",
        "float32 (torch-xla on Neuron downcasts F64 to F32)",
    ),
    Rule(
        "cuda-backend-flags",
        "torch.backends.cudnn / torch.backends.cuda / allow_tf32 / matmul precision",
        INFO,
        INFO,
        "delete (no effect); set precision with the compiler's --auto-cast",
        "delete (no effect); set precision with the compiler's --auto-cast",
    ),
    Rule(
        "nccl",
        'the "nccl" process-group backend',
        BLOCKING,
        BLOCKING,
        'backend="neuron"',
        'import torch_xla.distributed.xla_backend; backend="xla"',
    ),
    Rule(
        "ddp-device-ids",
        "DistributedDataParallel(device_ids=...)",
        CHANGE,
        CHANGE,
        "keep DDP, drop device_ids / output_device",
        "remove DDP; call xm.optimizer_step(optimizer)",
    ),
    Rule(
        "dataloader-shapes",
        "DataLoader without drop_last=True",
        CHANGE,
        CHANGE,
        "drop_last=True or pad to fixed shapes (a short last batch is a new compile); "
        "pin_memory is CUDA-specific",
        "wrap in pl.MpDeviceLoader(loader, device); drop_last=True",
    ),
    Rule(
        "torch-compile-options",
        'torch.compile with mode=, backend="inductor" or dynamic=True',
        CHANGE,
        CHANGE,
        'torch.compile(model, backend="neuron", fullgraph=True): no mode, no dynamic=True',
        "remove torch.compile (unsupported on XLA torch-neuronx)",
    ),
    Rule(
        "torch-compile",
        "torch.compile",
        None,
        CHANGE,
        "",
        "remove torch.compile (unsupported on XLA torch-neuronx)",
    ),
    Rule(
        "cuda-graphs",
        "CUDA graphs (torch.cuda.graph, CUDAGraph, make_graphed_callables)",
        BLOCKING,
        BLOCKING,
        "remove (no equivalent)",
        "remove (no equivalent)",
    ),
    Rule(
        "cuda-extension",
        "CUDA extension (CUDAExtension, cpp_extension.load with CUDA sources, .cu files)",
        BLOCKING,
        BLOCKING,
        "rewrite as NKI: @nki.jit + @torch_neuronx.nki_op, with register_autograd for training",
        "rewrite as NKI kernels through the torch_xla path",
    ),
    Rule(
        "triton",
        "Triton kernels (import triton, @triton.jit)",
        BLOCKING,
        BLOCKING,
        "rewrite as NKI: @nki.jit + @torch_neuronx.nki_op, with register_autograd for training",
        "rewrite as NKI kernels through the torch_xla path",
    ),
    Rule(
        "cuda-library",
        "flash_attn / xformers / apex / bitsandbytes",
        BLOCKING,
        BLOCKING,
        "F.scaled_dot_product_attention (maps to NKI flash attention); torch-native optimizers",
        "replace with torch-native code; check it with torch_neuronx.analyze",
    ),
    Rule(
        "channels-last",
        "torch.channels_last",
        CHANGE,
        CHANGE,
        "remove (channels_last convolutions are reported rejected)",
        "remove",
    ),
    Rule(
        "dynamic-shape-op",
        "torch.nonzero / unique / masked_select / repeat_interleave with repeats that are not "
        "an int literal",
        CHANGE,
        CHANGE,
        "keep in eager (may fall back to the CPU), avoid in compiled regions",
        "breaks the trace and recompiles: pad, mask, or move it out of the step",
    ),
    Rule(
        "host-sync",
        ".item() / .cpu() / .numpy() / .tolist() inside a loop",
        INFO,
        CHANGE,
        "a device sync: move it out of the hot loop",
        "cuts the graph: use xm.add_step_closure",
    ),
    Rule(
        "nvidia-tools",
        "CUDA_VISIBLE_DEVICES / nvidia-smi / pynvml",
        CHANGE,
        CHANGE,
        "NEURON_RT_VISIBLE_CORES; neuron-ls, neuron-monitor, neuron-top",
        "NEURON_RT_VISIBLE_CORES; neuron-ls, neuron-monitor, neuron-top",
    ),
    Rule(
        "legacy-xla",
        "torch_xla / XLA torch-neuronx code",
        BLOCKING,
        None,
        "delete the XLA code: no lazy tensors, no mark_step, no MpDeviceLoader, no trace",
        "",
    ),
    Rule(
        "legacy-xla-renamed",
        "xm.xla_device() / xm.mark_step()",
        BLOCKING,
        INFO,
        "delete (native Neuron runs eagerly: no device handle from XLA, no step marker)",
        "torch_xla.device() / torch_xla.sync()",
    ),
    Rule(
        "legacy-xla-removed",
        "xm.xrt_world_size() / xm.get_ordinal()",
        BLOCKING,
        BLOCKING,
        "torch.distributed.get_world_size() / get_rank()",
        "torch_xla.runtime.world_size() / global_ordinal() (removed from torch-xla 2.9)",
    ),
    Rule(
        "legacy-xla-bf16",
        "XLA_USE_BF16 / XLA_DOWNCAST_BF16",
        CHANGE,
        CHANGE,
        "no effect: model.to(torch.bfloat16) or torch.autocast(device_type='neuron')",
        "deprecated since torch-neuronx 2.5: model.to(torch.bfloat16) + "
        "NEURON_RT_STOCHASTIC_ROUNDING_EN=1",
    ),
)


RULES = {rule.id: rule for rule in _RULES}


def severity_for(rule: Rule, flavours: Iterable[str]) -> str | None:
    by_flavour = {FLAVOUR_NATIVE: rule.native_severity, FLAVOUR_XLA: rule.xla_severity}
    present = [by_flavour[f] for f in flavours if by_flavour[f]]
    return min(present, key=SEVERITIES.index) if present else None
