"""Per-tensor error metrics, and the verdict rule that judges them, kept apart.

First compute what is (as Polygraphy's comparator computes its error statistics), then judge it
with a stated rule and stated tolerances (methods.md part d). The rule is the one PyTorch's own
compiler accuracy checker uses (`torch._dynamo.utils.same`): a tensor passes when it is close at
`torch.testing.assert_close`'s per-dtype tolerances, or else when its RMSE against an fp64 run is
within a multiple of the fp32 reference's RMSE against that same fp64 run. That rule answers
device fidelity. Precision cost has its own measure: a layer's own error, re-run on the
reference's inputs, against the band its precision's rounding alone gives (`own_error`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from workbench.errors import BadInput

# torch is imported by the functions that compute: the records here are what 03_numerics.json is
# read back into, and its readers (compare, collect, export-metrics) never need torch.
if TYPE_CHECKING:
    import torch

# torch.testing.assert_close's defaults (rtol, atol) per dtype (methods.md d1), by dtype_name.
# For two tensors it takes the larger pair of the two dtypes, so a bf16 target is judged at
# bf16's tolerances.
DTYPE_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}
LOW_PRECISION_DTYPES = ("float16", "bfloat16")
# Unit roundoff u = 2^-p of each dtype's p-bit significand: rounding one value to the dtype
# changes it by at most u relatively.
UNIT_ROUNDOFF: dict[str, float] = {
    "float64": 2.0**-53,
    "float32": 2.0**-24,
    "bfloat16": 2.0**-8,
    "float16": 2.0**-11,
}
# How a single value is judged (ScalarTolerance, scalar_tolerance): stated in every report.
SCALAR_RULE = (
    "A single value (the loss, or an output that is one number) is judged as a value, not by "
    "an error ratio (one draw of the reference's own error can sit near zero by chance): it "
    "passes when |run - reference| <= rtol x max(|run|, |reference|) + atol, rtol being "
    "assert_close's rtol of the run's precision (fp32 1.3e-06, bf16 0.016, fp16 0.001) and "
    "atol that rtol times the loss's scale (its largest |value| over the reference's "
    "trajectory), so a loss training drove far down keeps the tolerance of its initial size."
)
# Smallest denominator of the relative error where atol is zero: Polygraphy's 2.22e-16.
_MIN_REL_FLOOR = 2.22e-16

SPREAD_OF_TWO_RUNS = "the two reference runs' spread"
RULE_CLOSE = "close"  # every element within atol + rtol * |reference|
RULE_FP64 = "fp64-rmse"  # not close, judged by RMSE against the fp64 yardstick
RULE_NONFINITE = "non-finite"  # NaN or Inf in the target where the reference is finite
RULE_NO_YARDSTICK = "no-yardstick"  # not close and no fp64 run to judge the error against
RULE_SPREAD = "reference-spread"  # no fp64 run; judged against the two reference runs' spread


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def share_text(share: float) -> str:
    """A share as a percentage that never rounds a mismatch down to "0%"."""
    return f"{share * 100:.3g}%"


def default_tolerances(*dtypes: torch.dtype) -> tuple[float, float]:
    """assert_close's (rtol, atol) for tensors of these dtypes; (0, 0) for non-float dtypes."""
    pairs = [DTYPE_TOLERANCES.get(dtype_name(d), (0.0, 0.0)) for d in dtypes]
    return max(p[0] for p in pairs), max(p[1] for p in pairs)


@dataclass
class TensorMetrics:
    """How far one target tensor is from the reference's (and both from the fp64 run's).

    Error statistics cover the elements that are finite in both runs; NaN and Inf are counted
    apart. `max_rel` divides by max(|reference|, atol), so elements near zero do not explode it.
    """

    name: str
    kind: str  # layer, output, loss, gradient, trajectory
    shape: list[int]
    target_dtype: str
    reference_dtype: str
    numel: int
    compared: int  # elements finite in both runs
    max_abs: float
    mean_abs: float
    max_rel: float
    rmse: float
    relative_l2: float  # ||target - reference|| / ||reference||
    cosine: float
    sqnr_db: float  # 20 log10(||reference|| / ||target - reference||); inf when equal
    share_outside: float  # share of elements with |t - r| > atol + rtol * |r| (NaN mismatches too)
    rtol: float
    atol: float
    target_nan: int
    target_inf: int
    reference_nan: int
    reference_inf: int
    new_nonfinite: int  # NaN/Inf in the target where the reference is finite
    reference_rms: float  # scale of the reference tensor, for relative readings
    target_rmse_vs_fp64: float | None = None
    reference_rmse_vs_fp64: float | None = None
    # RMSE between the two reference runs: non-zero only when the reference is not deterministic.
    reference_spread: float | None = None
    # What reference_spread measures, in words, where it is not the two reference runs' spread
    # (a trajectory's: the reference run again from weights nudged by one unit in the last place).
    spread_source: str | None = None

    @property
    def reference_relative_l2_vs_fp64(self) -> float | None:
        """The fp32 reference's own error against fp64, relative to its scale."""
        if self.reference_rmse_vs_fp64 is None or self.reference_rms == 0:
            return None
        return self.reference_rmse_vs_fp64 / self.reference_rms


