"""Properties that must hold for any valid spec (hypothesis)."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import estimate
from roofline.params import Architecture, count_params
from roofline.specs import Hardware, Model


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
        "d", "d", "test",
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
        assert (e.max_batch + 1) * e.kv_bytes_per_sequence > e.kv_budget_bytes
        at_limit = estimate(model, device, batch=e.max_batch, prompt_tokens=prompt, output_tokens=output, memory_fraction=fraction)
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
