"""Device redirection for a script run as it is: its CUDA calls mapped onto the chosen target.

A training script names `cuda` (device strings, `.cuda()`, `torch.cuda.is_available()`, CUDA
autocast and GradScaler); while it runs in the workbook those calls are answered by the target
instead, the way GPU-migration tools redirect device calls at run time rather than editing the
source. Every redirected call is recorded with the file and line in the script that made it, and
calls with no meaning on another device (cuDNN flags, custom CUDA extensions, CUDA memory
counters) are recorded as not mapped. This is the one module outside the targets' own that names
a device: naming them is its job.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._device
import torch.utils.cpp_extension

from workbench.errors import is_user_code, short_path
from workbench.targets.cuda_runtime import (
    ANSWERED_CAPABILITY,
    TargetEvent,
    TargetProperties,
    TargetStream,
    on_stream,
    total_memory_source,
)


@dataclass(frozen=True)
class CallSite:
    """One call the script made that names CUDA, where it was made and what became of it."""

    call: str  # e.g. "torch.device('cuda')", ".cuda()"
    outcome: str  # what it was mapped to, or why it could not be
    path: str  # as short_path gives it while the script runs: relative to the script's folder
    line: int

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass
class RedirectionLog:
    """Calls redirected onto the target and calls that could not be, each with its site; a call
    made in a loop is recorded once per site, with how many times it was made."""

    redirected: Counter[CallSite]
    unmapped: Counter[CallSite]

    def rows(self) -> list[dict[str, Any]]:
        """One row per site, redirected first, for a table or a result file."""
        return [
            {
                "call": site.call,
                "outcome": site.outcome,
                "mapped": mapped,
                "where": site.location,
                "times": count,
            }
            for mapped, sites in ((True, self.redirected), (False, self.unmapped))
            for site, count in sites.items()
        ]


@contextmanager
def patched(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    """`owner.name` is `replacement` inside; afterwards exactly what it was (a method a class
    inherits, such as Tensor.to from its C base, is inherited again)."""
    own = isinstance(owner, type) and name in owner.__dict__
    original = owner.__dict__[name] if own else getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        if own or not isinstance(owner, type):
            setattr(owner, name, original)
        else:
            delattr(owner, name)


def _call_site() -> tuple[str, int]:
    """The innermost frame in the user's code: the script line that made the call."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        if is_user_code(frame.f_code.co_filename):
            frames.append((frame.f_code.co_filename, frame.f_lineno))
        frame = frame.f_back  # type: ignore[assignment]
    # An installed package between torch and the script (a deprecation wrapper) is not the
    # line the script wrote: the innermost frame outside installed packages is.
    for path, line in frames:
        if "-packages" + os.sep not in path:
            return short_path(path), line
    return (short_path(frames[0][0]), frames[0][1]) if frames else ("<unknown>", 0)


def _stand_in(real: type, name: str, make: Callable[..., Any]) -> type:
    """A class standing in for `real` while the script runs: calling it calls `make`, and
    isinstance(x, it) keeps answering for `real`, for torch's code and the script's."""

    class _Meta(type):
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, real)

    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        return make(*args, **kwargs)

    # Named as `real` is, so pickling (Inductor's graph cache) finds it under real's name.
    return _Meta(
        name, (), {"__new__": new, "__module__": real.__module__, "__qualname__": real.__qualname__}
    )