def _ratio_db(signal: float, noise: float) -> float:
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 20 * math.log10(signal / noise)


def _flat64(tensor: torch.Tensor) -> torch.Tensor:
    import torch

    return tensor.detach().to("cpu", torch.float64).reshape(-1)


# torch.vdot, not torch.dot: on real vectors both give the same sum, but dot goes through BLAS,
# whose threads wake for each call between other ops: measured here inside a comparison,
# 0.57 ms per dot on average, a quarter of the comparison's time, against microseconds for vdot.


def _statistics(
    t: torch.Tensor, r: torch.Tensor, rtol: float, atol: float, floor: float
) -> list[float]:
    """Sums of squares (error, reference, target), dot product, sum and max of the absolute
    error, max relative error and the count outside atol + rtol * |r|, in one read-back."""
    import torch

    if not t.numel():
        return [0.0] * 8
    diff = t - r
    abs_diff, ref_abs = diff.abs(), r.abs()
    return torch.stack(
        [
            torch.vdot(diff, diff),
            torch.vdot(r, r),
            torch.vdot(t, t),
            torch.vdot(t, r),
            abs_diff.sum(),
            abs_diff.max(),
            (abs_diff / ref_abs.clamp_min(floor)).max(),
            (abs_diff > atol + rtol * ref_abs).sum(),  # assert_close's element rule
        ]
    ).tolist()


def _identical_statistics(r: torch.Tensor) -> list[float]:
    """`_statistics` of a target equal to the reference `r`: only the sums of squares read."""
    import torch

    if not r.numel():
        return [0.0] * 8
    square = float(torch.vdot(r, r))
    return [0.0, square, square, square, 0.0, 0.0, 0.0, 0.0]


def _squared_errors(t: torch.Tensor, r: torch.Tensor, f: torch.Tensor) -> tuple[float, float]:
    """Mean squared error of the target and of the reference against the fp64 run."""
    import torch

    if not f.numel():
        return 0.0, 0.0
    target_error, reference_error = t - f, r - f
    target_sq, reference_sq = (
        torch.stack(
            [torch.vdot(target_error, target_error), torch.vdot(reference_error, reference_error)]
        )
        / f.numel()
    ).tolist()
    return target_sq, reference_sq


def compute_metrics(
    name: str,
    kind: str,
    target: torch.Tensor,
    reference: torch.Tensor,
    fp64: torch.Tensor | None = None,
    *,
    rtol: float,
    atol: float,
) -> TensorMetrics:
    """Error statistics of `target` against `reference`, in float64; `fp64` adds both runs'
    RMSE against the fp64 yardstick. Shapes must match (the caller lists mismatches)."""
    if target.shape != reference.shape:
        raise ValueError(f"{name}: shape {tuple(target.shape)} vs {tuple(reference.shape)}")
    t, r = _flat64(target), _flat64(reference)
    both, stats = _finite_statistics(t, r, rtol, atol)
    compared = t.numel() if both is None else int(both.sum())
    err_sq, ref_sq, t_sq, dot, abs_sum, abs_max, rel_max, outside = stats
    counts, mismatched = _nonfinite_counts(t, r) if both is not None else (_ALL_FINITE, 0)
    ref_norm, err_norm, t_norm = math.sqrt(ref_sq), math.sqrt(err_sq), math.sqrt(t_sq)
    if err_norm == 0:
        relative_l2 = 0.0
    else:
        relative_l2 = err_norm / ref_norm if ref_norm else math.inf
    target_rmse_vs_fp64 = reference_rmse_vs_fp64 = None
    if fp64 is not None:
        target_rmse_vs_fp64, reference_rmse_vs_fp64 = _rmse_vs_fp64(t, r, _flat64(fp64), both)
    return TensorMetrics(
        name=name,
        kind=kind,
        shape=list(target.shape),
        target_dtype=dtype_name(target.dtype),
        reference_dtype=dtype_name(reference.dtype),
        numel=t.numel(),
        compared=compared,
        max_abs=abs_max,
        mean_abs=abs_sum / compared if compared else 0.0,
        max_rel=rel_max,
        rmse=math.sqrt(err_sq / compared) if compared else 0.0,
        relative_l2=relative_l2,
        cosine=_cosine(dot, t_norm, ref_norm),
        sqnr_db=_ratio_db(ref_norm, err_norm),
        share_outside=(outside + mismatched) / t.numel() if t.numel() else 0.0,
        rtol=rtol,
        atol=atol,
        reference_rms=math.sqrt(ref_sq / compared) if compared else 0.0,
        **counts,
        target_rmse_vs_fp64=target_rmse_vs_fp64,
        reference_rmse_vs_fp64=reference_rmse_vs_fp64,
    )


