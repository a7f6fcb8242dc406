"""MoE, MLA, sliding windows, tensor parallelism and config.json input. Numbers derived by hand in comments."""

import json

import pytest
from typer.testing import CliRunner

from roofline import estimate, load_hardware, load_model
from roofline.calc.shape import Shape, windowed_pairs
from roofline.cli import app
from roofline.errors import RooflineError, UsageError
from roofline.specs.params import expected_experts

runner = CliRunner()

# (model, published total, published active, does the publisher count the input embedding as active?, digits
#  printed for the active figure, source). Publishers differ: Mistral counts it; DeepSeek and OpenAI do not.
PUBLISHED = [
    ("mixtral-8x7b", 46.7e9, 12.9e9, True, 3, "mistral.ai/news/mixtral-of-experts"),
    ("deepseek-v3", 671e9, 37e9, False, 2, "DeepSeek-V3 Technical Report, arXiv 2412.19437, abstract"),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, True, 2, "huggingface.co/Qwen/Qwen3-30B-A3B model card"),
    ("gpt-oss-20b", 20.9e9, 3.61e9, False, 3, "gpt-oss model card, arXiv 2508.10925"),
]


@pytest.mark.parametrize("model_id, total, active, with_embedding, digits, source", PUBLISHED)
def test_moe_total_and_active_params_match_the_publisher(model_id, total, active, with_embedding, digits, source):
    counts = load_model(model_id).counts
    assert counts.total == pytest.approx(total, rel=0.01), source
    ours = counts.active - (0 if with_embedding else counts.embedding)
    # Within 1%, or consistent with the digits printed: rounded ("37B" for 36.6B) or truncated ("3.3B" for 3.35B).
    unit = 10 ** (len(str(int(active))) - digits)
    rounded, truncated = abs(ours - active) <= unit / 2, active <= ours < active + unit
    assert abs(ours - active) <= 0.01 * active or rounded or truncated, (ours, source)


def test_mixtral_active_by_hand():
    # Per layer: attention 41,943,040 + 2 of 8 experts x 176,160,768 + router 8 x 4096 + norms 8192 = 394,305,536;
    # x 32 = 12,617,777,152; + embedding and lm_head 2 x 131,072,000 + final norm 4096 = 12,879,925,248.
    assert load_model("mixtral-8x7b").counts.active == 12_879_925_248


def test_deepseek_v3_params_by_hand():
    # MLA per layer: q_a 7168 x 1536 + norm 1536 + q_b 1536 x 128 x 192 + kv_a 7168 x 576 + norm 512
    #   + kv_b 512 x 128 x 256 + o 128 x 128 x 7168 = 187,107,328; x 61 = 11,413,547,008.
    # 3 dense MLPs 3 x 7168 x 18432 = 1,189,085,184. 58 MoE layers x (257 experts x 3 x 7168 x 2048
    #   + router 256 x 7168) = 656,569,532,416. Norms 2 x 7168 x 61 + 7168; embedding + lm_head 2 x 129280 x 7168.
    c = load_model("deepseek-v3").counts
    assert c.attention == 11_413_547_008
    assert c.total == 11_413_547_008 + 1_189_085_184 + 656_569_532_416 + 2 * 7168 * 61 + 7168 + 2 * 129280 * 7168


@pytest.mark.parametrize(
    "model_id, kind, kv",
    [
        ("llama-2-7b", "MHA", 2 * 32 * 32 * 128 * 2),  # 524,288 B/token
        ("llama-3.1-8b", "GQA", 2 * 32 * 8 * 128 * 2),  # 131,072
        ("deepseek-v3", "MLA", 61 * (512 + 64) * 2),  # 70,272: the latent and the rope key, bf16
        ("gemma-2-9b", "sliding", 2 * 42 * 8 * 256 * 2),  # 344,064 per token until the window fills
    ],
)
def test_kv_bytes_per_token(model_id, kind, kv):
    assert estimate(load_model(model_id), load_hardware("h200")).kv_bytes_per_token == kv, kind


def test_mqa_kv_bytes(write_yaml):
    # MQA is num_kv_heads = 1: 2 x 32 layers x 1 x 128 x 2 B = 16,384 B/token.
    path = write_yaml(
        "mqa.yaml",
        "name: mqa\nsource: t\ndtype: bf16\nlayers: 32\nhidden_size: 4096\nnum_heads: 32\nnum_kv_heads: "
        "1\nintermediate_size: 11008\nvocab_size: 32000\n",
    )
    assert estimate(load_model(path), load_hardware("h100-sxm")).kv_bytes_per_token == 16_384


