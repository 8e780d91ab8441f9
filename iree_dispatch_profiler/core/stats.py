"""Samples in, estimates out: medians with bootstrap confidence intervals, CVs, speedups of
interleaved samples, significance and drift. Shared by profiler.py, compare.py and the tuner."""
from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 2000
# Two-thirds of a round's samples on either side of a change this large is drift, not noise:
# the noisiest in-run CV seen on our VMs is ~10%.
DRIFT_THRESHOLD = 0.10
# Smaller differences are not claimed, however sure: they do not survive a reboot on our VMs.
MIN_EFFECT = 0.03
# The spread of a speedup between sessions on a steady machine (calibrations agreeing), as a
# relative standard deviation beyond the within-session noise: benchmarks/bench_truth.py (e)
# measured 1.0% pooled over the seed sweep's 16 configurations (0 to 2.4% each), 5 sessions.
SESSION_SD = 0.01


@dataclass(frozen=True)
class Estimate:
    """A median with its confidence interval. For a speedup, values above 1 favour the variant."""

    median: float
    low: float
    high: float
    cv: float
    n: int

    @property
    def relative_half_width(self) -> float:
        """Half the interval's width as a fraction of the median (`inf` without an interval)."""
        if not (self.median > 0 and math.isfinite(self.low) and math.isfinite(self.high)):
            return math.inf
        return (self.high - self.low) / 2 / self.median

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)

    def interval(self, spec: str = ".3f") -> str:
        """`[1.234, 1.301]`, or in words why there is none (too few rounds)."""
        if not self.has_interval:
            return f"[no interval: {self.n} round{'s' if self.n != 1 else ''}]"
        return f"[{self.low:{spec}}, {self.high:{spec}}]"


NO_ESTIMATE = Estimate(math.nan, math.nan, math.nan, math.nan, 0)


def estimate(samples: Sequence[float]) -> Estimate:
    """Median, its bootstrap interval (BCa; percentile where BCa degenerates) and the CV."""
    values = np.asarray(samples, dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        return NO_ESTIMATE
    median = float(np.median(values))
    cv = float(np.std(values, ddof=1) / np.mean(values)) if values.size > 1 else 0.0
    if values.size < 3:
        return Estimate(median, math.nan, math.nan, cv, int(values.size))
    if np.ptp(values) == 0:
        return Estimate(median, median, median, cv, int(values.size))
    from scipy.stats import bootstrap  # loaded here: most of a script's start otherwise
    low = high = math.nan
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # degenerate BCa: fall back below
            result = bootstrap((values,), np.median, confidence_level=CONFIDENCE,
                               n_resamples=RESAMPLES, method=method, vectorized=True,
                               random_state=np.random.default_rng(0))
        low, high = result.confidence_interval
        if math.isfinite(low) and math.isfinite(high):
            break
    return Estimate(median, float(low), float(high), cv, int(values.size))


def speedup(baseline: Sequence[float], variant: Sequence[float]) -> Estimate:
    """Baseline time / variant time from samples taken in the same rounds: the median of the
    per-round ratios, so that drift common to both cancels out."""
    a, b = np.asarray(baseline, dtype=float), np.asarray(variant, dtype=float)
    if a.shape != b.shape:
        raise ValueError("speedup needs samples paired by round")
    return estimate(a / b)


def across_sessions(ratio: Estimate, session_sd: float = SESSION_SD) -> Estimate:
    """The interval of a speedup across sessions (reproducibility, as ISO 5725 tells it from
    repeatability): each side of the within-session interval widened, in quadrature, by the
    between-session spread. Within-session intervals alone held another session's speedup
    59% of the time here."""
    if not ratio.has_interval or not ratio.median > 0:
        return ratio
    extra = statistics.NormalDist().inv_cdf(0.5 + CONFIDENCE / 2) * session_sd
    low = (1 - ratio.low / ratio.median) ** 2 + extra ** 2
    high = (ratio.high / ratio.median - 1) ** 2 + extra ** 2
    return Estimate(ratio.median, ratio.median * (1 - math.sqrt(low)),
                    ratio.median * (1 + math.sqrt(high)), ratio.cv, ratio.n)


def significant(ratio: Estimate, min_effect: float) -> bool:
    """A difference is claimed only when the whole interval lies beyond `min_effect` (either
    way): it then excludes 1, and even its near end is an effect worth naming. An interval
    that merely excludes 1 is wrong 1 time in 20 by construction, and more often here, where
    rounds are not independent (A/A runs of one vmfb gave 1.11x [1.01, 1.16])."""
    if not ratio.n or not ratio.low > 0:
        return False
    return ratio.low > 1 + min_effect or ratio.high < 1 / (1 + min_effect)


def direction(ratio: Estimate) -> str:
    """`faster by 2.10x [1.95, 2.24]` or `slower by 1.05x [1.02, 1.08]` (a slowdown inverted,
    so its numbers read above 1 too)."""
    if ratio.median > 1:
        return f"faster by {ratio.median:.2f}x {ratio.interval('.2f')}"
    return f"slower by {1 / ratio.median:.2f}x [{1 / ratio.high:.2f}, {1 / ratio.low:.2f}]"


def verdict(name: str, baseline: str, ratio: Estimate, min_effect: float) -> str:
    """`dt faster than base by 2.10x [1.95, 2.24]`, or no significant difference."""
    if not significant(ratio, min_effect):
        return (f"{name} vs {baseline}: no significant difference "
                f"({ratio.median:.2f}x {ratio.interval('.2f')})")
    faster_or_slower, rest = direction(ratio).split(" by ", 1)
    return f"{name} {faster_or_slower} than {baseline} by {rest}"


def drift(samples: Sequence[float]) -> float:
    """How far the last third of a candidate's rounds moved from the first third (late median /
    early median - 1), or 0 when the two overlap or differ by less than DRIFT_THRESHOLD."""
    values = np.asarray(samples, dtype=float)
    third = values.size // 3
    if third < 2:
        return 0.0
    early, late = values[:third], values[-third:]
    change = float(np.median(late) / np.median(early) - 1)
    separated = early.max() < late.min() or late.max() < early.min()
    return change if separated and abs(change) > DRIFT_THRESHOLD else 0.0
