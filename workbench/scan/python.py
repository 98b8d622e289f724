"""Python sources read as syntax trees: calls, attributes and strings that tie code to CUDA."""

from __future__ import annotations

import ast
import re

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


# Exceptions whose handler makes an import optional: the code runs on without the package.
_IMPORT_GUARDS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


# torch.cuda members that only answer a question; in an if/while test they choose a branch.
_CUDA_QUESTIONS = {
    "is_available",
    "device_count",
    "current_device",
    "get_device_name",
    "is_bf16_supported",
    "get_device_capability",
}


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
        self.import_guards = 0  # inside the body of a try whose handler catches ImportError
        self.test_depth = 0  # inside the test of an if, while, assert or conditional expression

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
        flagged = top in ("triton", "pynvml", "torch_xla", *_CUDA_LIBRARIES)
        if flagged and self.import_guards:
            self.hit(node, "guarded-import")
        elif top == "triton":
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
        if self.import_guards:
            return  # an optional import; where its names are used, those lines are judged
        full = {f"{module}.{a.name}" for a in node.names}
        for name in full:
            self._name_hit(node, name)

    def visit_Try(self, node: ast.Try) -> None:
        guarded = any(_catches_import_error(handler) for handler in node.handlers)
        self.import_guards += guarded
        for statement in node.body:
            self.visit(statement)
        self.import_guards -= guarded
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    visit_TryStar = visit_Try

    def _with_test(self, node: ast.If | ast.While | ast.IfExp | ast.Assert) -> None:
        self.test_depth += 1
        self.visit(node.test)
        self.test_depth -= 1
        for field_name, value in ast.iter_fields(node):
            if field_name == "test":
                continue
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    self.visit(child)

    def visit_If(self, node: ast.If) -> None:
        self._with_test(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._with_test(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._with_test(node)

    def visit_While(self, node: ast.While) -> None:
        self.loop_depth += 1
        self._with_test(node)
        self.loop_depth -= 1

    # names --------------------------------------------------------------------------------
    def _name_hit(self, node: ast.AST, name: str) -> bool:
        if name.startswith("torch.cuda."):
            member = name.split(".")[2]
            if name.endswith(".GradScaler"):
                rule = "grad-scaler"
            elif member == "is_available" or (member in _CUDA_QUESTIONS and self.test_depth):
                rule = "cuda-check"
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
        as_function = name in {f"torch.{op}" for op in _DYNAMIC_OPS}
        if (method in _DYNAMIC_OPS or as_function) and not (
            method == "repeat_interleave" and _static_repeats(node, is_method=not as_function)
        ):
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

    def _loop(self, node: ast.For | ast.AsyncFor) -> None:
        self.loop_depth += 1
        self.generic_visit(node)
        self.loop_depth -= 1

    visit_For = visit_AsyncFor = _loop

    def visit_Assign(self, node: ast.Assign) -> None:
        # DEVICE = "cuda" (or "cuda" if ... else "cpu"): the device every later .to() uses.
        names = [t.id if isinstance(t, ast.Name) else getattr(t, "attr", "") for t in node.targets]
        if (
            any("device" in n.lower() for n in names)
            and any(_is_cuda_string(v) for v in ast.walk(node.value))
            and not _derived_from_a_device(node.value)
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


def _derived_from_a_device(value: ast.AST) -> bool:
    """`"cuda" if "cuda" in device else "cpu"`: the string names what a device already is (its
    type, for autocast), so it follows the device the script is given; not a choice of CUDA."""
    if not isinstance(value, ast.IfExp):
        return False
    return any(
        isinstance(node, ast.Compare)
        and any(isinstance(op, ast.In) for op in node.ops)
        and _is_cuda_string(node.left)
        for node in ast.walk(value.test)
    )


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = {c.id if isinstance(c, ast.Name) else getattr(c, "attr", "") for c in caught}
    return bool(names & _IMPORT_GUARDS)


def _is_int_expression(node: ast.AST | None) -> bool:
    """An int literal, or arithmetic on int literals: a repeat count fixed in the code."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.BinOp):
        return _is_int_expression(node.left) and _is_int_expression(node.right)
    if isinstance(node, ast.UnaryOp):
        return _is_int_expression(node.operand)
    return False


def _static_repeats(call: ast.Call, *, is_method: bool) -> bool:
    """repeat_interleave's output size follows its input when `repeats` is an int: read the
    argument (x.repeat_interleave(2, dim=1), torch.repeat_interleave(x, 2)) before flagging."""
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    position = 0 if is_method else 1
    repeats = keywords.get("repeats")
    if repeats is None and len(call.args) > position:
        repeats = call.args[position]
    return _is_int_expression(repeats)


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


def python_hits(source: str) -> list[tuple[int, str]]:
    visitor = _Visitor()
    visitor.visit(ast.parse(source))
    return visitor.hits
