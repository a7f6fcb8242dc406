"""`roofline fit` and end-to-end throughput: answers derived by hand from the spec figures."""

import json

from typer.testing import CliRunner

from roofline import load_hardware, load_model
from roofline.calc.fit import fit
from roofline.cli import app

runner = CliRunner()
H100 = 0.9 * 80 * 2**30  # the memory fraction of an H100 SXM's 80 GiB [B]


def test_largest_context_by_hand():
    # Llama-3.1-8B bf16: 8,030,261,248 params x 2 B; KV 2 x 32 x 8 x 128 x 2 = 131,072 B/token.
    budget = H100 - 8_030_261_248 * 2
    f = fit(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batch=1)
    assert f.memory_context_tokens == int(budget // 131_072)  # 467,292: past the model's own 131,072
    assert f.max_context_tokens == 131_072
    f4 = fit(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batch=4, context=131_072)
    assert f4.max_context_tokens == f4.memory_context_tokens == int(budget // (4 * 131_072))
    assert f4.max_batch == int(budget // (131_072 * 131_072))  # 3 sequences of the full 128k context


def test_sliding_windows_cap_the_kv_and_the_context():
    # Gemma-2-9B: 42 layers, 21 sliding at 4096 tokens; KV per layer-token 2 x 8 x 256 x 2 = 8,192 B.
    # Past the window KV(C) = 8,192 x (21 C + 21 x 4096), so C = budget / (8,192 x 21) - 4096.
    m = load_model("gemma-2-9b")
    budget = 0.9 * 23_034 * 2**20 - m.params * 2  # L4: 23,034 MiB with ECC
    f = fit(m, load_hardware("l4"), batch=1, context=8192)
    assert (
        f.memory_context_tokens == int(budget / (8192 * 21) - 4096) and f.max_context_tokens == 8192
    )  # its max_context
    # Mistral-7B windows every layer (4096): its KV stops growing, so memory sets no limit; its max_context does.
    g = fit(load_model("mistral-7b"), load_hardware("l4"), batch=1)
    assert (
        g.memory_context_tokens is None and g.max_context_tokens == 32_768 and "not the limit" in g.max_context_reason
    )


def test_the_tp_that_just_fits():
    # Llama-3.1-70B bf16 = 70,553,706,496 x 2 B = 141.1 GB: over one H100's 77.3 GB; at tp 2, 70.55 GB of weights
    # + half of one 8,192-token sequence's KV (327,680 B/token x 8,192 / 2 = 1.34 GB) = 71.9 GB: fits.
    f = fit(load_model("llama-3.1-70b"), load_hardware("h100-sxm"), context=8192)
    assert f.min_tp == 2 and f.max_context_tokens is None and f.max_batch == 0
    # At 4-bit AWQ (~39 GB) one device is enough.
    assert fit(load_model("llama-3.1-70b"), load_hardware("h100-sxm"), context=8192, quant="awq").min_tp == 1
    # A device without an interconnect cannot split a model (estimate refuses tp > 1 there): no tp answers, and why.
    m1 = fit(load_model("llama-3.1-70b"), load_hardware("apple-m1"), context=8192)
    assert m1.min_tp is None and "no interconnect_bandwidth" in m1.min_tp_reason


def test_mla_and_moe_by_hand():
    # DeepSeek-V3 fp8 at tp 8 on H200s: every expert is resident, so the weights are all 671,026,404,352 params (summed
    # by hand in test_architectures.test_deepseek_v3_params_by_hand: MLA + dense MLPs + 58 MoE layers + norms +
    # embeddings)
    # x 1 B (not the 37B active), / 8 = 83,878,300,544 B per device. MLA caches its latent, 61 layers x (512 + 64)
    # x 2 B = 70,272 B per token, and the latent has no heads to split, so every device holds all of it.
    budget = 0.9 * 141 * 2**30 - 671_026_404_352 / 8
    f = fit(load_model("deepseek-v3"), load_hardware("h200"), tp=8)
    assert (
        f.memory_context_tokens == int(budget // 70_272) and f.max_context_tokens == 163_840
    )  # 745,382, then its own limit
    assert f.max_batch == int(budget // (70_272 * 163_840))  # 4 sequences of the full 160k context
    # At tp 4 the weights (167.8 GB per device) exceed 0.9 x 141 GiB = 136.3 GB: tp 8 is the smallest that fits.
    assert f.min_tp == 8


def test_quantized_kv_doubles_the_context():
    # q4_0 KV is 18/32 B per element against bf16's 2: 3.56x the tokens in the same budget.
    m, h = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    bf16 = fit(m, h).memory_context_tokens
    q4 = fit(m, h, kv_dtype="q4_0").memory_context_tokens
    assert q4 == int((H100 - 8_030_261_248 * 2) // (65_536 * 18 / 32))
    assert q4 > 3.5 * bf16


def test_fit_cli_json_contract():
    r = runner.invoke(app, ["fit", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--context", "8192", "--json", "-q"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert {"schema_version", "model", "hardware", "inputs", "max_context_tokens", "max_batch", "min_tp"} <= set(data)
    assert data["inputs"]["context_tokens"] == 8192 and data["min_tp"] == 1


def test_a_context_past_the_models_own_is_warned():
    # GPT-2 small's config.json: n_positions 1024; the estimate warns past it, and so does fit.
    r = runner.invoke(app, ["fit", "-m", "gpt2", "-H", "h100-sxm", "--context", "100000", "--json"])
    assert r.exit_code == 0 and "warning: --context 100000 exceeds gpt2's max_context 1024" in r.stderr
    assert json.loads(r.stdout)["inputs"]["context_tokens"] == 100_000


def test_the_smallest_tp_says_where_the_weights_alone_would_fit():
    # Kimi-K2 on H200s (an audit, 2026-12-07): 1.0264e12 B of fp8 weights over 8 devices is 128.3 GB each, within
    # 0.9 x 141 GiB = 136.3 GB, but one 131,072-token sequence adds its MLA cache on every device (61 layers x (512 +
    # 64) x 2 B = 70,272 B a token: 9.21 GB), 137.5 GB: 16 devices. The 8 a shorter context needs is said beside it.
    f = fit(load_model("kimi-k2"), load_hardware("h200"))
    assert f.min_tp == 16 and "(the weights alone fit at tp 8)" in f.min_tp_reason
    assert "weights alone" not in fit(load_model("llama-3.1-8b"), load_hardware("h100-sxm")).min_tp_reason
