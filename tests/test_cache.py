"""Bandwidth by working set (roofline.calc.cache): a step is priced at the read speed of what it streams.

Every figure here is derived by hand from the definition: the ladder's speedup at a working set is its
interpolated read rate there (log-log) over the largest working set's (the memory plateau), never below 1.
"""

import math

import pytest
from test_validate import MEASURED  # tests/ is on the path: conftest

from roofline import estimate, load_hardware, load_model
from roofline.calc import cache
from roofline.measure.bench import decode_bandwidth

MiB, GiB = 2**20, 2**30


def ladder(*points: tuple[float, float]) -> dict:
    return {"bandwidth": {"read": {"by_working_set": {"points": [{"bytes": b, "bytes_per_s": r} for b, r in points]}}}}


# L2-ish 200 GB/s up to 4 MiB, 100 GB/s at 16 MiB, memory 40 GB/s from 64 MiB.
STEPS = ladder((1 * MiB, 200e9), (4 * MiB, 200e9), (16 * MiB, 100e9), (64 * MiB, 40e9), (256 * MiB, 40e9))


def test_speedup_by_hand():
    points = cache.ladder(STEPS)
    assert cache.speedup(points, 256 * MiB) == 1.0 and cache.speedup(points, 4 * GiB) == 1.0  # held beyond
    assert cache.speedup(points, 16 * MiB) == pytest.approx(100 / 40)
    # 32 MiB is halfway from 16 to 64 MiB in log size: sqrt(100 x 40) = 63.246 GB/s, / 40 = 1.58114.
    assert cache.speedup(points, 32 * MiB) == pytest.approx(math.sqrt(100 * 40) / 40)
    assert cache.speedup(points, 512 * 1024) == pytest.approx(5.0)  # below the ladder: held at 200 / 40
    assert cache.speedup(None, 1 * MiB) == 1.0  # a datasheet: no ladder, no speedup
    assert cache.at_memory(points, 80e9, 32 * MiB) == pytest.approx(80e9 / (math.sqrt(4000) / 40))


def test_a_ladder_point_slower_than_a_larger_working_set_reads_at_that_sets_speed():
    # The Zen 4 VM's quick profile of 2026-12-07: ... 172 GB/s at 16 MiB (the fastest), 94 at 32, 35 at 64, a dip to
    # 17 at 128, 34 at 256, 34 at 512 MiB. Beyond the fastest point each point is at least every larger set's:
    # 128 MiB reads max(17, 34, 34) = 34, 64 MiB max(35, 34) = 35. Before the fastest (a small read's call cost) a
    # point stays: 1 MiB at 100, under 16 MiB's 172.
    points = cache.ladder(
        ladder(
            (1 * MiB, 100e9),
            (16 * MiB, 172e9),
            (32 * MiB, 94e9),
            (64 * MiB, 35e9),
            (128 * MiB, 17e9),
            (256 * MiB, 34e9),
            (512 * MiB, 34e9),
        )
    )
    assert [r / 1e9 for _, r in points] == pytest.approx([100, 172, 94, 35, 34, 34, 34])
    # A curve time of 1 s reading 20 GB over its 128 MiB cold set (20 GB/s, memory-bound against the ladder's 34
    # there) carried to a 2 GiB step (34 GB/s, held beyond the ladder): 1 x 34 / 34 = 1 s, not 1 x 17 / 34 = 0.5.
    profile = ladder((1 * MiB, 100e9), (16 * MiB, 172e9), (32 * MiB, 94e9), (64 * MiB, 35e9), (128 * MiB, 17e9),
                     (256 * MiB, 34e9), (512 * MiB, 34e9))  # fmt: skip
    assert cache.carried(profile, 1.0, 20e9, 2 * GiB, 128 * MiB) == pytest.approx(1.0)


