"""How long one engine iteration takes: the timing models and the profiles that configure them.

The engine asks one question per iteration (one forward pass, vLLM v1 style: chunked prefill and
decode in the same batch): how long does it take? A :class:`Batch` describes the pass; a
:class:`TimingModel` answers in seconds. Decode-only stretches are asked for at once
(:meth:`TimingModel.decode_span_s`, numpy, no Python loop over the steps); span step ``i``
(0-based) equals ``iteration_s`` of the decode-only batch with ``kv_tokens + i * seqs`` and
``kv_usage + i * usage_step``. An empty batch (no token computed) takes 0 s in every model.

Notation for one batch: ``P`` = ``prefill_tokens``, ``C`` = ``prefill_context``, ``D`` =
``decode_seqs``, ``K`` = ``kv_tokens``, ``u`` = ``kv_usage``; ``T = P + D`` tokens computed.

**roofline** (:class:`RooflineTiming`, from public specs only). Model: ``N`` parameters (``A``
active per token; ``A = N`` for a dense model), ``L`` layers, hidden size ``h``, ``H`` query heads
of size ``d``, ``Hkv`` KV heads, vocabulary ``V``, ``b`` bytes per weight and ``bkv`` per KV
element; MoE: ``E`` experts, ``k`` routed per token. Hardware, per GPU: peak dense bf16 FLOP/s
``F``, memory bandwidth ``B``; ``tp`` GPUs in tensor parallel.

- FLOPs = 2 * A_mm * T + 2 * V * h * S + 4 * L * H * d * (P * C - P^2 / 2 + K), where
  A_mm = A - V * h * (2 untied, 1 tied) are the parameters multiplied per token (the embedding is
  a lookup; the LM head runs once per sequence, as vLLM computes logits only at each scheduled
  request's last token: S = D + 1 if P > 0 else D, one row for the prefill part since Batch does
  not say how many requests are prefilling).
  Attention: 4 FLOPs (QK^T and AV) per query-key pair per head dim. A prefill chunk of c tokens
  whose context is x tokens (cached + earlier chunks + the chunk) makes c * (x - c/2) causal
  pairs; with only the sums P and C known, P * C - P^2 / 2 is exact for one prefilling request
  and an upper bound for several (it counts Σ_{i≠j} c_i (x_j - c_j/2) ≥ 0 pairs too many).
  Decode: K pairs.
- Bytes = b * (N_dense_read + N_exp * (1 - (1 - k/E)^T)) + bkv_tok * (K + C + T), where
  bkv_tok = 2 * L * Hkv * d * bkv (K and V of one token, all layers). Weights: every dense
  matrix except the input embedding table (only T rows are gathered: N_dense_read = N - N_exp -
  V * h if untied); the experts a batch touches: N_exp = (N - A) / (1 - k/E) parameters in all
  experts, each expert untouched by T uniformly routed tokens with probability (1 - k/E)^T (one
  token reads exactly A; a large batch reads all N). KV: decode reads K, prefill attention reads
  its context C, every computed token writes its own (T). Activations are not counted.
- Tensor parallel (Megatron-style, as vLLM shards a model): every layer ends its attention and
  its MLP (or MoE) with an all-reduce of the T tokens' activations, 2 * L all-reduces of
  S = T * h * b bytes per iteration. One all-reduce takes ``lat + S * 2 * (tp - 1) / tp / BW``,
  NCCL's own definition of bus bandwidth (nccl-tests: busbw = algbw * 2 * (n - 1) / n), with
  ``BW`` = ``interconnect_bandwidth`` (the all-reduce bus bandwidth, bytes/s) and ``lat`` =
  ``allreduce_latency_us`` (a small all-reduce's time). Comm = 2 * L * (lat + S * 2 * (tp - 1)
  / tp / BW) for tp > 1, else 0; it is on the critical path (each layer waits for it).
- time = max(FLOPs / (F * tp * mfu), Bytes / (B * tp * mbu)) + comm + overhead, with ``mfu``
  and ``mbu`` the achievable shares of peak compute and bandwidth and ``overhead`` a fixed host
  cost per iteration.

Defaults (public knowledge, not fitted to any measurement in this project): ``mfu`` 0.5 (Meta's
Llama 3 paper reports 38-43% bf16 MFU on H100 for training at scale; Pope et al. 2022,
"Efficiently Scaling Transformer Inference", reach up to 76% MFU on large prefill batches);
``mbu`` 0.7 (Databricks/MosaicML's "LLM Inference Performance Engineering: Best Practices",
2023, which defines MBU, measured well-tuned stacks at small batch in the 50-60%+ range; vLLM and
TensorRT-LLM are commonly quoted at 70-85%); ``overhead_ms`` 1.0 (vLLM v0.6 and V1 overlap the
CPU work of scheduling and output processing with GPU execution; 1 ms stands for the residue:
launch gaps, sampling, synchronisation).

**polynomial** (:class:`PolynomialTiming`): the fit of NVIDIA Dynamo's mocker
(ai-dynamo/dynamo ``lib/mocker/src/common/perf_model.rs``, ``PerfModel::Polynomial``), in ms:

- prefill(T') = 4.209989e-07 * T'^2 + 1.518344e-02 * T' + 16.50142 for T' = P > 0 uncached
  batch tokens ("total new tokens across the batch"), else 0 (and never below 0);
- decode(p) = max(1, -25.74 * p^2 + 54.01 * p + 5.74) for D > 0, else 0, where p = clip(u, 0,
  1) is the share of KV blocks in use (Dynamo: active KV blocks * block size / total KV tokens);
- iteration = (prefill + decode) / 1000 s. Both are per forward pass: the mocker's vLLM
  scheduler loop (``lib/mocker/src/scheduler/vllm.rs``: ``simulate_prefill`` then
  ``simulate_decode``, each sleeping its predicted ms) runs them one after the other in every
  iteration, so a mixed batch costs the sum. (That loop sums the prefill polynomial per
  scheduled request chunk, paying the 16.5 ms constant per request; ``Batch`` carries only the
  total P, so the polynomial is applied to the total, as the perf model's own doc states.)

The coefficients (``prefill_coefficients``, ``decode_coefficients`` as [a, b, c] of a*x^2 + b*x
+ c) and the 1 ms floor (``decode_floor_ms``) are profile fields.

**table** (:class:`TableTiming`): measured points, linear interpolation clamped at both ends
(``numpy.interp``): prefill ms vs P; decode ms vs D, or bilinear in (D, K) on a grid
(interpolate each of the two bracketing D rows in K, then between them in D). Combined like the
polynomial: iteration = (prefill(P) [P > 0] + decode [D > 0]) / 1000 s.

**Profiles** (:func:`load_profile`): a JSON file with ``model``, ``hardware``, ``engine``,
``timing``, ``sources`` and ``notes``; the bundled ones are in ``sim/profiles/``. Hardware
figures are per GPU. ``engine.num_gpu_blocks`` is taken as given, else derived as vLLM sizes its
cache (:func:`derive_num_gpu_blocks`)::

    num_gpu_blocks = floor((memory * gpu_memory_utilization - N * b / tp - reserve)
                           / (block_size * bkv_tok / tp))

with ``reserve`` = ``activation_reserve_gib`` GiB per GPU (peak activations of the profiling
forward pass, CUDA graphs, non-torch memory such as the CUDA context).

**jitter** (any model; ``timing.jitter`` = ``cv``, default 0): real iterations of the same batch
vary (host scheduling, kernels picked per shape, the network). With ``cv`` > 0 every iteration's
time is the model's times a factor ``exp(sigma * z - sigma^2 / 2)``, ``z`` standard normal and
``sigma^2 = ln(1 + cv^2)``: log-normal with mean 1 and coefficient of variation ``cv``, so mean
times stay the model's. Draws come from a seeded generator per engine (:class:`JitteredTiming`):
offline, the same seed gives the same numbers, another seed other numbers with the same means, as
two runs on a real server differ (what a regression gate has to tell from a regression). It
does not desynchronise requests that share every iteration (equal lengths, admitted together):
their tokens still come out together.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, NoReturn, Protocol, Sequence

import numpy as np

from ..errors import LLMReplayError
from .profile_files import profile_path

if TYPE_CHECKING:
    from .engine import EngineConfig

GIB = 2**30
DEFAULT_MFU = 0.5
DEFAULT_MBU = 0.7
DEFAULT_OVERHEAD_MS = 1.0
DYNAMO_PREFILL = (4.209989e-07, 1.518344e-02, 1.650142e01)
DYNAMO_DECODE = (-25.74, 54.01, 5.74)
DYNAMO_DECODE_FLOOR_MS = 1.0
TIMING_KINDS = ("roofline", "polynomial", "table")


@dataclass(frozen=True, slots=True)
class Batch:
    """One iteration's work, summed over its requests."""

    prefill_tokens: int  # new (uncached) prompt tokens computed this iteration (chunked prefill)
    prefill_context: int  # Σ over prefilling requests of the context their chunk attends to (cached + earlier chunks + this chunk)
    decode_seqs: int  # requests decoding one token this iteration
    kv_tokens: int  # Σ tokens already in KV over the decoding requests (what decode attention reads)
    kv_usage: float  # used KV blocks / total KV blocks, 0..1