def _finite_statistics(
    t: torch.Tensor, r: torch.Tensor, rtol: float, atol: float
) -> tuple[torch.Tensor | None, list[float]]:
    """`_statistics` of the target against the reference, and the mask of elements finite in
    both where a NaN or Inf made them be taken again over those alone (None otherwise)."""
    import torch

    floor = max(atol, _MIN_REL_FLOOR)
    # A run that computed the very same numbers (fp32 eager on the CPU is the reference's own
    # computation) has no error to measure: only the reference's size is read.
    stats = _identical_statistics(r) if torch.equal(t, r) else None
    if stats is None or not all(math.isfinite(v) for v in stats[:3]):
        stats = _statistics(t, r, rtol, atol, floor)
    # A NaN or Inf anywhere makes a sum of squares non-finite: only then are the elements
    # finite in both runs masked out and the statistics taken again over them.
    if all(math.isfinite(v) for v in stats[:3]):
        return None, stats
    both = torch.isfinite(t) & torch.isfinite(r)
    return both, _statistics(t[both], r[both], rtol, atol, floor)


class _NonFiniteCounts(TypedDict):
    """TensorMetrics' counts of NaN and Inf in either run."""

    target_nan: int
    target_inf: int
    reference_nan: int
    reference_inf: int
    new_nonfinite: int  # NaN/Inf in the target where the reference is finite


_ALL_FINITE = _NonFiniteCounts(
    target_nan=0, target_inf=0, reference_nan=0, reference_inf=0, new_nonfinite=0
)


def _nonfinite_counts(t: torch.Tensor, r: torch.Tensor) -> tuple[_NonFiniteCounts, int]:
    """The NaN and Inf counts, and how many elements not finite in one run the other does not
    match (NaN against NaN, or the same infinity, is a match, as assert_close with equal_nan)."""
    import torch

    t_finite, r_finite = torch.isfinite(t), torch.isfinite(r)
    rest = ~(t_finite & r_finite)
    rest_t, rest_r = t[rest], r[rest]
    same = (rest_t == rest_r) | (torch.isnan(rest_t) & torch.isnan(rest_r))
    counts = _NonFiniteCounts(
        target_nan=int(torch.isnan(t).sum()),
        target_inf=int(torch.isinf(t).sum()),
        reference_nan=int(torch.isnan(r).sum()),
        reference_inf=int(torch.isinf(r).sum()),
        new_nonfinite=int((~t_finite & r_finite).sum()),
    )
    return counts, int((~same).sum())


def _cosine(dot: float, t_norm: float, ref_norm: float) -> float:
    if ref_norm == 0 and t_norm == 0:
        return 1.0
    if ref_norm == 0 or t_norm == 0:
        return 0.0
    return dot / (t_norm * ref_norm)


def _rmse_vs_fp64(
    t: torch.Tensor, r: torch.Tensor, f: torch.Tensor, both: torch.Tensor | None
) -> tuple[float, float]:
    """The target's and the reference's RMSE against fp64, over the elements finite in all
    three where any is not finite."""
    import torch

    squares = _squared_errors(t, r, f) if both is None else None
    if squares is None or not all(math.isfinite(v) for v in squares):
        mask = torch.isfinite(t) & torch.isfinite(r) & torch.isfinite(f)
        squares = _squared_errors(t[mask], r[mask], f[mask])
    target_sq, reference_sq = squares
    return math.sqrt(target_sq), math.sqrt(reference_sq)


