"""Summary statistics of a small sample (seeds of a training run) with scipy / numpy."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Summary:
    """n, mean, sample std (ddof 1; 0 for one value), two-sided t interval of the mean (nan for one value), range."""

    n: int
    mean: float
    std: float
    ci_low: float
    ci_high: float
    min: float
    max: float


def t_quantile(p: float, dof: int) -> float:
    """The p quantile of Student's t distribution with `dof` degrees of freedom."""
    return float(stats.t.ppf(p, dof))


def summarize(values: list[float], confidence: float = 0.95) -> Summary:
    """Mean, std and the `confidence` t interval of the mean of `values` (at least one)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("summarize: no values")
    mean = float(x.mean())
    if x.size == 1:
        return Summary(1, mean, 0.0, math.nan, math.nan, mean, mean)
    std = float(x.std(ddof=1))
    half = t_quantile(0.5 + confidence / 2, x.size - 1) * std / math.sqrt(x.size)
    return Summary(int(x.size), mean, std, mean - half, mean + half, float(x.min()), float(x.max()))
