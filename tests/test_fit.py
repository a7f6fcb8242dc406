"""`roofline fit` and end-to-end throughput: answers derived by hand from the spec figures."""

import json

import pytest
from typer.testing import CliRunner

from roofline import estimate, load_hardware, load_model
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
    budget = 0.9 * 24 * 2**30 - m.params * 2  # L4: 24 GiB
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


def test_mla_and_moe_by_hand():
    # DeepSeek-V3 fp8 at tp 8 on H200s: every expert is resident, so the weights are all 671,026,404,352 params (summed
    # by hand in test_architectures.test_deepseek_v3_params_by_hand: MLA + dense MLPs + 58 MoE layers + norms + embeddings)
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


def test_end_to_end_throughput_counts_the_prefill():
    # output tokens/s = B x O / (TTFT + (O - 1) x TPOT), below the decode step's B / TPOT.
    e = estimate(
        load_model("llama-3.1-8b"),
        load_hardware("h100-sxm"),
        batch=64,
        prompt_tokens=128,
        output_tokens=128,
        weight_dtype="fp8",
    )
    assert e.output_tokens_per_s == pytest.approx(64 * 128 / (e.ttft_s + 127 * e.tpot_s))
    assert e.requests_per_s == pytest.approx(64 / e.request_latency_s)
    assert e.output_tokens_per_s < e.decode.tokens_per_s


def toy_device(write_yaml, power=None, price=None):
    # 1 TB/s, 100 TFLOP/s bf16, 80 GiB: a napkin device for plan's arithmetic.
    extra = (f"power: {power}\n" if power else "") + (f"price_per_hour: {price}\n" if price else "")
    return load_hardware(
        write_yaml(
            "toy.yaml",
            "name: toy\nsource: test\nmemory_capacity: 80 GiB\nmemory_bandwidth: 1 TB/s\n"
            "peak_flops:\n  bf16: 100 TFLOP/s\n" + extra,
        )
    )


def test_plan_littles_law_by_hand(write_yaml):
    from roofline.calc.plan import plan

    h = toy_device(write_yaml, power=500, price=2.0)
    m = load_model("llama-3.1-8b")
    p = plan(m, [h], prompt_tokens=128, output_tokens=64, rate=10.0, tpot_slo=0.05, tps=(1,))
    best = p.best
    e = estimate(m, h, batch=best.batch, prompt_tokens=128, output_tokens=64)
    # Little's law: in flight = 10 requests/s x the request latency; replicas = ceil(in flight / batch).
    assert best.replicas == max(1, -(-10.0 * e.request_latency_s // best.batch))
    assert best.devices == best.replicas and best.output_tokens_per_s == 10.0 * 64  # served: rate x output tokens
    # Cost: $2 x devices per hour over 640 tokens/s x 3,600 s, per million; energy: 500 W x devices / 640 tokens/s x 1e6.
    assert best.cost_per_million_tokens == pytest.approx(2.0 * best.devices / (640 * 3600) * 1e6)
    assert best.energy_j_per_million_tokens == pytest.approx(500 * best.devices / 640 * 1e6)
    assert p.inputs["ranked_by"] == "cost"


def test_plan_concurrency_and_refusals(write_yaml):
    from roofline.calc.plan import plan

    h = toy_device(write_yaml)
    m = load_model("llama-3.1-8b")
    # 100 requests in flight, no SLO: the largest batch up to 100 that fits (64, powers of two) -> ceil(100 / 64) = 2.
    p = plan(m, [h], prompt_tokens=128, output_tokens=64, concurrency=100, tps=(1,))
    assert (
        p.best.batch == 64
        and p.best.replicas == 2
        and p.best.cost_per_hour is None
        and p.inputs["ranked_by"] == "devices"
    )
    # A TPOT under the weights' read time (16 GB / 1 TB/s = 16 ms) cannot be met; tp 2 needs an interconnect.
    p = plan(m, [h], prompt_tokens=128, output_tokens=64, concurrency=1, tpot_slo=0.010, tps=(1, 2))
    assert p.best is None and {o.reason.split(" (")[0] for o in p.options} == {
        "no batch meets the SLOs",
        "no interconnect_bandwidth for tp, pp or disaggregation",
    }


def test_plan_cli_json_contract():
    r = runner.invoke(
        app,
        [
            "plan",
            "-m",
            "llama-3.1-8b",
            "-H",
            "h100-sxm",
            "-H",
            "l40s",
            "--concurrency",
            "64",
            "--tpot-slo",
            "30ms",
            "--price",
            "h100-sxm=2.5",
            "--price",
            "l40s=0.9",
            "--json",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    keys = {
        "hardware",
        "tp",
        "replicas",
        "batch",
        "devices",
        "ttft_s",
        "tpot_s",
        "meets_slo",
        "output_tokens_per_s",
        "goodput_per_device",
        "cost_per_hour",
        "cost_per_million_tokens",
        "energy_j_per_million_tokens",
    }
    assert {"schema_version", "inputs", "options", "best"} <= set(data) and all(keys <= set(o) for o in data["options"])
    assert data["inputs"]["ranked_by"] == "cost" and data["best"] == data["options"][0]
    bad = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "--concurrency", "4", "--price", "nope=1"])
    assert bad.exit_code == 2 and "--price" in bad.stderr
