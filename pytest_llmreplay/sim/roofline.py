"""The roofline timing model: one iteration's time from public model and hardware specs.

Notation as in :mod:`.timing`.

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
- MLA attention (DeepSeek-V2, arXiv:2405.04434, section 2.1: the cache holds one compressed
  latent of ``kv_lora_rank`` r and one shared RoPE key of ``qk_rope_head_dim`` dr per token and
  layer, instead of K and V per head): bkv_tok = L * (r + dr) * bkv. The latent is not split by
  heads, so every tensor-parallel rank keeps (and reads) the whole of it (vLLM's MLA backends
  replicate the latent cache over TP ranks): the KV terms of Bytes count tp times, and the KV
  cache's size per GPU is not divided by tp. Attention FLOPs keep 4 * L * H * d per pair, with d
  the query-key head dim of the config (an approximation: vLLM's decode absorbs the up-projections
  and multiplies against the latent).
- Data parallel (vLLM ``data_parallel_size`` dp): dp engines, each a full replica of the dense
  weights on its tp GPUs, with its own scheduler and KV cache; for a dense model they share
  nothing, and this model times one engine. For a MoE model vLLM splits the experts over all
  dp * tp GPUs (with ``enable_expert_parallel`` as whole experts, E / (dp * tp) per GPU; without
  it each expert's matrices are sliced over the same dp * tp GPUs: vLLM's
  FusedMoEParallelConfig flattens TP across DP) and gathers every rank's tokens into each MoE
  layer. Assuming the dp ranks carry equal loads (T tokens each, dp * T in the layer), one
  engine's experts (N_exp / dp of them) are each touched with probability
  1 - (1 - k/E)^(dp * T): expert Bytes = b * N_exp / dp * (1 - (1 - k/E)^(dp * T)) (EP at dp = 2
  halves each engine's expert bytes at equal tokens in the layer); expert FLOPs are unchanged
  (2 * A_exp * dp * T over dp engines). Slices or whole experts read the same expected bytes.
- Expert dispatch and combine (vLLM's default ``all2all_backend`` ``allgather_reducescatter``,
  docs.vllm.ai "Expert Parallel Deployment": dispatch is an all-gather of the dp ranks' hidden
  states, combine a reduce-scatter): per MoE layer two collectives over the dp ranks, each
  ``lat + (dp - 1) * T * h * b / BW`` (a ring all-gather or reduce-scatter of S bytes per rank
  moves (dp - 1) * S per rank; nccl-tests: busbw = algbw * (n - 1) / n), with ``BW`` and ``lat``
  the profile's ``interconnect_bandwidth`` and ``allreduce_latency_us`` (the same link).
  Comm += L_moe * 2 * (lat + (dp - 1) * T * h * b / BW) for a MoE model with dp > 1, where
  L_moe = ``moe_layers`` (default: every layer). Router logits (T * E values) are left out.
  Not modelled: vLLM's MoE DP ranks step in lockstep (an idle rank runs dummy batches), so a
  busy rank waits for the slowest; each engine here steps on its own batch alone.
- Two phases, each bound by its own resource: the linear layers (FLOPs 2 * A_mm * T + 2 * V * h * S;
  Bytes the weights) and attention (FLOPs 4 * L * H * d * (P * C - P^2 / 2 + K); Bytes the KV
  terms). Each layer runs its projections and MLP as GEMMs and its attention as a kernel of its
  own, one after the other on one stream (vLLM compiles the model in pieces split at the
  attention op: ``splitting_ops`` ``vllm::unified_attention_with_output`` in its compilation
  config), so a step takes the sum of the phases, not the max of their totals: the roofline per
  operator of LLM-Viewer (Yuan et al. 2024, "LLM Inference Unveiled: Survey and Roofline Model
  Insights", https://arxiv.org/abs/2402.16363). A decode-only step (both phases memory-bound)
  or a large prefill (both compute-bound) takes the same either way; a step that mixes a
  prefill chunk into many decodes does not: its GEMMs turn compute-bound while its decode
  attention still reads the whole KV context, where one max over the totals hid up to ~450
  prefill tokens of a full decode batch under the KV reads (bench/README.md, sim_fidelity).
- time = max(FLOPs_lin / (F * tp * mfu), Bytes_lin / (B * tp * mbu)) + max(FLOPs_attn / (F * tp *
  mfu), Bytes_attn / (B * tp * mbu)) + comm + overhead + admission_overhead_ms * R, with ``mfu`` and ``mbu`` the achievable
  shares of peak compute and bandwidth and overhead = ``overhead_ms`` + ``layer_overhead_ms`` * L
  the host's cost per iteration: a fixed part (scheduling, input preparation, sampling, output
  handling) and a part per layer (default 0), with ``piecewise_layer_overhead_ms`` * L more
  where P > 0 (below). The part per layer is the host launching each
  layer's operators one by one, as an engine does when it runs the model eagerly (vLLM's
  ``--enforce-eager``, and its CPU build: no CUDA graph replays a whole step), the host's time then
  growing with the number of layers whatever their width (PyTorch's "Performance Tuning Guide":
  small operators are bound by the framework's per-operator overhead; CUDA graphs exist to remove
  exactly that launch cost per operator). A calibration tells the two apart only from runs of two
  layer counts on the same machine (sim/calibrate_run.py).
- Piecewise steps, ``piecewise_layer_overhead_ms`` * L (default 0) in every iteration that
  computes prefill tokens (P > 0): vLLM's default CUDA graph mode since PR #25444 (2025-09),
  FULL_AND_PIECEWISE, replays one captured graph of the whole model for a batch of decodes only,
  and for any batch with prefill tokens the piecewise graphs, split at the attention op, with
  each layer's attention run eagerly between them (vLLM's docs, design/cuda_graphs.md; the
  capture log's "mixed prefill-decode, PIECEWISE" and "decode, FULL"), so such a step pays the
  host's launch of each layer's attention and of the graph pieces around it, a cost per layer
  that a decode-only step does not pay. A profile for an engine run eagerly puts its whole
  per-layer cost in ``layer_overhead_ms`` instead, for every step.
- The host's set-up of each request an iteration schedules for the first time (or again after a
  preemption), ``admission_overhead_ms`` * R (default 0), in that iteration only: vLLM's model
  runner, before the step's forward pass (``GPUModelRunner._update_states``,
  vllm/v1/worker/gpu_model_runner.py, which its CPU build's ``CPUModelRunner`` inherits), makes a
  ``CachedRequestState`` for each of the scheduler's ``scheduled_new_reqs`` (resumed ones are
  re-added the same way), copies its prompt's token ids, sampling parameters and block ids into
  the persistent batch (``InputBatch.add_request``, gpu_input_batch.py), and rebuilds the sampling
  metadata because the batch changed (``InputBatch.refresh_metadata``); before that the
  scheduler looked its blocks up in the prefix cache and allocated its slots
  (``Scheduler.schedule``: ``kv_cache_manager.get_computed_blocks``, ``allocate_slots``). None of
  it depends on the model's size, and a decode step of requests already in the batch does none of
  it. So an iteration that admits R requests costs R times this more than one of the same tokens
  that admits none, and every request decoding in it waits for that too: what tells it apart from
  the server's front end (sim/cluster.py), which also delays a request's first token by a
  constant but delays nobody else (sim/calibrate_run.py).
- The whole iteration's time (all of the above) times ``discrepancy``, the model's structural
  error: 1 in every prediction, and not a field of the profile's ``timing``; only the error band
  draws it, from the ``uncertainty`` section's ``timing.discrepancy`` range (sim/profile_ranges.py),
  so that what the model leaves out widens the band without moving the prediction.

Defaults (public knowledge, not fitted to any measurement in this project): ``mfu`` 0.5 (Meta's
Llama 3 paper reports 38-43% bf16 MFU on H100 for training at scale; Pope et al. 2022,
"Efficiently Scaling Transformer Inference", reach up to 76% MFU on large prefill batches);
``mbu`` 0.7 (Databricks/MosaicML's "LLM Inference Performance Engineering: Best Practices",
2023, which defines MBU, measured well-tuned stacks at small batch in the 50-60%+ range; vLLM and
TensorRT-LLM are commonly quoted at 70-85%); ``overhead_ms`` 1.0 (vLLM v0.6 and V1 overlap the
CPU work of scheduling and output processing with GPU execution; 1 ms stands for the residue:
launch gaps, sampling, synchronisation).

Bundled profiles: ``mfu`` 0.5 and ``mbu`` 0.7 are H100 SXM's serving efficiencies (the GPU the
sources above measured on); another GPU's are that anchor scaled by how much of its datasheet it
reaches in public micro-benchmarks relative to H100, mfu_gpu = 0.5 * gemm_share_gpu /
gemm_share_H100 and mbu_gpu = 0.7 * bandwidth_share_gpu / bandwidth_share_H100, a share being
achieved / datasheet (dense BF16 GEMM; streaming bandwidth; H100: 794.5 / 989.4 TFLOPS and
2.97 / 3.35 TB/s), rounded to 3 significant digits. A micro-benchmark's share is a ceiling, not a
serving efficiency, so only its ratio to H100's is used. Anchor and scaling are taken from
published sources, not fitted to any measured serving run; each profile's sources give its
figures and links.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .timing import Batch, decode_span_points

DEFAULT_MFU = 0.5
DEFAULT_MBU = 0.7
DEFAULT_OVERHEAD_MS = 1.0


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
    max_position_embeddings: int = 0  # the context length (config.json; vLLM's default max_model_len); 0: unknown
    kv_lora_rank: int = 0  # r, MLA's latent KV width (DeepSeek V2/V3 config.json); 0: not MLA
    qk_rope_head_dim: int = 0  # dr, MLA's shared RoPE key width
    moe_layers: int | None = None  # L_moe, layers with experts; None: every layer (MoE) or none (dense)

    @property
    def active(self) -> float:
        return self.parameters if self.active_parameters is None else self.active_parameters

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def kv_bytes_per_token(self) -> float:
        """2 * L * Hkv * d * bkv: K and V of one token over all layers; MLA: L * (r + dr) * bkv."""
        kv_dtype = self.dtype_bytes if self.kv_dtype_bytes is None else self.kv_dtype_bytes
        if self.mla:
            return self.layers * (self.kv_lora_rank + self.qk_rope_head_dim) * kv_dtype
        return 2 * self.layers * self.kv_heads * self.head_dim * kv_dtype

    def kv_shards(self, tensor_parallel: int) -> int:
        """How many tensor-parallel GPUs split one token's KV: tp, or 1 for MLA (replicated)."""
        return 1 if self.mla else tensor_parallel

    @property
    def moe_layer_count(self) -> int:
        """L_moe: ``moe_layers`` if given, else every layer of a MoE model, 0 for a dense one."""
        if not self.experts:
            return 0
        return self.layers if self.moe_layers is None else self.moe_layers

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
    data_parallel: int = 1  # dp, engines of one server (vLLM data_parallel_size)
    expert_parallel: bool = False  # vLLM enable_expert_parallel: whole experts per GPU (same bytes, module doc)


