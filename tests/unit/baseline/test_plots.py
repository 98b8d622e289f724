"""Baseline figures render under Agg from a result, including one with a failed configuration."""

import io

import matplotlib

matplotlib.use("Agg")

from tests.fixtures.baseline_records import baseline_result, timed_config  # noqa: E402
from workbench.baseline import plots  # noqa: E402
from workbench.baseline.records import (
    COMPILED,
    EAGER,
    INFER,
    TRAIN,
    BaselineResult,
    BaselineSettings,
    ConfigResult,
    MemoryUse,
    StepFailure,
)


def config(kind: str, mode: str, first: float, steady: float, device: bool = False) -> ConfigResult:
    memory = MemoryUse(300 * 2**20, 2**20 if device else None, 2**21 if device else None)
    warmup = [steady * 1.5, steady * 1.1, steady, steady]
    steady_times = [steady * (1 + 0.01 * i) for i in range(10)] + [steady * 40]
    return timed_config(kind, mode, first, warmup, steady_times, memory=memory)


def result(configs: list[ConfigResult]) -> BaselineResult:
    return baseline_result(configs)


def render(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def test_step_times_is_log_scale_and_starts_with_the_first_call():
    full = result(
        [
            config(TRAIN, EAGER, 0.01, 0.001),
            config(TRAIN, COMPILED, 9.0, 0.0005),
            config(INFER, EAGER, 0.001, 0.0002),
            config(INFER, COMPILED, 1.0, 0.0001),
        ]
    )
    figure = plots.step_times(full)
    train_axes = figure.axes[0]
    assert train_axes.get_yscale() == "log"
    compiled_line = next(line for line in train_axes.lines if line.get_label() == COMPILED)
    assert compiled_line.get_ydata()[0] == 9.0 * 1e3  # the compile spike, in ms
    assert len(compiled_line.get_xdata()) == 1 + 4 + 11
    for make in (plots.step_times, plots.steady_histogram, plots.eager_vs_compiled):
        assert render(make(full)).startswith(b"\x89PNG")


def test_figures_survive_a_failed_configuration_and_show_device_memory():
    failed = ConfigResult(TRAIN, COMPILED, 8, 8)
    failed.failure = StepFailure(TRAIN, COMPILED, "compile", 0, "RuntimeError: x", "", True)
    partial = result([config(TRAIN, EAGER, 0.01, 0.001, device=True), failed])
    partial.settings = BaselineSettings(kinds=(TRAIN,))
    figure = plots.eager_vs_compiled(partial)
    titles = [ax.get_title() for ax in figure.axes]
    assert any(title.startswith("device") for title in titles)
    for make in (plots.step_times, plots.steady_histogram, plots.eager_vs_compiled):
        assert render(make(partial)).startswith(b"\x89PNG")
