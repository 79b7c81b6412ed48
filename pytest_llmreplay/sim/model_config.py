"""A profile's ``model`` section from the model's Hugging Face ``config.json`` (``model.config``).

A profile for a model no bundled profile covers names the model's ``config.json`` instead of
counting its parameters by hand; fields the profile gives beside it win (a quantised cache, a
name). :func:`model_fields` reads the architecture (``model_type``) and counts every weight the
serving engine loads, biases and norms included:

- dense, ``llama``, ``mistral``, ``qwen2``, ``qwen3``: per layer the attention's q (h x H d), k
  and v (h x Hkv d each; Qwen2's three with biases; ``attention_bias`` where the config sets it),
  o (H d x h), Qwen3's q and k norms (d each), the MLP's gate, up and down (3 h I), two norms (2 h);
- MoE, ``qwen3_moe`` and ``mixtral``: the same attention; in each sparse layer E experts of
  3 h I_moe and a router (h x E); Qwen3-MoE's ``mlp_only_layers`` and ``decoder_sparse_step``
  leave some layers dense (intermediate_size);
- MLA, ``deepseek_v2``, ``deepseek_v3``, ``deepseek_v32``: q through ``q_lora_rank`` (h r_q, a
  norm, r_q H (d_nope + d_rope)) or directly (h H (d_nope + d_rope)), the compressed KV (h (r + d_rope),
  a norm, r H (d_nope + d_v)), o (H d_v x h); the first ``first_k_dense_replace`` layers dense,
  the others with E routed and ``n_shared_experts`` shared experts of 3 h I_moe, a router (h x E,
  plus E biases for ``noaux_tc``); V3.2's indexer per layer (r_q x heads_idx d_idx, h d_idx,
  h heads_idx, a LayerNorm of d_idx with bias). The multi-token-prediction layers
  (``num_nextn_predict_layers``) are not counted: vLLM loads them only for speculative decoding.

Parameters = V h (the embedding) + V h (the LM head, unless tied) + h (the final norm) + the
layers; active parameters = the same with ``num_experts_per_tok`` of the E routed experts in each
sparse layer. ``dtype_bytes`` is the weights' (1 for ``quantization_config.quant_method`` fp8,
else ``torch_dtype``'s); ``kv_dtype_bytes`` the activations' (``torch_dtype``: vLLM's
``kv_cache_dtype`` auto).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from ..errors import LLMReplayError, WorkloadError
from ..workloads.formats._fields import read_json_document

DENSE = ("llama", "mistral", "qwen2", "qwen3")
MOE = ("qwen3_moe", "mixtral")
MLA = ("deepseek_v2", "deepseek_v3", "deepseek_v32")
ARCHITECTURES = (*DENSE, *MOE, *MLA)
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def read_config(path: Path, where: str) -> dict[str, Any]:
    """``path``'s JSON object; one error naming ``where`` (the profile's field) and the file
    when it cannot be read, is not UTF-8 or not JSON, or names a key twice."""
    try:
        data = read_json_document(path, expected="a UTF-8 config.json")
    except OSError as exc:
        raise LLMReplayError(f"{where}: cannot read {path}: {exc.strerror}") from None
    except WorkloadError as exc:  # not UTF-8, not JSON, a key twice: it names the file, line and column
        raise LLMReplayError(f"{where}: {exc}") from None
    if not isinstance(data, dict):
        raise LLMReplayError(f"{where}: {path}: expected a config.json object")
    return data


def model_fields(config: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The profile ``model`` fields of ``config`` (a parsed ``config.json``; module doc);
    ``source`` names it in errors."""

    def fail(key: str, message: str) -> NoReturn:
        raise LLMReplayError(f"{source}: {key}: {message}")

    def integer(key: str, default: int | None = None, minimum: int = 1) -> int:
        """``config[key]``, an integer >= ``minimum``; ``default`` when absent or null (None:
        required)."""
        value = config.get(key)
        if value is None:
            if default is None:
                fail(key, "missing")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            fail(key, f"must be an integer >= {minimum}, got {value!r}")
        return value

    kind = config.get("model_type")
    if kind not in ARCHITECTURES:
        fail("model_type", f"{kind!r} is not one counted here; expected one of {', '.join(ARCHITECTURES)}")
    hidden, layers, heads, vocab = (
        integer(key) for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    )
    tie = config.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        fail("tie_word_embeddings", f"must be true or false, got {tie!r}")
    dtype_key = "torch_dtype" if "torch_dtype" in config else "dtype"
    dtype = config.get(dtype_key, "bfloat16")
    if dtype not in DTYPE_BYTES:
        fail(dtype_key, f"expected one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    quantization = config.get("quantization_config")
    fp8 = isinstance(quantization, Mapping) and quantization.get("quant_method") == "fp8"
    if quantization is not None and not fp8:
        fail("quantization_config", "only fp8 weights are counted here; give dtype_bytes in the profile")
    counted = (_mla if kind in MLA else _attention_and_mlp)(config, integer, fail, hidden, heads, layers)
    total, active, fields = counted
    embedding = vocab * hidden * (1 if tie else 2) + hidden  # embedding, LM head, final norm
    return {
        "parameters": embedding + total,
        "active_parameters": embedding + active,
        "layers": layers,
        "hidden_size": hidden,
        "heads": heads,
        "vocab_size": vocab,
        "tie_word_embeddings": tie,
        "max_position_embeddings": integer("max_position_embeddings", 0, minimum=0),
        "dtype_bytes": 1 if fp8 else DTYPE_BYTES[dtype],
        "kv_dtype_bytes": DTYPE_BYTES[dtype],
        **fields,
        **({"name": config["_name_or_path"]} if isinstance(config.get("_name_or_path"), str) else {}),
    }


Integer = Callable[..., int]
Fail = Callable[[str, str], NoReturn]


def _attention_and_mlp(
    config: Mapping[str, Any], integer: Integer, fail: Fail, hidden: int, heads: int, layers: int
) -> tuple[int, int, dict[str, Any]]:
    """The ``layers`` layers of a dense, Qwen3-MoE or Mixtral model: (total, active, fields)."""
    kind = config["model_type"]
    kv_heads = integer("num_key_value_heads", heads)
    head_dim = integer("head_dim", hidden // heads)
    attention = (hidden * (heads + 2 * kv_heads) * head_dim) + heads * head_dim * hidden + 2 * hidden
    if kind == "qwen2" or config.get("attention_bias") is True:  # q, k, v biases (Qwen2: always)
        attention += (heads + 2 * kv_heads) * head_dim
    if config.get("attention_bias") is True:  # and o's, where the config asks for them
        attention += hidden
    attention += 2 * head_dim if kind in ("qwen3", "qwen3_moe") else 0  # q_norm, k_norm
    fields: dict[str, Any] = {"kv_heads": kv_heads, "head_dim": head_dim}
    if kind not in MOE:
        mlp = 3 * hidden * integer("intermediate_size")
        mlp += (2 * integer("intermediate_size") + hidden) if config.get("mlp_bias") is True else 0
        return layers * (attention + mlp), layers * (attention + mlp), fields
    experts = integer("num_local_experts" if kind == "mixtral" else "num_experts")
    routed = _routed(integer, fail, experts)
    expert = 3 * hidden * integer("intermediate_size" if kind == "mixtral" else "moe_intermediate_size")
    dense_only = config.get("mlp_only_layers") or []
    if not isinstance(dense_only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in dense_only
    ):
        fail("mlp_only_layers", f"must be a list of layer indices 0-{layers - 1}, got {dense_only!r}")
    step = integer("decoder_sparse_step", 1)
    # layers i with (i + 1) % step == 0, counted without a walk (a config may say any layer count)
    sparse = layers // step - sum(1 for i in set(dense_only) if (i + 1) % step == 0)
    dense_mlp = 3 * hidden * integer("intermediate_size") if sparse < layers else 0
    router = hidden * experts
    total = layers * attention + sparse * (experts * expert + router) + (layers - sparse) * dense_mlp
    active = layers * attention + sparse * (routed * expert + router) + (layers - sparse) * dense_mlp
    fields.update(experts=experts, experts_per_token=routed)
    if sparse < layers:
        fields["moe_layers"] = sparse
    return total, active, fields


def _mla(
    config: Mapping[str, Any], integer: Integer, fail: Fail, hidden: int, heads: int, layers: int
) -> tuple[int, int, dict[str, Any]]:
    """The ``layers`` layers of a DeepSeek V2/V3/V3.2 model: (total, active, fields)."""
    nope, rope, value = (integer(key) for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"))
    rank, q_rank = integer("kv_lora_rank"), integer("q_lora_rank", 0, minimum=0)  # 0 or null: no q compression
    query = heads * (nope + rope)
    if q_rank:
        attention = hidden * q_rank + q_rank + q_rank * query
    else:
        attention = hidden * query
    attention += hidden * (rank + rope) + rank + rank * heads * (nope + value) + heads * value * hidden
    attention += 2 * hidden  # the layer's two norms
    if config["model_type"] == "deepseek_v32":
        index_heads, index_dim = integer("index_n_heads"), integer("index_head_dim")
        attention += (q_rank or hidden) * index_heads * index_dim + hidden * index_dim + hidden * index_heads
        attention += 2 * index_dim  # the indexer's key LayerNorm, weight and bias
    dense_layers = min(integer("first_k_dense_replace", 0, minimum=0), layers)
    freq = integer("moe_layer_freq", 1)
    # the multiples of freq in [dense_layers, layers), counted without a walk: ceil(b / f) - ceil(a / f)
    sparse = -(-layers // freq) + dense_layers // -freq
    experts = integer("n_routed_experts")
    routed = _routed(integer, fail, experts)
    expert = 3 * hidden * integer("moe_intermediate_size")
    shared = integer("n_shared_experts", 0, minimum=0) * expert
    router = hidden * experts + (experts if config.get("topk_method") == "noaux_tc" else 0)
    dense_mlp = 3 * hidden * integer("intermediate_size") if sparse < layers else 0
    total = layers * attention + sparse * (experts * expert + shared + router) + (layers - sparse) * dense_mlp
    active = layers * attention + sparse * (routed * expert + shared + router) + (layers - sparse) * dense_mlp
    fields: dict[str, Any] = {
        "kv_heads": integer("num_key_value_heads", heads),
        "head_dim": nope + rope,
        "kv_lora_rank": rank,
        "qk_rope_head_dim": rope,
        "experts": experts,
        "experts_per_token": routed,
    }
    if sparse < layers:
        fields["moe_layers"] = sparse
    return total, active, fields


def _routed(integer: Integer, fail: Fail, experts: int) -> int:
    """``num_experts_per_tok``, at most the routed experts."""
    routed = integer("num_experts_per_tok")
    if routed > experts:
        fail("num_experts_per_tok", f"must be at most the {experts} routed experts, got {routed}")
    return routed


__all__ = ["ARCHITECTURES", "model_fields", "read_config"]