@dataclass
class MetricsVerdict:
    passed: bool
    rule: str  # which branch decided: close, fp64-rmse, non-finite, no-yardstick
    reason: str  # one line with the numbers that decided it


@dataclass(frozen=True)
class VerdictRule:
    """The pass/fail rule and its parameters; defaults are those of torch._dynamo.utils.same.

    multiplier: how many times the fp32 reference's RMSE against fp64 a target may reach (2.0).
    low_precision_multiplier: the same for bf16/fp16 target tensors (3.0).
    rmse_atol: the small absolute term added to that budget (1e-5: same()'s tol / 10).
    rtol, atol: closeness tolerances; None (both) means assert_close's per-dtype defaults.
    """

    multiplier: float = 2.0
    low_precision_multiplier: float = 3.0
    rmse_atol: float = 1e-5
    rtol: float | None = None
    atol: float | None = None

    def __post_init__(self) -> None:
        if (self.rtol is None) != (self.atol is None):
            raise BadInput("rtol and atol go together: set both, or neither for per-dtype values.")
        for name in ("multiplier", "low_precision_multiplier", "rmse_atol", "rtol", "atol"):
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise BadInput(f"{name} {value!r}: use a finite number of at least 0.")
        if self.multiplier < 1 or self.low_precision_multiplier < 1:
            raise BadInput(
                "multiplier and low_precision_multiplier must be at least 1: a target may not "
                "be required to beat the reference's own error."
            )

    def tolerances(self, target: torch.dtype, reference: torch.dtype) -> tuple[float, float]:
        if self.rtol is not None and self.atol is not None:
            return self.rtol, self.atol
        return default_tolerances(target, reference)

    def multiplier_for(self, target_dtype: str) -> float:
        low = target_dtype in LOW_PRECISION_DTYPES
        return self.low_precision_multiplier if low else self.multiplier

    def tolerance_text(self) -> str:
        if self.rtol is not None:
            return f"rtol {self.rtol:g}, atol {self.atol:g} (set for this run)"
        table = ", ".join(
            f"{name} {rtol:g}/{atol:g}" for name, (rtol, atol) in DTYPE_TOLERANCES.items()
        )
        return f"torch.testing.assert_close's per-dtype rtol/atol, the looser of the two ({table})"

    def statement(self) -> str:
        """The rule in words, with its numbers: every report shows it next to the verdicts."""
        return (
            "A tensor passes when every element satisfies |target - reference| <= atol + rtol * "
            f"|reference| at {self.tolerance_text()}. Otherwise it passes when its RMSE against "
            f"the fp64 run is at most {self.multiplier:g}x ({self.low_precision_multiplier:g}x "
            "for bf16/fp16 target tensors) the fp32 reference's RMSE against the same fp64 run, "
            f"plus {self.rmse_atol:g}: the rule of PyTorch's compiler accuracy checker "
            "(torch._dynamo.utils.same). NaN or Inf in the target where the reference is finite "
            f"always fails. {SCALAR_RULE} A run keeps device fidelity when its outputs, loss, "
            "every gradient and its loss trajectory pass against the run it is judged by (the "
            "fp32 reference, or the CPU eager run of its own precision); leaf outputs that "
            "fail are flagged for the precision-cost check. The yardstick of each gradient and "
            "of the trajectory is at least their spread in the reference run again from weights "
            "and inputs one unit in the last place away (a ReLU kink taken on the other side "
            "keeps or drops a whole upstream gradient)."
        )


