"""Text from user code made safe for a terminal, a log file, a JSON field or the index page.

A workload's exception message or printed output can carry ANSI escape sequences: colours are
harmless, but CSI and OSC sequences can also move the cursor, rewrite earlier console lines,
set the window title or plant hyperlinks, and bidirectional-override characters can make a
line read differently from what it contains. Every such sequence is removed; the text stays.
"""

from __future__ import annotations

import re

from workbench.redact import scrub_text

_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor movement, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks, clipboard
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[@-Z\\-_]?"  # any other escape, or a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]"  # single-byte CSI
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # other C0/C1 controls; newline and tab stay
    r"|[\u202a-\u202e\u2066-\u2069]"  # bidirectional overrides and isolates
)


def strip_control(text: str) -> str:
    """`text` without terminal control sequences or control characters (newlines and tabs kept)."""
    return _CONTROL.sub("", text)


def console_line(text: str) -> str:
    """A line for the console or a log that holds text from run files or user code: control
    sequences stripped and secrets scrubbed (a hand-edited or foreign file may carry either)."""
    return scrub_text(strip_control(text))
