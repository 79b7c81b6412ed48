"""Simulator profiles: a model, its hardware, engine settings and a timing model, read from JSON.

**Profiles** (:func:`load_profile`): a JSON file with ``model``, ``hardware``, ``engine``,
``timing``, ``sources`` and ``notes``; the bundled ones are in ``sim/profiles/``. Hardware
figures are per GPU. ``engine.num_gpu_blocks`` is taken as given, else derived as vLLM sizes its
cache from ``gpu_memory_utilization``, ``activation_reserve_gib`` and ``cudagraph_reserve_gib``
(:mod:`.kv_memory`); a profile gives one or the other.

``engine.async_scheduling`` (default false): vLLM's ``--async-scheduling``, batches decided one
iteration ahead (sim/engine.py); vLLM's default on GPUs since v0.14.0, off on its CPU backend.
``engine.scheduler_reserve_full_isl`` (default false): vLLM's ``--scheduler-reserve-full-isl``, a
request admitted only when its whole sequence fits in the free KV blocks (sim/engine.py); vLLM's
default since its pull request #37307 (2026-03; in 0.19.0).

``uncertainty`` (optional): the uncertain parameters, each with its range and the range's source
(:mod:`.profile_ranges`); ``llmreplay run --sim --band N`` draws them (:mod:`.profile_band`).

``reasoning`` (optional): the reasoning tokens before each answer, a number or a distribution
(:mod:`.reasoning`). Every field is read strictly: an error names the profile file and the
dotted field (``profile.json: engine.block_size: must be > 0, got 0``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, NoReturn

from ..errors import LLMReplayError
from ..workloads.formats._fields import read_json_document
from ..workloads.formats.distribution import Distribution, parse_distribution
from .engine import MAX_GPU_BLOCKS, EngineConfig
from .kv_memory import MEMORY_PLAN_FIELDS, MemoryPlan, derive_num_gpu_blocks, weight_bytes_per_gpu
from .polynomial import DYNAMO_DECODE, DYNAMO_DECODE_FLOOR_MS, DYNAMO_PREFILL, PolynomialTiming
from .profile_files import profile_path
from .profile_ranges import LINK_FIELDS, Uncertain, parse_uncertainty
from .roofline import DEFAULT_MBU, DEFAULT_MFU, DEFAULT_OVERHEAD_MS, HardwareSpec, ModelSpec, RooflineTiming
from .timing import JitteredTiming, TimingModel
from .timing_table import TableTiming

TIMING_KINDS = ("roofline", "polynomial", "table")


@dataclass(frozen=True)
class Profile:
    """A named simulator set-up: timing model, engine settings, the facts behind them, sources."""

    name: str
    timing: TimingModel
    engine: EngineConfig
    model: ModelSpec | None = None
    hardware: HardwareSpec | None = None
    jitter: float = 0.0  # coefficient of variation of iteration times (sim/timing.py: jitter)
    frontend_ms: float = (
        0.0  # the server's per-request latency before the engine sees a request (sim/cluster.py: front end)
    )
    reasoning: Distribution | None = None  # reasoning tokens before each answer (sim/reasoning.py)
    uncertainty: tuple[Uncertain, ...] = ()  # uncertain parameters, their ranges and sources (sim/profile_ranges.py)
    memory_plan: MemoryPlan | None = None  # where num_gpu_blocks was derived, what it was derived from
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    description: str = ""
    path: str | None = None

    @property
    def max_model_len(self) -> int:
        """The longest prompt + output served (``/v1/models``' ``max_model_len``): the engine's
        ``max_model_len`` (a served context: ``llmreplay calibrate`` writes the server's), else the
        model's context ``max_position_embeddings``, capped at what one engine's KV cache holds
        (``num_gpu_blocks * block_size``: where vLLM would refuse to start, or with
        ``--max-model-len auto`` take the largest length that fits); the KV cache alone when the
        profile gives no context length."""
        kv_tokens = self.engine.num_gpu_blocks * self.engine.block_size
        model_context = self.model.max_position_embeddings if self.model is not None else 0
        context = self.engine.max_model_len or model_context
        return min(context, kv_tokens) if context else kv_tokens

    @property
    def gpus(self) -> int:
        """GPUs behind one engine (for per-GPU throughput)."""
        return self.hardware.gpus if self.hardware is not None else 1


def load_profile(name_or_path: str | Path) -> Profile:
    """A bundled profile by name (file stem in ``sim/profiles/``) or a profile ``.json`` file."""
    path = profile_path(name_or_path)
    return parse_profile(read_profile_json(path), origin=str(path), default_name=path.stem)


def read_profile_json(path: Path) -> Any:
    """The JSON document of the profile file ``path`` (its shape is :func:`parse_profile`'s
    to check); one error naming the file when it cannot be read, is not UTF-8 (a byte-order
    mark is skipped) or is not JSON, a key given twice included
    (:func:`~pytest_llmreplay.workloads.formats._fields.read_json_document`)."""
    try:
        return read_json_document(path, expected="a UTF-8 JSON profile")
    except OSError as exc:
        raise LLMReplayError(f"{path}: cannot read: {exc.strerror}") from None


class _Fields:
    """Strict reading of one profile's fields; errors name the origin and the dotted field."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, name: str, message: str) -> NoReturn:
        raise LLMReplayError(f"{self.origin}: {name}: {message}")

    def section(
        self, data: Mapping[str, Any], key: str, allowed: Sequence[str], required: bool = True
    ) -> Mapping[str, Any] | None:
        if key not in data:
            if required:
                self.fail(key, "missing")
            return None
        value = data[key]
        if not isinstance(value, Mapping):
            self.fail(key, f"must be an object, got {value!r}")
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            self.fail(f"{key}.{unknown[0]}", f"unknown field (expected one of: {', '.join(allowed)})")
        return value

    def number(
        self,
        data: Mapping[str, Any],
        prefix: str,
        key: str,
        default: float | None = None,
        *,
        integer: bool = False,
        minimum: float = 0.0,
        inclusive: bool = False,
        maximum: float | None = None,
    ) -> Any:
        """A number > minimum (>= with ``inclusive``), <= maximum; ``default`` when absent (None: required)."""
        name = f"{prefix}.{key}"
        if key not in data:
            if default is None:
                self.fail(name, "missing")
            return default
        value = data[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (isinstance(value, float) and not math.isfinite(value))
        ):
            self.fail(name, f"must be a number, got {value!r}")
        if integer and value != int(value):
            self.fail(name, f"must be a whole number, got {value!r}")
        if value < minimum or (value == minimum and not inclusive):
            self.fail(name, f"must be {'>=' if inclusive else '>'} {minimum:g}, got {value!r}")
        if maximum is not None and value > maximum:
            self.fail(name, f"must be <= {maximum:g}, got {value!r}")
        return int(value) if integer else float(value)

    def string(self, data: Mapping[str, Any], prefix: str, key: str, default: str | None = None) -> str:
        name = f"{prefix}.{key}" if prefix else key
        if key not in data:
            if default is None:
                self.fail(name, "missing")
            return default
        value = data[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(name, f"must be a non-empty string, got {value!r}")
        return value

    def strings(self, data: Mapping[str, Any], key: str) -> list[str]:
        value = data.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            self.fail(key, "must be a list of non-empty strings")
        return list(value)

    def points(self, data: Mapping[str, Any], prefix: str, key: str, *, increasing: bool) -> list[float]:
        name = f"{prefix}.{key}"
        if key not in data:
            self.fail(name, "missing")
        return self.values(data[key], name, increasing=increasing)

    def values(self, value: Any, name: str, *, increasing: bool) -> list[float]:
        """A non-empty list of numbers >= 0 (strictly increasing with ``increasing``)."""
        if not isinstance(value, list) or not value:
            self.fail(name, f"must be a non-empty list of numbers, got {value!r}")
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (int, float)) or not math.isfinite(item) or item < 0:
                self.fail(name, f"must hold numbers >= 0, got {item!r}")
        if increasing and any(b <= a for a, b in pairwise(value)):
            self.fail(name, "must be strictly increasing")
        return [float(v) for v in value]

    def coefficients(
        self, data: Mapping[str, Any], prefix: str, key: str, default: Sequence[float]
    ) -> tuple[float, ...]:
        value = data.get(key, list(default))
        if (
            not isinstance(value, list)
            or len(value) != 3
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        ):
            self.fail(f"{prefix}.{key}", f"must be [a, b, c] of a*x^2 + b*x + c, got {value!r}")
        try:
            finite = all(math.isfinite(v) for v in value)
        except OverflowError:  # an integer too large for a float
            finite = False
        if not finite:
            self.fail(f"{prefix}.{key}", f"must be finite numbers, got {value!r}")
        return tuple(float(v) for v in value)


_TOP = ("name", "description", "model", "hardware", "engine", "timing", "reasoning", "uncertainty", "sources", "notes")
_MODEL = (
    "config",
    "name",
    "parameters",
    "active_parameters",
    "layers",
    "hidden_size",
    "heads",
    "kv_heads",
    "head_dim",
    "dtype_bytes",
    "kv_dtype_bytes",
    "vocab_size",
    "tie_word_embeddings",
    "experts",
    "experts_per_token",
    "max_position_embeddings",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "moe_layers",
)
_HARDWARE = (
    "name",
    "peak_flops",
    "memory_bandwidth",
    "memory_bytes",
    "gpus",
    "tensor_parallel",
    "data_parallel",
    "expert_parallel",
    "interconnect_bandwidth",
    "allreduce_latency_us",
)
_ENGINE = (
    "block_size",
    "num_gpu_blocks",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "activation_reserve_gib",
    "cudagraph_reserve_gib",
    "async_scheduling",
    "scheduler_reserve_full_isl",
    "max_model_len",
)
_TIMING = {
    "roofline": (
        "kind",
        "mfu",
        "mbu",
        "overhead_ms",
        "layer_overhead_ms",
        "piecewise_layer_overhead_ms",
        "admission_overhead_ms",
        "jitter",
        "frontend_ms",
    ),
    "polynomial": ("kind", "prefill_coefficients", "decode_coefficients", "decode_floor_ms", "jitter", "frontend_ms"),
    "table": ("kind", "prefill", "decode", "jitter", "frontend_ms"),
}
MAX_JITTER = 1.0  # a coefficient of variation above this is a typo, not a server
MAX_FRONTEND_MS = 60_000.0  # a minute before the engine sees a request is a typo, not a server


def _model(f: _Fields, data: Mapping[str, Any]) -> ModelSpec:
    p = "model"
    parameters = f.number(data, p, "parameters")
    active = f.number(data, p, "active_parameters", parameters, maximum=parameters)
    tie = data.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        f.fail(f"{p}.tie_word_embeddings", f"must be true or false, got {tie!r}")
    experts = f.number(data, p, "experts", 0, integer=True, inclusive=True)
    per_token = f.number(data, p, "experts_per_token", 0, integer=True, inclusive=True)
    if bool(experts) != bool(per_token):
        f.fail(
            f"{p}.{'experts_per_token' if experts else 'experts'}",
            "missing (a MoE model needs experts and experts_per_token)",
        )
    if experts and per_token >= experts:
        f.fail(f"{p}.experts_per_token", f"must be < experts ({experts}), got {per_token}")
    spec = ModelSpec(
        name=f.string(data, p, "name"),
        parameters=parameters,
        active_parameters=active,
        layers=f.number(data, p, "layers", integer=True),
        hidden_size=f.number(data, p, "hidden_size", integer=True),
        heads=f.number(data, p, "heads", integer=True),
        kv_heads=f.number(data, p, "kv_heads", integer=True),
        head_dim=f.number(data, p, "head_dim", integer=True),
        dtype_bytes=f.number(data, p, "dtype_bytes"),
        kv_dtype_bytes=f.number(data, p, "kv_dtype_bytes", f.number(data, p, "dtype_bytes")),
        vocab_size=f.number(data, p, "vocab_size", 0, integer=True, inclusive=True),
        tie_word_embeddings=tie,
        experts=experts,
        experts_per_token=per_token,
        max_position_embeddings=f.number(data, p, "max_position_embeddings", 0, integer=True, inclusive=True),
        kv_lora_rank=f.number(data, p, "kv_lora_rank", 0, integer=True, inclusive=True),
        qk_rope_head_dim=f.number(data, p, "qk_rope_head_dim", 0, integer=True, inclusive=True),
        moe_layers=f.number(
            data, p, "moe_layers", None, integer=True, maximum=f.number(data, p, "layers", integer=True)
        )
        if "moe_layers" in data
        else None,
    )
    if spec.qk_rope_head_dim and not spec.kv_lora_rank:
        f.fail(f"{p}.kv_lora_rank", "missing (qk_rope_head_dim is MLA's: give kv_lora_rank too)")
    if spec.moe_layers is not None and not experts:
        f.fail(f"{p}.moe_layers", "a dense model has no MoE layers (give experts and experts_per_token)")
    if spec.matmul_parameters <= 0 or spec.dense_read_parameters <= 0:
        f.fail(f"{p}.vocab_size", "embedding and LM head (vocab_size * hidden_size) exceed the parameters")
    return spec


def _with_config(f: _Fields, data: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """``data`` (the model section) with the fields its ``config`` (a Hugging Face config.json,
    relative to the profile's folder) gives (:mod:`.model_config`); the section's own fields win."""
    from .model_config import model_fields, read_config

    value = data["config"]
    if not isinstance(value, str) or not value.strip():
        f.fail("model.config", f"must be the path of the model's config.json, got {value!r}")
    path = Path(value).expanduser()
    if not path.is_absolute() and Path(origin).is_file():
        path = Path(origin).parent / path
    where = f"{origin}: model.config"
    derived = model_fields(read_config(path, where), f"{where} ({path})")
    return {**derived, **{key: item for key, item in data.items() if key != "config"}}


def _hardware(f: _Fields, data: Mapping[str, Any], model: ModelSpec | None) -> HardwareSpec:
    p = "hardware"
    gpus = f.number(data, p, "gpus", 1, integer=True)
    tp = f.number(data, p, "tensor_parallel", 1, integer=True, maximum=gpus)
    dp = f.number(data, p, "data_parallel", 1, integer=True)
    if tp * dp > gpus:
        f.fail(f"{p}.gpus", f"must be at least tensor_parallel x data_parallel = {tp * dp}, got {gpus}")
    expert_parallel = data.get("expert_parallel", False)
    if not isinstance(expert_parallel, bool):
        f.fail(f"{p}.expert_parallel", f"must be true or false, got {expert_parallel!r}")
    if expert_parallel and (model is None or not model.experts):
        f.fail(f"{p}.expert_parallel", "needs a MoE model (model.experts and model.experts_per_token)")
    if "interconnect_bandwidth" not in data:
        if tp > 1:
            f.fail(
                f"{p}.interconnect_bandwidth",
                f"missing (tensor_parallel {tp} all-reduces every layer: give the all-reduce bus bandwidth in bytes/s, "
                "NCCL's busbw, and allreduce_latency_us)",
            )
        if dp > 1 and model is not None and model.experts:
            f.fail(
                f"{p}.interconnect_bandwidth",
                f"missing (data_parallel {dp} of a MoE model gathers every MoE layer's tokens: "
                "give the link's bus bandwidth in bytes/s, NCCL's busbw, and allreduce_latency_us)",
            )
    return HardwareSpec(
        name=f.string(data, p, "name"),
        peak_flops=f.number(data, p, "peak_flops"),
        memory_bandwidth=f.number(data, p, "memory_bandwidth"),
        memory_bytes=f.number(data, p, "memory_bytes"),
        gpus=gpus,
        tensor_parallel=tp,
        data_parallel=dp,
        expert_parallel=expert_parallel,
        interconnect_bandwidth=f.number(
            data, p, "interconnect_bandwidth", 0.0, inclusive="interconnect_bandwidth" not in data
        ),
        allreduce_latency_us=f.number(data, p, "allreduce_latency_us", 0.0, inclusive=True),
    )


def _engine(
    f: _Fields, data: Mapping[str, Any], model: ModelSpec | None, hardware: HardwareSpec | None
) -> tuple[EngineConfig, MemoryPlan | None]:
    """The engine settings, and the :class:`MemoryPlan` its ``num_gpu_blocks`` was derived from
    (None where the section gives it)."""
    p = "engine"
    block_size = f.number(data, p, "block_size", integer=True)
    memory_plan = None
    if "num_gpu_blocks" in data:
        blocks = f.number(data, p, "num_gpu_blocks", integer=True)
    else:
        if model is None or hardware is None:
            f.fail(f"{p}.num_gpu_blocks", "missing (give it, or model and hardware to derive it)")
        utilization = f.number(data, p, "gpu_memory_utilization", maximum=1.0)
        memory_plan = MemoryPlan(
            utilization,
            f.number(data, p, "activation_reserve_gib", inclusive=True),
            f.number(data, p, "cudagraph_reserve_gib", 0.0, inclusive=True),
        )
        blocks = derive_num_gpu_blocks(model, hardware, block_size, utilization, memory_plan.reserve_gib())
        if blocks <= 0:
            f.fail(
                f"{p}.num_gpu_blocks",
                f"no memory left for the KV cache: {weight_bytes_per_gpu(model, hardware) / 1e9:.1f} GB of weights "
                f"+ {memory_plan.reserve_gib():g} GiB reserve exceed {utilization:g} x "
                f"{hardware.memory_bytes / 1e9:.1f} GB per GPU",
            )
    if blocks > MAX_GPU_BLOCKS:
        how = "" if "num_gpu_blocks" in data else " (derived from the model and hardware)"
        f.fail(
            f"{p}.num_gpu_blocks",
            f"must be <= {MAX_GPU_BLOCKS:,} (the simulator keeps per-block state in memory), got {blocks:,}{how}",
        )
    beside_given_blocks = [key for key in MEMORY_PLAN_FIELDS if key in data] if memory_plan is None else []
    if beside_given_blocks:
        f.fail(f"{p}.{beside_given_blocks[0]}", "not used where engine.num_gpu_blocks is given: give one or the other")
    switches = {}
    for key in ("async_scheduling", "scheduler_reserve_full_isl"):
        switches[key] = data.get(key, False)
        if not isinstance(switches[key], bool):
            f.fail(f"{p}.{key}", f"must be true or false, got {switches[key]!r}")
    engine = EngineConfig(
        block_size=block_size,
        num_gpu_blocks=blocks,
        max_num_seqs=f.number(data, p, "max_num_seqs", integer=True),
        max_num_batched_tokens=f.number(data, p, "max_num_batched_tokens", integer=True),
        async_scheduling=switches["async_scheduling"],
        scheduler_reserve_full_isl=switches["scheduler_reserve_full_isl"],
        max_model_len=f.number(data, p, "max_model_len", integer=True) if "max_model_len" in data else None,
    )
    return engine, memory_plan


def _table(f: _Fields, data: Mapping[str, Any]) -> TableTiming:
    prefill = f.section(data, "prefill", ("tokens", "ms"))
    decode = f.section(data, "decode", ("seqs", "kv_tokens", "ms"))
    assert prefill is not None and decode is not None
    tokens = f.points(prefill, "timing.prefill", "tokens", increasing=True)
    prefill_ms = f.points(prefill, "timing.prefill", "ms", increasing=False)
    if len(tokens) != len(prefill_ms):
        f.fail(
            "timing.prefill.ms",
            f"must have one value per point of timing.prefill.tokens ({len(tokens)}), got {len(prefill_ms)}",
        )
    seqs = f.points(decode, "timing.decode", "seqs", increasing=True)
    if "kv_tokens" not in decode:
        decode_ms: Any = f.points(decode, "timing.decode", "ms", increasing=False)
        if len(decode_ms) != len(seqs):
            f.fail(
                "timing.decode.ms",
                f"must have one value per point of timing.decode.seqs ({len(seqs)}), got {len(decode_ms)}",
            )
        return TableTiming(tokens, prefill_ms, seqs, decode_ms)
    kv = f.points(decode, "timing.decode", "kv_tokens", increasing=True)
    rows = decode.get("ms")
    if not isinstance(rows, list) or len(rows) != len(seqs):
        f.fail(
            "timing.decode.ms",
            f"must be {len(seqs)} rows (one per seqs point) of {len(kv)} values (one per kv_tokens point)",
        )
    grid = []
    for i, row in enumerate(rows):
        values = f.values(row, f"timing.decode.ms[{i}]", increasing=False)
        if len(values) != len(kv):
            f.fail(f"timing.decode.ms[{i}]", f"must have {len(kv)} values (one per kv_tokens point), got {len(values)}")
        grid.append(values)
    return TableTiming(tokens, prefill_ms, seqs, grid, kv)


def _timing(f: _Fields, data: Mapping[str, Any], model: ModelSpec | None, hardware: HardwareSpec | None) -> TimingModel:
    kind = data.get("kind") if isinstance(data, Mapping) else None
    if not isinstance(kind, str) or kind not in _TIMING:
        f.fail("timing.kind", "missing" if kind is None else f"must be one of {', '.join(TIMING_KINDS)}, got {kind!r}")
    section = f.section({"timing": data}, "timing", _TIMING[kind])
    assert section is not None
    if kind == "roofline":
        if model is None:
            f.fail("model", "missing (the roofline needs the model's figures)")
        if hardware is None:
            f.fail("hardware", "missing (the roofline needs the hardware's figures)")
        return RooflineTiming(
            model,
            hardware,
            mfu=f.number(section, "timing", "mfu", DEFAULT_MFU, maximum=1.0),
            mbu=f.number(section, "timing", "mbu", DEFAULT_MBU, maximum=1.0),
            overhead_ms=f.number(section, "timing", "overhead_ms", DEFAULT_OVERHEAD_MS, inclusive=True),
            layer_overhead_ms=f.number(section, "timing", "layer_overhead_ms", 0.0, inclusive=True),
            admission_overhead_ms=f.number(section, "timing", "admission_overhead_ms", 0.0, inclusive=True),
            piecewise_layer_overhead_ms=f.number(section, "timing", "piecewise_layer_overhead_ms", 0.0, inclusive=True),
        )
    if kind == "polynomial":
        return PolynomialTiming(
            f.coefficients(section, "timing", "prefill_coefficients", DYNAMO_PREFILL),
            f.coefficients(section, "timing", "decode_coefficients", DYNAMO_DECODE),
            f.number(section, "timing", "decode_floor_ms", DYNAMO_DECODE_FLOOR_MS, inclusive=True),
        )
    return _table(f, section)


def parse_profile(data: Any, origin: str = "<profile>", default_name: str | None = None) -> Profile:
    """A :class:`Profile` from a profile's parsed JSON; errors name ``origin`` and the field."""
    f = _Fields(origin)
    if not isinstance(data, Mapping):
        raise LLMReplayError(f"{origin}: a profile must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_TOP))
    if unknown:
        f.fail(unknown[0], f"unknown field (expected one of: {', '.join(_TOP)})")
    description = data.get("description", "")
    if not isinstance(description, str):
        f.fail("description", f"must be a string, got {description!r}")
    model_data = f.section(data, "model", _MODEL, required=False)
    hardware_data = f.section(data, "hardware", _HARDWARE, required=False)
    engine_data = f.section(data, "engine", _ENGINE)
    if "timing" not in data:
        f.fail("timing", "missing")
    if not isinstance(data["timing"], Mapping):
        f.fail("timing", f"must be an object, got {data['timing']!r}")
    if model_data is not None and "config" in model_data:
        model_data = _with_config(f, model_data, origin)
    model = _model(f, model_data) if model_data is not None else None
    hardware = _hardware(f, hardware_data, model) if hardware_data is not None else None
    assert engine_data is not None
    timing = _timing(f, data["timing"], model, hardware)
    frontend_ms = f.number(data["timing"], "timing", "frontend_ms", 0.0, maximum=MAX_FRONTEND_MS, inclusive=True)

    engine, memory_plan = _engine(f, engine_data, model, hardware)

    def value_of(name: str) -> float | None:
        section, _, key = name.partition(".")
        if name == "timing.frontend_ms":
            return frontend_ms
        if name == "engine.activation_reserve_gib":
            return memory_plan.activation_reserve_gib if memory_plan is not None else None
        if not isinstance(timing, RooflineTiming):
            return None
        if name in LINK_FIELDS and not timing.communicates:
            f.fail(
                f"uncertainty.{name}",
                "the profile's GPUs do not communicate (one GPU, or data parallel with a dense model)",
            )
        return float(getattr(timing if section == "timing" else timing.hardware, key))

    uncertainty = parse_uncertainty(data["uncertainty"], value_of, f.fail) if "uncertainty" in data else ()
    for uncertain in uncertainty:
        if uncertain.field == "engine.activation_reserve_gib" and memory_plan and model and hardware:
            high = memory_plan.reserve_gib(uncertain.high)
            if derive_num_gpu_blocks(model, hardware, engine.block_size, memory_plan.utilization, high) <= 0:
                f.fail(
                    "uncertainty.engine.activation_reserve_gib.range",
                    f"its high end {uncertain.high:g} GiB leaves no memory for the KV cache",
                )
    return Profile(
        name=f.string(data, "", "name", default_name or "profile"),
        timing=timing,
        engine=engine,
        model=model,
        hardware=hardware,
        jitter=f.number(data["timing"], "timing", "jitter", 0.0, maximum=MAX_JITTER, inclusive=True),
        frontend_ms=frontend_ms,
        reasoning=parse_distribution(data["reasoning"], "reasoning", {"path": origin}) if "reasoning" in data else None,
        uncertainty=uncertainty,
        memory_plan=memory_plan,
        sources=f.strings(data, "sources"),
        notes=f.strings(data, "notes"),
        description=description,
        path=origin,
    )


def engine_timing(profile: Profile, seed: Any) -> TimingModel:
    """The timing model of one engine of ``profile``: its own jitter generator seeded by ``seed``
    (a replay's seed and the engine's index), or the profile's model as it is without jitter."""
    return JitteredTiming(profile.timing, profile.jitter, seed) if profile.jitter else profile.timing


__all__ = [
    "Profile",
    "load_profile",
    "parse_profile",
    "engine_timing",
    "MAX_JITTER",
    "TIMING_KINDS",
]
