"""Write workbench/data/xla_support_torch_xla_<version>.json from torch-xla's own dispatcher.

Run it where torch and torch-xla of the same release are installed (`make xla-venv`):

    PJRT_DEVICE=CPU .venv-xla/bin/python tools/xla_support_table.py

`import torch_xla` registers torch-xla's kernels and its boxed CPU fallback with the PyTorch
dispatcher. For every operator the dispatcher knows, `torch._C._dispatch_dump_table(op)` then
shows the entry the dispatcher computed for the XLA key (and for AutogradXLA), with the kind of
registration that fills it. That entry decides what an XLA tensor gets:

- lowered: torch-xla registered a kernel of its own for XLA (or replaced the autograd formula
  with AutogradXLA), so the op becomes HLO;
- decomposes: no torch-xla kernel, but a CompositeImplicitAutograd ("math kernel") or
  CompositeExplicitAutograd ("default backend kernel") kernel re-dispatches the op as other ops,
  which each get their own entry; the parts are not checked here;
- cpu_fallback: the entry is torch-xla's boxed fallback (aten_fallback.cpp), which copies the
  inputs to the host, runs the CPU kernel and counts the run as an `aten::<op>` counter.

Ops whose AutogradXLA entry is torch-xla's own (aten::native_layer_norm, ...) are also listed under
"autograd_overrides": on XLA their gradient comes from torch-xla's formula, so the backward ops a
CPU run shows for them (aten::native_layer_norm_backward) never reach the XLA device.

A kernel is a static fact, not a run: an op with a kernel can still fall back at run time (torch-xla
sends dynamic-output-shape ops such as aten::nonzero to the CPU unless dynamic shapes are enabled),
which is why the workbook's measured verdicts override this table.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

import torch
import torch_xla  # noqa: F401 - registers torch-xla's kernels and fallback with the dispatcher

DATA_DIR = Path(__file__).resolve().parent.parent / "workbench" / "data"
LOWERED = "lowered"
DECOMPOSES = "decomposes"
CPU_FALLBACK = "cpu_fallback"

# `_dispatch_dump_table` lines look like
# "XLA: registered at torch_xla/csrc/aten_fallback.cpp:68 [backend fallback]".
_ENTRY = re.compile(r"^(?P<key>XLA|AutogradXLA): (?P<where>.*?) \[(?P<kind>[^\]]+)\]\s*$", re.M)
_XLA_KINDS = {
    "kernel": LOWERED,
    "math kernel": DECOMPOSES,  # CompositeImplicitAutograd
    "default backend kernel": DECOMPOSES,  # CompositeExplicitAutograd(NonFunctional)
    "backend fallback": CPU_FALLBACK,
}


def _entries(op: str) -> dict[str, re.Match]:
    return {m["key"]: m for m in _ENTRY.finditer(torch._C._dispatch_dump_table(op))}


def overrides_autograd(op: str) -> bool:
    """True where torch-xla registered its own AutogradXLA kernel (its own gradient formula)."""
    autograd = _entries(op).get("AutogradXLA")
    return bool(autograd and autograd["kind"] == "kernel" and "torch_xla" in autograd["where"])


def classify(op: str) -> str:
    """The status of one operator for XLA tensors, from the dispatcher's computed table."""
    if overrides_autograd(op):
        return LOWERED  # e.g. aten::native_layer_norm: forward and gradient are torch-xla's
    xla = _entries(op).get("XLA")
    if xla is None or xla["kind"] not in _XLA_KINDS:
        # A new registration kind means this script's reading of the table is out of date.
        raise SystemExit(f"{op}: unexpected XLA dispatch entry {xla and xla.group(0)!r}")
    status = _XLA_KINDS[xla["kind"]]
    if status == CPU_FALLBACK and "torch_xla" not in xla["where"]:
        raise SystemExit(f"{op}: the XLA fallback is not torch-xla's: {xla.group(0)!r}")
    return status


def build_table() -> dict:
    ops: dict[str, list[str]] = {LOWERED: [], DECOMPOSES: [], CPU_FALLBACK: []}
    names = sorted(torch._C._dispatch_get_all_op_names())
    for op in names:
        ops[classify(op)].append(op)
    xla_version = version("torch-xla")
    return {
        "name": f"torch-xla {xla_version} dispatcher table",
        "flavour": "xla",
        "torch_xla_version": xla_version,
        "torch_version": torch.__version__,
        "generated_on": datetime.now(timezone.utc).date().isoformat(),
        "generated_by": "tools/xla_support_table.py",
        "source": (
            f"PyTorch dispatcher after `import torch_xla` (torch-xla {xla_version}, "
            f"torch {torch.__version__})"
        ),
        "method": (
            "for each op in torch._C._dispatch_get_all_op_names(), the XLA and AutogradXLA "
            "entries of torch._C._dispatch_dump_table(op): a torch-xla kernel is 'lowered', a "
            "CompositeImplicitAutograd (math) or CompositeExplicitAutograd (default backend) "
            "kernel is 'decomposes' (re-dispatched as other ops, not checked here), torch-xla's "
            "boxed fallback is 'cpu_fallback'; ops with torch-xla's own AutogradXLA kernel are "
            "also listed in 'autograd_overrides'. Static: a lowered op can still fall back at "
            "run time (dynamic-output-shape ops such as aten::nonzero)."
        ),
        "counts": {status: len(ops_of) for status, ops_of in ops.items()},
        "ops": ops,
        "autograd_overrides": [op for op in names if overrides_autograd(op)],
    }


def main() -> int:
    table = build_table()
    path = DATA_DIR / f"xla_support_torch_xla_{table['torch_xla_version']}.json"
    path.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    counts = ", ".join(f"{n} {status}" for status, n in table["counts"].items())
    print(f"{path}: {sum(table['counts'].values())} ops ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
