"""What a sample costs: samples per dollar and time to a given number of samples, per instance.

Prices come from a user-editable table (workbench/data/prices.json by default; every row with
its source and date; prices that were not found are absent, not guessed). A row is "measured"
only when it is the instance this notebook ran on and its worker count was a measured world
size; every other row is a projection from the per-worker rate measured here, and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from workbench.errors import BadInput
from workbench.tuning.parallel import ScalingStudy

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
PROJECTION = "projection"


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


def check_instance(prices: PriceTable, instance: str) -> None:
    """BadInput unless `instance` is empty or a row of the table."""
    if instance and instance not in {row.instance for row in prices.rows}:
        raise BadInput(
            f"instance_type {instance!r} is not in {prices.path}; add a row for it or leave "
            "instance_type empty."
        )


@dataclass
class CostRow:
    instance: str
    pricing: str
    accelerator: str
    workers: int
    usd_per_hour: float | None
    basis: str  # MEASURED or PROJECTION
    items_per_second: float
    how: str  # how the rate was obtained, in a few words
    source: str
    date: str
    note: str = ""
    items: int = 0  # how many items the time and dollar columns price

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
    projection_assumption: str  # what every projected row takes for granted
    rows: list[CostRow] = field(default_factory=list)


def cost_study(
    prices: PriceTable,
    *,
    per_worker_rate: float,
    per_worker_basis: str,
    scaling: ScalingStudy | None,
    this_instance: str,
    target_name: str,
    unit: str,
    items: int,
) -> CostStudy:
    """This machine's measured row first, then one row per price entry."""
    if items < 1:
        raise BadInput(f"price_items {items} must be 1 or more.")
    check_instance(prices, this_instance)
    label = f"measured on this machine ({target_name})"
    assumption = (
        f"a projection takes one accelerator of its row (a NeuronCore, a GPU) to run as fast as "
        f"one worker measured on {target_name}, and the scaling efficiency measured here to hold "
        "at the row's worker count"
    )
    study = CostStudy(prices, unit, items, label, per_worker_rate, per_worker_basis, assumption)
    measured = {r.world_size: r for r in scaling.measured()} if scaling else {}
    best = max(measured.values(), key=lambda r: r.throughput or 0.0, default=None)
    here_rate = best.throughput if best and best.throughput else per_worker_rate
    here_workers = best.world_size if best else 1
    study.rows.append(
        CostRow(
            "this machine",
            "",
            target_name,
            here_workers,
            None,
            MEASURED,
            here_rate,
            f"{label}, world size {here_workers}",
            "",
            "",
            items=items,
        )
    )
    for row in prices.rows:
        run = measured.get(row.accelerators) if row.instance == this_instance else None
        if run is not None and run.throughput:
            rate, basis, how = run.throughput, MEASURED, f"{label}, world size {run.world_size}"
        else:
            rate, how = _projection(row, per_worker_rate, scaling)
            basis = PROJECTION
        study.rows.append(
            CostRow(
                row.instance,
                row.pricing,
                row.accelerator,
                row.accelerators,
                row.usd_per_hour,
                basis,
                rate,
                how,
                row.source,
                row.date,
                row.note,
                items,
            )
        )
    return study


def _projection(
    row: PriceRow, per_worker_rate: float, scaling: ScalingStudy | None
) -> tuple[float, str]:
    """Rate and how it was projected: workers x per-worker rate x measured efficiency."""
    measured = scaling.efficiency_at(row.accelerators) if scaling else None
    if measured is None:
        efficiency, source = 1.0, "no scaling measured: 100% assumed"
    else:
        efficiency, world = measured
        source = f"measured at world size {world}"
        if world < row.accelerators:
            source += f", assumed at {row.accelerators}"
    how = f"{row.accelerators} x per-worker rate x {efficiency:.0%} efficiency ({source})"
    return per_worker_rate * row.accelerators * efficiency, how
