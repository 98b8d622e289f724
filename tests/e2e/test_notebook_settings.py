"""Each notebook builds its settings from its own parameters cell (`*Settings.from_params`):
these tests keep the two in step, so a default changed in one place cannot drift from the other."""

from __future__ import annotations

from dataclasses import fields

import pytest

from tests.fixtures import REPO_ROOT
from workbench.baseline import BaselineSettings
from workbench.numerics import NumericsSettings
from workbench.params import notebook_parameters
from workbench.tuning import RetuneSettings
from workbench.workload import WorkloadSpec

NOTEBOOKS = REPO_ROOT / "notebooks"


def _defaults(notebook: str) -> dict:
    declared = notebook_parameters(NOTEBOOKS / f"{notebook}.ipynb")
    return {name: p.default for name, p in declared.items()}


@pytest.mark.parametrize(
    ("notebook", "settings_class"),
    [
        ("01_baseline", BaselineSettings),
        ("03_numerics", NumericsSettings),
        ("04_retuning", RetuneSettings),
    ],
)
def test_notebook_defaults_build_the_code_defaults(notebook: str, settings_class: type) -> None:
    assert settings_class.from_params(_defaults(notebook)) == settings_class()


@pytest.mark.parametrize(
    "notebook", ["01_baseline", "02_op_coverage", "03_numerics", "04_retuning"]
)
def test_notebook_workload_defaults_build_the_default_workload_spec(notebook: str) -> None:
    # WorkloadSpec() names workloads.DEFAULT_WORKLOAD: the notebooks' literal must be that one.
    assert WorkloadSpec.from_params(_defaults(notebook)) == WorkloadSpec()


def test_every_retuning_setting_is_a_notebook_04_parameter() -> None:
    declared = _defaults("04_retuning")
    missing = [f.name for f in fields(RetuneSettings) if f.name not in declared]
    assert not missing, f"settings without a notebook 04 parameter: {missing}"


def test_baseline_settings_take_each_parameter() -> None:
    params = _defaults("01_baseline") | {
        "steady_steps": 7,
        "warmup_window": 5,
        "warmup_threshold": 0.2,
        "warmup_max_steps": 40,
        "kinds": ["train"],
        "modes": ["eager"],
    }
    settings = BaselineSettings.from_params(params)
    assert settings.steady_steps == 7
    assert (settings.warmup.window, settings.warmup.threshold, settings.warmup.max_steps) == (
        5,
        0.2,
        40,
    )
    assert settings.kinds == ("train",) and settings.modes == ("eager",)


def test_numerics_settings_take_each_parameter_and_zero_tolerances_mean_per_dtype() -> None:
    params = _defaults("03_numerics") | {
        "precisions": ["fp32"],
        "compiled_precisions": [],
        "steps": 3,
        "multiplier": 4.0,
        "rtol": 0.0,
        "atol": 0.0,
        "band_factor": 16.0,
        "loss_tolerance": 0.05,
        "metric_tolerance": 0.1,
        "validation_batches": 2,
    }
    settings = NumericsSettings.from_params(params)
    assert settings.precisions == ("fp32",) and settings.compiled_precisions == ()
    assert settings.steps == 3 and settings.rule.multiplier == 4.0
    cost = settings.cost
    assert (cost.band_factor, cost.loss_tolerance, cost.metric_tolerance) == (16.0, 0.05, 0.1)
    assert settings.validation_batches == 2
    assert settings.rule.rtol is None and settings.rule.atol is None
    explicit = NumericsSettings.from_params(params | {"rtol": 1e-3, "atol": 1e-4})
    assert (explicit.rule.rtol, explicit.rule.atol) == (1e-3, 1e-4)