class TimingModel(Protocol):
    def iteration_s(self, batch: Batch) -> float:
        """Duration of one iteration over ``batch``, in seconds."""
        ...

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        """Durations of `steps` consecutive decode-only iterations of `seqs` requests, kv_tokens growing by `seqs` and kv_usage by `usage_step` each iteration; vectorised (numpy), no Python loop over steps."""
        ...


def _span(seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """kv_tokens and kv_usage of each step of a decode span."""
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    i = np.arange(steps, dtype=np.float64)
    return kv_tokens + seqs * i, kv_usage + usage_step * i


class JitteredTiming:
    """``base``'s iteration times, each times a log-normal factor of mean 1 and coefficient of
    variation ``cv`` (module docstring), drawn from ``numpy.random.default_rng(seed)``."""

    def __init__(self, base: TimingModel, cv: float, seed: Any) -> None:
        if not cv > 0:
            raise ValueError(f"cv must be > 0, got {cv}")
        self.base = base
        self._sigma = math.sqrt(math.log1p(cv * cv))
        self._rng = np.random.default_rng(seed)

    def _factors(self, count: int) -> np.ndarray:
        return np.exp(self._sigma * self._rng.standard_normal(count) - self._sigma * self._sigma / 2)

    def iteration_s(self, batch: Batch) -> float:
        return self.base.iteration_s(batch) * float(self._factors(1)[0])

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        return self.base.decode_span_s(seqs, kv_tokens, kv_usage, usage_step, steps) * self._factors(steps)


def engine_timing(profile: "Profile", seed: Any) -> TimingModel:
    """The timing model of one engine of ``profile``: its own jitter generator seeded by ``seed``
    (a replay's seed and the engine's index), or the profile's model as it is without jitter."""
    return JitteredTiming(profile.timing, profile.jitter, seed) if profile.jitter else profile.timing


# ---------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class ModelSpec:
    """What the roofline needs to know of a model (public config figures)."""

    name: str
    parameters: float  # N, all weights
    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype_bytes: float = 2.0
    active_parameters: float | None = None  # A, per token (MoE); None: = parameters
    kv_dtype_bytes: float | None = None  # None: = dtype_bytes
    vocab_size: int = 0  # 0: unknown; embedding and LM head then count as ordinary weights
    tie_word_embeddings: bool = False
    experts: int = 0  # E; 0: dense
    experts_per_token: int = 0  # k

    @property
    def active(self) -> float:
        return self.parameters if self.active_parameters is None else self.active_parameters

    @property
    def kv_bytes_per_token(self) -> float:
        """2 * L * Hkv * d * bkv: K and V of one token over all layers."""
        kv_dtype = self.dtype_bytes if self.kv_dtype_bytes is None else self.kv_dtype_bytes
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_dtype

    @property
    def weight_bytes(self) -> float:
        """N * b: resident weights."""
        return self.parameters * self.dtype_bytes

    @property
    def embedding_parameters(self) -> float:
        return float(self.vocab_size * self.hidden_size)

    @property
    def matmul_parameters(self) -> float:
        """A_mm = A - V * h * (2 untied, 1 tied): multiplied per token."""
        return self.active - self.embedding_parameters * (1 if self.tie_word_embeddings else 2)

    @property
    def expert_parameters(self) -> float:
        """N_exp = (N - A) / (1 - k/E): parameters of all experts together."""
        if not self.experts:
            return 0.0
        return (self.parameters - self.active) / (1 - self.experts_per_token / self.experts)

    @property
    def dense_read_parameters(self) -> float:
        """N - N_exp - V * h (untied): weights every iteration reads besides the experts."""
        untied = 0.0 if self.tie_word_embeddings else self.embedding_parameters
        return self.parameters - self.expert_parameters - untied


@dataclass(frozen=True)
class HardwareSpec:
    """One GPU's public peak figures, and how many serve one engine."""

    name: str
    peak_flops: float  # F, dense bf16 tensor FLOP/s per GPU
    memory_bandwidth: float  # B, bytes/s per GPU
    memory_bytes: float  # per GPU, as the framework sees it
    gpus: int = 1
    tensor_parallel: int = 1
    interconnect_bandwidth: float = 0.0  # BW, all-reduce bus bandwidth, bytes/s (0: comm not modelled)
    allreduce_latency_us: float = 0.0  # lat, one small all-reduce


# ---------------------------------------------------------------------------- models


class RooflineTiming:
    """max(compute, memory) per iteration from public model and hardware specs (module doc)."""

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareSpec,
        mfu: float = DEFAULT_MFU,
        mbu: float = DEFAULT_MBU,
        overhead_ms: float = DEFAULT_OVERHEAD_MS,
    ) -> None:
        self.model, self.hardware = model, hardware
        self.mfu, self.mbu, self.overhead_ms = mfu, mbu, overhead_ms
        tp = hardware.tensor_parallel
        self._flops_token = 2 * model.matmul_parameters  # 2 * A_mm
        self._flops_seq = 2.0 * model.vocab_size * model.hidden_size  # 2 * V * h
        self._flops_pair = 4.0 * model.layers * model.heads * model.head_dim  # 4 * L * H * d
        self._kv_bytes = model.kv_bytes_per_token
        self._dense_bytes = model.dense_read_parameters * model.dtype_bytes
        self._expert_bytes = model.expert_parameters * model.dtype_bytes
        self._expert_miss = 1 - model.experts_per_token / model.experts if model.experts else 0.0
        self._compute_rate = hardware.peak_flops * tp * mfu
        self._memory_rate = hardware.memory_bandwidth * tp * mbu
        self._overhead_s = overhead_ms / 1000
        communicates = tp > 1 and hardware.interconnect_bandwidth > 0
        self._comm_fixed = 2 * model.layers * hardware.allreduce_latency_us / 1e6 if communicates else 0.0
        ring = 2 * (tp - 1) / tp / hardware.interconnect_bandwidth if communicates else 0.0
        self._comm_token = 2 * model.layers * model.hidden_size * model.dtype_bytes * ring  # seconds per token

    def _parts(self, p: Any, c: Any, d: Any, k: Any) -> tuple[Any, Any]:
        """(compute_s, memory_s); scalars or numpy arrays alike."""
        tokens = p + d
        seqs = d + (p > 0)
        flops = self._flops_token * tokens + self._flops_seq * seqs + self._flops_pair * (p * c - 0.5 * p * p + k)
        weights = self._dense_bytes + self._expert_bytes * (1 - self._expert_miss**tokens)
        memory = weights + self._kv_bytes * (k + c + tokens)
        return flops / self._compute_rate, memory / self._memory_rate

    def _comm(self, tokens: Any) -> Any:
        """The tensor-parallel all-reduces of one iteration of ``tokens`` tokens (module doc)."""
        return self._comm_fixed + self._comm_token * tokens

    def breakdown(self, batch: Batch) -> dict[str, Any]:
        """compute_s, memory_s, comm_s, the bound that wins and total_s of one iteration."""
        compute, memory = self._parts(batch.prefill_tokens, batch.prefill_context, batch.decode_seqs, batch.kv_tokens)
        return {
            "compute_s": compute, "memory_s": memory, "comm_s": self._comm(batch.prefill_tokens + batch.decode_seqs),
            "overhead_s": self._overhead_s, "bound": "compute" if compute >= memory else "memory", "total_s": self.iteration_s(batch),
        }

    def iteration_s(self, batch: Batch) -> float:
        tokens = batch.prefill_tokens + batch.decode_seqs
        if tokens <= 0:
            return 0.0
        compute, memory = self._parts(batch.prefill_tokens, batch.prefill_context, batch.decode_seqs, batch.kv_tokens)
        return max(compute, memory) + self._comm(tokens) + self._overhead_s

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        kv, _ = _span(seqs, kv_tokens, kv_usage, usage_step, steps)
        if seqs <= 0:
            return np.zeros(steps)
        compute, memory = self._parts(0, 0, seqs, kv)
        return np.maximum(compute, memory) + self._comm(seqs) + self._overhead_s