def judge(
    metrics: TensorMetrics, rule: VerdictRule, *, budget_rmse: float | None = None
) -> MetricsVerdict:
    """Apply the rule to one tensor's metrics. `budget_rmse` replaces the reference's RMSE
    against fp64 as the yardstick (used to judge a run against another run of its precision)."""
    if metrics.new_nonfinite:
        return MetricsVerdict(
            False,
            RULE_NONFINITE,
            f"{metrics.new_nonfinite} NaN/Inf element(s) in the target where the reference "
            "is finite",
        )
    if metrics.share_outside == 0:
        return MetricsVerdict(
            True,
            RULE_CLOSE,
            f"close at rtol {metrics.rtol:g}, atol {metrics.atol:g} "
            f"(max abs {metrics.max_abs:.3g})",
        )
    spread = metrics.reference_spread or 0.0
    k = rule.multiplier_for(metrics.target_dtype)
    yardstick = metrics.reference_rmse_vs_fp64 if budget_rmse is None else budget_rmse
    if (metrics.target_rmse_vs_fp64 is None or yardstick is None) and spread:
        # No fp64 run, but two reference runs that differ: their spread is the yardstick.
        passed = metrics.rmse <= k * spread + rule.rmse_atol
        return MetricsVerdict(
            passed,
            RULE_SPREAD,
            f"RMSE vs reference {metrics.rmse:.3g} {'<=' if passed else '>'} {k:g} x "
            f"{metrics.spread_source or SPREAD_OF_TWO_RUNS} {spread:.3g} + {rule.rmse_atol:g}",
        )
    if metrics.target_rmse_vs_fp64 is None or yardstick is None:
        return MetricsVerdict(
            False,
            RULE_NO_YARDSTICK,
            f"{share_text(metrics.share_outside)} of elements outside rtol {metrics.rtol:g}, "
            f"atol {metrics.atol:g}, and no fp64 run to judge the error against",
        )
    # A reference that is not deterministic is judged against the spread of its two runs
    # (dynamo's eager_two_runs_differ): the yardstick is never below that spread.
    widened = spread > yardstick
    yardstick = max(yardstick, spread)
    budget = k * yardstick + rule.rmse_atol
    passed = metrics.target_rmse_vs_fp64 <= budget
    sign = "<=" if passed else ">"
    return MetricsVerdict(
        passed,
        RULE_FP64,
        f"RMSE vs fp64 {metrics.target_rmse_vs_fp64:.3g} {sign} {k:g} x {yardstick:.3g}"
        f"{f' ({metrics.spread_source or SPREAD_OF_TWO_RUNS})' if widened else ''} + "
        f"{rule.rmse_atol:g} "
        f"({share_text(metrics.share_outside)} of elements outside rtol {metrics.rtol:g}, "
        f"atol {metrics.atol:g})",
    )


def budget_of(metrics: TensorMetrics, rule: VerdictRule) -> float | None:
    """The RMSE-vs-fp64 a target tensor may reach under the rule (None without fp64)."""
    if metrics.reference_rmse_vs_fp64 is None:
        return None
    yardstick = max(metrics.reference_rmse_vs_fp64, metrics.reference_spread or 0.0)
    return rule.multiplier_for(metrics.target_dtype) * yardstick + rule.rmse_atol


@dataclass
class OwnError:
    """What one layer adds itself: run at the target precision on the reference's inputs,
    against fp64 on the same inputs, next to the band its precision's rounding alone gives.

    rounding_rmse: the exact (fp64) layer fed inputs rounded to the dtypes the run's layer got,
    with weights rounded as the run rounds them, its output rounded to the run's output dtype:
    the error of a perfect kernel at this precision, which holds the layer's own amplification
    of rounded inputs. The band is the largest of that, u times the output's RMS (the bound of
    one rounding of the output: the band of a layer that amplifies nothing) and the fp32
    reference's own error on the same inputs (so an fp32 run is never asked to beat the
    reference): u x RMS x max(1, amplification), at least the reference's error.
    """

    layer: str
    module_type: str
    dtype: str  # the run's output dtype for this layer
    unit_roundoff: float
    own_rmse: float  # the run's layer vs fp64, both on the reference's inputs
    rounding_rmse: float
    reference_rmse: float  # the fp32 reference's layer vs fp64 on the same inputs
    output_rms: float  # RMS of the fp64 output
    band: float
    amplification: float  # rounding_rmse / (u * output_rms): how the layer scales rounding
    factor: float  # own_rmse / band
    new_nonfinite: int  # NaN/Inf in the re-run where fp64 is finite


