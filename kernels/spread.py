"""A measured figure and its spread: the median of its samples and their interquartile range.

    figure = measured([1.02, 0.98, 1.10, 1.05, 0.99])   # Measured(1.02), .low 0.99, .high 1.05
    figure * 2                                            # a plain float: arithmetic drops the spread
    asv_samples(samples)                                  # what a track_ benchmark returns

A ``Measured`` is a float (its median), so every table, plot and comparison that takes a
number takes it unchanged; ``low`` and ``high`` (the 25th and 75th percentiles) and ``n``
(the number of samples) ride along for the places that show or test the spread.  One
sample has no spread: ``low == high == median``, ``n == 1``.

asv computes the median, the quartiles and a 99% confidence interval of a timing
benchmark's samples itself; a ``track_`` benchmark that returns ``asv_samples(list)``
gets the same treatment (asv takes a result carrying ``samples`` and ``number`` as a
timing result's), so that the ratios and throughputs this suite tracks keep their rounds'
spread in asv's results, where the report reads it.
"""
import math

import numpy as np


class Measured(float):
    """A median (the float's value) with the interquartile range [low, high] of n samples."""

    low: float
    high: float
    n: int

    def __new__(cls, median, low=None, high=None, n=1):
        figure = super().__new__(cls, median)
        figure.low = float(median if low is None else low)
        figure.high = float(median if high is None else high)
        figure.n = int(n)
        return figure

    def __repr__(self):
        return f"Measured({float(self)!r}, low={self.low!r}, high={self.high!r}, n={self.n})"

    def __reduce__(self):
        return Measured, (float(self), self.low, self.high, self.n)

    @property
    def relative_spread(self):
        """(high - low) ÷ median: the interquartile range as a fraction of the figure."""
        return (self.high - self.low) / abs(float(self)) if float(self) else math.nan


def measured(samples):
    """The Measured of ``samples`` (NaNs dropped); NaN when there are none."""
    values = np.asarray([s for s in samples if not math.isnan(s)], dtype=float)
    if values.size == 0:
        return math.nan
    low, median, high = np.percentile(values, (25, 50, 75))
    return Measured(median, low, high, values.size)


def bounds(value):
    """(low, high) of a Measured; (value, value) of a plain number."""
    return (value.low, value.high) if isinstance(value, Measured) else (value, value)


def quotient(numerator, denominator):
    """numerator ÷ denominator with the spread of both: the interval runs from the smallest
    quotient of the two ranges to the largest (each quartile against the other's opposite
    one), so it is wide where either figure moved.  Plain numbers give a plain float."""
    value = numerator / denominator
    if numerator is denominator:
        return value  # a figure against itself (numpy's row of "speed-up over numpy"): exactly 1
    if not isinstance(numerator, Measured) and not isinstance(denominator, Measured):
        return value
    (a_low, a_high), (b_low, b_high) = bounds(numerator), bounds(denominator)
    ends = sorted((a_low / b_high, a_high / b_low)) if b_low > 0 else (value, value)
    n = min(getattr(v, "n", math.inf) for v in (numerator, denominator))
    return Measured(value, min(ends[0], value), max(ends[1], value), n)


def asv_samples(samples):
    """A track_ benchmark's return value that asv records with its spread: the samples
    (floats) and ``number`` = 1 (one call per sample)."""
    return {"samples": [float(s) for s in samples], "number": 1}
