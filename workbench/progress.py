"""Progress bars for long loops: tqdm's notebook-aware bar, imported only when a bar is made.

Inside a notebook kernel `tqdm.auto` picks the ipywidgets bar, and importing it loads ipywidgets:
a few hundred milliseconds that a notebook's start-up, and a command that never draws a bar,
should not pay.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

if TYPE_CHECKING:
    from tqdm import tqdm

T = TypeVar("T")


@overload
def progress_bar(iterable: Iterable[T], **options: Any) -> tqdm[T]: ...
@overload
def progress_bar(iterable: None = None, **options: Any) -> tqdm[Any]: ...
def progress_bar(iterable: Iterable[Any] | None = None, **options: Any) -> tqdm[Any]:
    """tqdm.auto's bar over `iterable`, or a manual one (`total=`, then `update()`); with
    `disable=True` (a headless run) plain tqdm's, which draws nothing and loads no widgets."""
    if options.get("disable"):
        from tqdm import tqdm
    else:
        from tqdm.auto import tqdm

    return cast("tqdm[Any]", tqdm(iterable, **options))
