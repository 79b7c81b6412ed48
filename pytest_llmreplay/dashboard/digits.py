"""Values to :data:`DIGITS` significant digits, as a page's data holds them (it stays small).

:func:`rounded` is the definition: Python's ``round(value, DIGITS - 1 - floor(log10 |value|))``,
the double nearest the decimal that the value rounds to. :func:`rounded_all` gives the same
doubles for a whole array at numpy's speed (a page holds hundreds of thousands): with ``d`` that
many decimals, ``n = rint(value * 10**d)`` is the decimal's digits whenever ``value * 10**d`` is
not within 1e-6 of a tie (its rounding error is far smaller), and ``n / 10**d`` is then the
double nearest the decimal, ``n`` and ``10**d`` being exact and a division correctly rounded
(``n * 10**-d`` likewise for large values). The few values near a tie, near a power of ten
(where the number of decimals is in doubt) or outside those bounds take :func:`rounded`.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
import numpy.typing as npt

DIGITS = 5
EXACT = 2.0**53  # integers below this are exact doubles
NEAR = 1e-6  # how close to a tie (or a power of ten) a value takes rounded()


def rounded(value: float) -> float:
    """``value`` to :data:`DIGITS` significant digits."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, DIGITS - 1 - math.floor(math.log10(abs(value))))


def rounded_all(values: npt.NDArray[np.float64]) -> list[float]:
    """:func:`rounded` of each of ``values`` (module docstring)."""
    out = values.astype(np.float64, copy=True)
    magnitude = np.abs(values)
    regular = np.isfinite(values) & (values != 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        power = np.log10(np.where(regular, magnitude, 1.0))
        decimals = DIGITS - 1 - np.floor(power)
        scale = 10.0 ** np.abs(decimals)
        scaled = np.where(decimals >= 0, values * scale, values / scale)
        digits = np.rint(scaled)
        result = np.where(decimals >= 0, digits / scale, digits * scale)
        doubtful = regular & (
            (np.abs(power - np.rint(power)) < NEAR)
            | (np.abs(np.abs(scaled - np.floor(scaled)) - 0.5) < NEAR)
            | (np.abs(decimals) > 22)
            | (np.abs(digits) >= EXACT)
            | (np.abs(result) >= EXACT)
        )
    fast = regular & ~doubtful
    out[fast] = result[fast]
    listed = cast(list[float], out.tolist())
    for index in cast(list[int], np.flatnonzero(doubtful).tolist()):
        listed[index] = rounded(listed[index])
    return listed
