"""A served shape's warm-up: a forward that caches state on its first call compiles again on
its second (pytorch/examples' word-language Transformer builds its mask once), which is warm-up,
not a graph compiled while requests are timed; a forward that recompiles on every call still
compiles inside the timed windows."""

from __future__ import annotations

import torch
from torch import nn

from workbench.serving.records import COMPILED, ServingSettings
from workbench.serving.sweep import measure_point
from workbench.targets import get_target
from workbench.timing import HostPeakRss
from workbench.workload import Workload

CPU = get_target("cpu")
SETTINGS = ServingSettings(window_requests=20, window_seconds=0.01, window_budget_s=0.5)


class CachesAMask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.mask: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mask is None:
            self.mask = torch.ones(4)
        return self.fc(x) * self.mask


class CountsItsCalls(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1  # a guarded Python int: every call is a new graph
        return self.fc(x) * self.calls


def _point(module: type[nn.Module]):
    workload = Workload(
        name=module.__name__,
        model_factory=module,
        batch_maker=lambda size, g: ((torch.randn(size, 4, generator=g),), torch.zeros(size)),
        loss_fn=lambda out, _: out.mean(),
        optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.1),
        batch_size=1,
    )
    model = workload.build_model().eval()
    point, _ = measure_point(workload, CPU, model, 1, COMPILED, SETTINGS, HostPeakRss())
    return point


def test_a_forward_that_caches_state_once_settles_before_the_timed_windows():
    point = _point(CachesAMask)
    assert point.status == "ok" and point.compiles == 2 and point.window_compiles == 0


def test_a_forward_that_recompiles_on_every_call_still_compiles_while_timed():
    torch._dynamo.reset()
    point = _point(CountsItsCalls)
    assert point.status == "ok" and point.window_compiles > 0