def test_sliding_window_caps_kv_per_sequence():
    # Gemma-2-9B at 8,100 tokens: 21 full layers x 8,100 + 21 sliding layers x 4,096 = 256,116 token-layers of
    # 2 x 8 x 256 x 2 = 8,192 B: 2,098,102,272 B (2.79 GB without the window).
    e = estimate(load_model("gemma-2-9b"), load_hardware("h200"), prompt_tokens=8000, output_tokens=100)
    assert e.kv_bytes_per_sequence == 256_116 * 8192


def test_sliding_window_decode_reads_at_most_the_window():
    # Mistral-7B (window 4096 on all 32 layers), one decode step at 8,000 cached tokens reads 4,096 per layer:
    # 32 x 4,096 x 4,096 B = 536,870,912, writes 131,072, plus the streamed weights.
    m, h = load_model("mistral-7b"), load_hardware("h100-sxm")
    e = estimate(m, h, prompt_tokens=8000, output_tokens=2)
    streamed = (m.counts.total - m.counts.embedding) * 2
    assert e.decode.bytes == pytest.approx(streamed + 536_870_912 + 131_072, rel=1e-12)


def test_decode_mean_across_a_filling_window_equals_the_mean_of_single_steps():
    # Steps at cached 4,000..4,199 cross Mistral's 4,096 window; each single step is an O = 2 estimate.
    m, h = load_model("mistral-7b"), load_hardware("l4")
    whole = estimate(m, h, batch=64, prompt_tokens=4000, output_tokens=201)
    steps = [estimate(m, h, batch=64, prompt_tokens=c, output_tokens=2).tpot_s for c in range(4000, 4200)]
    assert whole.tpot_s == pytest.approx(sum(steps) / len(steps), rel=1e-12)


def test_windowed_pairs_by_hand():
    # P = 5, W = 3: min(i, 3) for i = 1..5 = 1 + 2 + 3 + 3 + 3 = 12; without a window 15.
    assert windowed_pairs(5, 3) == 12 and windowed_pairs(5, 0) == 15 and windowed_pairs(3, 8) == 6


def test_expected_experts():
    assert expected_experts(256, 8, 1) == pytest.approx(8)  # one token: its k experts
    assert expected_experts(256, 8, 100_000) == pytest.approx(256)  # many tokens: all of them
    assert expected_experts(8, 2, 2) == pytest.approx(8 * (1 - (6 / 8) ** 2))  # 3.5, by hand


def test_moe_decode_reads_only_touched_experts():
    m, h = load_model("mixtral-8x7b"), load_hardware("h100-sxm")
    c = m.counts
    one = estimate(m, h, batch=1, prompt_tokens=100, output_tokens=2)
    # Batch 1: 2 of 8 experts per layer: streamed = all - embedding - 6 x 32 unused experts.
    assert one.weight_bytes_streamed == (c.total - c.embedding - 6 * 32 * c.expert) * 2
    many = estimate(m, h, batch=256, prompt_tokens=100, output_tokens=2)
    assert many.weight_bytes_streamed == pytest.approx((c.total - c.embedding) * 2, rel=1e-9)  # all experts
    # FLOPs use active parameters: 2 x 12,617,777,152 + 2 x 131,072,000 (lm_head) per token, plus attention.
    assert one.model.matmul_params == 12_617_777_152 - 32 * 8192 + 131_072_000


def test_mla_decode_attention_flops_per_key():
    # Absorbed MLA: per head and key, q . [latent, rope] is 2 x (512 + 64) FLOP and the latent-weighted sum
    # 2 x 512: 128 heads x 2 x (2 x 512 + 64) = 278,528 FLOP per key and layer.
    m = load_model("deepseek-v3")
    assert Shape(m, 8, "bf16", "fp8").key_flops_decode == 278_528


def test_tp_1_equals_the_single_device_estimate():
    # tp = 1 must not touch the interconnect: the same device with no link at all gives the same estimate.
    m, h = load_model("llama-3.1-70b"), load_hardware("h200")
    alone = h._replace(interconnect_bandwidth=None, interconnect_latency=None)
    assert estimate(m, h, batch=8, tp=1).to_dict() == estimate(m, alone, batch=8).to_dict()
    e = estimate(m, h, batch=8, tp=1)
    assert e.decode.comm_s == e.prefill.comm_s == 0 and e.weight_bytes_per_device == e.weight_bytes


