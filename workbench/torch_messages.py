"""Torch's own warnings during a traced or compiled call, grouped instead of pasted.

Dynamo and Inductor log each graph break or recompile as a multi-line warning on stderr, once
per occurrence, with timestamps and process ids; in a notebook report that is a wall of text
that repeats what the graph-break table already says. While `grouped_torch_messages()` is
active those messages (and Python warnings) are collected instead, one group per distinct
first line with a count, and torch's own handlers are restored afterwards.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# Loggers torch configures with their own stderr handler (propagation off).
_TORCH_LOGGERS = ("torch", "torch._dynamo", "torch._inductor")


@dataclass
class MessageGroup:
    source: str  # the logger, or the warning category
    message: str  # the first non-empty line
    count: int = 1


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:300]


class _Grouping(logging.Handler):
    def __init__(self, groups: list[MessageGroup]) -> None:
        super().__init__(logging.WARNING)
        self.groups = groups

    def emit(self, record: logging.LogRecord) -> None:
        add(self.groups, record.name, record.getMessage())


def add(groups: list[MessageGroup], source: str, text: str) -> None:
    """Count `text` under its first line, keeping the order in which groups first appeared."""
    message = _first_line(text)
    for group in groups:
        if (group.source, group.message) == (source, message):
            group.count += 1
            return
    groups.append(MessageGroup(source, message))


@contextmanager
def grouped_torch_messages() -> Iterator[list[MessageGroup]]:
    """Collect torch's warning-level log messages and Python warnings into groups."""
    groups: list[MessageGroup] = []
    handler = _Grouping(groups)
    loggers = [logging.getLogger(name) for name in _TORCH_LOGGERS]
    saved = [logger.handlers[:] for logger in loggers]
    for logger in loggers:
        logger.handlers = [handler]
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # every occurrence, so the counts are true
            yield groups
    finally:
        for logger, handlers in zip(loggers, saved, strict=True):
            logger.handlers = handlers
        for warning in caught:
            add(groups, warning.category.__name__, str(warning.message))
