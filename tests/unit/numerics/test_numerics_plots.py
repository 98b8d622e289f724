"""Notebook 03's figures: built under Agg, log scales where errors span decades, layers named
with their module type, the first diverging layer marked and named, NaN losses marked rather
than silently not drawn, identical series named as such, legends outside the data."""

import copy
import io

import matplotlib
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from torch import nn

from tests.fixtures.numerics_cases import classifier, sgd
from workbench.numerics import plots as numerics_plots
from workbench.numerics import run as numerics
from workbench.numerics.metrics import own_error
from workbench.numerics.records import OWN, Attribution, FirstDivergence
from workbench.targets.cpu import CpuTarget

matplotlib.use("Agg")


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 3))


SMALL = classifier("small-mlp", _model, 6, features=(8,), classes=3, optimizer=sgd(0.1))


@pytest.fixture(scope="module")
def result():
    settings = numerics.NumericsSettings(
        precisions=("fp32", "bf16-autocast", "fp16-cast"),
        informative_precisions=(),
        compiled_precisions=(),
        steps=3,
    )
    return numerics.run_numerics(SMALL, CpuTarget(), settings, log=lambda _: None)


def _texts(figure: Figure) -> list[str]:
    return [t.get_text() for ax in figure.axes for t in ax.texts]


def _renders(figure: Figure) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    assert buffer.getvalue().startswith(b"\x89PNG")


def _legend_outside(figure: Figure, ax) -> bool:
    """The legend's box lies right of the axes' box, where it covers no data."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    legend = ax.get_legend() or next(a.get_legend() for a in figure.axes if a.get_legend())
    return legend.get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1


def test_layer_errors_name_layers_with_their_type_and_mark_the_first_divergence(result):
    figure = numerics_plots.layer_errors(result)
    visible = [ax for ax in figure.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == [r.label for r in result.runs]
    assert all(ax.get_yscale() == "log" for ax in visible)
    fp32 = visible[0]
    assert [t.get_text() for t in fp32.get_xticklabels()] == [
        "0 (Linear)",
        "1 (GELU)",
        "2 (Linear)",
    ]
    assert not fp32.texts  # fp32 against itself: nothing diverges, nothing marked
    assert all(_legend_outside(figure, ax) for ax in visible)
    _renders(figure)


def test_layer_errors_name_the_diverging_layer_and_its_factor(result):
    diverged = copy.deepcopy(result)
    run = diverged.runs[1]
    output = torch.linspace(-1, 1, 64)
    own = own_error("0", "Linear", output, output, output, output.double())
    own.factor = 123.0
    attribution = Attribution("0", OWN, own, "its own")
    comparison = run.layers[0]
    run.first_divergence = FirstDivergence("0", "Linear", 1, comparison, attribution)
    figure = numerics_plots.layer_errors(diverged)
    assert "first divergence: 0 (Linear), 123x its band" in _texts(figure)
    _renders(figure)


def test_precision_sweep_has_one_line_per_precision_and_the_fp32_floor(result):
    figure = numerics_plots.precision_sweep(result)
    (ax,) = figure.axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["fp32 reference vs fp64", "fp32", "bf16-autocast", "fp16-cast"]
    assert ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()][:2] == ["0 (Linear)", "1 (GELU)"]
    assert _legend_outside(figure, ax)
    _renders(figure)


def test_identical_series_are_named_and_do_not_hide_each_other(result):
    twins = copy.deepcopy(result)
    twin = copy.deepcopy(twins.runs[1])
    twin.run = {**twin.run, "label": "cpu bf16-autocast again", "precision": "bf16-again"}
    twins.runs.append(twin)
    figure = numerics_plots.precision_sweep(twins)
    (ax,) = figure.axes
    lines = ax.get_lines()
    assert lines[-1].get_label() == "bf16-again (identical to bf16-autocast)"
    # Hollow markers of different shapes and sizes: the one drawn first stays visible.
    original = lines[2]
    assert original.get_marker() != lines[-1].get_marker()
    assert original.get_markersize() > lines[-1].get_markersize()
    assert lines[-1].get_markerfacecolor() == "none"
    curves = numerics_plots.loss_curves(twins)
    names = [line.get_label() for line in curves.axes[0].get_lines()]
    assert "cpu bf16-autocast again (identical to cpu bf16-autocast eager)" in names
    # fp32 eager computes exactly what the reference computes: said, not hidden.
    assert "cpu fp32 eager (identical to fp32 reference)" in names
    assert _legend_outside(curves, curves.axes[1])


def test_gradient_errors_cover_every_parameter(result):
    figure = numerics_plots.gradient_errors(result)
    (ax,) = figure.axes
    names = [t.get_text() for t in ax.get_xticklabels()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert ax.get_yscale() == "log"
    assert _legend_outside(figure, ax)
    _renders(figure)


def test_loss_curves_mark_where_a_loss_turns_nan(result):
    broken = copy.deepcopy(result)
    run = broken.runs[1]
    run.losses = [run.losses[0], float("nan"), float("nan")]
    figure = numerics_plots.loss_curves(broken)
    curves, gaps = figure.axes
    assert gaps.get_yscale() == "log"
    assert f"{run.label}: NaN/Inf from step 2" in _texts(figure)
    assert "fp32 reference" in [line.get_label() for line in curves.get_lines()]
    _renders(figure)


def test_figures_say_so_when_there_is_nothing_to_draw(result):
    empty = copy.deepcopy(result)
    for run in empty.runs:
        run.status, run.layers, run.gradients = "failed", [], []
    for plot in (
        numerics_plots.layer_errors,
        numerics_plots.precision_sweep,
        numerics_plots.gradient_errors,
    ):
        figure = plot(empty)
        assert figure.texts and not figure.axes
        _renders(figure)
