"""`estimate` on hand-worked cases. Every expected number is derived in the comments, not read off the code."""

import pytest

from roofline import estimate, load_hardware, load_model
from roofline.errors import UsageError

TOY_MODEL = """
    name: toy
    source: hand-made test spec
    dtype: bf16
    params: 1e9
    kv_bytes_per_token: 1e5
    max_context: 100
"""
TOY_DEVICE = """
    name: toy device
    source: hand-made test spec
    memory_capacity: 100 GB
    memory_bandwidth: 1 TB/s
    peak_flops:
      bf16: 100 TFLOP/s
"""


@pytest.fixture
def toy(write_yaml):
    return load_model(write_yaml("toy.yaml", TOY_MODEL)), load_hardware(write_yaml("dev.yaml", TOY_DEVICE))


def test_toy_estimate_by_hand(toy):
    model, device = toy
    e = estimate(model, device, batch=4, prompt_tokens=100, output_tokens=11)
    # Weights: 1e9 params x 2 B = 2e9 B, all streamed (a params-only model has no lookup tables).
    assert e.weight_bytes == e.weight_bytes_streamed == 2e9
    # Prefill: 4 x 2 x 1e9 x 100 = 8e11 FLOP -> 8 ms at 1e14; bytes 2e9 + 4 x 100 x 1e5 = 2.04e9 -> 2.04 ms.
    assert e.prefill.flops == pytest.approx(8e11)
    assert e.prefill.bytes == pytest.approx(2.04e9)
    assert e.ttft_s == pytest.approx(8e-3)
    assert e.prefill.bound == "compute"
    # Decode: 10 steps (the prefill yields token 1) at cached 100..109; bytes 2e9 + 4 x 1e5 x (c + 1),
    # mean c + 1 = 105.5 -> 2.0422e9 B -> 2.0422 ms; FLOPs 4 x 2e9 = 8e9 -> 0.08 ms: memory-bound throughout.
    assert e.decode.steps == 10
    assert e.decode.bytes == pytest.approx(2.0422e9)
    assert e.tpot_s == pytest.approx(2.0422e-3)
    assert e.decode.bound == "memory"
    assert e.decode.tokens_per_s == pytest.approx(4 / 2.0422e-3)
    assert e.decode.mbu == pytest.approx(1.0)
    assert e.decode.mfu == pytest.approx(8e9 / 2.0422e-3 / 1e14)
    # Request: 8 ms + 10 x 2.0422 ms = 28.422 ms.
    assert e.request_latency_s == pytest.approx(28.422e-3)
    # KV: 1e5 x 111 tokens = 1.11e7 B/sequence; budget 0.9 x 1e11 - 2e9 = 8.8e10 -> floor(7927.9) = 7927.
    assert e.kv_bytes_per_sequence == pytest.approx(1.11e7)
    assert e.kv_budget_bytes == pytest.approx(8.8e10)
    assert e.max_batch == 7927
    assert e.fits
    # Critical batch at the mean step (c + 1 = 105.5): 2e-3 s / (2e9/1e14 - 1.055e7/1e12) = 211.6 -> 212.
    assert e.critical_batch == 212
    assert e.ridge_point_flop_per_byte == pytest.approx(100)
    # prompt + output = 111 > max_context 100: a warning, not an error.
    assert e.warnings and "max_context" in e.warnings[0]


def test_efficiencies_scale_the_peaks(toy):
    model, device = toy
    e = estimate(
        model, device, batch=4, prompt_tokens=100, output_tokens=11, bandwidth_efficiency=0.5, compute_efficiency=0.5
    )
    # Half the bandwidth doubles the memory-bound TPOT (2.0422 -> 4.0844 ms); MBU against the raw peak is 0.5.
    assert e.tpot_s == pytest.approx(4.0844e-3)
    assert e.decode.mbu == pytest.approx(0.5)
    assert e.ttft_s == pytest.approx(16e-3)


def test_llama_decode_step_by_hand():
    e = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batch=1, prompt_tokens=1024, output_tokens=2)
    # One decode step at 1,024 cached tokens. Streamed weights: everything but the 525,336,576-entry input
    # embedding: (8,030,261,248 - 525,336,576) x 2 B = 15,009,849,344 B; KV read 1,024 + written 1 token:
    # 131,072 x 1,025 = 134,348,800 B.
    assert e.decode.bytes == pytest.approx(15_009_849_344 + 134_348_800, rel=1e-12)
    # FLOPs: 2 x 7,504,658,432 matmul params + 4 x 32 x 32 x 128 x 1,025 keys = 15,009,316,864 + 537,395,200.
    assert e.decode.flops == pytest.approx(15_009_316_864 + 537_395_200, rel=1e-12)
    # 15,144,198,144 B / 3.35e12 B/s = 4.5206 ms.
    assert e.tpot_s == pytest.approx(15_144_198_144 / 3.35e12)


