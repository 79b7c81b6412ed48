"""A profile's model from the model's ``config.json``: its parameters counted from the
architecture agree with the published totals and the bundled profiles' own counts, the profile's
own fields win, and a config that cannot be counted is one error naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmreplay.errors import LLMReplayError
from pytest_llmreplay.sim.model_config import model_fields
from pytest_llmreplay.sim.profile import load_profile
from pytest_llmreplay.sim.profile_files import profile_path

ROOT = Path(__file__).resolve().parents[1]
DEEPSEEK_RUN = ROOT / "bench" / "data" / "llmservingsim" / "rtxpro6000-deepseek-v3.2-exp-16l64e"
# the models' config.json fields the counts read (huggingface.co/<model>/blob/main/config.json)
LLAMA_3_1_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
QWEN3_32B = {
    "model_type": "qwen3",
    "hidden_size": 5120,
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 25600,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
QWEN3_30B_A3B = {
    **QWEN3_32B,
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "intermediate_size": 6144,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 768,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
}
MIXTRAL_8X7B = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "intermediate_size": 14336,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


QWEN2_5_7B = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
MISTRAL_7B = {**LLAMA_3_1_8B, "model_type": "mistral", "vocab_size": 32000, "max_position_embeddings": 32768}
DEEPSEEK_V2_LITE = {
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 1408,
    "intermediate_size": 10944,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "topk_method": "greedy",
    "vocab_size": 102400,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
DEEPSEEK_V3 = {
    **DEEPSEEK_V2_LITE,
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048,
    "intermediate_size": 18432,
    "first_k_dense_replace": 3,
    "topk_method": "noaux_tc",
    "vocab_size": 129280,
}


def bundled_model(name: str) -> dict:
    return json.loads(profile_path(name).read_text())["model"]


@pytest.mark.parametrize(
    ("config", "profile"), [(LLAMA_3_1_8B, "llama-3.1-8b-h100"), (QWEN3_32B, "qwen3-32b-tp2-h100")]
)
def test_a_dense_models_count_is_its_safetensors_total_as_the_bundled_profile_states_it(config, profile):
    fields, bundled = model_fields(config, "config.json"), bundled_model(profile)
    assert {key: fields[key] for key in bundled if key != "name"} == {
        key: value for key, value in bundled.items() if key != "name"
    }


@pytest.mark.parametrize(
    ("config", "total", "active"),
    [  # the model cards' totals
        (QWEN3_30B_A3B, 30.5e9, 3.3e9),
        (MIXTRAL_8X7B, 46.7e9, 12.9e9),
        (DEEPSEEK_V2_LITE, 15.7e9, 2.4e9),
        (DEEPSEEK_V3, 671e9, 37e9),
        (QWEN2_5_7B, 7.61e9, 7.61e9),
        (MISTRAL_7B, 7.24e9, 7.24e9),
    ],
)
def test_a_models_count_matches_its_model_card(config, total, active):
    fields = model_fields(config, "config.json")
    assert fields["parameters"] == pytest.approx(total, rel=0.005)
    # DeepSeek's cards count the activated parameters without the input embedding (a lookup)
    lookup = config["vocab_size"] * config["hidden_size"] if config["model_type"].startswith("deepseek") else 0
    assert fields["active_parameters"] - lookup == pytest.approx(active, rel=0.025)
    dense_first = config.get("first_k_dense_replace", 0)
    assert fields.get("moe_layers", config["num_hidden_layers"]) == config["num_hidden_layers"] - dense_first


def test_an_mla_models_count_is_the_one_its_bench_profile_was_written_with():
    """DeepSeek-V3.2-Exp-16L64E (no checkpoint to read a total from): the counts written by hand
    in its bench profile, from the same config."""
    config = json.loads((DEEPSEEK_RUN / "model-config.json").read_text())
    fields = model_fields(config, "model-config.json")
    written = json.loads((DEEPSEEK_RUN / "profile.json").read_text())["model"]
    for key in ("parameters", "active_parameters", "layers", "hidden_size", "heads", "head_dim", "moe_layers"):
        assert fields[key] == written[key], key
    assert (fields["kv_lora_rank"], fields["qk_rope_head_dim"], fields["dtype_bytes"]) == (512, 64, 1)
    assert fields["kv_dtype_bytes"] == 2  # bf16 activations: the profile gives its FP8 cache's 1.368 itself


def test_a_profile_names_its_config_beside_it_and_its_own_fields_win(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({**LLAMA_3_1_8B, "_name_or_path": "meta-llama/x"}))
    profile = json.loads(profile_path("llama-3.1-8b-h100").read_text())
    profile["model"] = {"config": "model/config.json", "kv_dtype_bytes": 1}
    profile.pop("uncertainty")
    (tmp_path / "mine.json").write_text(json.dumps(profile))
    loaded = load_profile(tmp_path / "mine.json")
    bundled = load_profile("llama-3.1-8b-h100")
    assert loaded.model is not None and bundled.model is not None
    assert (loaded.model.name, loaded.model.kv_dtype_bytes) == ("meta-llama/x", 1)
    assert loaded.model.parameters == bundled.model.parameters == 8_030_261_248
    # the cache a profile derives from the GPU's memory holds twice the blocks of 1-byte KV
    assert 1.95 < loaded.engine.num_gpu_blocks / bundled.engine.num_gpu_blocks < 2.05


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "gpt2"}, "model_type: 'gpt2' is not one counted here; expected one of llama, mistral"),
        ({"hidden_size": -1}, "hidden_size: must be an integer >= 1, got -1"),
        ({"torch_dtype": "int8"}, "torch_dtype: expected one of float32, float16, bfloat16, got 'int8'"),
        ({"quantization_config": {"quant_method": "awq"}}, "quantization_config: only fp8 weights are counted here"),
        ({"head_dim": "128"}, "head_dim: must be an integer >= 1, got '128'"),
        ({"num_attention_heads": 0}, "num_attention_heads: must be an integer >= 1, got 0"),
        ({"torch_dtype": 2}, "torch_dtype: expected one of"),
    ],
)
def test_a_config_that_cannot_be_counted_is_one_error_naming_its_field(change, message):
    with pytest.raises(LLMReplayError, match="^config.json: " + message.replace("(", r"\(").replace(")", r"\)")):
        model_fields({**LLAMA_3_1_8B, **change}, "config.json")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({**QWEN3_30B_A3B, "mlp_only_layers": 3}, "mlp_only_layers: must be a list of layer indices 0-47, got 3"),
        ({**QWEN3_30B_A3B, "mlp_only_layers": ["0"]}, "mlp_only_layers: must be a list of layer indices 0-47"),
        ({**QWEN3_30B_A3B, "num_experts_per_tok": 200}, "num_experts_per_tok: must be at most the 128 routed experts"),
        ({**QWEN3_30B_A3B, "decoder_sparse_step": 0}, "decoder_sparse_step: must be an integer >= 1, got 0"),
        ({**DEEPSEEK_V3, "q_lora_rank": "1536"}, "q_lora_rank: must be an integer >= 0, got '1536'"),
    ],
)
def test_a_moe_or_mla_config_that_cannot_be_counted_names_its_field(config, message):
    with pytest.raises(LLMReplayError, match="^config.json: " + message.replace("(", r"\(").replace(")", r"\)")):
        model_fields(config, "config.json")


def test_a_dense_layer_free_mla_model_needs_no_intermediate_size_and_dtype_names_its_key():
    config = {key: value for key, value in DEEPSEEK_V3.items() if key != "intermediate_size"}
    assert "moe_layers" not in model_fields({**config, "first_k_dense_replace": 0}, "c")
    with pytest.raises(LLMReplayError, match="^c: dtype: expected one of"):
        model_fields({**{k: v for k, v in LLAMA_3_1_8B.items() if k != "torch_dtype"}, "dtype": "int8"}, "c")


def test_a_config_without_a_field_the_count_needs_names_it():
    without = {key: value for key, value in LLAMA_3_1_8B.items() if key != "vocab_size"}
    with pytest.raises(LLMReplayError, match="^config.json: vocab_size: missing$"):
        model_fields(without, "config.json")


def test_a_missing_config_file_names_the_profile_field(tmp_path):
    profile = json.loads(profile_path("llama-3.1-8b-h100").read_text())
    profile["model"] = {"config": "nowhere/config.json"}
    (tmp_path / "mine.json").write_text(json.dumps(profile))
    with pytest.raises(LLMReplayError, match=r"mine\.json: model\.config: cannot read .*nowhere/config\.json"):
        load_profile(tmp_path / "mine.json")


def test_the_moe_layer_count_comes_without_a_walk_over_the_layers():
    """A config may say any layer count: 10**12 layers (a typo) is counted at once, not walked."""
    config = json.loads((DEEPSEEK_RUN / "model-config.json").read_text())
    huge = {**config, "num_hidden_layers": 10**12, "first_k_dense_replace": 3, "moe_layer_freq": 2}
    assert model_fields(huge, "c")["moe_layers"] == 10**12 // 2 - 2  # the even layers but 0 and 2
