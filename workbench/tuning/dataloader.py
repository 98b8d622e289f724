"""DataLoader workers: the training step's throughput with each setting, and how much of the
step is spent waiting for data.

The pipeline is the workload's own data with real CPU work added per sample: SHA-256 over blocks
of the sample's bytes, calibrated on this machine to a chosen cost, as decoding or augmenting
would cost; hashing blocks this large releases the GIL, as native decoders do. Each setting
runs in a child process (the trial machinery's isolation and deadline), which times
`next(loader)` apart from the training step it feeds. The setting to use is the fastest, or a
cheaper one indistinguishable from it (noise.COMPARISON_RULE): waiting less is not the aim, a
faster step is, and a setting that waits less can still be far slower.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from time import perf_counter
from typing import Any

import torch
from torch.utils._pytree import tree_map
from torch.utils.data import DataLoader, Dataset

from workbench.errors import BadInput
from workbench.processes import FINISHED, run_in_child, usable_cores
from workbench.progress import progress_bar
from workbench.targets import get_target
from workbench.targets.base import Target
from workbench.timing import OUTLIER_RULE, HostLoadProbe, Measurement, format_seconds
from workbench.tuning.noise import (
    COMPARISON_RULE,
    Rated,
    SweepRun,
    fastest_then_cheapest,
    host_load_from,
)
from workbench.tuning.steps import items_per_second, log_line
from workbench.workload import Inputs, WorkloadSpec, input_tensors, move_inputs

# PyTorch's TensorBoard profiler plugin advises more workers once DataLoader time passes 5% of
# the step (methods.md e4): here a diagnosis of the chosen setting (data loading still bounds
# the step), not what chooses it.
WAIT_SHARE_LIMIT = 0.05
LOADER_RULE = (
    f"{COMPARISON_RULE}; among the settings indistinguishable from the fastest, the cheapest "
    "is chosen: fewest workers, then no pinning, then the smallest prefetch"
)
# Above hashlib's 2047-byte threshold, so each round runs without the GIL.
BLOCK_BYTES = 4096
_CALIBRATION_ROUNDS = 2_000


@dataclass(frozen=True)
class SampleWork:
    """CPU work per sample: `rounds` SHA-256 updates over a block of the sample's bytes,
    calibrated to about `cost_ms`."""

    cost_ms: float
    rounds: int
    calibration: str

    def apply(self, data: bytes) -> bytes:
        block = (data * (BLOCK_BYTES // max(1, len(data)) + 1))[:BLOCK_BYTES]
        digest = hashlib.sha256()
        for _ in range(self.rounds):
            digest.update(block)
        return digest.digest()


def calibrate_sample_work(cost_ms: float) -> SampleWork:
    """Rounds that take `cost_ms` on this machine, timed here and now."""
    if cost_ms < 0:
        raise BadInput(f"per_sample_cost_ms {cost_ms} must be 0 or more.")
    if cost_ms == 0:
        return SampleWork(0.0, 0, "no added per-sample work")
    probe = SampleWork(0.0, _CALIBRATION_ROUNDS, "")
    start = perf_counter()
    probe.apply(b"calibration")
    per_round = (perf_counter() - start) / _CALIBRATION_ROUNDS
    rounds = max(1, round(cost_ms / 1e3 / per_round))
    return SampleWork(
        cost_ms,
        rounds,
        f"{rounds:,} SHA-256 updates of {BLOCK_BYTES // 1024} KiB, timed at "
        f"{format_seconds(per_round)} each on this machine when the sweep started",
    )


@dataclass(eq=False)  # a dataset is itself, not its tensors' values
class CostlyDataset(Dataset):
    """The workload's samples, served one by one, each after `work` on its bytes.

    It cycles through one batch of the workload's data (a pool), so its memory stays one batch
    whatever its length.
    """

    inputs: Inputs
    targets: torch.Tensor
    length: int
    work: SampleWork

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Inputs, torch.Tensor]:
        row = index % len(self.targets)
        # Tuples stay tuples and dicts stay dicts: the default collate batches both.
        sample = tree_map(lambda t: t[row].clone(), self.inputs)
        # Raw bytes whatever the dtype (numpy has no bfloat16).
        tensors = input_tensors(sample)
        self.work.apply(
            b"".join(t.reshape(-1).view(torch.uint8).numpy().tobytes() for t in tensors)
        )
        return sample, self.targets[row].clone()


@dataclass(frozen=True)
class LoaderSetting:
    num_workers: int
    pin_memory: bool
    prefetch_factor: int | None  # None with num_workers 0: the main process loads

    def label(self) -> str:
        text = f"{self.num_workers} worker(s)"
        if self.prefetch_factor is not None:
            text += f", prefetch {self.prefetch_factor}"
        return text + (", pinned" if self.pin_memory else "")


@dataclass(frozen=True)
class LoaderJob:
    """Training steps fed by a DataLoader with one setting, run in a child process."""

    spec: WorkloadSpec
    target: str
    batch_size: int
    setting: LoaderSetting
    work: SampleWork
    warmup_steps: int
    steps: int

    def run(self) -> dict[str, Any]:
        # Workers and intra-op threads share the cores: the training process keeps the rest.
        torch.set_num_threads(training_threads(self.setting.num_workers))
        target = get_target(self.target)
        workload = self.spec.load()
        model = workload.build_model(target.device)
        model.train()
        optimizer = workload.make_optimizer(model)
        inputs, targets = workload.batch("cpu", self.batch_size)
        total = self.warmup_steps + self.steps
        loader = DataLoader(
            CostlyDataset(inputs, targets, total * self.batch_size, self.work),
            batch_size=self.batch_size,
            num_workers=self.setting.num_workers,
            pin_memory=self.setting.pin_memory,
            prefetch_factor=self.setting.prefetch_factor,
            drop_last=True,
        )
        batches = iter(loader)

        def step() -> tuple[float, float]:
            """(waited for the batch, whole step) in seconds."""
            start = perf_counter()
            batch_inputs, batch_targets = next(batches)
            loaded = perf_counter()
            # Pinned pages are what make a non-blocking copy asynchronous.
            non_blocking = self.setting.pin_memory
            x = move_inputs(batch_inputs, target.device, non_blocking=non_blocking)
            y = batch_targets.to(target.device, non_blocking=non_blocking)
            optimizer.zero_grad(set_to_none=True)
            workload.compute_loss(workload.forward(model, x), y).backward()
            optimizer.step()
            target.synchronize()
            return loaded - start, perf_counter() - start

        for _ in range(self.warmup_steps):
            step()
        # The probe counts the workers' CPU time as this setting's own work (they are children).
        with HostLoadProbe() as probe:
            timed = [step() for _ in range(self.steps)]
        assert probe.result is not None
        host = probe.result
        # The dataset holds exactly `total` batches: this ends the epoch, which shuts the
        # workers down cleanly instead of leaving them to the process group's kill.
        next(batches, None)
        return {
            "wait_times": [wait for wait, _ in timed],
            "step_times": [whole for _, whole in timed],
            "host": asdict(host),
        }


@dataclass
class LoaderResult:
    setting: LoaderSetting
    status: str  # "ok", or what went wrong
    waits: Measurement | None = None
    steps: Measurement | None = None
    items_per_step: int = 0
    error: str | None = None
    seconds: float = 0.0  # the child process, start to exit
    earlier: list[Measurement] = field(default_factory=list)  # noisier attempts set aside
    remeasure_note: str = ""

    @property
    def measurement(self) -> Measurement | None:
        return self.steps

    @property
    def wait_share(self) -> float | None:
        """Time blocked in next(loader) over the whole step time, across the measured steps
        that the step-time outlier rule keeps (timing.OUTLIER_RULE): one step stalled by other
        load on the machine is not the loader's supply rate. A loader that cannot keep up
        slows every step, or every few steps, alike, so the rule keeps those steps."""
        if self.waits is None or self.steps is None:
            return None
        left_out = set(self.steps.discarded)
        kept = [i for i in range(len(self.steps.times)) if i not in left_out]
        step_time = sum(self.steps.times[i] for i in kept)
        if step_time <= 0:
            return None
        return sum(self.waits.times[i] for i in kept) / step_time

    @property
    def throughput(self) -> float | None:
        return items_per_second(self.items_per_step, self.steps)


@dataclass
class LoaderStudy:
    batch_size: int
    work: SampleWork
    warmup_steps: int
    steps: int
    results: list[LoaderResult] = field(default_factory=list)
    recommended: LoaderResult | None = None
    fastest: LoaderResult | None = None
    limit: float = WAIT_SHARE_LIMIT
    rule: str = LOADER_RULE
    notes: list[str] = field(default_factory=list)


def training_threads(num_workers: int) -> int:
    """Intra-op threads for the training process next to `num_workers` loader processes."""
    return max(1, usable_cores() - num_workers)


def default_worker_counts(cores: int) -> list[int]:
    """0 (the main process), then powers of two up to the core count, and the count itself."""
    counts = [0]
    count = 1
    while count < cores:
        counts.append(count)
        count *= 2
    return counts + [cores]


def loader_settings(
    worker_counts: Sequence[int], prefetch_factors: Sequence[int], pin_memory_helps: bool
) -> list[LoaderSetting]:
    """Every combination that means something: prefetching needs workers, pinning needs a
    device whose copies it speeds up (the target says)."""
    if any(n < 0 for n in worker_counts):
        raise BadInput(f"dataloader_workers {list(worker_counts)}: counts must be 0 or more.")
    if not prefetch_factors or any(p < 1 for p in prefetch_factors):
        raise BadInput(f"prefetch_factors {list(prefetch_factors)}: give values of 1 or more.")
    pins = (False, True) if pin_memory_helps else (False,)
    settings = []
    for workers in sorted(set(worker_counts)):
        for pin in pins:
            prefetches = sorted(set(prefetch_factors)) if workers else [None]
            settings += [LoaderSetting(workers, pin, p) for p in prefetches]
    return settings


def choose_setting(
    results: Sequence[LoaderResult],
) -> tuple[LoaderResult, LoaderResult] | None:
    """(chosen, fastest) by LOADER_RULE among the settings that ran; None when none did."""
    rated = [Rated(r, r.items_per_step, r.steps) for r in results if r.steps and r.items_per_step]
    pick = fastest_then_cheapest(
        rated,
        lambda r: (r.setting.num_workers, r.setting.pin_memory, r.setting.prefetch_factor or 0),
    )
    return None if pick is None else (pick.chosen.setting, pick.fastest.setting)


def sweep_loader(
    spec: WorkloadSpec,
    target: Target,
    batch_size: int,
    settings: Sequence[LoaderSetting],
    work: SampleWork,
    *,
    items_per_sample: int,
    steps: int,
    timeout_s: float,
    sweep: SweepRun | None = None,
) -> LoaderStudy:
    """Each setting in its own child process, taken again while it is noisy or loaded
    (`sweep.policy`); a failing one is recorded and the sweep goes on."""
    sweep = sweep or SweepRun()
    cores = usable_cores()
    # Each worker has prefetch_factor batches in flight at start: skip them so the measured
    # steps show the steady supply, not the initial queue.
    most_in_flight = max((s.num_workers * (s.prefetch_factor or 0) for s in settings), default=0)
    warmup = most_in_flight + 2
    study = LoaderStudy(batch_size, work, warmup, steps)
    study.notes.append(
        "the share of the step spent waiting for data leaves out steps the outlier rule drops: "
        + OUTLIER_RULE
    )
    study.notes.append(
        f"the training process runs cores minus workers intra-op threads (at least 1) of the "
        f"{cores} usable cores, so loader workers and the step do not fight over them"
    )
    oversubscribed = sorted({s.num_workers for s in settings if s.num_workers > (cores or 1)})
    if oversubscribed:
        study.notes.append(
            f"worker counts {oversubscribed} exceed the {cores} usable cores: PyTorch warns about "
            "this, and the workers then compete with the training step for CPU"
        )
    for setting in progress_bar(settings, desc="DataLoader sweep", disable=not sweep.progress_bars):
        job = LoaderJob(spec, target.name, batch_size, setting, work, warmup, steps)

        def attempt(job: LoaderJob = job) -> LoaderResult:
            result = _measure(job, target, timeout_s, batch_size * items_per_sample)
            sweep.log(_line(result))
            return result

        first = attempt()
        study.results.append(
            sweep.policy.settle(first, attempt, f"DataLoader {setting.label()}")
            if first.steps
            else first
        )
    choice = choose_setting(study.results)
    if choice is not None:
        study.recommended, study.fastest = choice
    return study


def _measure(job: LoaderJob, target: Target, timeout_s: float, items: int) -> LoaderResult:
    outcome = run_in_child(job, target.trial_start_method, timeout_s)
    result = LoaderResult(job.setting, "ok", items_per_step=items, seconds=outcome.seconds)
    data = outcome.result or {}
    if outcome.status != FINISHED or data.get("error"):
        result.status = "failed" if outcome.status == FINISHED else outcome.status
        result.error = data.get("error") or outcome.output_tail[-500:] or outcome.status
    else:
        result.waits = Measurement(data["wait_times"])
        result.steps = Measurement(data["step_times"], host=host_load_from(data.get("host")))
    return result


def _line(result: LoaderResult) -> str:
    head = f"dataloader {result.setting.label()}: {result.status}"
    timed = result.steps if result.wait_share is not None else None
    if timed is not None:
        head += f", waiting {result.wait_share:.0%} of the step"
    why = result.error.splitlines()[-1][:160] if result.error else None
    return log_line(head, timed, why=why)
