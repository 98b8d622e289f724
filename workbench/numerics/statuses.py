"""The words a numerics result records for a run's role, a layer's error cause, a judgement and
a run's verdict: below the records and the sentences, so both read them without importing each
other."""

from __future__ import annotations

from typing import Final, Literal

ROLE_TARGET = "target"
# A CPU eager run at a precision a target run uses: it measures that precision's own error, so
# a target run can be judged against it as well as against fp32.
ROLE_PRECISION_BASELINE = "precision baseline"

OWN = "own"
INHERITED = "inherited"
UNKNOWN = "unknown"

# A run's verdict uses the scorecard's words, and "could not run" besides.
COULD_NOT_RUN: Final = "could not run"
# A run's verdict: the scorecard's statuses, or could not run.
RunVerdictStatus = Literal["pass", "attention", "blocker", "could not run"]
# A judgement of one question (device fidelity or precision cost).
JUDGED_PASS: Final = "pass"
JUDGED_FAIL: Final = "fail"
TRIVIAL: Final = "trivially true"  # fidelity of an eager run on the reference's own device
NOT_JUDGED: Final = "not judged"
JudgementStatus = Literal["pass", "fail", "trivially true", "not judged"]