def own_error(
    layer: str,
    module_type: str,
    own: torch.Tensor,
    rounded: torch.Tensor,
    reference: torch.Tensor,
    fp64: torch.Tensor,
) -> OwnError:
    """The layer's own error against its band (see OwnError); every tensor on the CPU."""
    import torch

    dtype = own.dtype
    u = UNIT_ROUNDOFF.get(dtype_name(dtype), UNIT_ROUNDOFF["float32"])
    f = _flat64(fp64)
    columns = torch.stack([_flat64(own), _flat64(rounded), _flat64(reference)]) - f
    # Mean squares of the three errors and of fp64 in one read-back; only a NaN or Inf among
    # them makes the elements finite everywhere get masked out and taken again.
    squares = torch.cat([columns, f.unsqueeze(0)]).square().mean(dim=1).tolist()
    new_nonfinite = 0
    if not all(math.isfinite(v) for v in squares):
        finite = torch.isfinite(f)
        new_nonfinite = int((~torch.isfinite(columns[0]) & finite).sum())
        keep = finite & torch.isfinite(columns).all(dim=0)
        kept = torch.cat([columns[:, keep], f[keep].unsqueeze(0)])
        squares = kept.square().mean(dim=1).tolist() if kept.shape[1] else [0.0] * 4
    own_rmse, rounding_rmse, reference_rmse, output_rms = (math.sqrt(v) for v in squares)
    band = max(rounding_rmse, reference_rmse, u * output_rms)
    if new_nonfinite:
        factor = math.inf
    elif band > 0:
        factor = own_rmse / band
    else:
        factor = 0.0 if own_rmse == 0 else math.inf
    amplification = rounding_rmse / (u * output_rms) if output_rms else 0.0
    errors = (own_rmse, rounding_rmse, reference_rmse, output_rms)  # in OwnError's order
    return OwnError(
        layer,
        module_type,
        dtype_name(dtype),
        u,
        *errors,
        band,
        amplification,
        factor,
        new_nonfinite,
    )