def test_tp_2_by_hand():
    m, h = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    e = estimate(m, h, batch=1, prompt_tokens=1024, output_tokens=2, tp=2)
    assert e.weight_bytes_per_device == m.params * 2 / 2
    # Decode: 80 layers x 2 all-reduces x (2 x 1/2 x 8192 x 2 B / 450 GB/s + 10 us) = 160 x 10.0364 us = 1.6058 ms.
    assert e.decode.comm_s == pytest.approx(160 * (16384 / 450e9 + 10e-6))
    single = estimate(m, load_hardware("h200"), batch=1, prompt_tokens=1024, output_tokens=2)
    assert e.decode.bytes == pytest.approx(single.decode.bytes / 2)  # weights and KV heads split in two
    assert e.tpot_s == pytest.approx(e.decode.memory_s + e.decode.comm_s)
    # Budget per device: 0.9 x 80 GiB - 70.55e9 B; max batch = budget / (KV per sequence / 2).
    assert e.kv_budget_bytes == pytest.approx(0.9 * 80 * 2**30 - m.params)
    assert e.max_batch == int(e.kv_budget_bytes / (e.kv_bytes_per_sequence / 2))


def test_tp_beyond_kv_heads_replicates_them():
    e = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), tp=16)
    assert any("replicated 2x" in n for n in e.notes)
    # Each device keeps 1 of 8 KV heads: KV per device is 1/8 of the sequence's, not 1/16.
    assert e.max_batch == int(e.kv_budget_bytes / (e.kv_bytes_per_sequence / 8))


def test_tp_needs_an_interconnect():
    with pytest.raises(UsageError, match="apple-m1 has no interconnect_bandwidth"):
        estimate(load_model("gpt2"), load_hardware("apple-m1"), tp=2)
    r = runner.invoke(app, ["estimate", "-q", "-H", "apple-m1", "--tp", "2"])
    assert r.exit_code == 2 and "--tp: apple-m1 has no interconnect_bandwidth" in r.stderr


def test_tp_json_keys():
    data = json.loads(
        runner.invoke(app, ["estimate", "-q", "--json", "-m", "deepseek-v3", "-H", "h200", "--tp", "8"]).stdout
    )
    assert data["inputs"]["tp"] == 8 and data["weight_bytes_per_device"] == pytest.approx(data["weight_bytes"] / 8)
    assert data["prefill"]["comm_s"] > 0 and data["decode"]["comm_s"] > 0 and "kv_budget_bytes" in data
    assert data["model"]["active_params"] < data["model"]["params"]
    dense = json.loads(runner.invoke(app, ["estimate", "-q", "--json"]).stdout)
    assert dense["model"]["active_params"] == dense["model"]["params"] and dense["decode"]["comm_s"] == 0


