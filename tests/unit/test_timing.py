"""The shared timing rules: when the machine was too busy for a measurement to stand on its own
(real /proc/stat readings, real busy processes). Which percentile a sample count supports:
test_tails.py.

A test that must see spare CPU to tell its case apart (a measurement's own children counted as
other load would add a whole machine's share only where there is CPU left to take) reads the
machine's load just before, and again after a reading that would fail it: on a machine other
processes load it skips, saying so, rather than failing because another process ran."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time

import pytest

from workbench.timing import (
    LOADED_OTHER_SHARE,
    MIN_LOAD_WINDOW_S,
    HostLoad,
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


def _other_load() -> HostLoad:
    """The share of the CPU other processes take now, over a short idle window."""
    with HostLoadProbe() as probe:
        time.sleep(0.3)
    assert probe.result is not None
    if probe.result.other_share is None:
        pytest.skip("/proc/stat cannot be read here, so no share of the CPU is measured")
    return probe.result


def _skip_when_loaded(load: HostLoad, needs: str) -> None:
    assert load.other_share is not None
    if load.other_share >= LOADED_OTHER_SHARE:
        pytest.skip(f"{needs}; {load.sentence()}")


def _judged_or_skipped(share: float, before: HostLoad, needs: str) -> None:
    """`share` (another process's share of the CPU in the window judged) stays under the load
    rule's limit above what other processes took just before; where it does not, the machine
    is read again, and a machine that other processes load by now skips instead."""
    assert before.other_share is not None
    if share < before.other_share + LOADED_OTHER_SHARE:
        return
    _skip_when_loaded(_other_load(), needs)
    raise AssertionError(
        f"other share {share:.0%} in the window, {before.other_share:.0%} before it"
    )


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
    """Busy children (as compiler or DataLoader workers are) do not mark it loaded. Counted as
    other load they would add the CPU they take, which a loaded machine leaves them little of."""
    needs = "busy children are told apart from other load only where CPU is left for them"
    before = _other_load()
    _skip_when_loaded(before, needs)
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
    _judged_or_skipped(probe.result.other_share, before, needs)


def test_a_measurements_own_work_is_not_counted_as_other_load() -> None:
    needs = "this process's own spinning is told apart from other load only where CPU is left"
    idle = _other_load()
    _skip_when_loaded(idle, needs)
    with HostLoadProbe() as busy:
        _spin(0.6)
    assert busy.result is not None and busy.result.other_share is not None
    # Spinning here takes about one core; counted as "other" it would add 1/cores of the machine.
    _judged_or_skipped(busy.result.other_share, idle, needs)


def test_a_window_of_a_few_milliseconds_is_read_over_enough_clock_ticks() -> None:
    """/proc/stat counts 10 ms ticks: a 2 ms window alone reads 0% or 100% of the CPU; read over
    MIN_LOAD_WINDOW_S it reads what a longer window just before it reads."""
    before = _other_load()
    readings = []
    for _ in range(5):
        with HostLoadProbe() as probe:
            _spin(0.002)
        assert probe.result is not None
        readings.append(probe.result)
    assert all(r.wall_seconds >= MIN_LOAD_WINDOW_S for r in readings)
    assert all(r.other_share is not None for r in readings)
    needs = "a short window is compared with a longer one only while the load holds still"
    _skip_when_loaded(before, needs)
    _judged_or_skipped(max(r.other_share or 0.0 for r in readings), before, needs)