def _poly(coefficients: Sequence[float], x: Any) -> Any:
    a, b, c = coefficients
    return a * x * x + b * x + c


class PolynomialTiming:
    """Dynamo mocker's fit: prefill ms from batch tokens, decode ms from KV usage, summed."""

    def __init__(
        self,
        prefill_coefficients: Sequence[float] = DYNAMO_PREFILL,
        decode_coefficients: Sequence[float] = DYNAMO_DECODE,
        decode_floor_ms: float = DYNAMO_DECODE_FLOOR_MS,
    ) -> None:
        self.prefill_coefficients = tuple(float(x) for x in prefill_coefficients)
        self.decode_coefficients = tuple(float(x) for x in decode_coefficients)
        self.decode_floor_ms = decode_floor_ms

    def prefill_ms(self, tokens: int) -> float:
        return max(_poly(self.prefill_coefficients, tokens), 0.0) if tokens > 0 else 0.0

    def decode_ms(self, kv_usage: float) -> float:
        p = min(max(kv_usage, 0.0), 1.0)
        return max(_poly(self.decode_coefficients, p), self.decode_floor_ms)

    def iteration_s(self, batch: Batch) -> float:
        decode = self.decode_ms(batch.kv_usage) if batch.decode_seqs > 0 else 0.0
        return (self.prefill_ms(batch.prefill_tokens) + decode) / 1000

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        _, usage = _span(seqs, kv_tokens, kv_usage, usage_step, steps)
        if seqs <= 0:
            return np.zeros(steps)
        return np.maximum(_poly(self.decode_coefficients, np.clip(usage, 0.0, 1.0)), self.decode_floor_ms) / 1000


