"""Every check each notebook's verdict makes, by the name a CI's test history follows.

A finding carries the name of the check that found it (scorecard.Finding.check). The JUnit report
writes one testcase per check of every notebook in every run, passing where the check found
nothing and skipped with its reason where the notebook did not finish, so the tests a CI tracks
from night to night are the same whatever the machine's load made the findings (two runs of
identical code once gave 11 and 8 testcases). Names only: no torch, no notebook imports.
"""

from __future__ import annotations


class Environment:
    """Notebook 00_environment's checks."""

    DRIFT = "no drift from the pinned manifest"
    RELEASE = "a known Neuron release combination"
    ALL = (DRIFT, RELEASE)


class Baseline:
    """Notebook 01_baseline's checks."""

    STEP = "every step ran"
    FINITE = "the loss stays finite"
    RECOMPILE = "no recompile in steady state"
    QUIET = "timed on a quiet machine"
    WARMUP = "warm-up settles"
    STEADY = "steady state within the noise allowed"
    REFERENCE = "reference artifact written for 03"
    ALL = (STEP, FINITE, RECOMPILE, QUIET, WARMUP, STEADY, REFERENCE)


class Coverage:
    """Notebook 02_op_coverage's checks."""

    CAPTURE = "the step was captured whole"
    FALLBACK = "no op falls back on a chosen flavour"
    CUSTOM = "every custom op has a Neuron kernel"
    SCAN = "the scan finds no blocking code"
    RISK = "no high or medium risk flag"
    SHAPES = "shapes stable beyond the batch"
    UNKNOWN = "no op of unknown support"
    ALL = (CAPTURE, FALLBACK, CUSTOM, SCAN, RISK, SHAPES, UNKNOWN)


class Numerics:
    """Notebook 03_numerics's checks."""

    RUNS = "every precision run passes"
    LOOP = "the script's own loop agrees"
    CONVERGENCE = "convergence study"
    ALL = (RUNS, LOOP, CONVERGENCE)


class Retuning:
    """Notebook 04_retuning's checks."""

    FIT = "a batch fits"
    RAN = "every trial and launch ran"
    SETTLED = "measurements settled"
    ALL = (FIT, RAN, SETTLED)


class Serving:
    """Notebook 05_serving's checks."""

    SERVES = "a batch size serves"
    POINTS = "every batch point serves"
    WINDOW = "no compile in a timed window"
    AGREE = "timing windows agree"
    QUIET = "timed on a quiet machine"
    SLO = "the SLO holds"
    OPEN_LOOP = "an open-loop rate holds the SLO"
    GAPS = "host gaps"
    SECTIONS = "every section measured"
    ALL = (SERVES, POINTS, WINDOW, AGREE, QUIET, SLO, OPEN_LOOP, GAPS, SECTIONS)


# By notebook stem (each package reader's RESULT_FILE.notebook).
CHECKS: dict[str, tuple[str, ...]] = {
    "00_environment": Environment.ALL,
    "01_baseline": Baseline.ALL,
    "02_op_coverage": Coverage.ALL,
    "03_numerics": Numerics.ALL,
    "04_retuning": Retuning.ALL,
    "05_serving": Serving.ALL,
}
# Findings outside a notebook's own checks (the workload's attentions, a result file's
# findings from before checks were named): one more fixed testcase.
OTHER = "other findings"