# Small config.json fixtures, written as the families publish them (field names and defaults differ).
CONFIGS = {
    "llama-3.1-8b": {
        "model_type": "llama",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "mistral-7b": {
        "model_type": "mistral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "sliding_window": 4096,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    },
    "mixtral-8x7b": {
        "model_type": "mixtral",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 32000,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "sliding_window": None,
        "max_position_embeddings": 32768,
        "torch_dtype": "bfloat16",
    },
    "qwen2.5-7b": {
        "model_type": "qwen2",
        "num_hidden_layers": 28,
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "intermediate_size": 18944,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": 131072,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
    },
    "qwen3-30b-a3b": {
        "model_type": "qwen3_moe",
        "num_hidden_layers": 48,
        "hidden_size": 2048,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "max_position_embeddings": 40960,
        "torch_dtype": "bfloat16",
    },
    "gemma-2-9b": {
        "model_type": "gemma2",
        "num_hidden_layers": 42,
        "hidden_size": 3584,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "intermediate_size": 14336,
        "vocab_size": 256000,
        "sliding_window": 4096,
        "max_position_embeddings": 8192,
        "torch_dtype": "float32",
    },
    "phi-3-mini": {
        "model_type": "phi3",
        "num_hidden_layers": 32,
        "hidden_size": 3072,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "intermediate_size": 8192,
        "vocab_size": 32064,
        "sliding_window": 2047,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "gpt2": {
        "model_type": "gpt2",
        "n_layer": 12,
        "n_embd": 768,
        "n_head": 12,
        "n_inner": None,
        "n_positions": 1024,
        "vocab_size": 50257,
    },
    "deepseek-v3": {
        "model_type": "deepseek_v3",
        "num_hidden_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "vocab_size": 129280,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "num_nextn_predict_layers": 1,
        "max_position_embeddings": 163840,
        "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "fp8"},
    },
    "gpt-oss-20b": {
        "model_type": "gpt_oss",
        "num_hidden_layers": 24,
        "hidden_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": 32,
        "num_experts_per_tok": 4,
        "experts_per_token": 4,
        "vocab_size": 201088,
        "attention_bias": True,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
}


@pytest.mark.parametrize("model_id", sorted(CONFIGS))
def test_config_json_round_trips_to_the_bundled_yaml(model_id, tmp_path):
    folder = tmp_path / model_id
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIGS[model_id]))
    from_config, bundled = load_model(str(folder)), load_model(model_id)
    assert from_config.arch == bundled.arch
    assert from_config.counts == bundled.counts
    assert (from_config.dtype, from_config.kv_dtype) == (
        bundled.dtype,
        bundled.kv_dtype,
    ) or model_id == "gemma-2-9b"  # fp32 on the hub
    assert load_model(str(folder / "config.json")).counts.total == bundled.counts.total


def test_qwen2_moe_and_qwen3_by_hand(tmp_path):
    # Qwen1.5-MoE-A2.7B: per layer attention 4 x 2048^2 + qkv biases 3 x 2048 = 16,783,360; 60 experts x
    # 3 x 2048 x 1408 = 519,045,120; shared 3 x 2048 x 5632 = 34,603,008; router 60 x 2048; norms 4,096:
    # 570,558,464 x 24 + 2 x 151936 x 2048 + 2048 = 14,315,735,040 (published 14.3B; 2.7B active).
    moe = {
        "model_type": "qwen2_moe",
        "num_hidden_layers": 24,
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "shared_expert_intermediate_size": 5632,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "moe.json").write_text(json.dumps(moe))
    c = load_model(str(tmp_path / "moe.json")).counts
    assert c.total == 14_315_735_040
    assert c.active == pytest.approx(2.7e9, rel=0.01)  # 2,689,124,352
    # A tiny qwen3: 2 layers, hidden 64, 4 heads x head_dim 32 (explicit), 2 KV heads, MLP 128, vocab 100:
    # attention 64 x (128 + 2 x 64) + 128 x 64 = 24,576; MLP 3 x 64 x 128 = 24,576; norms 2 x 64 -> 49,280 per layer;
    # x 2 + embedding 6,400 + untied head 6,400 + final norm 64 = 111,424.
    tiny = {
        "model_type": "qwen3",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "head_dim": 32,
        "num_key_value_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 100,
        "tie_word_embeddings": False,
    }
    (tmp_path / "tiny.json").write_text(json.dumps(tiny))
    assert load_model(str(tmp_path / "tiny.json")).counts.total == 111_424


def test_unsupported_model_type_and_bad_json(tmp_path):
    (tmp_path / "bert.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(RooflineError, match="unsupported model_type 'bert' \\(supported: deepseek_v3, gemma2, gpt2"):
        load_model(str(tmp_path / "bert.json"))
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(RooflineError, match="JSON syntax error"):
        load_model(str(tmp_path / "bad.json"))
    with pytest.raises(UsageError, match="no such config.json"):
        load_model(str(tmp_path / "missing.json"))


def test_models_import_writes_a_yaml_that_loads(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIGS["gemma-2-9b"]))
    out = tmp_path / "gemma.yaml"
    r = runner.invoke(app, ["models", "import", str(folder), "--name", "my-gemma", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    text = out.read_text()
    assert "source: " in text and "name: my-gemma" in text
    assert load_model(str(out)).counts == load_model("gemma-2-9b").counts
    printed = runner.invoke(app, ["models", "import", str(folder / "config.json")])
    assert printed.exit_code == 0 and printed.stdout.startswith("# Converted by `roofline models import`")


def test_models_show_gives_an_mla_model_no_kv_heads_and_its_real_head_width():
    # DeepSeek-V3 (config.json: qk_nope_head_dim 128, qk_rope_head_dim 64, kv_lora_rank 512) caches one latent a token
    # and layer, so `models show --json` printed two derived figures that mean nothing there: 128 KV heads and a head
    # dim of 7168 / 128 = 56 (an audit, 2026-12-07). A query/key head is 128 + 64 = 192 wide.
    from roofline.calc import describe

    arch = describe.model(load_model("deepseek-v3"))["architecture"]
    assert (arch["num_kv_heads"], arch["head_dim"], arch["kv_lora_rank"]) == (None, 192, 512)