class TableTiming:
    """Interpolation in measured points (ms), linear and clamped; prefill + decode summed.

    ``decode_ms`` is 1-D (one value per ``decode_seqs`` point) or, with ``decode_kv_tokens``, a
    grid ``decode_ms[i][j]`` at (``decode_seqs[i]``, ``decode_kv_tokens[j]``), bilinear.
    """

    def __init__(
        self,
        prefill_tokens: Sequence[float],
        prefill_ms: Sequence[float],
        decode_seqs: Sequence[float],
        decode_ms: Sequence[float] | Sequence[Sequence[float]],
        decode_kv_tokens: Sequence[float] | None = None,
    ) -> None:
        self.prefill_tokens = np.asarray(prefill_tokens, dtype=np.float64)
        self.prefill_ms_points = np.asarray(prefill_ms, dtype=np.float64)
        self.decode_seqs = np.asarray(decode_seqs, dtype=np.float64)
        self.decode_kv_tokens = None if decode_kv_tokens is None else np.asarray(decode_kv_tokens, dtype=np.float64)
        self.decode_ms_points = np.asarray(decode_ms, dtype=np.float64)
        expected = (len(self.decode_seqs),) if self.decode_kv_tokens is None else (len(self.decode_seqs), len(self.decode_kv_tokens))
        if self.decode_ms_points.shape != expected:
            raise ValueError(f"decode_ms has shape {self.decode_ms_points.shape}, expected {expected}")

    def prefill_ms(self, tokens: int) -> float:
        return float(np.interp(tokens, self.prefill_tokens, self.prefill_ms_points)) if tokens > 0 else 0.0

    def decode_ms(self, seqs: int, kv_tokens: Any) -> Any:
        """Decode ms at ``seqs`` (a number) and ``kv_tokens`` (a number or an array)."""
        if self.decode_kv_tokens is None:
            value = np.interp(seqs, self.decode_seqs, self.decode_ms_points)
            return value if np.ndim(kv_tokens) == 0 else np.full(np.shape(kv_tokens), value)
        grid, rows = self.decode_seqs, self.decode_ms_points
        if len(grid) == 1:
            return np.interp(kv_tokens, self.decode_kv_tokens, rows[0])
        x = min(max(float(seqs), grid[0]), grid[-1])
        i = min(int(np.searchsorted(grid, x, side="right")) - 1, len(grid) - 2)
        f = (x - grid[i]) / (grid[i + 1] - grid[i])
        low = np.interp(kv_tokens, self.decode_kv_tokens, rows[i])
        high = np.interp(kv_tokens, self.decode_kv_tokens, rows[i + 1])
        return low * (1 - f) + high * f

    def iteration_s(self, batch: Batch) -> float:
        decode = float(self.decode_ms(batch.decode_seqs, batch.kv_tokens)) if batch.decode_seqs > 0 else 0.0
        return (self.prefill_ms(batch.prefill_tokens) + decode) / 1000

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        kv, _ = _span(seqs, kv_tokens, kv_usage, usage_step, steps)
        if seqs <= 0:
            return np.zeros(steps)
        return np.asarray(self.decode_ms(seqs, kv), dtype=np.float64) / 1000


