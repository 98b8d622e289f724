"""Data-parallel scaling: the training step under torch.distributed, launched with torchrun.

Each world size is one `python -m torch.distributed.run --standalone` launch of this module's
rank entry point, in a session of its own with a deadline: a launch still running at its
deadline gets SIGTERM, then SIGKILL, for its whole process group, so a hung collective cannot
hang the notebook. Every rank runs the same fixed number of steps (an adaptive warm-up could end
at different steps on different ranks and leave one waiting in a collective), times each one,
and writes its times; a step's time is that of the slowest rank. Efficiency is weak scaling at
a fixed per-worker batch: throughput(N) / (N x throughput(1)) (methods.md e6).

Each rank reads the machine's load around its timed steps; the other ranks of the launch are
its own job, not other load, so their CPU time is moved out of the other processes' share.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final, Literal

from workbench.errors import BadInput
from workbench.processes import (
    launcher_environment_hidden,
    read_tail,
    torchrun,
    usable_cores,
)
from workbench.progress import progress_bar
from workbench.targets import get_target, target_class
from workbench.targets.base import Target
from workbench.timing import HostLoad, HostLoadProbe, Measurement, format_seconds
from workbench.tuning.noise import (
    COMPARISON_RULE,
    Rated,
    SweepRun,
    cpu_seconds,
    fastest_then_cheapest,
    host_load_from,
    with_own_helpers,
)
from workbench.tuning.steps import items_per_second, log_line

# Imported where they are used: they load torch, which reading result files back (compare,
# collect, export-metrics) never needs.
if TYPE_CHECKING:
    from workbench.workload import WorkloadSpec


OK: Final = "ok"
SKIPPED: Final = "skipped"
FAILED: Final = "failed"
TIMEOUT: Final = "timeout"
LaunchStatus = Literal["ok", "skipped", "failed", "timeout"]  # how one width's launch ended


@dataclass(frozen=True)
class RankJob:
    spec: WorkloadSpec
    target: str
    batch_size: int  # per rank
    warmup_steps: int
    steps: int
    collective_timeout_s: float
    threads: int  # intra-op threads per rank
    out_dir: str

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RankJob:
        from workbench.workload import WorkloadSpec

        data = json.loads(text)
        return cls(**{**data, "spec": WorkloadSpec(**data["spec"])})


def rank_main(job: RankJob) -> None:
    """One rank: join the group, run the fixed steps, write this rank's times."""
    import torch

    local_rank = int(os.environ["LOCAL_RANK"])
    # Before the target exists: the variables decide which device this rank claims.
    os.environ.update(target_class(job.target).rank_environment(local_rank))
    torch.set_num_threads(job.threads)
    target = get_target(job.target)
    target.init_process_group(timedelta(seconds=job.collective_timeout_s))
    import torch.distributed as dist

    try:
        # The workload is this rank's copy of the model; a script it runs (a `script:`
        # workload) must not take this launch for its own and join a second process group.
        with launcher_environment_hidden():
            workload = job.spec.load()
            # A script workload makes a batch of another size by running the script again:
            # made here, where the launch's variables are hidden, and kept for the step below.
            workload.batch(batch_size=job.batch_size)
        model = target.data_parallel(workload.build_model(target.device))
        model.train()
        optimizer = workload.make_optimizer(model)
        inputs, targets = workload.batch(target.device, job.batch_size)

        def step() -> float:
            start = perf_counter()
            optimizer.zero_grad(set_to_none=True)
            workload.compute_loss(workload.forward(model, inputs), targets).backward()
            target.data_parallel_optimizer_step(optimizer)
            target.synchronize()
            return perf_counter() - start

        for _ in range(job.warmup_steps):
            step()
        import psutil  # here: readers of scaling records never measure a process

        me = psutil.Process()
        cpu_before = cpu_seconds(me)
        with HostLoadProbe() as probe:
            times = [step() for _ in range(job.steps)]
            cpu = cpu_seconds(me) - cpu_before
        # Nobody leaves while another rank may still need it for a collective.
        dist.barrier()
        record = {
            "rank": dist.get_rank(),
            "times": times,
            "host": asdict(probe.result) if probe.result else None,
            "cpu_seconds": cpu,
        }
        Path(job.out_dir, f"rank{dist.get_rank()}.json").write_text(json.dumps(record))
    finally:
        dist.destroy_process_group()


