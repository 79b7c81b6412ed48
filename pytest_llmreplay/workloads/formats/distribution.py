"""Seeded distributions of lengths and times, written as a number or a mapping with ``dist``,
read strictly: the synthetic workload's lengths and delays, a simulator profile's reasoning.

A value is a number (fixed) or ``{dist: fixed, value}``, ``{dist: uniform, min, max}``
(inclusive), ``{dist: normal, mean, std}`` or ``{dist: lognormal, mean, std}`` (mean and std of
the values themselves), each with optional ``min``/``max`` clamps. :func:`parse_distribution`
checks one and names the field at fault (``synthetic.delay.std: must be a number >= 0``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import WorkloadError
from ._fields import is_finite_number, type_name

INTEGER_CEILING = (
    10**15
)  # integer draws stop here (exact in a float, far past every limit) instead of wrapping negative
DISTRIBUTIONS = {
    "fixed": ("value",),
    "uniform": ("min", "max"),
    "normal": ("mean", "std"),
    "lognormal": ("mean", "std"),
}


@dataclass(frozen=True)
class Distribution:
    """A length or time distribution; see the module docstring for the forms."""

    dist: str
    params: tuple[tuple[str, float], ...]
    low: float | None = None
    high: float | None = None

    def highest(self) -> float:
        """The largest value it can give: a fixed value, a uniform's max, else its ``max`` clamp
        (infinite without one)."""
        p = dict(self.params)
        top = p["value"] if self.dist == "fixed" else p["max"] if self.dist == "uniform" else math.inf
        return min(top, self.high) if self.high is not None else top

    def sample(self, rng: np.random.Generator, size: int, *, integer: bool, minimum: int = 1) -> np.ndarray:
        """``size`` draws, clamped to [low, high]; integers are rounded, at least ``minimum`` and at
        most :data:`INTEGER_CEILING` (1e20 cast to int64 would be a negative count), other values
        at least 0."""
        p = dict(self.params)
        values: np.ndarray
        if self.dist == "fixed":
            values = np.full(size, p["value"], dtype=float)
        elif self.dist == "uniform":
            # integer bounds past int64 (a max of 1e300) were numpy's "high is out of bounds" traceback
            least, most = (int(min(p[bound], INTEGER_CEILING)) for bound in ("min", "max"))
            values = (
                rng.integers(least, most + 1, size).astype(float) if integer else rng.uniform(p["min"], p["max"], size)
            )
        elif self.dist == "normal":
            values = rng.normal(p["mean"], p["std"], size)
        else:  # lognormal, parametrised by the mean and std of the values themselves
            sigma2 = math.log1p((p["std"] / p["mean"]) ** 2)
            values = rng.lognormal(math.log(p["mean"]) - sigma2 / 2, math.sqrt(sigma2), size)
        values = np.clip(values, self.low, self.high) if (self.low is not None or self.high is not None) else values
        if integer:
            return np.clip(np.rint(values), minimum, INTEGER_CEILING).astype(np.int64)
        return np.maximum(values, 0.0)


Length = int | float | Distribution | Mapping[str, Any]


def drawn_text(count: int) -> str:
    """An integer draw (or a sum of them) for a message: ``12,345``, or ``1e+15 or more`` from
    :data:`INTEGER_CEILING` on, where draws stopped."""
    return f"{count:,}" if count < INTEGER_CEILING else f"{INTEGER_CEILING:.0e} or more"


def parse_distribution(value: Length, field: str, where: Mapping[str, Any]) -> Distribution:
    """A :class:`Distribution` from a number or a ``{dist: ..., ...}`` mapping, checked; a
    :class:`~pytest_llmreplay.errors.WorkloadError` naming ``field`` (and ``where``: its
    ``path``) when it is not one."""
    if isinstance(value, Distribution):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            raise WorkloadError(f"must be a finite number >= 0, got {value!r}", field=field, **where)
        return Distribution("fixed", (("value", float(value)),))
    if not isinstance(value, Mapping):
        raise WorkloadError(f"expected a number or a mapping with 'dist', got {type_name(value)}", field=field, **where)
    kind = value.get("dist")
    if kind not in DISTRIBUTIONS:
        raise WorkloadError(
            f"'dist' must be one of {', '.join(DISTRIBUTIONS)}, got {kind!r}", field=f"{field}.dist", **where
        )
    allowed = {"dist", "min", "max", *DISTRIBUTIONS[kind]}
    for key in value:
        if key not in allowed:
            raise WorkloadError(
                f"unknown key for dist {kind}; expected {', '.join(sorted(allowed))}", field=f"{field}.{key}", **where
            )
    numbers = {}
    for key in allowed - {"dist"}:
        if key in value:
            numbers[key] = check_number(value[key], f"{field}.{key}", where)
        elif key in DISTRIBUTIONS[kind]:
            raise WorkloadError(f"required for dist {kind}", field=f"{field}.{key}", **where)
    if kind == "lognormal" and numbers["mean"] <= 0:
        raise WorkloadError("must be > 0 for a lognormal", field=f"{field}.mean", **where)
    low, high = numbers.get("min"), numbers.get("max")
    if low is not None and high is not None and low > high:
        raise WorkloadError(f"min {low:g} is greater than max {high:g}", field=f"{field}.min", **where)
    params = tuple((k, numbers[k]) for k in DISTRIBUTIONS[kind])
    if kind == "uniform":
        return Distribution(kind, params)
    return Distribution(kind, params, low, high)


def check_number(
    value: Any, field: str, where: Mapping[str, Any], *, high: float | None = None, positive: bool = False
) -> float:
    """``value`` as a float when it is a finite number >= 0 (> 0 when ``positive``, at most
    ``high``), else a :class:`~pytest_llmreplay.errors.WorkloadError` naming ``field``."""
    bad = not is_finite_number(value, 0)
    if bad or (positive and value == 0) or (high is not None and value > high):
        bounds = f"{'> 0' if positive else '>= 0'}{f' and <= {high:g}' if high is not None else ''}"
        raise WorkloadError(f"must be a number {bounds}, got {value!r}", field=field, **where)
    return float(value)
