"""Serving features: speculative decoding, prefix caching, chunked prefill. Numbers by hand; properties by hypothesis."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import estimate, load_hardware, load_model
from roofline.calc import serving
from roofline.calc.shape import windowed_pairs

M, H = load_model("llama-3.1-8b"), load_hardware("h100-sxm")


def test_expected_tokens_by_hand():
    # Leviathan et al. 2023: k = 4, a = 0.8 -> (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2 = 3.3616 tokens per iteration.
    assert serving.expected_tokens(4, 0.8) == pytest.approx(3.3616)
    assert serving.expected_tokens(4, 1.0) == 5 and serving.expected_tokens(4, 0.0) == 1


def test_speculative_tpot_is_iteration_over_expected_tokens():
    e = estimate(M, H, batch=1, draft=load_model("llama-3.2-1b"), draft_tokens=4, acceptance=0.8)
    s = e.speculative
    assert s.expected_tokens_per_step == pytest.approx(3.3616)
    assert e.tpot_s == pytest.approx((s.draft_s + s.verify_s) / 3.3616)
    # Memory-bound at batch 1: verifying 5 tokens reads the 8B weights once, so the iteration costs about one plain
    # step plus 4 draft steps, and the speedup is large; the draft's weights count against memory.
    plain = estimate(M, H, batch=1)
    assert e.tpot_s < plain.tpot_s / 1.5 and e.kv_budget_bytes < plain.kv_budget_bytes


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
    assert windowed_pairs(1024, 0) - windowed_pairs(768, 0) == 1024 * 1025 / 2 - 768 * 769 / 2  # no window: all causal pairs


@settings(max_examples=40, deadline=None)
@given(prompt=st.integers(2, 8192), a=st.floats(0, 1), b=st.floats(0, 1))
def test_more_cached_tokens_never_raise_ttft(prompt, a, b):
    low, high = sorted((int(a * (prompt - 1)), int(b * (prompt - 1))))
    assert estimate(M, H, prompt_tokens=prompt, cached_tokens=high, output_tokens=2).ttft_s <= \
        estimate(M, H, prompt_tokens=prompt, cached_tokens=low, output_tokens=2).ttft_s * (1 + 1e-12)


def test_shared_prefix_is_held_once():
    # KV per sequence at 1024 + 256 tokens = 131,072 x 1,280; a 1,000-token shared prefix is held once:
    # max batch = (budget - 131,072 x 1,000) / (131,072 x 280).
    budget = 0.9 * 80 * 2**30 - 8_030_261_248 * 2
    e = estimate(M, H, shared_prefix=1000)
    assert e.max_batch == int((budget - 131_072 * 1000) // (131_072 * 280))


def test_chunked_prefill_by_hand():
    # P = 1024, B = 64, C = 2048: 1,984 prompt tokens a step -> 1 step to the first token; steady-state share of
    # mixed steps = P B / (O (C - B)) = 1024 x 64 / (256 x 1984) = 0.129.
    e = estimate(M, H, batch=64, chunk_tokens=2048)
    ch = e.chunked
    assert ch.steps_to_first_token == 1 and ch.mixed_share == pytest.approx(1024 * 64 / (256 * 1984))
    assert e.ttft_s == ch.mixed_step_s and e.tpot_s == pytest.approx(ch.mixed_share * ch.mixed_step_s + (1 - ch.mixed_share) * ch.decode_step_s)
    # A small chunk spreads the prompt: 1024 / (128 - 64) = 16 steps.
    assert estimate(M, H, batch=64, chunk_tokens=128).chunked.steps_to_first_token == 16


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
        126 * 2 * f.ring_allreduce_seconds(16_384 * 2, 8, 450e9, 10e-6))  # within a node: NVLink


def test_expert_parallelism_by_hand():
    # Mixtral-8x7B bf16 on 8 H100s, tp 1, ep 8: each device holds 1 of 8 experts per layer and all the rest.
    m, h = load_model("mixtral-8x7b"), load_hardware("h100-sxm")
    c = m.counts
    experts = c.moe_layers * c.num_experts * (c.expert + c.expert_biases) * 2  # bytes, bf16
    e = estimate(m, h, ep=8, batch=16, output_tokens=2)
    assert e.weight_bytes_per_device == pytest.approx((c.total * 2 - experts) + experts / 8)
    # All-to-all per MoE layer: dispatch + combine of 16 tokens x 4,096 x 2 B x 2 experts, 7/8 of it leaving the device,
    # at 450 GB/s, plus the 10 us latency each: 32 layers x 2 x (16 x 4096 x 2 x 2 x 7/8 / 450e9 + 10e-6).
    per = 16 * 4096 * 2 * 2 * 7 / 8 / 450e9 + 10e-6
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
    with pytest.raises(Exception, match="at most one expert group per device"):
        estimate(load_model("mixtral-8x7b"), H, ep=16)
