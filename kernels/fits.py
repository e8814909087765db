"""Power laws fitted to measurements against n: the exponent that makes O(n²) visible.

    fit = fit_power_law(seq_lens, seconds)    # y ≈ a·n^b over the large-n points
    fit.b, fit(8192), fit.solve(ram_bytes)
"""
import math
from dataclasses import dataclass

import numpy as np

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
