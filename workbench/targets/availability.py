"""Whether something a target offers can run here, and why (or why not)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str  # why not available, or what was found when it is
