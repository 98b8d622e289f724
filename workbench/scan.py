"""Static scan of a workload's sources for CUDA-specific code, with the Neuron replacement.

Python files (and notebooks' code cells) are read as syntax trees, so a "cuda" in a comment or
a docstring is never a finding; names are resolved through the file's imports (`from torch.cuda
import amp`, `import torch_xla.core.xla_model as xm`). Files that are not Python (shell scripts,
requirements, YAML, Dockerfiles) and Python files that do not parse are read line by line with
regular expressions, comment lines skipped. CUDA sources (.cu, .cuh) are findings by existing.

Each finding names the file and line, the pattern, its severity for each Neuron flavour, and the
replacement the Neuron documentation gives for that flavour (reference neuron.md section 5):
- blocking: fails, or silently keeps the work off the NeuronCores;
- change: runs, but costs a recompile, a fallback, a sync or different numerics;
- info: no effect on Neuron; delete or tidy.

`workbench scan PATH... [--flavour native|xla]` prints the findings and exits 0, or 4 when a
blocking finding exists for the chosen flavours (2: bad input, nothing scanned).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from workbench.coverage_capture import is_workload_code
from workbench.errors import EXIT_BLOCKING_FINDINGS, EXIT_OK, BadInput
from workbench.targets.detect import FLAVOUR_NATIVE, FLAVOUR_XLA
from workbench.workload import Workload

BLOCKING = "blocking"
CHANGE = "change"
INFO = "info"
SEVERITIES = (BLOCKING, CHANGE, INFO)
FLAVOURS = (FLAVOUR_NATIVE, FLAVOUR_XLA)

_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "venv", "build", "dist"}
_TEXT_FILES = re.compile(
    r"(\.(sh|bash|ya?ml|toml|cfg|ini)|^requirements.*\.txt|^Dockerfile.*|^Makefile)$"
)
_CUDA_SOURCES = (".cu", ".cuh")


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
        "cuda-query",
        "torch.cuda.is_available / device_count / current_device / set_device",
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
        "torch.nonzero / unique / masked_select / repeat_interleave",
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


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    pattern: str
    code: str  # the source line, stripped
    severity: str  # the worst over the chosen flavours
    native_severity: str | None
    xla_severity: str | None
    native: str  # replacement on native TorchNeuron
    xla: str  # replacement on legacy XLA
    how: str  # "ast" or "regex"

    def location(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class ScanReport:
    roots: list[str]
    flavours: list[str]
    files: int = 0
    findings: list[Finding] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    @property
    def blocking(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == BLOCKING]

    def sentence(self) -> str:
        if not self.findings:
            return f"No CUDA-specific code found in {self.files} file(s)."
        counts = {s: sum(1 for f in self.findings if f.severity == s) for s in SEVERITIES}
        text = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        return f"{len(self.findings)} finding(s) in {self.files} file(s): {text}."


def _severity(rule: Rule, flavours: Iterable[str]) -> str | None:
    by_flavour = {FLAVOUR_NATIVE: rule.native_severity, FLAVOUR_XLA: rule.xla_severity}
    present = [by_flavour[f] for f in flavours if by_flavour[f]]
    return min(present, key=SEVERITIES.index) if present else None


# ---------------------------------------------------------------------------------------------
# Python: syntax trees

_TORCH_CUDA_MEMBERS = {
    **dict.fromkeys(
        (
            "is_available",
            "device_count",
            "current_device",
            "set_device",
            "get_device_name",
            "get_device_properties",
        ),
        "cuda-query",
    ),
    "synchronize": "cuda-sync",
    "Event": "cuda-event",
    "manual_seed": "cuda-seed",
    "manual_seed_all": "cuda-seed",
    "graph": "cuda-graphs",
    "graphs": "cuda-graphs",
    "CUDAGraph": "cuda-graphs",
    "make_graphed_callables": "cuda-graphs",
    "amp": "cuda-autocast",
}
_CUDA_MEMORY = re.compile(r"^(max_)?memory_|^reset_(peak|accumulated)_memory|^empty_cache$")
_DYNAMIC_OPS = {"nonzero", "unique", "unique_consecutive", "masked_select", "repeat_interleave"}
_HOST_READS = {"item", "cpu", "numpy", "tolist"}
_CUDA_LIBRARIES = ("flash_attn", "xformers", "apex", "bitsandbytes")
_CUDA_STRING = re.compile(r"^cuda(:\d+)?$")
_DEVICE_KEYWORDS = {"device", "map_location"}
_STRING_RULES = (
    (re.compile(r"\bCUDA_VISIBLE_DEVICES\b|nvidia-smi"), "nvidia-tools"),
    (re.compile(r"\bXLA_(USE|DOWNCAST)_BF16\b"), "legacy-xla-bf16"),
)


class _Visitor(ast.NodeVisitor):
    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.hits: list[tuple[int, str]] = []
        self.loop_depth = 0

    def hit(self, node: ast.AST, rule: str) -> None:
        self.hits.append((getattr(node, "lineno", 1), rule))

    def dotted(self, node: ast.AST) -> str | None:
        """The full dotted name an expression refers to, through the file's imports."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    # imports ------------------------------------------------------------------------------
    def _module_hit(self, node: ast.AST, module: str) -> None:
        top = module.split(".")[0]
        if top == "triton":
            self.hit(node, "triton")
        elif top in _CUDA_LIBRARIES:
            self.hit(node, "cuda-library")
        elif top == "pynvml":
            self.hit(node, "nvidia-tools")
        elif top == "torch_xla":
            self.hit(node, "legacy-xla")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.aliases[alias.asname or alias.name.split(".")[0]] = (
                alias.name if alias.asname else alias.name.split(".")[0]
            )
            self._module_hit(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
        self._module_hit(node, module)
        full = {f"{module}.{a.name}" for a in node.names}
        for name in full:
            self._name_hit(node, name)

    # names --------------------------------------------------------------------------------
    def _name_hit(self, node: ast.AST, name: str) -> bool:
        if name.startswith("torch.cuda."):
            member = name.split(".")[2]
            if name.endswith(".GradScaler"):
                rule = "grad-scaler"
            elif _CUDA_MEMORY.match(member):
                rule = "cuda-memory"
            else:
                rule = _TORCH_CUDA_MEMBERS.get(member, "cuda-api")
            self.hit(node, rule)
            return True
        if name.startswith(("torch.backends.cudnn", "torch.backends.cuda")):
            self.hit(node, "cuda-backend-flags")
            return True
        if name.endswith(".allow_tf32") or name == "torch.set_float32_matmul_precision":
            self.hit(node, "cuda-backend-flags")
            return True
        if name in ("torch.amp.GradScaler", "torch.GradScaler"):
            self.hit(node, "grad-scaler")
            return True
        if name == "torch.channels_last":
            self.hit(node, "channels-last")
            return True
        if name in ("torch.float16", "torch.half"):
            self.hit(node, "fp16")
            return True
        if name in ("torch.float64", "torch.double"):
            self.hit(node, "fp64")
            return True
        if name.startswith("torch.utils.cpp_extension.CUDAExtension"):
            self.hit(node, "cuda-extension")
            return True
        if name.startswith("torch_xla.") and name.endswith(("xla_device", "mark_step")):
            self.hit(node, "legacy-xla-renamed")
            return True
        if name.startswith("torch_xla.") and name.endswith(("xrt_world_size", "get_ordinal")):
            self.hit(node, "legacy-xla-removed")
            return True
        return False

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.dotted(node)
        if name is None or not self._name_hit(node, name):
            self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        name = self.aliases.get(node.id)
        if name and name != node.id:
            self._name_hit(node, name)

    # calls --------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = self.dotted(func) or ""
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        method = func.attr if isinstance(func, ast.Attribute) else ""
        if method == "cuda" and name != "torch.cuda":
            self.hit(node, "cuda-call")
        elif method == "half" and not node.args:
            self.hit(node, "fp16")
        elif method == "double" and not node.args:
            self.hit(node, "fp64")
        elif method in _HOST_READS and not node.args and self.loop_depth:
            self.hit(node, "host-sync")
        if method in _DYNAMIC_OPS or name in {f"torch.{op}" for op in _DYNAMIC_OPS}:
            self.hit(node, "dynamic-shape-op")
        if method in ("to", "device") or name == "torch.device":
            if any(_is_cuda_string(a) for a in node.args):
                self.hit(node, "cuda-device")
        if name.endswith("autocast") and (
            any(_is_cuda_string(a) for a in node.args)
            or _is_cuda_string(keywords.get("device_type"))
        ):
            self.hit(node, "cuda-autocast")
        if name.endswith("init_process_group") and any(
            _is_string(a, "nccl") for a in node.args[:1]
        ):
            self.hit(node, "nccl")
        if name.endswith("DistributedDataParallel") and "device_ids" in keywords:
            self.hit(node, "ddp-device-ids")
        if name.endswith("DataLoader") and not _is_true(keywords.get("drop_last")):
            self.hit(node, "dataloader-shapes")
        if name == "torch.compile":
            options = (
                "mode" in keywords
                or _is_string(keywords.get("backend"), "inductor")
                or _is_true(keywords.get("dynamic"))
            )
            self.hit(node, "torch-compile-options" if options else "torch-compile")
        if name.endswith("cpp_extension.load") or name.endswith("cpp_extension.load_inline"):
            if (
                "cuda_sources" in keywords
                or _is_true(keywords.get("with_cuda"))
                or any(
                    isinstance(c, ast.Constant) and isinstance(c.value, str) and ".cu" in c.value
                    for c in ast.walk(node)
                )
            ):
                self.hit(node, "cuda-extension")
        for keyword in node.keywords:
            if keyword.arg in _DEVICE_KEYWORDS and _is_cuda_string(keyword.value):
                self.hit(keyword.value, "cuda-device")
            if keyword.arg == "backend" and _is_string(keyword.value, "nccl"):
                self.hit(keyword.value, "nccl")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            if (self.dotted(target) or "").startswith("triton."):
                self.hit(decorator, "triton")
        # A function body defined in a loop is not itself inside the loop.
        depth, self.loop_depth = self.loop_depth, 0
        self.generic_visit(node)
        self.loop_depth = depth

    visit_AsyncFunctionDef = visit_FunctionDef

    def _loop(self, node: ast.For | ast.While | ast.AsyncFor) -> None:
        self.loop_depth += 1
        self.generic_visit(node)
        self.loop_depth -= 1

    visit_For = visit_While = visit_AsyncFor = _loop

    def visit_Assign(self, node: ast.Assign) -> None:
        # DEVICE = "cuda" (or "cuda" if ... else "cpu"): the device every later .to() uses.
        names = [t.id if isinstance(t, ast.Name) else getattr(t, "attr", "") for t in node.targets]
        if any("device" in n.lower() for n in names) and any(
            _is_cuda_string(v) for v in ast.walk(node.value)
        ):
            self.hit(node, "cuda-device")
        self.generic_visit(node)

    # strings ------------------------------------------------------------------------------
    def visit_Expr(self, node: ast.Expr) -> None:
        # A bare string statement is a docstring or a comment in disguise: never a finding.
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            for pattern, rule in _STRING_RULES:
                if pattern.search(node.value):
                    self.hit(node, rule)


def _is_string(node: ast.AST | None, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def _is_true(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is True


def _is_cuda_string(node: ast.AST | None) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(_CUDA_STRING.match(node.value))
    if isinstance(node, ast.JoinedStr) and node.values:  # f"cuda:{rank}"
        first = node.values[0]
        return isinstance(first, ast.Constant) and str(first.value).startswith("cuda")
    return False


def _python_hits(source: str) -> list[tuple[int, str]]:
    visitor = _Visitor()
    visitor.visit(ast.parse(source))
    return visitor.hits


# ---------------------------------------------------------------------------------------------
# Everything else: lines and regular expressions

_LINE_RULES = (
    (re.compile(r"\bCUDA_VISIBLE_DEVICES\b|nvidia-smi|\bpynvml\b|nvidia-ml-py"), "nvidia-tools"),
    (re.compile(r"\b(flash[-_]attn|xformers|apex|bitsandbytes)\b"), "cuda-library"),
    (re.compile(r"\btriton\b"), "triton"),
    (re.compile(r"\bnccl\b", re.I), "nccl"),
    (re.compile(r"\bXLA_(USE|DOWNCAST)_BF16\b"), "legacy-xla-bf16"),
    (re.compile(r"\btorch[-_]xla\b"), "legacy-xla"),
)
# For Python that does not parse: the call patterns, on lines that are not comments.
_PYTHON_LINE_RULES = (
    (re.compile(r"\.cuda\("), "cuda-call"),
    (re.compile(r"""["']cuda(:\d+)?["']"""), "cuda-device"),
    (re.compile(r"\btorch\.cuda\.\w+"), "cuda-api"),
    *_LINE_RULES,
)


def _line_hits(text: str, rules: tuple) -> list[tuple[int, str]]:
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith(("#", "//")):
            continue
        for pattern, rule in rules:
            if pattern.search(line):
                hits.append((number, rule))
    return hits


def _notebook_cells(path: Path) -> Iterator[tuple[str, str]]:
    """(label, source) per code cell; IPython magics and shell lines become blank lines, so
    line numbers still match the cell."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for index, cell in enumerate(notebook.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else source
        lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in text.split("\n")]
        yield f"{path} cell {index}", "\n".join(lines)


def _files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if any(p.startswith(".") or p in _SKIP_DIRS for p in parts[:-1]):
            continue
        if path.is_file():
            yield path


def _findings(
    label: str, text: str, hits: list[tuple[int, str]], flavours: list[str], how: str
) -> list[Finding]:
    lines = text.splitlines()
    found, seen = [], set()
    for line, rule_id in hits:
        rule = RULES[rule_id]
        severity = _severity(rule, flavours)
        if severity is None or (line, rule_id) in seen:
            continue
        seen.add((line, rule_id))
        found.append(
            Finding(
                path=label,
                line=line,
                rule=rule_id,
                pattern=rule.pattern,
                code=lines[line - 1].strip() if 0 < line <= len(lines) else "",
                severity=severity,
                native_severity=rule.native_severity if FLAVOUR_NATIVE in flavours else None,
                xla_severity=rule.xla_severity if FLAVOUR_XLA in flavours else None,
                native=rule.native if FLAVOUR_NATIVE in flavours else "",
                xla=rule.xla if FLAVOUR_XLA in flavours else "",
                how=how,
            )
        )
    return found


def _scan_file(path: Path, report: ScanReport) -> None:
    name = path.name
    label = str(path)
    flavours = report.flavours
    if name.endswith(_CUDA_SOURCES):
        report.files += 1
        text = f"{name}: CUDA source"
        report.findings += _findings(label, text, [(1, "cuda-extension")], flavours, "file")
        return
    is_python = name.endswith(".py")
    if not (is_python or name.endswith(".ipynb") or _TEXT_FILES.search(name)):
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        report.unreadable.append(f"{label}: {exc}")
        return
    report.files += 1
    if name.endswith(".ipynb"):
        try:
            cells = list(_notebook_cells(path))
        except (ValueError, AttributeError) as exc:
            report.unreadable.append(f"{label}: not a notebook ({exc})")
            return
        for cell_label, source in cells:
            try:
                report.findings += _findings(
                    cell_label, source, _python_hits(source), flavours, "ast"
                )
            except SyntaxError:
                hits = _line_hits(source, _PYTHON_LINE_RULES)
                report.findings += _findings(cell_label, source, hits, flavours, "regex")
        return
    if is_python:
        try:
            report.findings += _findings(label, text, _python_hits(text), flavours, "ast")
        except SyntaxError:
            hits = _line_hits(text, _PYTHON_LINE_RULES)
            report.findings += _findings(label, text, hits, flavours, "regex")
        return
    report.findings += _findings(label, text, _line_hits(text, _LINE_RULES), flavours, "regex")


def scan_paths(paths: Iterable[str | Path], flavours: Iterable[str] = FLAVOURS) -> ScanReport:
    """Scan files and folders (recursively; hidden folders, virtualenvs and build output
    skipped) for CUDA-specific code, judged for the given Neuron flavours."""
    flavours = list(flavours)
    unknown = [f for f in flavours if f not in FLAVOURS]
    if unknown or not flavours:
        raise BadInput(f"Neuron flavours {flavours!r}: choose from {', '.join(FLAVOURS)}.")
    roots = [Path(p) for p in paths]
    missing = [str(p) for p in roots if not p.exists()]
    if missing:
        raise BadInput(f"Scan path {missing[0]!r} does not exist.")
    report = ScanReport([str(p) for p in roots], flavours)
    for root in roots:
        for path in _files(root):
            _scan_file(path, report)
    report.findings.sort(key=lambda f: (SEVERITIES.index(f.severity), f.path, f.line))
    return report


def workload_sources(workload: Workload) -> list[Path]:
    """The workload's own source files: where its model classes, factory, batch maker, loss
    and optimizer factory are defined, leaving out torch, the standard library and workbench's
    machinery (its workload loader included)."""
    objects: list[object] = [
        workload.model_factory,
        workload.batch_maker,
        workload.loss_fn,
        workload.optimizer_factory,
    ]
    try:
        # On the meta device: the classes are all that is needed, not the weights.
        objects += [type(m) for m in workload.build_model("meta").modules()]
    except Exception:  # noqa: BLE001 - a model that fails to build still has a factory file
        pass
    loader = Path(inspect.getfile(Workload)).resolve()
    files: list[Path] = []
    for obj in objects:
        try:
            source = inspect.getsourcefile(obj)  # type: ignore[arg-type]
        except TypeError:  # builtins, C extensions, partials
            continue
        if not source or not is_workload_code(source):
            continue
        path = Path(source).resolve()
        if path != loader and path not in files:
            files.append(path)
    return files


def format_finding(finding: Finding) -> str:
    replacements = [
        f"{label}: {text}"
        for label, text, severity in (
            ("native", finding.native, finding.native_severity),
            ("xla", finding.xla, finding.xla_severity),
        )
        if severity
    ]
    return (
        f"{finding.location()}: {finding.severity} [{finding.rule}] {finding.pattern}\n"
        f"    {finding.code}\n" + "".join(f"    -> {r}\n" for r in replacements)
    )


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """The arguments of `workbench scan`."""
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or folders to scan")
    parser.add_argument(
        "--flavour",
        action="append",
        choices=FLAVOURS,
        help="Neuron path you migrate to (repeatable; default both: native and xla)",
    )


def cmd_scan(args: argparse.Namespace) -> int:
    report = scan_paths(args.paths, args.flavour or FLAVOURS)
    for finding in report.findings:
        print(format_finding(finding))
    for problem in report.unreadable:
        print(f"not scanned: {problem}")
    print(report.sentence())
    return EXIT_BLOCKING_FINDINGS if report.blocking else EXIT_OK
