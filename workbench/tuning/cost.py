"""What a sample costs on the hardware this run measured: samples per dollar and time to a given
number of samples.

The instance type comes from the instance_type parameter or the EC2 instance metadata; its price
from a user-editable table (workbench/data/prices.json by default, or prices_file: every row
with its source and date). No row multiplies this machine's rate to price other hardware: a
migration's cost is a comparison of runs, each on its own instance (`workbench compare`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from workbench.environment.instance import InstanceType
from workbench.errors import BadInput
from workbench.tuning.noise import unsettled
from workbench.tuning.parallel import ScalingRun

REQUIRED_FIELDS = (
    "instance",
    "pricing",
    "usd_per_hour",
    "accelerator",
    "accelerators",
    "source",
    "date",
)
MEASURED = "measured"


@dataclass(frozen=True)
class PriceRow:
    instance: str
    pricing: str  # on-demand, capacity block...
    usd_per_hour: float
    accelerator: str
    accelerators: int  # data-parallel workers per instance: NeuronCores or GPUs
    source: str
    date: str
    note: str = ""


@dataclass
class PriceTable:
    path: str
    currency: str
    region: str
    retrieved: str
    rows: list[PriceRow]
    not_found: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def load_prices(path: str = "") -> PriceTable:
    """The price table at `path`, or the packaged one; a malformed file is BadInput."""
    if path:
        where = path
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise BadInput(f"prices_file {path!r}: {exc.strerror or exc}.") from None
    else:
        where = "workbench/data/prices.json"
        text = resources.files("workbench").joinpath("data/prices.json").read_text("utf-8")
    try:
        data = json.loads(text)
        rows = [_row(item) for item in data["instances"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput(
            f"prices file {where}: {exc}; each entry of 'instances' needs "
            f"{', '.join(REQUIRED_FIELDS)}."
        ) from None
    return PriceTable(
        where,
        data.get("currency", "USD"),
        data.get("region", ""),
        data.get("retrieved", ""),
        rows,
        list(data.get("not_found", [])),
        list(data.get("notes", [])),
    )


def _row(item: dict[str, Any]) -> PriceRow:
    missing = [name for name in REQUIRED_FIELDS if item.get(name) in (None, "")]
    if missing:
        raise ValueError(f"entry {item.get('instance', item)!r} lacks {', '.join(missing)}")
    price, count = float(item["usd_per_hour"]), int(item["accelerators"])
    if price <= 0 or count < 1:
        raise ValueError(f"entry {item['instance']!r}: usd_per_hour and accelerators must be > 0")
    return PriceRow(
        str(item["instance"]),
        str(item["pricing"]),
        price,
        str(item["accelerator"]),
        count,
        str(item["source"]),
        str(item["date"]),
        str(item.get("note", "")),
    )


@dataclass
class CostRow:
    instance: str
    pricing: str
    accelerator: str
    workers: int
    usd_per_hour: float | None
    basis: str  # MEASURED: every row is a measurement of this run's own hardware
    items_per_second: float
    how: str  # how the rate was obtained, in a few words
    source: str
    date: str
    note: str = ""
    items: int = 0  # how many items the time and dollar columns price
    # Why the rate cannot be read as clean (noisy steps, a loaded machine); "" when it can.
    caveat: str = ""

    @property
    def items_per_dollar(self) -> float | None:
        if not self.usd_per_hour:
            return None
        return self.items_per_second * 3600 / self.usd_per_hour

    @property
    def hours_for_items(self) -> float:
        return self.items / self.items_per_second / 3600

    @property
    def dollars_for_items(self) -> float | None:
        return None if self.usd_per_hour is None else self.hours_for_items * self.usd_per_hour


@dataclass
class CostStudy:
    prices: PriceTable
    unit: str  # samples or tokens
    items: int
    measured_label: str  # "measured on this machine (<target>)"
    per_worker_rate: float
    per_worker_basis: str
    instance: InstanceType  # the instance this run measured on, and where that came from
    world_size: int = 1  # the data-parallel width every row prices
    rows: list[CostRow] = field(default_factory=list)
    price_note: str = ""  # where the row's price came from, or why it has none


def cost_study(
    prices: PriceTable,
    *,
    per_worker_rate: float,
    per_worker_basis: str,
    world: ScalingRun | None,
    instance: InstanceType,
    target_name: str,
    unit: str,
    items: int,
) -> CostStudy:
    """One row: what this machine measured at the recommended data-parallel width (`world`, the
    launch it was chosen from; one worker at `per_worker_rate` without one), priced only when
    its instance type and a price for it are known. No row prices hardware this run did not
    run on."""
    if items < 1:
        raise BadInput(f"price_items {items} must be 1 or more.")
    label = f"measured on this machine ({target_name})"
    launched = world is not None and world.throughput is not None
    rate = world.throughput if world is not None and world.throughput else per_worker_rate
    workers = world.world_size if world is not None and launched else 1
    how = (
        f"{label}, torchrun world size {workers}, the recommended data-parallel width"
        if launched
        else f"{label}, one worker: {per_worker_basis}"
    )
    study = CostStudy(
        prices, unit, items, label, per_worker_rate, per_worker_basis, instance, workers
    )
    price = next(
        (row for row in prices.rows if instance.name and row.instance == instance.name), None
    )
    if price is not None:
        study.price_note = f"{price.pricing} price of {price.instance} from {prices.path}"
    elif instance.name:
        study.price_note = (
            f"no price for {instance.name} in {prices.path}: add one, or pass prices_file"
        )
    else:
        study.price_note = (
            f"instance type unknown ({instance.source}): set instance_type to price it"
        )
    study.rows.append(
        CostRow(
            instance.name or "this machine",
            price.pricing if price else "",
            target_name,
            workers,
            price.usd_per_hour if price else None,
            MEASURED,
            rate,
            how,
            price.source if price else "",
            price.date if price else "",
            price.note if price else "",
            items,
            (unsettled(world.step) or "") if world is not None and launched else "",
        )
    )
    return study