# ---------------------------------------------------------------------------- profiles


@dataclass(frozen=True)
class Profile:
    """A named simulator set-up: timing model, engine settings, the facts behind them, sources."""

    name: str
    timing: TimingModel
    engine: EngineConfig
    model: ModelSpec | None = None
    hardware: HardwareSpec | None = None
    jitter: float = 0.0  # coefficient of variation of iteration times (module docstring)
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    description: str = ""
    path: str | None = None

    @property
    def gpus(self) -> int:
        """GPUs behind one engine (for per-GPU throughput)."""
        return self.hardware.gpus if self.hardware is not None else 1


def derive_num_gpu_blocks(
    model: ModelSpec,
    hardware: HardwareSpec,
    block_size: int,
    gpu_memory_utilization: float,
    activation_reserve_gib: float,
) -> int:
    """floor((memory * utilization - N * b / tp - reserve) / (block_size * bkv_tok / tp)), per GPU.

    vLLM's rule: of ``gpu_memory_utilization`` of each GPU's memory, what the weight shard and the
    profiled peak (activations, CUDA graphs, non-torch memory: ``activation_reserve_gib``) leave
    is KV cache, in blocks of ``block_size`` tokens of this GPU's share of the KV heads.
    Returns <= 0 when nothing is left.
    """
    tp = hardware.tensor_parallel
    free = hardware.memory_bytes * gpu_memory_utilization - model.weight_bytes / tp - activation_reserve_gib * GIB
    return math.floor(free / (block_size * model.kv_bytes_per_token / tp))


