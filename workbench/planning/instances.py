"""The instance types a plan is made for: ranks per instance and memory per rank, with sources.

A rank is one (logical) NeuronCore, the unit of parallelism Neuron's launchers count
(neuron.md 4.2; TorchTitan's NGPU equals the NeuronCores of the instance). Its HBM is the
chip's HBM divided among the chip's logical cores: 16 GiB on Trn1/Inf2 (32 GiB for two
NeuronCore-v2), 24 GiB on Trn2 at the default LNC=2 (96 GiB for four logical cores, "before
runtime overhead", acceptance_inference_parallelism.md 1.3). Besides those, "here" is the
machine the command runs on: its cores as ranks, its host memory shared among them, which is
what the sharded check runs on gloo use.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.errors import BadInput, did_you_mean
from workbench.processes import usable_cores

GiB = 2**30
HERE = "here"
# What a plan is made for when nothing names an instance: AWS's own Llama training scripts'.
DEFAULT_INSTANCE = "trn1.32xlarge"
TRAINING = "training"
INFERENCE = "inference"

NEURON_SOURCE = "AWS Neuron documentation, Trainium and Inferentia2 architecture (2026-12)"
TRN2_SOURCE = (
    "AWS Neuron documentation, Trn2 architecture and training best practices (2026-10): LNC=2, "
    "24 GiB HBM per rank"
)


def human_bytes(value: float) -> str:
    """GiB for sizes of a GiB and more, MiB down to a MiB, KiB below (by size, either sign)."""
    if abs(value) >= GiB:
        return f"{value / GiB:,.2f} GiB"
    if abs(value) >= 2**20 or value == 0:
        return f"{value / 2**20:,.2f} MiB"
    return f"{value / 2**10:,.2f} KiB"


@dataclass(frozen=True)
class InstanceSpec:
    """One instance type as the planner sees it."""

    name: str
    ranks: int  # logical NeuronCores (or, for "here", CPU cores): one rank each
    hbm_per_rank_bytes: int  # device memory one rank may hold (host memory share for "here")
    host_memory_bytes: int | None  # None where no source gives it
    ranks_per_chip: int  # tensor parallelism inside one chip stays on its fast links
    chips: int
    use: str  # TRAINING (Trn) or INFERENCE (Inf2): what AWS sells the instance for
    source: str

    @property
    def is_here(self) -> bool:
        return self.name == HERE

    def describe(self) -> str:
        memory = f"{self.hbm_per_rank_bytes / GiB:.3g} GiB"
        where = "host memory" if self.is_here else "HBM"
        return f"{self.name}: {self.ranks} ranks x {memory} {where} per rank"


def _neuron(
    name: str,
    chips: int,
    ranks_per_chip: int,
    hbm_per_chip_gib: int,
    host_gib: int | None,
    use: str = TRAINING,
    source: str = NEURON_SOURCE,
) -> InstanceSpec:
    return InstanceSpec(
        name=name,
        ranks=chips * ranks_per_chip,
        hbm_per_rank_bytes=hbm_per_chip_gib * GiB // ranks_per_chip,
        host_memory_bytes=None if host_gib is None else host_gib * GiB,
        ranks_per_chip=ranks_per_chip,
        chips=chips,
        use=use,
        source=source,
    )


INSTANCES: dict[str, InstanceSpec] = {
    spec.name: spec
    for spec in (
        _neuron("trn1.2xlarge", 1, 2, 32, 32),
        _neuron("trn1.32xlarge", 16, 2, 32, 512),
        _neuron("trn1n.32xlarge", 16, 2, 32, 512),
        # Host memory of trn2.3xlarge: not in the stored sources (neuron.md marks it n/r).
        _neuron("trn2.3xlarge", 1, 4, 96, None, source=TRN2_SOURCE),
        _neuron("trn2.48xlarge", 16, 4, 96, 2048, source=TRN2_SOURCE),
        _neuron("inf2.xlarge", 1, 2, 32, 16, INFERENCE),
        _neuron("inf2.8xlarge", 1, 2, 32, 128, INFERENCE),
        _neuron("inf2.24xlarge", 6, 2, 32, 384, INFERENCE),
        _neuron("inf2.48xlarge", 12, 2, 32, 768, INFERENCE),
    )
}


def this_machine(ranks: int | None = None) -> InstanceSpec:
    """The machine this runs on: `ranks` processes (default one per usable core) sharing its
    physical memory, as the gloo check runs do."""
    count = ranks or usable_cores()
    import psutil  # here: readers of a plan never measure this machine

    total = int(psutil.virtual_memory().total)
    return InstanceSpec(
        name=HERE,
        ranks=count,
        hbm_per_rank_bytes=total // count,
        host_memory_bytes=total,
        ranks_per_chip=count,
        chips=1,
        use=TRAINING,
        source=f"this machine: {count} ranks sharing {total / GiB:.3g} GiB of host memory (psutil)",
    )


def get_instance(name: str) -> InstanceSpec:
    """The named instance type, or "here"; anything else is one sentence with the closest name."""
    if name == HERE:
        return this_machine()
    spec = INSTANCES.get(name.strip().lower())
    if spec is None:
        names = [*INSTANCES, HERE]
        raise BadInput(
            f"Instance type {name!r} is not one the planner knows{did_you_mean(name, names)}; "
            f"known: {', '.join(names)}."
        )
    return spec