@dataclass
class ScalingRun:
    world_size: int
    status: LaunchStatus
    reason: str = ""
    step: Measurement | None = None  # per step, the slowest rank's time
    items_per_step: int = 0  # all ranks together
    seconds: float = 0.0  # the whole launch
    efficiency: float | None = None
    output_tail: str = ""
    earlier: list[Measurement] = field(default_factory=list)  # noisier attempts set aside
    remeasure_note: str = ""

    @property
    def measurement(self) -> Measurement | None:
        return self.step

    @property
    def throughput(self) -> float | None:
        return items_per_second(self.items_per_step, self.step)

    @property
    def per_worker(self) -> float | None:
        rate = self.throughput
        return None if rate is None else rate / self.world_size


@dataclass
class ScalingStudy:
    backend: str
    batch_size: int  # per worker
    threads_per_rank: int
    max_workers: int
    warmup_steps: int
    steps: int
    runs: list[ScalingRun] = field(default_factory=list)
    skipped_reason: str | None = None  # the whole sweep could not run here

    def measured(self) -> list[ScalingRun]:
        return [r for r in self.runs if r.status == OK and r.throughput]

    def efficiency_at(self, workers: int) -> tuple[float, int] | None:
        """The efficiency measured at the largest world size up to `workers`, and that size."""
        runs = [r for r in self.measured() if r.efficiency and r.world_size <= workers]
        if not runs:
            return None
        run = max(runs, key=lambda r: r.world_size)
        return run.efficiency or 0.0, run.world_size


def default_world_sizes(max_workers: int) -> list[int]:
    """1, 2, 4, ... up to the worker count, and the count itself."""
    sizes, size = [], 1
    while size < max_workers:
        sizes.append(size)
        size *= 2
    return sizes + [max_workers]


def _child_pythonpath() -> str:
    """The notebook's import path, so ranks find the same workload modules."""
    return os.pathsep.join(p for p in sys.path if p)


def launch(job: RankJob, world_size: int, timeout_s: float) -> ScalingRun:
    """One torchrun launch at `world_size`, bounded by `timeout_s`."""
    run = ScalingRun(world_size, OK)
    with tempfile.TemporaryDirectory(prefix="workbench-ddp-") as folder:
        job = replace(job, out_dir=folder)
        job_path = Path(folder, "job.json")
        job_path.write_text(job.to_json())
        log_path = Path(folder, "torchrun.log")
        env = {
            **os.environ,
            "OMP_NUM_THREADS": str(job.threads),
            "PYTHONPATH": _child_pythonpath(),
        }
        started = perf_counter()
        args = ["-m", "workbench.tuning.parallel", str(job_path)]
        code = torchrun(args, world_size, env, log_path, timeout_s)
        run.seconds = perf_counter() - started
        ranks = [json.loads(p.read_text()) for p in sorted(Path(folder).glob("rank*.json"))]
        if code is None:
            run.status = TIMEOUT
            run.reason = f"still running after {format_seconds(timeout_s)}: process group killed"
        elif len(ranks) != world_size:
            run.status = FAILED
            run.reason = (
                f"torchrun exited with code {code}; {len(ranks)} of {world_size} ranks reported"
            )
        elif code != 0:
            # Every rank passed the final barrier and wrote its times, so the measurement is
            # complete; gloo can still abort a rank while the group is torn down afterwards.
            run.reason = f"all ranks reported, then torchrun exited with code {code} at shutdown"
            run.output_tail = read_tail(log_path)
        if run.status != OK:
            run.output_tail = read_tail(log_path)
            return run
        slowest = [max(times) for times in zip(*(r["times"] for r in ranks), strict=True)]
        run.step = Measurement(slowest, host=launch_load(ranks))
        return run


def launch_load(ranks: list[dict[str, Any]]) -> HostLoad | None:
    """The machine's load over a launch's timed steps: each rank's reading with the other
    ranks' CPU time counted as the launch's own, and the most loaded rank's reading kept."""
    total_cpu = sum(float(r.get("cpu_seconds") or 0.0) for r in ranks)
    readings = []
    for rank in ranks:
        load = host_load_from(rank.get("host"))
        if load is not None:
            siblings = total_cpu - float(rank.get("cpu_seconds") or 0.0)
            readings.append(with_own_helpers(load, siblings))
    return max(readings, key=lambda load: load.other_share or 0.0, default=None)