@dataclass(frozen=True)
class PrecisionCostRule:
    """What a precision may cost this model before a run needs attention.

    band_factor: a layer's own error may reach this many times its precision band (8).
    loss_tolerance: the loss, over the trajectory and on held-out data, may deviate from the
        reference's by this share of it (0.01: 1%).
    metric_tolerance: the held-out task metric may differ from the reference's by this much
        times max(1, |reference|): absolute for a metric in [0, 1] such as accuracy, relative
        for one above 1 such as perplexity (0.02).
    Each is widened by the spread of the two reference runs when they differ.
    """

    band_factor: float = 8.0
    loss_tolerance: float = 0.01
    metric_tolerance: float = 0.02

    def __post_init__(self) -> None:
        for name in ("band_factor", "loss_tolerance", "metric_tolerance"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise BadInput(f"{name} {value!r}: use a finite number of at least 0.")
        if self.band_factor < 1:
            raise BadInput(
                f"band_factor {self.band_factor!r}: use at least 1; a layer cannot be asked to "
                "round better than its precision does."
            )

    def statement(self) -> str:
        return (
            "Precision cost: a layer the dynamo rule fails whose full-run error exceeds "
            f"{self.band_factor:g}x one rounding of its output is re-run alone on the "
            "reference's inputs at the run's precision; it diverges when its own error there "
            "(RMSE against fp64 on the same inputs) "
            f"exceeds {self.band_factor:g}x its band: u x the output's RMS x the layer's own "
            "measured amplification of rounded inputs where that exceeds 1 (u the unit "
            "roundoff: bf16 2^-8, fp16 2^-11, fp32 2^-24), never below the fp32 reference's own "
            "error. "
            "A run passes when no layer diverges, every loss is finite, the loss at every step "
            "and the held-out loss satisfy |run - reference| <= "
            f"{self.loss_tolerance:.3g} x max(|run|, |reference|) + floor, and the held-out "
            f"task metric stays within {self.metric_tolerance:g} x max(1, |reference|) of the "
            "reference's, each tolerance widened by the two reference runs' spread. The floor "
            "keeps a loss that training drove far below its initial size from being judged "
            "relative to that small size alone; it is the largest of the tolerance squared "
            "times the loss's scale (its largest |value| over the reference's trajectory, or of "
            "the held-out loss: a loss below the tolerance's share of its scale is judged as if "
            "it were that share), the run's unit roundoff times that scale, and for the "
            "trajectory the dynamo multiplier times the fp32 reference's own largest distance "
            "from the fp64 trajectory (how far rounding alone, amplified by training, moves "
            "this model's loss). Held-out scores and steps after a run's first "
            "NaN/Inf loss are not evidence and are not judged."
        )


def metric_allowance(tolerance: float, reference: float) -> float:
    """How far a task metric may move: absolute below 1 (accuracy), relative above (perplexity)."""
    return tolerance * max(1.0, abs(reference))


RULE_SCALAR = "scalar"  # one value (a loss, a held-out score), judged by ScalarTolerance


@dataclass(frozen=True)
class ScalarTolerance:
    """How far one value may be from its reference: |a - b| <= rtol * max(|a|, |b|) + atol.

    The per-tensor rules compare error statistics over many elements; on a single value the
    error of the reference against fp64 is one draw, which can by chance sit near zero, so a
    ratio of two such errors says nothing. A value is judged directly instead, at a relative
    tolerance, with an absolute floor (`atol`) for a loss that training drove far below its
    initial size, whose rounding still carries the error of the terms it was computed from.
    """

    rtol: float
    atol: float

    def allowed(self, value: float, reference: float) -> float:
        return self.rtol * max(abs(value), abs(reference)) + self.atol

    def passes(self, value: float, reference: float) -> bool:
        if not (math.isfinite(value) and math.isfinite(reference)):
            return False
        return abs(value - reference) <= self.allowed(value, reference)

    def text(self) -> str:
        return f"rtol {self.rtol:.3g}, atol {self.atol:.3g}"


def loss_scale(losses: list[float]) -> float:
    """The typical size of a run's loss: the largest finite |loss| of its trajectory (its first
    steps, before training drives it down); 0 when there is none."""
    return max((abs(v) for v in losses if math.isfinite(v)), default=0.0)


def scalar_tolerance(dtype: torch.dtype, scale: float) -> ScalarTolerance:
    """The device-fidelity tolerance of one value computed at `dtype`: assert_close's rtol of
    that dtype (2 to 22 unit roundoffs), on a denominator never below `scale`, the loss's
    typical size over the run: atol = rtol x scale."""
    rtol = DTYPE_TOLERANCES.get(dtype_name(dtype), DTYPE_TOLERANCES["float32"])[0]
    return ScalarTolerance(rtol, rtol * scale)


@dataclass
class ScalarCheck:
    """One value, or one value per step, against the reference's under a ScalarTolerance; the
    step reported is the first that fails, else the one closest to failing."""

    name: str  # "loss", "loss trajectory", "held-out loss"
    value: float  # the run's, at `step`
    reference: float
    step: int | None  # 1-based optimizer step for a trajectory; None for a single value
    difference: float  # |value - reference|
    allowed: float  # what the tolerance allows at that step
    tolerance: ScalarTolerance
    passed: bool
    compared: int  # values compared (steps of a trajectory)

    def sentence(self) -> str:
        at = f" at step {self.step}" if self.step is not None else ""
        if not (math.isfinite(self.value) and math.isfinite(self.reference)):
            return f"the {self.name} is {self.value:.4g}{at}, not a finite number"
        sign = "<=" if self.passed else ">"
        return (
            f"the {self.name} differs by {self.difference:.3g}{at} ({self.value:.6g} against "
            f"{self.reference:.6g}) {sign} {self.allowed:.3g} allowed ({self.tolerance.text()})"
        )


@dataclass
class LossFloor:
    """The absolute floor of a loss's precision-cost tolerance, so that a loss training drove
    far below its initial size is not judged relative to that small size alone.

    scale: the loss's typical size, its largest |value| over the reference's trajectory.
    rounding: the run's unit roundoff times the scale (one rounding of a loss that size).
    fp64_noise: the fp32 reference's largest |loss - fp64 loss| over its trajectory, times the
        dynamo multiplier: how far rounding alone, amplified by training, moves this model's
        loss; None without an fp64 run (or for a single value).
    sensitivity: the largest |loss - reference's loss| of the reference run again from weights
        nudged by one unit in the last place (TrajectorySensitivity), times the dynamo
        multiplier: how far a difference of the size a reordered sum makes, amplified by this
        model's training, moves its loss; None where it was not measured.
    The floor at a relative tolerance t is the largest of those and t x t x scale: a loss that
    fell below t of its scale is judged as if it were t of its scale, so a loss decayed from 2.2
    to 0.0003 is allowed 2.2e-4 at t = 1%, while a loss 10% off at its start still fails.
    """

    scale: float
    rounding: float
    fp64_noise: float | None = None
    sensitivity: float | None = None

    def at(self, tolerance: float) -> float:
        return max(
            self.rounding,
            self.fp64_noise or 0.0,
            self.sensitivity or 0.0,
            tolerance * tolerance * self.scale,
        )

    def text(self, tolerance: float) -> str:
        noise = "" if self.fp64_noise is None else f", fp64 noise {self.fp64_noise:.3g}"
        nudged = "" if self.sensitivity is None else f", one-ulp sensitivity {self.sensitivity:.3g}"
        return (
            f"floor {self.at(tolerance):.3g} (decay {tolerance * tolerance * self.scale:.3g}, "
            f"rounding {self.rounding:.3g}{noise}{nudged})"
        )


def _largest_gap(run: list[float], other: list[float]) -> float:
    gaps = [
        abs(a - b)
        for a, b in zip(run, other, strict=False)
        if math.isfinite(a) and math.isfinite(b)
    ]
    return max(gaps, default=0.0)


def loss_floor(
    dtype: torch.dtype,
    reference: list[float],
    fp64: list[float] | None,
    multiplier: float,
    nudged: list[float] | None = None,
) -> LossFloor:
    """The floor of a loss comparison at `dtype` (see LossFloor); `fp64` is the fp64 run's
    trajectory beside the reference's, when there is one, and `nudged` the reference's run
    from weights and inputs one ulp away."""
    unit = UNIT_ROUNDOFF.get(dtype_name(dtype), UNIT_ROUNDOFF["float32"])
    scale = loss_scale(reference)
    noise = None if fp64 is None else multiplier * _largest_gap(reference, fp64)
    sensitivity = None if nudged is None else multiplier * _largest_gap(reference, nudged)
    return LossFloor(scale, unit * scale, noise, sensitivity)


@dataclass
class TrajectorySensitivity:
    """How sensitive the reference's own training is: the fp32 reference trained again from
    its initial weights each moved by one unit in the last place (up or down at random), the
    size of difference a reordered sum makes. Training amplifies such a difference: in a
    chaotic run (a loss driven to 1e-4, a high learning rate) far beyond the fp32 reference's
    distance from fp64, so a compiled run's reordering is judged against this spread.

    The same holds for one step's gradients of a net with ReLU kinks: a pre-activation within
    a reordering's error of zero takes the other side of the kink in either run, and its whole
    upstream gradient is kept or dropped, so gradients move far more than rounding alone moves
    them. `gradients` holds, per parameter, the RMSE of the nudged run's first gradient against
    the reference's: how far this model's gradients move for a difference of that size."""

    losses: list[float]  # the nudged run's loss per step
    rmse: float  # RMSE of its trajectory against the reference's
    largest: float  # largest |nudged - reference| over the steps
    held_out_gap: float | None = None  # |held-out loss after training, nudged - reference|
    gradients: dict[str, float] = field(default_factory=dict)  # name -> RMSE vs the reference


def trajectory_sensitivity(
    reference: list[float],
    nudged: list[float],
    held_out: tuple[float, float] | None = None,
    gradients: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] | None = None,
) -> TrajectorySensitivity:
    """`gradients`: the nudged run's first gradients and the reference's, paired by name."""
    pairs = [
        (a, b)
        for a, b in zip(nudged, reference, strict=False)
        if math.isfinite(a) and math.isfinite(b)
    ]
    rmse = math.sqrt(sum((a - b) ** 2 for a, b in pairs) / len(pairs)) if pairs else 0.0
    gap = None if held_out is None else abs(held_out[0] - held_out[1])
    spreads = {}
    if gradients is not None:
        moved, original = gradients
        for name, gradient in moved.items():
            other = original.get(name)
            if other is None or other.shape != gradient.shape:
                continue
            difference = (_flat64(gradient) - _flat64(other)).nan_to_num()
            spreads[name] = float(difference.square().mean().sqrt()) if difference.numel() else 0.0
    largest = _largest_gap(reference, nudged)
    return TrajectorySensitivity(list(nudged), rmse, largest, gap, spreads)


def check_scalars(
    name: str, values: list[float], references: list[float], tolerance: ScalarTolerance
) -> ScalarCheck:
    """Each value against the reference's of the same position; one failure fails the check.
    Positions are steps when there is more than one value."""
    pairs = list(zip(values, references, strict=False))
    if not pairs:
        raise ValueError(f"{name}: no values to compare")
    worst, worst_share = 0, -1.0
    for index, (value, reference) in enumerate(pairs):
        if not tolerance.passes(value, reference):
            worst = index
            break
        allowed = tolerance.allowed(value, reference)
        share = abs(value - reference) / allowed if allowed else 0.0
        if share > worst_share:
            worst, worst_share = index, share
    value, reference = pairs[worst]
    return ScalarCheck(
        name=name,
        value=value,
        reference=reference,
        step=worst + 1 if len(values) > 1 else None,
        difference=abs(value - reference),
        allowed=tolerance.allowed(value, reference),
        tolerance=tolerance,
        passed=tolerance.passes(value, reference),
        compared=len(pairs),
    )
