"""An error band around a simulated prediction: the profile's uncertain parameters drawn over their ranges.

A prediction from a profile built from specs is one value of figures that are each known only
within a range (:mod:`.profile_ranges`). The band propagates them: ``draws`` profiles, each with
every uncertain parameter drawn uniformly from its range (a factor, ``timing.discrepancy``,
uniformly in its logarithm; independently, from ``numpy.random.default_rng(seed)``: the same seed
gives the same draws), replay the same workload; each headline figure's band is the 10th to 90th
percentile of its values over the draws (numpy's linear percentile), a nominal 80% band: if each
range held its parameter's true value with the spread a draw gives, and the model's structure
were right or its structural error within the ``timing.discrepancy`` range, the measured figure
would fall inside its band four times in five. The prediction itself stays the profile's own
values'."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..metrics.units import display_unit, in_unit, significant, with_unit
from .engine import EngineConfig
from .kv_memory import derive_num_gpu_blocks
from .profile import Profile
from .profile_ranges import LOG_DRAWN, ROOFLINE_FIELDS, Uncertain
from .roofline import RooflineTiming

BAND_PERCENTILES = (10.0, 90.0)  # a nominal 80% band
HEADLINE = (
    ("TTFT p50", "ttft", "p50"),
    ("TTFT p90", "ttft", "p90"),
    ("TPOT mean", "tpot", "mean"),
    ("TPOT p50", "tpot", "p50"),
    ("latency p50", "latency", "p50"),
    ("requests/s", "request_throughput", "overall"),
    ("output tok/s", "output_throughput", "overall"),
)


def with_values(profile: Profile, values: Mapping[str, float]) -> Profile:
    """``profile`` with the dotted fields of ``values`` (:data:`~.profile_ranges.UNCERTAIN_FIELDS`) set."""
    changes: dict[str, Any] = {}
    if "timing.frontend_ms" in values:
        changes["frontend_ms"] = values["timing.frontend_ms"]
    if "engine.activation_reserve_gib" in values:
        changes["engine"] = with_reserve(profile, values["engine.activation_reserve_gib"])
    roofline = {name: value for name, value in values.items() if name in ROOFLINE_FIELDS}
    if roofline:
        timing = profile.timing
        assert isinstance(timing, RooflineTiming)  # parse_uncertainty allows these fields on a roofline only
        spec = timing.hardware
        hardware = dataclasses.replace(
            spec,
            peak_flops=roofline.get("hardware.peak_flops", spec.peak_flops),
            memory_bandwidth=roofline.get("hardware.memory_bandwidth", spec.memory_bandwidth),
            interconnect_bandwidth=roofline.get("hardware.interconnect_bandwidth", spec.interconnect_bandwidth),
            allreduce_latency_us=roofline.get("hardware.allreduce_latency_us", spec.allreduce_latency_us),
        )
        changes["hardware"] = hardware
        changes["timing"] = RooflineTiming(
            timing.model,
            hardware,
            mfu=roofline.get("timing.mfu", timing.mfu),
            mbu=roofline.get("timing.mbu", timing.mbu),
            overhead_ms=roofline.get("timing.overhead_ms", timing.overhead_ms),
            layer_overhead_ms=timing.layer_overhead_ms,
            admission_overhead_ms=timing.admission_overhead_ms,
            discrepancy=roofline.get("timing.discrepancy", timing.discrepancy),
            piecewise_layer_overhead_ms=roofline.get(
                "timing.piecewise_layer_overhead_ms", timing.piecewise_layer_overhead_ms
            ),
        )
    return dataclasses.replace(profile, **changes)


def with_reserve(profile: Profile, reserve_gib: float) -> EngineConfig:
    """The profile's engine with the KV cache vLLM would size with an activation reserve of
    ``reserve_gib`` GiB per GPU (:func:`~.kv_memory.derive_num_gpu_blocks`, at the profile's own
    utilization and CUDA graph reserve), at least one block: the profile's parse checked that
    its range leaves memory for the cache."""
    plan = profile.memory_plan
    assert plan is not None and profile.model is not None and profile.hardware is not None
    reserve = plan.reserve_gib(reserve_gib)
    blocks = derive_num_gpu_blocks(
        profile.model, profile.hardware, profile.engine.block_size, plan.utilization, reserve
    )
    return dataclasses.replace(profile.engine, num_gpu_blocks=max(blocks, 1))


def draw(rng: np.random.Generator, uncertain: Uncertain) -> float:
    """One value of ``uncertain`` from its range: uniform, or uniform in the logarithm for a
    factor (:data:`~.profile_ranges.LOG_DRAWN`)."""
    if uncertain.field in LOG_DRAWN:
        return float(np.exp(rng.uniform(np.log(uncertain.low), np.log(uncertain.high))))
    return float(rng.uniform(uncertain.low, uncertain.high))


def draw_profiles(profile: Profile, draws: int, seed: int) -> list[Profile]:
    """``draws`` profiles, each with every uncertain parameter drawn from its range (:func:`draw`,
    module doc)."""
    rng = np.random.default_rng(seed)
    return [with_values(profile, {u.field: draw(rng, u) for u in profile.uncertainty}) for _ in range(draws)]


def band(values: Sequence[float]) -> tuple[float, float]:
    """(low, high): the :data:`BAND_PERCENTILES` of ``values``."""
    low, high = np.percentile(np.asarray(values, dtype=np.float64), BAND_PERCENTILES)
    return float(low), float(high)


def headline_bands(
    profile: Profile, draws: int, seed: int, summarise: Callable[[Profile], Mapping[str, Any]]
) -> dict[str, tuple[float, float]]:
    """Each :data:`HEADLINE` figure's band over ``draws`` drawn profiles; ``summarise(profile)``
    replays the workload with a profile and gives its result's summary."""
    summaries = [summarise(drawn) for drawn in draw_profiles(profile, draws, seed)]
    return {label: band([s[metric][stat] for s in summaries]) for label, metric, stat in HEADLINE}


