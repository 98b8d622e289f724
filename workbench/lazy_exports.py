"""Package names imported on first use (PEP 562), so importing a package costs nothing.

`from workbench import baseline` in a notebook's first cell, or `workbench compare` reading
notebook 02's result-file reader from `workbench.coverage.question`, runs the package's
__init__; if that imported the measuring code it would load torch (over a second) before anything
needs it. A package lists what it exports and the module each name lives in; the name is
imported, and kept in the package, the first time it is read.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` for `package` that imports each of `exports` (name -> the
    module that defines it) when first read; any other name raises AttributeError as usual."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later reads skip this hook
        return value

    return __getattr__
