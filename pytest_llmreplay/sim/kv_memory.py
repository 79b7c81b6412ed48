"""The KV cache a profile derives from the GPU's memory, as vLLM sizes it.

A profile's ``engine.num_gpu_blocks`` is taken as given, else derived (:func:`derive_num_gpu_blocks`)::

    num_gpu_blocks = floor((memory * gpu_memory_utilization - W_gpu - reserve)
                           / (block_size * bkv_tok / kv_shards))

with ``W_gpu`` a GPU's weights: ``(N - N_exp) * b / tp + N_exp * b / (dp * tp)`` (a MoE model's
experts are split over all dp * tp GPUs of a data-parallel server; a dense model's dp engines are
replicas: ``N * b / tp``), ``kv_shards`` = tp (each GPU holds its KV heads' share) or 1 for MLA
(the latent is replicated on every TP rank), ``reserve`` = ``activation_reserve_gib`` +
``cudagraph_reserve_gib`` GiB per GPU: the first what every vLLM version sets aside (non-torch
memory such as the CUDA context, the peak activations of its profiling forward pass), the second
(default 0) the CUDA graph pool estimate that vLLM 0.21.0 and later also subtract by default
(``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``; 0 for earlier versions, with it off, or eager).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .roofline import HardwareSpec, ModelSpec

GIB = 2**30


# the engine section's keys a MemoryPlan is read from; none of them may stand beside num_gpu_blocks
MEMORY_PLAN_FIELDS = ("gpu_memory_utilization", "activation_reserve_gib", "cudagraph_reserve_gib")


class MemoryPlan(NamedTuple):
    """The engine fields a derived ``num_gpu_blocks`` comes from (module doc)."""

    utilization: float  # gpu_memory_utilization
    activation_reserve_gib: float  # non-torch memory + the profiling run's activation peak, per GPU
    cudagraph_reserve_gib: float  # vLLM >= 0.21's CUDA graph pool estimate, per GPU

    def reserve_gib(self, activation_reserve_gib: float | None = None) -> float:
        """All that is set aside besides the weights, with another activation reserve if given."""
        activation = self.activation_reserve_gib if activation_reserve_gib is None else activation_reserve_gib
        return activation + self.cudagraph_reserve_gib


def derive_num_gpu_blocks(
    model: ModelSpec,
    hardware: HardwareSpec,
    block_size: int,
    gpu_memory_utilization: float,
    activation_reserve_gib: float,
) -> int:
    """floor((memory * utilization - W_gpu - reserve) / (block_size * bkv_tok / kv_shards)), per GPU
    (module doc).

    vLLM's rule: of ``gpu_memory_utilization`` of each GPU's memory, what the weight shard and the
    profiled peak (activations, CUDA graphs, non-torch memory: ``activation_reserve_gib``) leave
    is KV cache, in blocks of ``block_size`` tokens of this GPU's share of the KV heads.
    Returns <= 0 when nothing is left.
    """
    free = (
        hardware.memory_bytes * gpu_memory_utilization
        - weight_bytes_per_gpu(model, hardware)
        - activation_reserve_gib * GIB
    )
    return math.floor(free / (block_size * model.kv_bytes_per_token / model.kv_shards(hardware.tensor_parallel)))


def weight_bytes_per_gpu(model: ModelSpec, hardware: HardwareSpec) -> float:
    """W_gpu = (N - N_exp) * b / tp + N_exp * b / (dp * tp) (module doc; dp = 1 for a dense model)."""
    tp = hardware.tensor_parallel
    dp = hardware.data_parallel if model.experts else 1
    experts = model.expert_parameters * model.dtype_bytes
    return (model.weight_bytes - experts) / tp + experts / (dp * tp)


__all__ = ["GIB", "MEMORY_PLAN_FIELDS", "MemoryPlan", "derive_num_gpu_blocks", "weight_bytes_per_gpu"]