def band_record(profile: Profile, bands: Mapping[str, tuple[float, float]], draws: int) -> dict[str, Any]:
    """The band as stored in a result (``result.json``'s ``band``): the draws, the percentiles,
    each uncertain parameter's range, and each :data:`HEADLINE` figure's ``[low, high]`` under
    its summary key (``ttft.p50``), in the summary's units (seconds, tokens/s)."""
    return {
        **band_facts(profile, draws),
        "figures": {f"{metric}.{stat}": list(bands[label]) for label, metric, stat in HEADLINE},
    }


def band_facts(profile: Profile, draws: int) -> dict[str, Any]:
    """What any stored band says of how it was drawn: the draws, the percentiles and each
    uncertain parameter's range."""
    return {
        "draws": draws,
        "percentiles": list(BAND_PERCENTILES),
        "parameters": {u.field: [u.low, u.high] for u in profile.uncertainty},
    }


def drawn_parameters(profile: Profile) -> str:
    """``timing.mfu 0.39-0.78, timing.mbu 0.51-0.87``: the parameters a band draws, with their ranges."""
    return ", ".join(f"{u.field} {u.low:g}-{u.high:g}" for u in profile.uncertainty)


def band_lines(
    profile: Profile, summary: Mapping[str, Any], bands: Mapping[str, tuple[float, float]], draws: int
) -> str:
    """The headline figures of ``summary`` with their bands: ``TTFT p50 61 ms (45-80)``, one a line,
    under a line saying what was drawn."""
    lines = [
        f"Error band: {draws} draws of the profile's uncertain parameters ({drawn_parameters(profile)}), "
        f"{BAND_PERCENTILES[0]:g}th-{BAND_PERCENTILES[1]:g}th percentile of each figure (a nominal 80% band):"
    ]
    for label, metric, stat in HEADLINE:
        value = summary[metric][stat]
        low, high = bands[label]
        unit = display_unit(metric, max(abs(value), abs(high)))
        lines.append(
            f"  {label} {with_unit(significant(in_unit(value, unit)), unit)} "
            f"({significant(in_unit(low, unit))}-{significant(in_unit(high, unit))})"
        )
    return "\n".join(lines)


__all__ = [
    "with_values",
    "draw",
    "draw_profiles",
    "band",
    "headline_bands",
    "band_record",
    "band_facts",
    "drawn_parameters",
    "band_lines",
    "HEADLINE",
    "BAND_PERCENTILES",
]
