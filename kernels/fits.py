"""Power laws fitted to measurements against n: the exponent that makes O(n²) visible.

    fit = fit_power_law(seq_lens, seconds)    # y ≈ a·n^b over the large-n points
    fit.b, fit(8192), fit.solve(ram_bytes)
    exponent_with_spread(fit, seq_lens, seconds)  # b with the range the values' spreads allow
"""
import math
from dataclasses import dataclass

import numpy as np

from .spread import Measured, bounds

# Attention is quadratic only once n dominates the per-call overheads and d: fit there.
FIT_MIN_N = 1024
FIT_MIN_POINTS = 3


@dataclass(frozen=True)
class PowerLaw:
    """y ≈ a·n^b, fitted on ``points`` values with n_min ≤ n ≤ n_max."""

    a: float
    b: float
    n_min: int
    n_max: int
    points: int

    def __call__(self, n):
        return self.a * np.asarray(n, dtype=float) ** self.b

    def solve(self, y):
        """The n at which the law reaches ``y`` (extrapolated)."""
        return (y / self.a) ** (1 / self.b)


def fit_power_law(seq_lens, values, min_n=FIT_MIN_N, min_points=FIT_MIN_POINTS):
    """Least-squares line through (log n, log y) over the measured points with n ≥ min_n.

    None when fewer than ``min_points`` such points are finite and positive.
    """
    points = [(n, y) for n, y in zip(seq_lens, values) if n >= min_n and np.isfinite(y) and y > 0]
    if len(points) < min_points:
        return None
    n, y = (np.array(column, dtype=float) for column in zip(*points))
    b, log_a = np.polyfit(np.log(n), np.log(y), 1)
    return PowerLaw(math.exp(log_a), b, int(n.min()), int(n.max()), len(points))


def exponent_with_spread(fit, seq_lens, values):
    """``fit``'s exponent b (``fit_power_law(seq_lens, values)``) as a ``spread.Measured``
    whose range is the exponents the values' interquartile ranges allow: fitted again
    through the points tilted from their low quartile at the fit's smallest n to their high
    quartile at its largest (log-linearly in between), and the other way.  A plain b when no
    value has a spread; NaN without a fit."""
    if fit is None:
        return math.nan
    points = [(n, y) for n, y in zip(seq_lens, values)
              if fit.n_min <= n <= fit.n_max and np.isfinite(y) and y > 0]
    if not any(isinstance(y, Measured) for _, y in points):
        return fit.b
    n = np.array([n for n, _ in points], dtype=float)
    low, high = np.log([bounds(y) for _, y in points]).T
    weight = np.log(n / n.min()) / np.log(n.max() / n.min())
    tilted = [np.polyfit(np.log(n), (1 - weight) * start + weight * end, 1)[0]
              for start, end in ((low, high), (high, low))]
    samples = min(getattr(y, "n", 1) for _, y in points)
    return Measured(fit.b, min(min(tilted), fit.b), max(max(tilted), fit.b), samples)