class RooflineTiming:
    """Per iteration, the linear layers' and attention's max(compute, memory), summed, from public
    model and hardware specs (module doc)."""

    def __init__(
        self,
        model: ModelSpec,
        hardware: HardwareSpec,
        mfu: float = DEFAULT_MFU,
        mbu: float = DEFAULT_MBU,
        overhead_ms: float = DEFAULT_OVERHEAD_MS,
        layer_overhead_ms: float = 0.0,
        admission_overhead_ms: float = 0.0,
        discrepancy: float = 1.0,
        piecewise_layer_overhead_ms: float = 0.0,
    ) -> None:
        self.model, self.hardware = model, hardware
        self.discrepancy = discrepancy  # the model's structural error, drawn only for a band (profile_ranges.py)
        self.mfu, self.mbu, self.overhead_ms, self.layer_overhead_ms = mfu, mbu, overhead_ms, layer_overhead_ms
        self.admission_overhead_ms = admission_overhead_ms
        self._admission_s = admission_overhead_ms / 1000
        tp = hardware.tensor_parallel
        self._flops_token = 2 * model.matmul_parameters  # 2 * A_mm
        self._flops_seq = 2.0 * model.vocab_size * model.hidden_size  # 2 * V * h
        self._flops_pair = 4.0 * model.layers * model.heads * model.head_dim  # 4 * L * H * d
        self._kv_bytes = model.kv_bytes_per_token * (tp if model.mla else 1)  # MLA: every TP rank reads the latent
        self._dense_bytes = model.dense_read_parameters * model.dtype_bytes
        dp = hardware.data_parallel if model.experts else 1  # a dense model's engines share nothing
        self._layer_tokens = dp  # tokens in a MoE layer per token of this engine
        self._expert_bytes = model.expert_parameters * model.dtype_bytes / dp
        self._expert_miss = 1 - model.experts_per_token / model.experts if model.experts else 0.0
        self._compute_rate = hardware.peak_flops * tp * mfu
        self._memory_rate = hardware.memory_bandwidth * tp * mbu
        self._overhead_s = (overhead_ms + layer_overhead_ms * model.layers) / 1000
        self.piecewise_layer_overhead_ms = piecewise_layer_overhead_ms
        self._piecewise_s = piecewise_layer_overhead_ms * model.layers / 1000  # a step with prefill tokens
        all_reduces = tp > 1 and hardware.interconnect_bandwidth > 0
        dispatches = dp > 1 and hardware.interconnect_bandwidth > 0  # a MoE's expert dispatch and combine
        self.communicates = all_reduces or dispatches  # an iteration pays collectives over the link
        self._comm_fixed = 2 * model.layers * hardware.allreduce_latency_us / 1e6 if all_reduces else 0.0
        ring = 2 * (tp - 1) / tp / hardware.interconnect_bandwidth if all_reduces else 0.0
        self._comm_token = 2 * model.layers * model.hidden_size * model.dtype_bytes * ring  # seconds per token
        if dispatches:  # expert dispatch (all-gather) and combine (reduce-scatter)
            self._comm_fixed += 2 * model.moe_layer_count * hardware.allreduce_latency_us / 1e6
            self._comm_token += (
                2
                * model.moe_layer_count
                * (dp - 1)
                * model.hidden_size
                * model.dtype_bytes
                / hardware.interconnect_bandwidth
            )

    def _parts(self, p: Any, c: Any, d: Any, k: Any) -> tuple[Any, Any, Any, Any]:
        """(linear compute_s, linear memory_s, attention compute_s, attention memory_s); scalars
        or numpy arrays alike."""
        tokens = p + d
        seqs = d + (p > 0)
        linear_flops = self._flops_token * tokens + self._flops_seq * seqs
        attention_flops = self._flops_pair * (p * c - 0.5 * p * p + k)
        weights = self._dense_bytes + self._expert_bytes * (1 - self._expert_miss ** (self._layer_tokens * tokens))
        kv = self._kv_bytes * (k + c + tokens)
        return (
            linear_flops / self._compute_rate,
            weights / self._memory_rate,
            attention_flops / self._compute_rate,
            kv / self._memory_rate,
        )

    def _host_s(self, batch: Batch) -> float:
        """The host's share of one iteration of ``batch``: per iteration and layer, per request
        admitted, and per layer again for a step with prefill tokens, run piecewise (module doc)."""
        piecewise = self._piecewise_s if batch.prefill_tokens > 0 else 0.0
        return self._overhead_s + piecewise + self._admission_s * batch.new_requests

    def _comm(self, tokens: Any) -> Any:
        """The tensor-parallel all-reduces of one iteration of ``tokens`` tokens (module doc)."""
        return self._comm_fixed + self._comm_token * tokens

    def breakdown(self, batch: Batch) -> dict[str, Any]:
        """compute_s and memory_s (both phases together), linear_s and attention_s (each phase's
        bound), comm_s, overhead_s (the host's: per iteration, per layer, per piecewise step's
        layer and per request admitted),
        the bound of the larger total and total_s of one iteration. Every time is times
        ``discrepancy``, as the iteration's is, so that for a batch of any tokens
        linear_s + attention_s + comm_s + overhead_s = total_s, in a band's draw too."""
        scale = self.discrepancy
        parts = self._parts(batch.prefill_tokens, batch.prefill_context, batch.decode_seqs, batch.kv_tokens)
        linear_compute, linear_memory, attention_compute, attention_memory = parts
        compute, memory = linear_compute + attention_compute, linear_memory + attention_memory
        return {
            "compute_s": compute * scale,
            "memory_s": memory * scale,
            "linear_s": max(linear_compute, linear_memory) * scale,
            "attention_s": max(attention_compute, attention_memory) * scale,
            "comm_s": self._comm(batch.prefill_tokens + batch.decode_seqs) * scale,
            "overhead_s": self._host_s(batch) * scale,
            "bound": "compute" if compute >= memory else "memory",
            "total_s": self.iteration_s(batch),
        }

    def iteration_s(self, batch: Batch) -> float:
        tokens = batch.prefill_tokens + batch.decode_seqs
        if tokens <= 0:
            return 0.0
        linear_compute, linear_memory, attention_compute, attention_memory = self._parts(
            batch.prefill_tokens, batch.prefill_context, batch.decode_seqs, batch.kv_tokens
        )  # the sum of the phases (module doc), with Python's max: a float per call, no numpy scalars
        phases = max(linear_compute, linear_memory) + max(attention_compute, attention_memory)
        return (phases + self._comm(tokens) + self._host_s(batch)) * self.discrepancy

    def decode_span_s(self, seqs: int, kv_tokens: int, kv_usage: float, usage_step: float, steps: int) -> np.ndarray:
        kv, _ = decode_span_points(seqs, kv_tokens, kv_usage, usage_step, steps)
        if seqs <= 0:
            return np.zeros(steps)
        linear_compute, linear_memory, attention_compute, attention_memory = self._parts(0, 0, seqs, kv)
        phases = np.maximum(linear_compute, linear_memory) + np.maximum(attention_compute, attention_memory)
        return (phases + self._comm(seqs) + self._overhead_s) * self.discrepancy


__all__ = ["ModelSpec", "HardwareSpec", "RooflineTiming", "DEFAULT_MFU", "DEFAULT_MBU", "DEFAULT_OVERHEAD_MS"]