def test_llama_prefill_runs_lm_head_on_the_last_position_only():
    e = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batch=1, prompt_tokens=1024, output_tokens=1)
    # 2 x (7,504,658,432 - 525,336,576) x 1,024 + 2 x 525,336,576 + 2 x 32 x 32 x 128 x 1,024 x 1,025
    # = 14,293,651,161,088 + 1,050,673,152 + 275,146,342,400 = 14,569,848,176,640 FLOP.
    assert e.prefill.flops == 14_569_848_176_640
    # -> 14.726 ms at 989.4 TFLOP/s: compute-bound (intensity ~962 FLOP/B vs ridge 295).
    assert e.ttft_s == pytest.approx(14_569_848_176_640 / 989.4e12)
    assert e.prefill.bound == "compute"


def test_tied_head_streamed_once():
    e = estimate(load_model("gpt2"), load_hardware("h100-sxm"), batch=1, prompt_tokens=10, output_tokens=2)
    # GPT-2 small in fp32: 123,653,376 streamed params (see test_formulas) x 4 B = 494,613,504 B.
    assert e.weight_bytes_streamed == 494_613_504


def test_weights_that_do_not_fit():
    e = estimate(load_model("llama-3.1-405b"), load_hardware("h100-sxm"))
    # 405.85e9 x 2 B = 811.7 GB > 0.9 x 80 GiB = 77.3 GB.
    assert not e.fits and "exceed" in e.fits_reason
    assert e.max_batch == 0


def test_batch_beyond_max_batch_does_not_fit():
    e = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batch=366)
    # The max batch at 1,280 tokens is 365 (test_formulas.test_kv_budget_and_max_batch).
    assert e.max_batch == 365 and not e.fits


def test_int4_weights_compute_in_bf16_and_bits_override():
    e = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), weight_dtype="int4", bits_per_weight=4.85)
    assert e.inputs.compute_dtype == "bf16"
    # 8,030,261,248 params x 4.85 / 8 B = 4,868,345,881.6 B.
    assert e.weight_bytes == pytest.approx(8_030_261_248 * 4.85 / 8)
    assert any("weight-only" in n for n in e.notes)


@pytest.mark.parametrize(
    "quant, hardware, expected",
    [
        ("q4_0", "rtx-4090", "int8"),
        ("q8_0", "h100-sxm", "int8"),
        ("q4_k_m", "apple-m4-max", "fp16"),
        ("awq", "h100-sxm", "bf16"),
    ],
)
def test_ggml_formats_compute_in_int8_where_the_device_has_it(quant, hardware, expected):
    # ggml multiplies its block formats against activations quantized to 8-bit blocks (ggml-cpu.c type_traits_cpu:
    # vec_dot_type Q8_0 / Q8_K; CUDA MMQ: q8_1), so their bound is the int8 peak; Apple's GPUs list none (fp16).
    # AWQ kernels dequantize to 16 bits. The RTX 4090's int8 peak is 660.6 TOPS (Ada whitepaper).
    e = estimate(load_model("llama-2-7b"), load_hardware(hardware), prompt_tokens=512, output_tokens=1, quant=quant)
    assert e.inputs.compute_dtype == expected
    if hardware == "rtx-4090":
        assert e.prefill.compute_s == pytest.approx(e.prefill.flops / 660.6e12)
        assert any("ggml block format" in n for n in e.notes)
    if hardware == "apple-m4-max":  # said as the block format's, not as weight-only quantization (a GPU's kernels)
        assert any("ggml block format" in n and "lists no peak" in n for n in e.notes), e.notes
        assert not any("weight-only" in n for n in e.notes)


def test_fp8_weights_on_a100_fall_back_to_bf16():
    e = estimate(load_model("llama-3.1-8b"), load_hardware("a100-80gb-sxm"), weight_dtype="fp8")
    assert e.inputs.compute_dtype == "bf16" and e.weight_bytes == 8_030_261_248


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"batch": 0}, "batch"),
        ({"prompt_tokens": 0}, "prompt_tokens"),
        ({"output_tokens": -1}, "output_tokens"),
        ({"memory_fraction": 0.0}, "memory_fraction"),
        ({"memory_fraction": 1.5}, "memory_fraction"),
        ({"weight_dtype": "fp12"}, "unknown dtype"),
        ({"compute_dtype": "fp4"}, "has no peak for fp4 (it has: fp32, tf32, bf16, fp16, fp8, int8)"),
        ({"bits_per_weight": 0}, "bits_per_weight"),
    ],
)
def test_bad_inputs(kwargs, words):
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), **kwargs)


def test_to_dict_round_trips_json():
    import json

    e = estimate(load_model("llama-3.1-8b"), load_hardware("h100-sxm"))
    assert json.loads(json.dumps(e.to_dict()))["decode"]["bound"] == "memory"
