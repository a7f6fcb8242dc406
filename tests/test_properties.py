"""Properties that must hold for any valid spec (hypothesis)."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import estimate
from roofline.calc.checks import MAX_COUNT
from roofline.specs.params import Architecture, count_params, expected_experts
from roofline.specs.records import Hardware, Model


@st.composite
def models(draw):
    kv_heads = draw(st.integers(1, 16))
    arch = Architecture(
        layers=draw(st.integers(1, 128)),
        hidden_size=draw(st.integers(64, 16384)),
        num_heads=kv_heads * draw(st.integers(1, 8)),
        num_kv_heads=kv_heads,
        head_dim=draw(st.sampled_from([32, 64, 128, 256])),
        intermediate_size=draw(st.integers(64, 65536)),
        vocab_size=draw(st.integers(1000, 256000)),
        mlp=draw(st.sampled_from(["gated", "plain"])),
        tied_embeddings=draw(st.booleans()),
    )
    dtype = draw(st.sampled_from(["bf16", "fp8", "fp32"]))
    return Model("m", "m", "test", dtype, dtype, arch=arch, counts=count_params(arch))


@st.composite
def devices(draw):
    return Hardware(
        "d",
        "d",
        "test",
        memory_capacity=draw(st.floats(1e9, 1e13)),
        memory_bandwidth=draw(st.floats(1e10, 1e13)),
        peak_flops={d: draw(st.floats(1e11, 1e16)) for d in ("fp32", "bf16", "fp8")},
    )


lengths = st.integers(1, 32768)


@settings(max_examples=150, deadline=None)
@given(models(), devices(), st.integers(1, 512), lengths, st.integers(0, 4096), st.floats(1.01, 10))
def test_more_bandwidth_never_slows_a_step(model, device, batch, prompt, output, factor):
    faster = device._replace(memory_bandwidth=device.memory_bandwidth * factor)
    a = estimate(model, device, batch=batch, prompt_tokens=prompt, output_tokens=output)
    b = estimate(model, faster, batch=batch, prompt_tokens=prompt, output_tokens=output)
    assert b.ttft_s <= a.ttft_s * (1 + 1e-12)
    assert b.tpot_s <= a.tpot_s * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(models(), devices(), st.integers(1, 512), lengths, st.integers(0, 4096))
def test_time_is_at_least_each_bound_and_everything_is_finite(model, device, batch, prompt, output):
    e = estimate(model, device, batch=batch, prompt_tokens=prompt, output_tokens=output)
    for phase in (e.prefill, e.decode):
        assert phase.time_s >= phase.compute_s and phase.time_s >= phase.memory_s
        for value in (phase.flops, phase.bytes, phase.intensity_flop_per_byte, phase.time_s):
            assert math.isfinite(value) and value > 0
    assert 0 < e.decode.mbu <= 1 + 1e-9 and 0 < e.decode.mfu <= 1 + 1e-9


@settings(max_examples=100, deadline=None)
@given(models(), devices(), st.integers(1, 511), lengths, st.integers(2, 4096))
def test_batch_raises_throughput_and_tpot(model, device, batch, prompt, output):
    a = estimate(model, device, batch=batch, prompt_tokens=prompt, output_tokens=output)
    b = estimate(model, device, batch=batch + 1, prompt_tokens=prompt, output_tokens=output)
    assert b.decode.tokens_per_s >= a.decode.tokens_per_s * (1 - 1e-12)  # a shared weight read: never worse
    assert b.tpot_s >= a.tpot_s * (1 - 1e-12)  # but every user waits at least as long


@settings(max_examples=100, deadline=None)
@given(models(), devices(), lengths, st.integers(0, 4096), st.floats(0.05, 1.0))
def test_max_batch_fits_in_the_budget(model, device, prompt, output, fraction):
    e = estimate(model, device, prompt_tokens=prompt, output_tokens=output, memory_fraction=fraction)
    if e.max_batch:
        assert e.max_batch * e.kv_bytes_per_sequence <= e.kv_budget_bytes * (1 + 1e-9)
        assert (
            e.max_batch + 1
        ) * e.kv_bytes_per_sequence > e.kv_budget_bytes or e.max_batch == MAX_COUNT  # counts stop at 1e9
        at_limit = estimate(
            model, device, batch=e.max_batch, prompt_tokens=prompt, output_tokens=output, memory_fraction=fraction
        )
        assert at_limit.fits


@settings(max_examples=100, deadline=None)
@given(models(), devices(), lengths, st.integers(2, 4096))
def test_critical_batch_is_where_decode_turns_compute_bound(model, device, prompt, output):
    e = estimate(model, device, prompt_tokens=prompt, output_tokens=output)
    if e.critical_batch is not None and e.critical_batch > 1:
        at = estimate(model, device, batch=e.critical_batch, prompt_tokens=prompt, output_tokens=output)
        below = estimate(model, device, batch=e.critical_batch - 1, prompt_tokens=prompt, output_tokens=output)
        assert at.decode.compute_s >= at.decode.memory_s * (1 - 1e-9)
        assert below.decode.compute_s < below.decode.memory_s


# ---- architectures: MoE, sliding windows, tensor parallelism


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 256), st.data())
def test_expected_experts_lies_between_k_and_e_and_grows(experts, data):
    k = data.draw(st.integers(1, experts))
    tokens = data.draw(st.floats(1, 1e6))
    touched = expected_experts(experts, k, tokens)
    assert k - 1e-9 <= touched <= experts + 1e-9
    assert expected_experts(experts, k, tokens * 2) >= touched - 1e-9


@st.composite
def moe_models(draw):
    experts = draw(st.integers(2, 64))
    arch = Architecture(
        layers=draw(st.integers(1, 48)),
        hidden_size=draw(st.integers(64, 8192)),
        num_heads=8,
        num_kv_heads=8,
        head_dim=64,
        intermediate_size=draw(st.integers(64, 16384)),
        vocab_size=32000,
        num_experts=experts,
        experts_per_token=draw(st.integers(1, experts)),
        expert_intermediate_size=draw(st.integers(64, 8192)),
        first_dense_layers=0,
    )
    return Model("moe", "moe", "test", "bf16", "bf16", arch=arch, counts=count_params(arch))


@settings(max_examples=100, deadline=None)
@given(moe_models(), devices(), st.integers(1, 255))
def test_moe_reads_more_experts_with_more_batch_but_never_more_than_all(model, device, batch):
    a = estimate(model, device, batch=batch, prompt_tokens=64, output_tokens=8)
    b = estimate(model, device, batch=batch + 1, prompt_tokens=64, output_tokens=8)
    everything = (model.counts.total - model.counts.embedding) * 2
    assert a.weight_bytes_streamed <= b.weight_bytes_streamed * (1 + 1e-12) <= everything * (1 + 1e-9)
    assert model.counts.active <= model.counts.total


@settings(max_examples=100, deadline=None)
@given(models(), devices(), st.integers(16, 8192), lengths, st.integers(0, 4096))
def test_a_sliding_window_never_adds_kv_or_time(model, device, window, prompt, output):
    windowed = model._replace(
        arch=model.arch._replace(sliding_window=window, sliding_layers=tuple(range(0, model.arch.layers, 2)))
    )
    full = estimate(model, device, prompt_tokens=prompt, output_tokens=output)
    slid = estimate(windowed, device, prompt_tokens=prompt, output_tokens=output)
    assert slid.kv_bytes_per_sequence <= full.kv_bytes_per_sequence * (1 + 1e-12)
    assert slid.tpot_s <= full.tpot_s * (1 + 1e-12) and slid.ttft_s <= full.ttft_s * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(models(), devices(), st.sampled_from([2, 4, 8]), st.integers(1, 64))
def test_tp_splits_weights_and_flops(model, device, tp, batch):
    arch = model.arch._replace(
        num_heads=8 * model.arch.num_heads, num_kv_heads=8
    )  # heads that any tp of 2, 4, 8 splits
    model = model._replace(arch=arch, counts=count_params(arch))
    device = device._replace(interconnect_bandwidth=450e9)
    one = estimate(model, device, batch=batch, prompt_tokens=128, output_tokens=16)
    many = estimate(model, device, batch=batch, prompt_tokens=128, output_tokens=16, tp=tp)
    assert many.weight_bytes_per_device * tp == pytest.approx(one.weight_bytes)
    assert many.decode.compute_s * tp == pytest.approx(one.decode.compute_s)
    assert many.decode.comm_s > 0 and one.decode.comm_s == 0
