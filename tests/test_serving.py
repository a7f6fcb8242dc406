"""Serving features: speculative decoding, prefix caching, chunked prefill, pipelines, pools. Numbers by hand;
properties by hypothesis."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import estimate, load_hardware, load_model
from roofline.calc.serving import speculative
from roofline.calc.shape import windowed_pairs

M, H = load_model("llama-3.1-8b"), load_hardware("h100-sxm")


def test_expected_tokens_by_hand():
    # Leviathan et al. 2023: k = 4, a = 0.8 -> (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2 = 3.3616 tokens per iteration.
    assert speculative.expected_tokens(4, 0.8) == pytest.approx(3.3616)
    assert speculative.expected_tokens(4, 1.0) == 5 and speculative.expected_tokens(4, 0.0) == 1


def test_speculative_tpot_is_iteration_over_expected_tokens():
    e = estimate(M, H, batch=1, draft=load_model("llama-3.2-1b"), draft_tokens=4, acceptance=0.8)
    s = e.speculative
    assert s.expected_tokens_per_step == pytest.approx(3.3616)
    assert e.tpot_s == pytest.approx((s.draft_s + s.verify_s) / 3.3616)
    # Memory-bound at batch 1: verifying 5 tokens reads the 8B weights once, so the iteration costs about one plain
    # step plus 4 draft steps, and the speedup is large; the draft's weights count against memory.
    plain = estimate(M, H, batch=1)
    assert e.tpot_s < plain.tpot_s / 1.5 and e.kv_budget_bytes < plain.kv_budget_bytes


def test_the_drafters_weights_are_named_where_memory_runs_out():
    # The audit's case: a 70B drafter for an 8B target on an H100 SXM (80 GiB): 0.9 x 80 GiB = 77.3 GB; the target's
    # 16.1 GB of weights fit, the drafter's ~141 GB do not, and the reason must say so (it read "weights (16.1 GB)
    # exceed 0.9 x memory (77.3 GB)"). With a 1B drafter the budget is 0.9 x 80 GiB less both models' weights:
    # stored params (tests/test_audit.py's header) 8,030,261,248 and 1,235,814,400, 2 B each in bf16.
    big = estimate(M, H, batch=4, draft=load_model("llama-3.1-70b"))
    assert not big.fits and "16.1 GB" in big.fits_reason and "141 GB held once (the drafter)" in big.fits_reason
    small = estimate(M, H, batch=1, draft=load_model("llama-3.2-1b"))
    assert small.held_once_bytes == 2 * 1_235_814_400
    assert small.kv_budget_bytes == pytest.approx(0.9 * 80 * 2**30 - 2 * 8_030_261_248 - 2 * 1_235_814_400)
    # The table's budget line names it: 2 x 1,235,814,400 B = 2.47 GB.
    from typer.testing import CliRunner

    from roofline.cli import app

    text = " ".join(CliRunner().invoke(app, ["estimate", "--draft", "llama-3.2-1b", "-q"]).stdout.split())
    assert "KV budget 58.8 GB = 0.9 x 80.0 GiB - weights - 2.47 GB held once (the drafter)" in text


def test_mtp_defaults():
    e = estimate(load_model("deepseek-v3"), load_hardware("h200"), tp=8, batch=8, mtp=1)
    assert e.speculative.drafter == "mtp" and e.speculative.acceptance == 0.85
    assert e.speculative.expected_tokens_per_step == pytest.approx(1.85)  # (1 - 0.85^2) / 0.15


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 8), batch=st.sampled_from([1, 8, 64]))
def test_acceptance_zero_never_beats_plain_decode(k, batch):
    plain = estimate(M, H, batch=batch)
    drafted = estimate(M, H, batch=batch, draft=load_model("llama-3.2-1b"), draft_tokens=k, acceptance=0.0)
    assert drafted.speculative.expected_tokens_per_step == 1
    assert drafted.tpot_s >= plain.decode.time_s * (1 - 1e-9)


def test_cached_prefill_by_hand():
    # Llama-3.1-8B, P = 1024 with N = 768 cached: 256 tokens through the matmuls, causal pairs 1024*1025/2 - 768*769/2.
    e = estimate(M, H, batch=1, cached_tokens=768, output_tokens=2)
    c = M.counts
    matmul = 2 * (c.matmul - c.head) * 256 + 2 * c.head
    attention = 4 * 32 * 32 * 128 * (1024 * 1025 / 2 - 768 * 769 / 2)  # 4 x layers x heads x head_dim per pair
    assert e.prefill.flops == pytest.approx(matmul + attention) and e.prefill.cached_tokens == 768
    assert (
        windowed_pairs(1024, 0) - windowed_pairs(768, 0) == 1024 * 1025 / 2 - 768 * 769 / 2
    )  # no window: all causal pairs


@settings(max_examples=40, deadline=None)
@given(prompt=st.integers(2, 8192), a=st.floats(0, 1), b=st.floats(0, 1))
def test_more_cached_tokens_never_raise_ttft(prompt, a, b):
    low, high = sorted((int(a * (prompt - 1)), int(b * (prompt - 1))))
    assert estimate(M, H, prompt_tokens=prompt, cached_tokens=high, output_tokens=2).ttft_s <= estimate(
        M, H, prompt_tokens=prompt, cached_tokens=low, output_tokens=2
    ).ttft_s * (1 + 1e-12)


def test_shared_prefix_is_held_once():
    # KV per sequence at 1024 + 256 tokens = 131,072 x 1,280; a 1,000-token shared prefix is held once:
    # max batch = (budget - 131,072 x 1,000) / (131,072 x 280).
    budget = 0.9 * 80 * 2**30 - 8_030_261_248 * 2
    e = estimate(M, H, shared_prefix=1000)
    assert e.max_batch == int((budget - 131_072 * 1000) // (131_072 * 280))


def test_chunked_prefill_by_hand():
    # P = 1024, B = 64, C = 2048: 1,984 prompt tokens a step -> 1 step to the first token; in steady state each request
    # needs its 1 mixed step and requests finish at B / O per step: share = 1 x 64 / 256 = 0.25.
    e = estimate(M, H, batch=64, chunk_tokens=2048)
    ch = e.chunked
    assert ch.steps_to_first_token == 1 and ch.mixed_share == pytest.approx(64 / 256)
    assert e.ttft_s == ch.mixed_step_s and e.tpot_s == pytest.approx(
        ch.mixed_share * ch.mixed_step_s + (1 - ch.mixed_share) * ch.decode_step_s
    )
    # A small chunk spreads the prompt: 1024 / (128 - 64) = 16 steps (share min(1, 16 x 64 / 256) = 1).
    small = estimate(M, H, batch=64, chunk_tokens=128).chunked
    assert small.steps_to_first_token == 16 and small.mixed_share == 1


def test_a_tp_group_spanning_nodes_uses_the_internode_tier():
    # 16 H100s in nodes of 8: the ring all-reduce runs at 50 GB/s per device (400 Gb/s InfiniBand), not NVLink's 450.
    from roofline.calc import formulas as f

    m = load_model("llama-3.1-405b")
    h = load_hardware("h100-sxm")
    without = estimate(m, h, tp=16, output_tokens=2)  # no internode figure: the NVLink one, said in a note
    assert any("spans nodes of 8 devices" in n and "assumed" in n for n in without.notes)
    two_nodes = h._replace(internode_bandwidth=50e9, internode_latency=20e-6)
    e = estimate(m, two_nodes, tp=16, batch=1, output_tokens=2)
    # Decode: 2 all-reduces per layer of 1 token x 16,384 hidden x 2 B, over 16 devices at 50 GB/s + 20 us each.
    per = f.ring_allreduce_seconds(16_384 * 2, 16, 50e9, 20e-6)
    assert e.decode.comm_s == pytest.approx(126 * 2 * per)
    assert estimate(m, two_nodes, tp=8, batch=1, output_tokens=2).decode.comm_s == pytest.approx(
        126 * 2 * f.ring_allreduce_seconds(16_384 * 2, 8, 450e9, 10e-6)
    )  # within a node: NVLink


def test_expert_parallelism_by_hand():
    # Mixtral-8x7B bf16 on 8 H100s, tp 1, ep 8: each device holds 1 of 8 experts per layer and all the rest.
    m, h = load_model("mixtral-8x7b"), load_hardware("h100-sxm")
    c = m.counts
    experts = c.moe_layers * c.num_experts * (c.expert + c.expert_biases) * 2  # bytes, bf16
    e = estimate(m, h, ep=8, batch=16, output_tokens=2)
    assert e.weight_bytes_per_device == pytest.approx((c.total * 2 - experts) + experts / 8)
    # All-to-all per MoE layer: each device dispatches and combines its 16 / 8 = 2 tokens x 4,096 x 2 B x 2 experts,
    # 7/8 of it leaving the device, at 450 GB/s, plus the 10 us latency each: 32 layers x 2 x (2 x 4096 x 2 x 2 x 7/8
    # / 450e9 + 10e-6).
    per = 2 * 4096 * 2 * 2 * 7 / 8 / 450e9 + 10e-6
    assert e.comm["ep_s"] == pytest.approx(32 * 2 * per) and e.comm["tp_s"] == 0 and e.inputs.ep == 8


@settings(max_examples=30, deadline=None)
@given(ep=st.sampled_from([2, 4, 8]), batch=st.sampled_from([1, 8, 64]))
def test_ep_never_adds_weight_bytes_per_device(ep, batch):
    for model in ("mixtral-8x7b", "qwen3-30b-a3b"):
        m = load_model(model)
        one = estimate(m, H, batch=batch, output_tokens=2)
        spread = estimate(m, H, batch=batch, output_tokens=2, ep=ep)
        assert spread.weight_bytes_per_device <= one.weight_bytes_per_device
        assert spread.weight_bytes == one.weight_bytes  # the model is the same; only its placement changes


def test_ep_refusals():
    with pytest.raises(Exception, match="no routed experts"):
        estimate(M, H, ep=2)
    with pytest.raises(Exception, match="does not split mixtral-8x7b's 8 experts evenly"):
        estimate(load_model("mixtral-8x7b"), H, ep=16)


def test_speculative_with_chunked_prefill_by_hand():
    # B = 4, k = 4 drafted, a = 0.8 -> E = 3.3616; C = 512 tokens a step: the 4 sequences verify 5 tokens each, so a
    # chunk gets 512 - 20 = 492 prompt tokens: ceil(1024 / 492) = 3 steps to the first token. Requests finish at
    # B E / O per iteration, each needing its 3 mixed steps: share = 3 x 4 x 3.3616 / 256 = 0.15758.
    e = estimate(M, H, batch=4, draft=load_model("llama-3.2-1b"), draft_tokens=4, acceptance=0.8, chunk_tokens=512)
    s, ch = e.speculative, e.chunked
    share = 3 * 4 * 3.3616 / 256
    assert ch.steps_to_first_token == 3 and ch.mixed_share == pytest.approx(share)
    assert e.ttft_s == pytest.approx(3 * (s.draft_s + ch.mixed_step_s) + s.draft_prefill_s)
    assert e.tpot_s == pytest.approx((s.draft_s + share * ch.mixed_step_s + (1 - share) * s.verify_s) / 3.3616)
    assert ch.decode_step_s == s.verify_s and ch.mixed_step_s > s.verify_s
    with pytest.raises(Exception, match="batch x verified tokens"):  # 4 x 5 = 20 tokens do not leave room in 20
        estimate(M, H, batch=4, draft=load_model("llama-3.2-1b"), draft_tokens=4, chunk_tokens=20)


def test_pipeline_by_hand():
    # Llama-3.1-8B on H100s, pp 2, batch 1: one micro-batch. Each stage does half the model (T / 2), then sends one
    # token's activations, 4,096 x 2 B, over NVLink (450 GB/s) + 10 us. Decode: a token passes both stages,
    # TPOT = 2 x (T / 2 + hop) = T + 2 hop; prefill fills the pipe: (1 + 2 - 1) slots of (T_pf / 2 + 1,024 tokens' hop).
    plain = estimate(M, H, batch=1)
    e = estimate(M, H, batch=1, pp=2)
    hop = 4096 * 2 / 450e9 + 10e-6
    assert e.tpot_s == pytest.approx(plain.tpot_s + 2 * hop)
    assert e.ttft_s == pytest.approx(plain.ttft_s + 2 * (1024 * 4096 * 2 / 450e9 + 10e-6))
    assert e.pipeline.bubble_prefill == pytest.approx(1 / 2) and e.pipeline.bubble_decode == pytest.approx(1 / 2)
    assert e.comm["pp_s"] == pytest.approx(2 * hop)
    # Memory: half the weights and half of each sequence's KV (its layers) per device:
    # max batch = (0.9 x 80 GiB - 16.06 GB / 2) / (131,072 B x 1,280 tokens / 2).
    assert e.weight_bytes_per_device == pytest.approx(8_030_261_248)
    assert e.max_batch == int((0.9 * 80 * 2**30 - 8_030_261_248) // (131_072 * 1280 / 2))


def test_pipeline_micro_batches_by_hand():
    # Batch 64 over pp 4: 4 micro-batches of 16 (the default, min(B, pp)), so every stage is busy in decode:
    # TPOT = 4 x (T(16) / 4 + hop(16)) = T(16) + 4 hop(16); prefill bubble (4 - 1) / (4 + 4 - 1) = 3/7.
    e = estimate(M, H, batch=64, pp=4)
    t16 = estimate(M, H, batch=16)
    hop = 16 * 4096 * 2 / 450e9 + 10e-6
    assert e.pipeline.micro_batches == 4 and e.pipeline.bubble_decode == 0
    assert e.pipeline.bubble_prefill == pytest.approx(3 / 7)
    assert e.tpot_s == pytest.approx(t16.decode.time_s + 4 * hop)
    # Two micro-batches leave half of each decode cycle idle: TPOT = 4 x (T(32) / 4 + hop(32)).
    two = estimate(M, H, batch=64, pp=4, micro_batches=2)
    assert two.pipeline.bubble_decode == pytest.approx(1 / 2)
    assert two.tpot_s == pytest.approx(estimate(M, H, batch=32).decode.time_s + 4 * (32 * 4096 * 2 / 450e9 + 10e-6))


@settings(max_examples=30, deadline=None)
@given(pp=st.sampled_from([2, 4, 8]), batch=st.sampled_from([1, 8, 64]))
def test_pp_never_adds_weight_bytes_per_device_and_never_beats_one_token_latency(pp, batch):
    one = estimate(M, H, batch=batch, output_tokens=2)
    piped = estimate(M, H, batch=batch, output_tokens=2, pp=pp)
    assert piped.weight_bytes_per_device <= one.weight_bytes_per_device
    assert piped.max_batch >= one.max_batch
    if batch == 1:  # one sequence still passes every layer in turn, plus the hops
        assert piped.tpot_s >= one.tpot_s


def test_disaggregated_pools_by_hand():
    # Llama-3.1-8B on H100s, batch 8, 1 prefill + 3 decode instances (tp 1). The prefill pool serves 8 requests per
    # prefill time; the decode pool 3 x 8 per (O - 1) x TPOT; the fleet the slower. TTFT adds the transfer of 8
    # prompts' KV (1,024 tokens x 131,072 B each) over NVLink: 8 x 134,217,728 B / 450 GB/s + 10 us.
    plain = estimate(M, H, batch=8)
    e = estimate(M, H, batch=8, disagg="1P:3D")
    d = e.disagg
    transfer = 8 * 1024 * 131_072 / 450e9 + 10e-6
    assert d.kv_transfer_s == pytest.approx(transfer) and e.ttft_s == pytest.approx(plain.ttft_s + transfer)
    assert d.prefill_requests_per_s == pytest.approx(8 / plain.ttft_s)
    assert d.decode_requests_per_s == pytest.approx(3 * 8 / (255 * plain.tpot_s))
    assert e.requests_per_s == min(d.prefill_requests_per_s, d.decode_requests_per_s)
    assert e.output_tokens_per_s == pytest.approx(e.requests_per_s * 256)
    assert (d.prefill_devices, d.decode_devices) == (1, 3) and e.tpot_s == plain.tpot_s
    for bad in ("3D", "0P:1D", "1P:2X", ""):
        with pytest.raises(Exception, match="xP:yD|like 1P:3D"):
            estimate(M, H, disagg=bad)


def test_cli_json_of_pipeline_and_disagg():
    import json

    from typer.testing import CliRunner

    from roofline.cli import app

    runner = CliRunner()
    r = runner.invoke(
        app,
        ["estimate", "-q", "--json", "-m", "llama-3.1-70b", "--tp", "2", "--pp", "2", "-b", "8", "--disagg", "1P:1D"],
    )
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert set(d["comm"]) == {"tp_s", "ep_s", "pp_s"} and d["comm"]["pp_s"] > 0
    assert {"prefill_devices", "decode_devices", "kv_transfer_s"} <= set(d["disagg"]) and d["disagg"][
        "prefill_devices"
    ] == 4
    assert {"stages", "micro_batches", "bubble_prefill", "bubble_decode"} <= set(d["pipeline"])
    assert (d["inputs"]["pp"], d["inputs"]["disagg"]) == (2, "1P:1D")
    plain = json.loads(runner.invoke(app, ["estimate", "-q", "--json"]).stdout)
    assert plain["pipeline"] is None and plain["disagg"] is None and plain["comm"] is None
    bad = runner.invoke(app, ["estimate", "-q", "--micro-batches", "2"])
    assert (
        bad.exit_code == 2
        and bad.stderr.strip() == "roofline: error: --micro-batches: micro-batches need a pipeline (pp > 1)"
    )
    bad = runner.invoke(app, ["plan", "-q", "--concurrency", "4", "--disagg", "1P:1D"])
    assert bad.exit_code == 2 and "--disagg: plan searches the pools itself: expected auto" in bad.stderr
