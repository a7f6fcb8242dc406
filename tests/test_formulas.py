"""Formula tables: numbers derived by hand or from published worked examples, sources in comments."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline.calc import formulas as f
from roofline.calc.shape import windowed_pairs
from roofline.specs.catalog import load_model
from roofline.specs.params import Architecture, count_params


def test_ridge_point_h100():
    # H100 SXM dense bf16 989.4 TFLOP/s over 3.35 TB/s = 295.3 FLOP/byte (the worked example: 989/3.35 = 295).
    assert f.ridge_point(989.4e12, 3.35e12) == pytest.approx(295.34, abs=0.01)


def test_ridge_point_apple_m1_measured():
    # The Measure issue's M1 example: 907 GFLOP/s matmul and 45.8 GB/s copy put the ridge at 19.8 FLOP/byte.
    assert f.ridge_point(907e9, 45.8e9) == pytest.approx(19.8, abs=0.05)


def test_kv_bytes_llama3_8b_uses_kv_heads():
    # Llama-3-8B: 2 x 32 layers x 8 kv heads x 128 x 2 B = 131,072 B/token (not 32 query heads: 524,288).
    assert f.kv_bytes_per_token(32, 8, 128, 2) == 131_072


def test_kv_bytes_llama2_70b():
    # Llama-2-70B: 2 x 80 x 8 x 128 x 2 B = 327,680 B/token (Pope et al. 2022 discuss its GQA-sized cache).
    assert f.kv_bytes_per_token(80, 8, 128, 2) == 327_680


def test_attention_flops_per_token():
    # Chinchilla appendix F: logits 2 x keys x head_dim x heads, AV the same; per layer 4 x keys x d x heads.
    # GPT-2 small at 1024 keys: 4 x 12 x 12 x 64 x 1024 = 37,748,736 FLOP.
    assert f.attention_flops(12, 12, 64, 1024) == 37_748_736


def test_causal_attention_is_about_half_the_full_square():
    # Causal pairs of a 3-token prompt by hand: 1 + 2 + 3 = 6; at 4096 tokens about half of 4096^2.
    assert windowed_pairs(3, 0) == 6
    assert windowed_pairs(4096, 0) / 4096**2 == pytest.approx(0.5, rel=1e-3)


def test_matmul_flops():
    # Kaplan et al. 2020: forward pass = 2N FLOP per token; 7e9 params x 10 tokens = 1.4e11.
    assert f.matmul_flops(7e9, 10) == 1.4e11


def test_kv_budget_and_max_batch():
    # 0.9 x 80 GiB - 16.06 GB = 77.31e9 - 16.06e9 = 61.25e9 B; / (131,072 x 1,280 B) = 365.1 -> 365 sequences.
    budget = f.kv_budget(0.9, 80 * 2**30, 16_060_522_496)
    assert budget == pytest.approx(0.9 * 85_899_345_920 - 16_060_522_496)
    assert f.max_batch(budget, 131_072 * 1280) == 365
    assert f.max_batch(-1.0, 100.0) == 0


def test_critical_batch_hand_example():
    # W = 2e9 B, BW = 1e12 B/s -> 2 ms of weights; per sequence 2e9 FLOP at 1e14 FLOP/s = 20 us and 1.055e7 B of
    # KV at 1e12 B/s = 10.55 us: B >= 2e-3 / (20e-6 - 10.55e-6) = 211.6 -> 212.
    assert f.critical_batch(2e9, 2e9, 1.055e7, 1e14, 1e12) == 212


def test_critical_batch_none_when_kv_alone_is_under_the_ridge():
    # 1 FLOP per KV byte is under any ridge above 1: more batch never turns decode compute-bound.
    assert f.critical_batch(2e9, 1e6, 1e6, 1e14, 1e12) is None


@settings(max_examples=1000)
@given(
    st.floats(0, 10),
    st.floats(-1, 1),
    st.floats(0, 10),
    st.floats(-1, 1),
    st.integers(1, 300),
)
def test_mean_of_max_linear_equals_brute_force(a0, a1, b0, b1, n):
    brute = sum(max(a0 + a1 * j, b0 + b1 * j) for j in range(n)) / n
    assert f.mean_of_max_linear(a0, a1, b0, b1, n) == pytest.approx(brute, rel=1e-9, abs=1e-9)


def test_gpt2_small_params_by_hand():
    # GPT-2 small, every tensor of GPT2LMHeadModel: wte 50257 x 768 = 38,597,376; wpe 1024 x 768 = 786,432;
    # per layer ln_1 1,536 + c_attn 768 x 2304 + 2304 + c_proj 768 x 768 + 768 + ln_2 1,536
    #   + c_fc 768 x 3072 + 3072 + c_proj 3072 x 768 + 768 = 7,087,872; x 12 = 85,054,464; ln_f 1,536.
    # Total 124,439,808 (lm_head tied to wte).
    counts = load_model("gpt2").counts
    assert counts.total == 124_439_808
    # Streamed per decode step: the layers + ln_f + the tied head read once, not wte/wpe as lookups:
    # 85,054,464 + 1,536 + 38,597,376 = 123,653,376.
    assert counts.streamed(1) == 123_653_376


def test_llama_3_1_8b_params_by_hand():
    # Per layer: q 4096^2 = 16,777,216; k, v 4096 x 1024 = 4,194,304 each; o 16,777,216;
    # MLP 3 x 4096 x 14336 = 176,160,768; 2 RMSNorms 8,192 -> 218,112,000; x 32 = 6,979,584,000.
    # Embedding and untied lm_head 128256 x 4096 = 525,336,576 each; final norm 4,096.
    # Total 8,030,261,248 (the HF model page: 8.03B).
    counts = load_model("llama-3.1-8b").counts
    assert counts.total == 8_030_261_248
    assert counts.matmul == 32 * (16_777_216 * 2 + 4_194_304 * 2 + 176_160_768) + 525_336_576
    assert counts.streamed(1) == counts.total - 525_336_576  # all but the input embedding


def test_explicit_head_dim_is_used():
    # Gemma-2-9B style: 16 heads x head_dim 256 = 4096 wide attention on a 3584 hidden size (not 3584 / 16 = 224).
    a = Architecture(
        layers=1, hidden_size=3584, num_heads=16, num_kv_heads=8, head_dim=256, intermediate_size=1, vocab_size=1
    )
    counts = count_params(a)
    assert counts.attention == 3584 * (4096 + 2 * 2048) + 4096 * 3584


def test_qkv_bias_counts():
    # Qwen2.5-7B q, k, v biases: 28 layers x (3584 + 2 x 512) = 129,024 parameters.
    assert load_model("qwen2.5-7b").counts.biases == 129_024


def test_mean_of_max_is_at_least_the_max_of_means():
    assert f.mean_of_max_linear(0, 1, 5, 0, 11) >= max(5.0, 5.0)
    assert math.isclose(f.mean_of_max_linear(0, 1, 5, 0, 11), (5 * 6 + 6 + 7 + 8 + 9 + 10) / 11)


def test_end_to_end_output_throughput_by_hand():
    # 8 sequences of 100 output tokens served together in 2 s of request latency: 400 tokens/s, 4 requests/s.
    assert f.output_tokens_per_s(8, 100, 2.0) == 400.0


def test_weighted_percentiles_by_hand_in_any_order():
    # Values 1, 2, 3 weighing 1, 1, 2 (total 4): cumulative 1, 2, 4. The smallest value whose cumulative weight
    # reaches q x 4: q = 0.25 -> 1 (1 >= 1), 0.5 -> 2 (2 >= 2), 0.9 -> 3 (4 >= 3.6); asked out of order.
    assert f.weighted_percentiles([(3, 2), (1, 1), (2, 1)], [0.9, 0.25, 0.5]) == [3, 1, 2]
    assert f.weighted_percentiles([(5.0, 3)], [0.5, 0.99]) == [5.0, 5.0]
