"""The shared timing rules: when the machine was too busy for a measurement to stand on its own
(real /proc/stat readings, real busy processes). Which percentile a sample count supports:
test_tails.py."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time

import pytest

from workbench.timing import (
    MIN_LOAD_WINDOW_S,
    HostLoadProbe,
    is_loaded,
)

# These read the whole machine's load and start busy processes of their own: beside other tests
# on other xdist workers they would measure those tests.
pytestmark = pytest.mark.serial


def test_load_rule_marks_busy_or_stolen_time_and_not_a_quiet_machine() -> None:
    assert not is_loaded(0.05, 0.0)
    assert not is_loaded(None, None)
    assert is_loaded(0.6, 0.0)
    assert is_loaded(0.0, 0.2)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_other_processes_busy_loops_mark_a_measurement_loaded() -> None:
    """Two busy loops started through a shell that exits at once: they are not this process's
    descendants (those are the measurement's own work), just other load on the machine."""
    spin = (
        f"{sys.executable} -c 'import time; end = time.time() + 2.5\nwhile time.time() < end: pass'"
    )
    subprocess.run(["sh", "-c", f"({spin} &) ; ({spin} &)"], check=True)
    time.sleep(0.5)  # past the interpreters' start-up
    with HostLoadProbe() as probe:
        time.sleep(1.0)
    load = probe.result
    assert load is not None and load.other_share is not None
    assert load.loaded, load.sentence()
    assert "LOADED" in load.sentence()
    time.sleep(1.2)  # the loops end by themselves


def test_a_measurements_child_processes_are_its_own_work() -> None:
    """Busy children (as compiler or DataLoader workers are) do not mark it loaded."""
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_spin, args=(2.0,)) for _ in range(2)]
    for process in workers:
        process.start()
    time.sleep(0.5)
    try:
        with HostLoadProbe() as probe:
            time.sleep(1.0)
    finally:
        for process in workers:
            process.join()
    assert probe.result is not None and probe.result.other_share is not None
    assert probe.result.other_share < 0.25, probe.result.sentence()


def test_a_measurements_own_work_is_not_counted_as_other_load() -> None:
    with HostLoadProbe() as idle:
        time.sleep(0.3)
    with HostLoadProbe() as busy:
        _spin(0.6)
    assert idle.result is not None and busy.result is not None
    assert idle.result.other_share is not None and busy.result.other_share is not None
    # Spinning here takes about one core; counted as "other" it would add 1/cores of the machine.
    assert busy.result.other_share <= idle.result.other_share + 0.2


def test_a_window_of_a_few_milliseconds_is_read_over_enough_clock_ticks() -> None:
    """/proc/stat counts 10 ms ticks: a 2 ms window alone reads 0% or 100% of the CPU."""
    readings = []
    for _ in range(5):
        with HostLoadProbe() as probe:
            _spin(0.002)
        assert probe.result is not None
        readings.append(probe.result)
    assert all(r.wall_seconds >= MIN_LOAD_WINDOW_S for r in readings)
    assert all(r.other_share is not None and r.other_share < 0.25 for r in readings), [
        r.sentence() for r in readings
    ]