def test_a_buffer_inside_the_cache_is_carried_to_memory_speed():
    # The read sum ran at 90 GB/s and weights_read at 60 GB/s over 128 MiB, which the ladder shows at 90 GB/s
    # against its 45 GB/s plateau from 512 MiB: both halve, to 45 and 30; the read is the decode bandwidth.
    steps = ladder((128 * MiB, 90e9), (512 * MiB, 45e9), (1 * GiB, 45e9))["bandwidth"]["read"]
    bandwidth = {
        "read": {"best_bytes_per_s": 90e9, "buffer_bytes": 128 * MiB, **steps},
        "weights_read": {"best_bytes_per_s": 60e9, "buffer_bytes": 128 * MiB},
    }
    assert decode_bandwidth(bandwidth) == ("read", pytest.approx(45e9))


def test_the_bound_reads_weights_that_fit_at_the_cache_speed():
    # A made-up device whose ladder reads 2x its memory speed up to 1 GiB. GPT-2 in fp16 streams ~250 MB a step,
    # inside it: a memory-bound decode step (batch 1, 1e15 FLOP/s) takes half as long as without the ladder.
    device = load_hardware("h100-sxm")._replace(memory_bandwidth=40e9, peak_flops={"fp16": 1e15, "fp32": 1e15})
    steps = ladder((256 * MiB, 80e9), (1 * GiB, 80e9), (2 * GiB, 40e9), (4 * GiB, 40e9))
    plain = estimate(load_model("gpt2"), device, batch=1, prompt_tokens=8, output_tokens=2, weight_dtype="fp16")
    cached = estimate(
        load_model("gpt2"),
        device._replace(measured=steps),
        batch=1,
        prompt_tokens=8,
        output_tokens=2,
        weight_dtype="fp16",
    )
    assert cached.tpot_s == pytest.approx(plain.tpot_s / 2)
    assert any("read ladder ran 2.00x" in n for n in cached.notes)


# A minimal measured profile for gpt2 in fp32: a flat curve at 1e10 FLOP/s (tests/test_validate.py's).
CURVE = MEASURED


@pytest.mark.parametrize(
    "buffer, points, scale",
    [
        # GPT-2's linears at the flat 1e10 FLOP/s read 4 B per 2 FLOPs: 20 GB/s. Its fp32 step streams ~500 MB.
        # 1. The curve read its 128 MiB at the ladder's 20 GB/s there (memory-bound); memory runs at 10 GB/s:
        #    the step takes 20 / 10 = 2x the curve's time.
        (128 * MiB, ((64 * MiB, 20e9), (128 * MiB, 20e9), (256 * MiB, 10e9), (1 * GiB, 10e9)), 2.0),
        # 2. The curve read at 20 of the ladder's 100 GB/s: the kernel, not memory, set its time, and memory at
        #    50 GB/s is still faster than the kernel: unchanged.
        (128 * MiB, ((64 * MiB, 100e9), (128 * MiB, 100e9), (256 * MiB, 50e9), (1 * GiB, 50e9)), 1.0),
        # 3. The same kernel over a memory of 10 GB/s: the memory time, 20 / 10 = 2x, is now the longer.
        (128 * MiB, ((64 * MiB, 100e9), (128 * MiB, 100e9), (256 * MiB, 10e9), (1 * GiB, 10e9)), 2.0),
        # 4. The curve memory-bound past the cache (4 GiB at 20 GB/s), the model inside a 40 GB/s cache: half.
        (4 * GiB, ((512 * MiB, 40e9), (1 * GiB, 40e9), (2 * GiB, 20e9), (4 * GiB, 20e9)), 0.5),
    ],
)
def test_the_decode_curve_is_carried_to_the_step_working_set(buffer, points, scale):
    device = load_hardware("h100-sxm")._replace(id="p", memory_bandwidth=50e9)
    flat = estimate(load_model("gpt2"), device._replace(measured=CURVE), batch=1, prompt_tokens=8, output_tokens=2)
    profile = {**CURVE, "plan": {"buffer_bytes": buffer}, **ladder(*points)}
    scaled = estimate(load_model("gpt2"), device._replace(measured=profile), batch=1, prompt_tokens=8, output_tokens=2)
    # The floor (FLOPs at the best matmul rate, 2e11) is 20x under the curve's 1e10: it does not bind.
    assert scaled.calibrated.decode_linear_s == pytest.approx(scale * flat.calibrated.decode_linear_s)