def load_profile(name_or_path: str | Path) -> Profile:
    """A bundled profile by name (file stem in ``sim/profiles/``) or a profile ``.json`` file."""
    path = profile_path(name_or_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LLMReplayError(f"{path}: not valid JSON: line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except OSError as exc:
        raise LLMReplayError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_profile(data, origin=str(path), default_name=path.stem)


class _Fields:
    """Strict reading of one profile's fields; errors name the origin and the dotted field."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def fail(self, name: str, message: str) -> NoReturn:
        raise LLMReplayError(f"{self.origin}: {name}: {message}")

    def section(self, data: Mapping[str, Any], key: str, allowed: Sequence[str], required: bool = True) -> Mapping[str, Any] | None:
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
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
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
        if increasing and any(b <= a for a, b in zip(value, value[1:])):
            self.fail(name, "must be strictly increasing")
        return [float(v) for v in value]

    def coefficients(self, data: Mapping[str, Any], prefix: str, key: str, default: Sequence[float]) -> tuple[float, ...]:
        value = data.get(key, list(default))
        if not isinstance(value, list) or len(value) != 3 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            self.fail(f"{prefix}.{key}", f"must be [a, b, c] of a*x^2 + b*x + c, got {value!r}")
        try:
            finite = all(math.isfinite(v) for v in value)
        except OverflowError:  # an integer too large for a float
            finite = False
        if not finite:
            self.fail(f"{prefix}.{key}", f"must be finite numbers, got {value!r}")
        return tuple(float(v) for v in value)


_TOP = ("name", "description", "model", "hardware", "engine", "timing", "sources", "notes")
_MODEL = (
    "name", "parameters", "active_parameters", "layers", "hidden_size", "heads", "kv_heads", "head_dim",
    "dtype_bytes", "kv_dtype_bytes", "vocab_size", "tie_word_embeddings", "experts", "experts_per_token",
)
_HARDWARE = ("name", "peak_flops", "memory_bandwidth", "memory_bytes", "gpus", "tensor_parallel", "interconnect_bandwidth", "allreduce_latency_us")
_ENGINE = ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "activation_reserve_gib")
_TIMING = {
    "roofline": ("kind", "mfu", "mbu", "overhead_ms", "jitter"),
    "polynomial": ("kind", "prefill_coefficients", "decode_coefficients", "decode_floor_ms", "jitter"),
    "table": ("kind", "prefill", "decode", "jitter"),
}
MAX_JITTER = 1.0  # a coefficient of variation above this is a typo, not a server


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
        f.fail(f"{p}.{'experts_per_token' if experts else 'experts'}", "missing (a MoE model needs experts and experts_per_token)")
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
    )
    if spec.matmul_parameters <= 0 or spec.dense_read_parameters <= 0:
        f.fail(f"{p}.vocab_size", "embedding and LM head (vocab_size * hidden_size) exceed the parameters")
    return spec


def _hardware(f: _Fields, data: Mapping[str, Any]) -> HardwareSpec:
    p = "hardware"
    gpus = f.number(data, p, "gpus", 1, integer=True)
    tp = f.number(data, p, "tensor_parallel", 1, integer=True, maximum=gpus)
    if tp > 1 and "interconnect_bandwidth" not in data:
        f.fail(
            f"{p}.interconnect_bandwidth",
            f"missing (tensor_parallel {tp} all-reduces every layer: give the all-reduce bus bandwidth in bytes/s, "
            "NCCL's busbw, and allreduce_latency_us)",
        )
    return HardwareSpec(
        name=f.string(data, p, "name"),
        peak_flops=f.number(data, p, "peak_flops"),
        memory_bandwidth=f.number(data, p, "memory_bandwidth"),
        memory_bytes=f.number(data, p, "memory_bytes"),
        gpus=gpus,
        tensor_parallel=tp,
        interconnect_bandwidth=f.number(data, p, "interconnect_bandwidth", 0.0, inclusive=tp == 1),
        allreduce_latency_us=f.number(data, p, "allreduce_latency_us", 0.0, inclusive=True),
    )


def _engine(f: _Fields, data: Mapping[str, Any], model: ModelSpec | None, hardware: HardwareSpec | None) -> EngineConfig:
    from .engine import MAX_GPU_BLOCKS, EngineConfig  # engine.py imports this module

    p = "engine"
    block_size = f.number(data, p, "block_size", integer=True)
    if "num_gpu_blocks" in data:
        blocks = f.number(data, p, "num_gpu_blocks", integer=True)
    else:
        if model is None or hardware is None:
            f.fail(f"{p}.num_gpu_blocks", "missing (give it, or model and hardware to derive it)")
        utilization = f.number(data, p, "gpu_memory_utilization", maximum=1.0)
        reserve = f.number(data, p, "activation_reserve_gib", inclusive=True)
        blocks = derive_num_gpu_blocks(model, hardware, block_size, utilization, reserve)
        if blocks <= 0:
            f.fail(
                f"{p}.num_gpu_blocks",
                f"no memory left for the KV cache: {model.weight_bytes / hardware.tensor_parallel / 1e9:.1f} GB of weights "
                f"+ {reserve:g} GiB reserve exceed {utilization:g} x {hardware.memory_bytes / 1e9:.1f} GB per GPU",
            )
    if blocks > MAX_GPU_BLOCKS:
        how = "" if "num_gpu_blocks" in data else " (derived from the model and hardware)"
        f.fail(f"{p}.num_gpu_blocks", f"must be <= {MAX_GPU_BLOCKS:,} (the simulator keeps per-block state in memory), got {blocks:,}{how}")
    return EngineConfig(
        block_size=block_size,
        num_gpu_blocks=blocks,
        max_num_seqs=f.number(data, p, "max_num_seqs", integer=True),
        max_num_batched_tokens=f.number(data, p, "max_num_batched_tokens", integer=True),
    )


def _table(f: _Fields, data: Mapping[str, Any]) -> TableTiming:
    prefill = f.section(data, "prefill", ("tokens", "ms"))
    decode = f.section(data, "decode", ("seqs", "kv_tokens", "ms"))
    assert prefill is not None and decode is not None
    tokens = f.points(prefill, "timing.prefill", "tokens", increasing=True)
    prefill_ms = f.points(prefill, "timing.prefill", "ms", increasing=False)
    if len(tokens) != len(prefill_ms):
        f.fail("timing.prefill.ms", f"must have one value per point of timing.prefill.tokens ({len(tokens)}), got {len(prefill_ms)}")
    seqs = f.points(decode, "timing.decode", "seqs", increasing=True)
    if "kv_tokens" not in decode:
        decode_ms: Any = f.points(decode, "timing.decode", "ms", increasing=False)
        if len(decode_ms) != len(seqs):
            f.fail("timing.decode.ms", f"must have one value per point of timing.decode.seqs ({len(seqs)}), got {len(decode_ms)}")
        return TableTiming(tokens, prefill_ms, seqs, decode_ms)
    kv = f.points(decode, "timing.decode", "kv_tokens", increasing=True)
    rows = decode.get("ms")
    if not isinstance(rows, list) or len(rows) != len(seqs):
        f.fail("timing.decode.ms", f"must be {len(seqs)} rows (one per seqs point) of {len(kv)} values (one per kv_tokens point)")
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
    model = _model(f, model_data) if model_data is not None else None
    hardware = _hardware(f, hardware_data) if hardware_data is not None else None
    assert engine_data is not None
    return Profile(
        name=f.string(data, "", "name", default_name or "profile"),
        timing=_timing(f, data["timing"], model, hardware),
        engine=_engine(f, engine_data, model, hardware),
        model=model,
        hardware=hardware,
        jitter=f.number(data["timing"], "timing", "jitter", 0.0, maximum=MAX_JITTER, inclusive=True),
        sources=f.strings(data, "sources"),
        notes=f.strings(data, "notes"),
        description=description,
        path=origin,
    )


__all__ = [
    "Batch", "TimingModel", "ModelSpec", "HardwareSpec", "RooflineTiming", "PolynomialTiming", "TableTiming", "JitteredTiming", "engine_timing",
    "Profile", "load_profile", "parse_profile", "derive_num_gpu_blocks",
]