def sweep_world_sizes(
    spec: WorkloadSpec,
    target: Target,
    batch_size: int,
    world_sizes: Sequence[int],
    *,
    items_per_sample: int,
    warmup_steps: int,
    steps: int,
    timeout_s: float,
    sweep: SweepRun | None = None,
) -> ScalingStudy:
    """Launch each world size (skipping, with the reason, what this machine cannot run), again
    while its steps are noisy or loaded (`sweep.policy`)."""
    if any(w < 1 for w in world_sizes):
        raise BadInput(f"world_sizes {list(world_sizes)}: every size must be 1 or more.")
    sweep = sweep or SweepRun()
    log = sweep.log
    max_workers = target.max_data_parallel_workers()
    sizes = sorted(set(world_sizes)) or default_world_sizes(max_workers)
    runnable = [w for w in sizes if w <= max_workers]
    # Every launch gives each rank the same share of the host's cores, so that a rank is the
    # same worker at every world size (the CPU stand-in for one NeuronCore per rank).
    threads = max(1, usable_cores() // max(runnable or [1]))
    study = ScalingStudy(
        target.distributed_backend, batch_size, threads, max_workers, warmup_steps, steps
    )
    collectives = target.collectives()
    if not collectives.available:
        study.skipped_reason = collectives.reason
        study.runs = [ScalingRun(w, SKIPPED, collectives.reason) for w in sizes]
        log(f"data-parallel sweep skipped: {collectives.reason}")
        return study
    job = RankJob(spec, target.name, batch_size, warmup_steps, steps, timeout_s, threads, "")
    for world_size in progress_bar(
        sizes, desc="data-parallel sweep", disable=not sweep.progress_bars
    ):
        if world_size > max_workers:
            run = ScalingRun(
                world_size,
                SKIPPED,
                f"world size {world_size} is more than the {max_workers} data-parallel workers "
                f"{target.name} offers here; it would measure oversubscription, not scaling",
            )
        else:

            def attempt(world_size: int = world_size) -> ScalingRun:
                run = launch(job, world_size, timeout_s)
                run.items_per_step = world_size * batch_size * items_per_sample
                log(_line(run))
                return run

            first, name = attempt(), f"world size {world_size}"
            run = sweep.policy.settle(first, attempt, name) if first.step else first
        study.runs.append(run)
    _weigh_efficiencies(study)
    return study


def _weigh_efficiencies(study: ScalingStudy) -> None:
    """Each measured launch's weak-scaling efficiency: thr(N) / (N x thr(1))."""
    base = next((r for r in study.measured() if r.world_size == 1), None)
    if base is not None and base.throughput:
        for run in study.measured():
            run.efficiency = (run.throughput or 0.0) / (run.world_size * base.throughput)


def _line(run: ScalingRun) -> str:
    return log_line(
        f"world size {run.world_size}: {run.status}",
        run.step,
        why=run.reason or None,
        seconds=run.seconds or None,
    )


def world_size_rule(floor: float) -> str:
    return (
        f"among world sizes whose weak-scaling efficiency is at least {floor:.0%} (a worker "
        f"that adds less is not worth its cost), {COMPARISON_RULE}; among the sizes "
        "indistinguishable from the fastest, the narrowest is chosen (fewer workers to pay for)"
    )


def choose_world_size(study: ScalingStudy, floor: float) -> ScalingRun | None:
    """world_size_rule(floor) over the measured launches; None when none qualifies."""
    rated = [
        Rated(r, r.items_per_step, r.step)
        for r in study.measured()
        if r.step is not None and r.efficiency is not None and r.efficiency >= floor
    ]
    pick = fastest_then_cheapest(rated, lambda r: (r.world_size,))
    return None if pick is None else pick.chosen.setting


def _main(argv: list[str]) -> int:
    import workbench.execution.fast_exit  # noqa: F401 - a rank that loaded torch ends without a pause

    if len(argv) != 1:
        print("usage: python -m torch.distributed.run ... -m workbench.tuning.parallel JOB.json")
        return 2
    rank_main(RankJob.from_json(Path(argv[0]).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