def _for_the_script(original: Callable[..., Any], answer: Callable[..., Any]) -> Callable[..., Any]:
    """`answer` for a call from the user's code, `original` for torch's own (and the
    workbench's): torch.compile and torch.manual_seed ask torch.cuda about the real machine, and
    a compile told CUDA is there would build CUDA kernels."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if is_user_code(sys._getframe(1).f_code.co_filename):
            return answer(*args, **kwargs)
        return original(*args, **kwargs)

    return call


# Modules whose answers torch's own code also asks for (a compile asks what the machine has):
# only the script's calls get the redirection's answers.
_ASKED_OF_THE_MACHINE = (torch.cuda, torch.accelerator, torch.backends.mps)


def _is_cuda(device: Any) -> bool:
    if isinstance(device, str):
        return device.split(":")[0].strip() == "cuda"
    return isinstance(device, _REAL_DEVICE) and device.type == "cuda"


_REAL_DEVICE = torch.device
_REAL_GENERATOR = torch.Generator
# Tensor factories that take device=: the ones training scripts use to build data and masks.
_FACTORIES = (
    "tensor",
    "as_tensor",
    "zeros",
    "ones",
    "empty",
    "full",
    "rand",
    "randn",
    "randint",
    "randperm",
    "arange",
    "linspace",
    "eye",
    "zeros_like",
    "ones_like",
    "empty_like",
    "full_like",
    "rand_like",
    "randn_like",
    "randint_like",
)
_CUDA_COUNTER_RESETS = ("reset_peak_memory_stats", "reset_max_memory_allocated")
# cuDNN settings: switches of one NVIDIA library that no other device reads.
_CUDNN_FLAGS = ("benchmark", "deterministic", "allow_tf32", "enabled")
# torch.cuda readings with no counterpart on another device here: answered 0 and named.
_CUDA_READINGS = (
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
)


# Calls with no counterpart on another device, answered without effect and named: (module,
# its name as scripts write it, functions, why, the answer).
_CUDA_ONLY_CALLS: tuple[tuple[Any, str, tuple[str, ...], str, Any], ...] = (
    (
        torch.cuda.nvtx,
        "torch.cuda.nvtx",
        ("range_push", "range_pop", "mark"),
        "an NVTX marker for NVIDIA's profilers: ignored",
        None,
    ),
    (
        torch.cuda.nvtx,
        "torch.cuda.nvtx",
        ("range",),
        "an NVTX range for NVIDIA's profilers: ignored",
        nullcontext(),
    ),
    (
        torch.cuda,
        "torch.cuda",
        ("set_per_process_memory_fraction", "ipc_collect"),
        "a CUDA allocator setting: ignored",
        None,
    ),
    (
        torch.cuda,
        "torch.cuda",
        ("memory_summary",),
        "a CUDA allocator report: answered with this sentence",
        "no CUDA allocator: the script runs on another device",
    ),
)


class DeviceRedirection:
    """While entered, CUDA calls run on `device`; `log` lists each one by its site."""

    def __init__(
        self,
        device: torch.device,
        synchronize: Callable[[], None],
        device_memory_bytes: int | None = None,
    ) -> None:
        self.device = device
        self.synchronize = synchronize
        # What get_device_properties().total_memory answers, and where it comes from.
        self.total_memory = total_memory_source(device_memory_bytes)
        self.log = RedirectionLog(Counter(), Counter())

    # -- recording -------------------------------------------------------------------------
    def _redirected(self, call: str, outcome: str = "") -> None:
        path, line = _call_site()
        self.log.redirected[CallSite(call, outcome or f"ran on {self.device}", path, line)] += 1

    def _unmapped(self, call: str, why: str) -> None:
        path, line = _call_site()
        self.log.unmapped[CallSite(call, why, path, line)] += 1

    def _map(self, device: Any, call: str) -> Any:
        """`device` itself unless it names CUDA; then the target's device, recorded."""
        if _is_cuda(device):
            self._redirected(call)
            return self.device
        return device

    # -- the patches -----------------------------------------------------------------------
    @contextmanager
    def active(self) -> Iterator[DeviceRedirection]:
        # torch's device context (`with torch.device("meta"):`) remembers, once per process,
        # which functions construct tensors. Were that first asked while the factories below are
        # patched, it would remember the stand-ins, and every later `with torch.device("meta")`
        # would build real tensors (a 70B model's meta build then filled the host's memory).
        torch.utils._device._device_constructors()
        with ExitStack() as stack:
            # A default device the script sets is its own: the process's is put back after
            # (None where none was set, so no device mode stays on every later torch call).
            context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
            stack.callback(
                torch.set_default_device, context.device if context is not None else None
            )
            for owner, name, replacement in [*self._patches(), *self._accelerator_patches()]:
                if owner in _ASKED_OF_THE_MACHINE and not isinstance(replacement, type):
                    replacement = _for_the_script(getattr(owner, name), replacement)
                stack.enter_context(patched(owner, name, replacement))
            yield self

    def _patches(self) -> list[tuple[Any, str, Any]]:
        patches: list[tuple[Any, str, Any]] = [
            (torch, "device", _stand_in(_REAL_DEVICE, "device", self._device)),
            (torch, "Generator", _stand_in(_REAL_GENERATOR, "Generator", self._generator)),
            (torch.Tensor, "to", self._to(torch.Tensor.to, "tensor.to")),
            (torch.nn.Module, "to", self._to(torch.nn.Module.to, "module.to")),
            (torch.Tensor, "cuda", self._cuda(torch.Tensor.to, "tensor.cuda()")),
            (torch.nn.Module, "cuda", self._cuda(torch.nn.Module.to, "module.cuda()")),
            (torch.cuda, "is_available", self._answer("torch.cuda.is_available()", True)),
            (torch.cuda, "device_count", self._answer("torch.cuda.device_count()", 1)),
            (torch.cuda, "current_device", self._answer("torch.cuda.current_device()", 0)),
            (torch.cuda, "is_bf16_supported", self._answer("torch.cuda.is_bf16_supported()", True)),
            (torch.cuda, "synchronize", self._synchronize()),
            (
                torch.cuda,
                "get_device_name",
                self._answer("torch.cuda.get_device_name()", str(self.device)),
            ),
            (torch.cuda, "manual_seed", self._seed("torch.cuda.manual_seed")),
            (torch.cuda, "manual_seed_all", self._seed("torch.cuda.manual_seed_all")),
            (torch.cuda, "set_device", self._answer("torch.cuda.set_device()", None)),
            (torch.cuda, "empty_cache", self._answer("torch.cuda.empty_cache()", None)),
            (torch.cuda, "get_device_properties", self._properties()),
            (torch.cuda, "get_device_capability", self._capability()),
            (torch.cuda, "Event", _stand_in(TargetEvent, "Event", self._event)),
            (torch.cuda, "Stream", _stand_in(TargetStream, "Stream", self._stream("Stream"))),
            (torch.cuda, "current_stream", self._stream("current_stream")),
            (torch.cuda, "default_stream", self._stream("default_stream")),
            (torch.cuda, "stream", self._on_stream),
            (torch.cuda, "device", self._answer("torch.cuda.device()", nullcontext())),
            (torch.cuda, "mem_get_info", self._mem_get_info()),
            (torch, "set_default_device", self._set_default_device()),
            (torch.amp.autocast_mode.autocast, "__init__", self._autocast()),
            (torch.amp.grad_scaler.GradScaler, "__init__", self._grad_scaler()),
            (torch.utils.cpp_extension, "load", self._extension("torch.utils.cpp_extension.load")),
            (
                torch.utils.cpp_extension,
                "load_inline",
                self._extension("torch.utils.cpp_extension.load_inline"),
            ),
        ]
        patches += [(torch, name, self._factory(getattr(torch, name), name)) for name in _FACTORIES]
        patches += [(torch.cuda, name, self._reading(name)) for name in _CUDA_READINGS]
        patches += [
            (owner, name, self._ignored(f"{prefix}.{name}()", why, answer))
            for owner, prefix, names, why, answer in _CUDA_ONLY_CALLS
            for name in names
        ]
        patches += [
            (torch.cuda, name, self._reading(name, answer=None)) for name in _CUDA_COUNTER_RESETS
        ]
        if self.device.type != "cuda":
            patches.append((torch.Tensor, "pin_memory", self._pin_memory()))
        return patches + self._backend_flag_patches()

    def _accelerator_patches(self) -> list[tuple[Any, str, Any]]:
        """torch.accelerator, the device-generic API official examples now use: it answers
        the target as the script's accelerator, so the script takes its accelerator path. MPS
        checks are answered as they are (False off a Mac) and listed: that path is not taken."""
        accelerator = torch.accelerator
        answers: list[tuple[str, Any]] = [
            ("is_available", True),
            ("current_accelerator", self.device),
            ("device_count", 1),
            ("current_device_index", 0),
            ("current_device_idx", 0),
            ("set_device_index", None),
            ("set_device_idx", None),
            ("empty_cache", None),
        ]
        patches: list[tuple[Any, str, Any]] = [
            (accelerator, name, self._answer(f"torch.accelerator.{name}()", value))
            for name, value in answers
            if hasattr(accelerator, name)
        ]
        if hasattr(accelerator, "synchronize"):
            patches.append((accelerator, "synchronize", self._synchronize()))
        mps = torch.backends.mps
        patches.append(
            (
                mps,
                "is_available",
                self._ignored(
                    "torch.backends.mps.is_available()",
                    f"an Apple-GPU check: answered {mps.is_available()}, as this machine "
                    "answers it; the script's MPS path is not taken",
                    mps.is_available(),
                ),
            )
        )
        return patches

    def _backend_flag_patches(self) -> list[tuple[Any, str, Any]]:
        """cuBLAS and cuDNN settings: named as meaning nothing off CUDA, never applied there."""
        matmul_type: Any = type(torch.backends.cuda.matmul)
        patches: list[tuple[Any, str, Any]] = [
            (matmul_type, "__setattr__", self._cublas_setting(matmul_type))
        ]
        # torch.backends.cudnn is a module object whose class holds the flags as descriptors.
        cudnn_type: Any = type(torch.backends.cudnn)
        flags = vars(cudnn_type)
        patches += [
            (cudnn_type, flag, self._cudnn_flag(flags[flag], flag))
            for flag in _CUDNN_FLAGS
            if flag in flags
        ]
        return patches

    def _device(self, *args: Any, **kwargs: Any) -> Any:
        made = _REAL_DEVICE(*args, **kwargs)
        return self._map(made, f"torch.device({str(made)!r})")

    def _generator(self, device: Any = "cpu") -> Any:
        return _REAL_GENERATOR(self._map(device, "torch.Generator(device='cuda')"))

    def _to(self, original: Callable[..., Any], name: str) -> Callable[..., Any]:
        redirection = self

        def to(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if args and (
                _is_cuda(args[0]) or (isinstance(args[0], int) and not isinstance(args[0], bool))
            ):
                call = f"{name}({args[0]!r})"
                redirection._redirected(call)
                args = (redirection.device, *args[1:])
            if "device" in kwargs:
                kwargs["device"] = redirection._map(kwargs["device"], f"{name}(device='cuda')")
            return original(obj, *args, **kwargs)

        return to

    def _cuda(self, to: Callable[..., Any], call: str) -> Callable[..., Any]:
        redirection = self

        def cuda(obj: Any, device: Any = None, non_blocking: bool = False, **_: Any) -> Any:
            redirection._redirected(call)
            if isinstance(obj, torch.Tensor):
                return to(obj, redirection.device, non_blocking=non_blocking)
            return to(obj, redirection.device)

        return cuda

    def _factory(self, original: Callable[..., Any], name: str) -> Callable[..., Any]:
        redirection = self

        def factory(*args: Any, **kwargs: Any) -> Any:
            if "device" in kwargs:
                kwargs["device"] = redirection._map(
                    kwargs["device"], f"torch.{name}(device='cuda')"
                )
            return original(*args, **kwargs)

        return factory

    def _set_default_device(self) -> Callable[[Any], None]:
        original = torch.set_default_device

        def set_default_device(device: Any) -> None:
            original(self._map(device, f"torch.set_default_device({device!r})"))

        return set_default_device

    def _answer(self, call: str, value: Any) -> Callable[..., Any]:
        def answer(*_: Any, **__: Any) -> Any:
            self._redirected(call)
            return value

        return answer

    def _ignored(self, call: str, why: str, value: Any) -> Callable[..., Any]:
        def ignored(*_: Any, **__: Any) -> Any:
            self._unmapped(call, why)
            return value

        return ignored

    def _mem_get_info(self) -> Callable[..., tuple[int, int]]:
        total, source = self.total_memory
        host = source.startswith("the host's")
        why = "a CUDA allocator reading: answered (free, total) of " + (
            "the host's memory (available, physical)"
            if host
            else f"{source}, free answered as the whole (the target reports no free figure)"
        )

        def mem_get_info(*_: Any, **__: Any) -> tuple[int, int]:
            self._unmapped("torch.cuda.mem_get_info()", why)
            free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") if host else total
            return free, total

        return mem_get_info

    def _properties(self) -> Callable[..., TargetProperties]:
        total, source = self.total_memory
        outcome = (
            f"answered for {self.device}: name {str(self.device)!r}, total_memory {source}, "
            f"major.minor {ANSWERED_CAPABILITY[0]}.{ANSWERED_CAPABILITY[1]} as "
            "get_device_capability() answers"
        )

        def properties(*_: Any, **__: Any) -> TargetProperties:
            self._redirected("torch.cuda.get_device_properties()", outcome)
            return TargetProperties(str(self.device), total, *ANSWERED_CAPABILITY)

        return properties

    def _capability(self) -> Callable[..., tuple[int, int]]:
        def capability(*_: Any, **__: Any) -> tuple[int, int]:
            self._unmapped(
                "torch.cuda.get_device_capability()",
                f"a CUDA compute capability: no other device has one; answered "
                f"{ANSWERED_CAPABILITY}, the first with bf16, as is_bf16_supported() answers True",
            )
            return ANSWERED_CAPABILITY

        return capability

    def _event(self, *_: Any, **__: Any) -> TargetEvent:
        self._redirected(
            "torch.cuda.Event()",
            f"an event on {self.device}: record() synchronizes it and reads the host clock",
        )
        return TargetEvent(self.synchronize)

    def _stream(self, name: str) -> Callable[..., TargetStream]:
        def stream(*_: Any, **__: Any) -> TargetStream:
            self._redirected(
                f"torch.cuda.{name}()",
                f"{self.device}'s one queue: work runs in order, synchronize() waits on it",
            )
            return TargetStream(self.synchronize)

        return stream

    def _on_stream(self, stream: Any = None) -> AbstractContextManager[None]:
        self._redirected("torch.cuda.stream()", f"{self.device}'s one queue")
        return on_stream(stream)

    def _pin_memory(self) -> Callable[..., torch.Tensor]:
        def pin_memory(tensor: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
            self._unmapped(
                "tensor.pin_memory()",
                "page-locked host memory speeds copies to a CUDA device only: the tensor is "
                "returned as it is",
            )
            return tensor

        return pin_memory

    def _synchronize(self) -> Callable[..., None]:
        def synchronize(*_: Any, **__: Any) -> None:
            self._redirected("torch.cuda.synchronize()")
            self.synchronize()

        return synchronize

    def _seed(self, call: str) -> Callable[..., None]:
        original = getattr(torch.cuda, call.rsplit(".", 1)[1])

        def seed(value: int) -> None:
            # CUDA's seeding is queued until CUDA starts, which here it never does.
            self._redirected(f"{call}() (torch.manual_seed seeds the target)")
            original(value)

        return seed

    def _reading(self, name: str, answer: int | None = 0) -> Callable[..., int | None]:
        def reading(*_: Any, **__: Any) -> int | None:
            self._unmapped(
                f"torch.cuda.{name}()",
                (
                    "a CUDA allocator counter: answered 0"
                    if answer == 0
                    else "a CUDA counter reset: ignored"
                )
                + " (notebook 01 reads the target's memory)",
            )
            return answer

        return reading

    def _autocast(self) -> Callable[..., None]:
        original = torch.amp.autocast_mode.autocast.__init__
        redirection = self

        def init(obj: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
            if _is_cuda(device_type):
                redirection._redirected(f"autocast({device_type!r})")
                device_type = redirection.device.type
            original(obj, device_type, *args, **kwargs)

        return init

    def _grad_scaler(self) -> Callable[..., None]:
        original = torch.amp.grad_scaler.GradScaler.__init__
        redirection = self

        def init(obj: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
            if _is_cuda(device):
                redirection._redirected(f"GradScaler({device!r})")
                device = redirection.device.type
            original(obj, device, *args, **kwargs)

        return init

    def _extension(self, call: str) -> Callable[..., Any]:
        original = getattr(torch.utils.cpp_extension, call.rsplit(".", 1)[1])

        def build(*args: Any, **kwargs: Any) -> Any:
            self._unmapped(call, "a custom C++/CUDA extension: its kernels are not redirected")
            return original(*args, **kwargs)

        return build

    def _cublas_setting(self, matmul_type: Any) -> Callable[..., None]:
        original = matmul_type.__dict__["__setattr__"]

        def setattr_(obj: Any, name: str, value: Any) -> None:
            self._unmapped(
                f"torch.backends.cuda.matmul.{name} = {value!r}",
                "a cuBLAS setting: no other device reads it",
            )
            original(obj, name, value)

        return setattr_

    def _cudnn_flag(self, descriptor: Any, flag: str) -> Any:
        redirection = self

        class Watched:
            def __get__(self, obj: Any, owner: Any = None) -> Any:
                return descriptor.__get__(obj, owner)

            def __set__(self, obj: Any, value: Any) -> None:
                redirection._unmapped(
                    f"torch.backends.cudnn.{flag} = {value!r}",
                    "a cuDNN setting: no other device reads it",
                )
                descriptor.__set__(obj, value)

        return Watched()
