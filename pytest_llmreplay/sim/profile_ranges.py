"""A profile's uncertain parameters: each one's range and where the range comes from.

A profile built from public specs rests on figures that are not known exactly: the efficiencies
come from micro-benchmarks and published figures with a spread, the host overhead is an estimate.
Its optional ``uncertainty`` section states them::

    "uncertainty": {
        "timing.mfu": {"range": [0.392, 0.784], "source": "why this range"},
        "timing.overhead_ms": {"range": [0.5, 2.0], "source": "..."}
    }

Each key is a dotted field of :data:`UNCERTAIN_FIELDS` (the roofline's efficiencies and host
overhead (per step, and per layer of a step run piecewise), the front end, the GPU's peak figures,
the link's all-reduce bus bandwidth and small all-reduce latency (:data:`LINK_FIELDS`, a profile
whose GPUs communicate: tensor parallel, or data parallel with a MoE model), ``timing.discrepancy``, and
``engine.activation_reserve_gib`` where the profile derives its KV cache from it: each draw then
derives its own ``num_gpu_blocks``, sim/kv_memory.py); ``range`` is
``[low, high]`` with ``0 < low < high`` (efficiencies at most 1) holding the profile's own value,
which stays the prediction; ``source`` says where the range comes from and is required.
:mod:`.profile_band` draws the parameters from their ranges to put a band around a prediction.

``timing.discrepancy`` (a roofline's) is the model's structural error rather than a parameter of
it: a factor on every iteration's time (sim/roofline.py), 1 in the prediction (its own value,
which its range must hold) and in no ``timing`` section. The parameters' ranges carry what the
model's inputs are unsure of; this one carries what the model itself leaves out, as measured
where a prediction of it could be checked (its source says where). A factor, it is drawn
log-uniformly (:data:`LOG_DRAWN`): 0.8 and 1.25 are equally likely.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

ROOFLINE_FIELDS = (
    "timing.mfu",
    "timing.mbu",
    "timing.overhead_ms",
    "timing.piecewise_layer_overhead_ms",
    "hardware.peak_flops",
    "hardware.memory_bandwidth",
    "hardware.interconnect_bandwidth",
    "hardware.allreduce_latency_us",
    "timing.discrepancy",
)
LINK_FIELDS = ("hardware.interconnect_bandwidth", "hardware.allreduce_latency_us")  # only where GPUs communicate
UNCERTAIN_FIELDS = (*ROOFLINE_FIELDS, "timing.frontend_ms", "engine.activation_reserve_gib")
LOG_DRAWN = ("timing.discrepancy",)  # factors: drawn uniformly in their logarithm
SHARES = ("timing.mfu", "timing.mbu")  # a share of a peak: at most 1


@dataclass(frozen=True)
class Uncertain:
    """One uncertain parameter: its dotted field, its range and the range's source."""

    field: str
    low: float
    high: float
    source: str


def parse_uncertainty(
    section: Any, value_of: Callable[[str], float | None], fail: Callable[[str, str], NoReturn]
) -> tuple[Uncertain, ...]:
    """The ``uncertainty`` section (module doc). ``value_of(field)``: the profile's own value of a
    dotted field (None where the profile's timing model has no such field); ``fail(name, message)``
    raises the profile's error naming the dotted field."""
    if not isinstance(section, Mapping):
        fail("uncertainty", f"must be an object of dotted fields, got {section!r}")
    out = []
    for name, entry in section.items():
        where = f"uncertainty.{name}"
        if name not in UNCERTAIN_FIELDS:
            fail(where, f"unknown field (expected one of: {', '.join(UNCERTAIN_FIELDS)})")
        own = value_of(name)
        if own is None and name == "engine.activation_reserve_gib":
            fail(where, "the profile gives engine.num_gpu_blocks: there is no derived KV cache whose reserve to draw")
        if own is None:
            fail(
                where,
                "the profile's timing model has no such parameter (the roofline's fields need timing.kind roofline)",
            )
        if not isinstance(entry, Mapping) or set(entry) != {"range", "source"}:
            fail(where, 'must be {"range": [low, high], "source": "where the range comes from"}')
        bounds, source = entry["range"], entry["source"]
        if not isinstance(source, str) or not source.strip():
            fail(f"{where}.source", f"must be a non-empty string, got {source!r}")
        if (
            not isinstance(bounds, list)
            or len(bounds) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in bounds)
        ):
            fail(f"{where}.range", f"must be [low, high], two numbers, got {bounds!r}")
        low, high = float(bounds[0]), float(bounds[1])
        if not 0 < low < high or (name in SHARES and high > 1):
            limit = " <= 1" if name in SHARES else ""
            fail(f"{where}.range", f"must be 0 < low < high{limit}, got {bounds!r}")
        if not low <= own <= high:
            fail(f"{where}.range", f"must hold the profile's own value {own:g}, got {bounds!r}")
        out.append(Uncertain(name, low, high, source))
    return tuple(out)


__all__ = ["Uncertain", "parse_uncertainty", "UNCERTAIN_FIELDS", "ROOFLINE_FIELDS", "LINK_FIELDS", "LOG_DRAWN"]
