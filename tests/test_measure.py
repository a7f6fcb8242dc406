"""`roofline measure` on the CPU with a tiny plan: accounting, verification, the profile, the CLI."""

import json
import re
import sys

import pytest
from typer.testing import CliRunner

from roofline.cli import app
from roofline.errors import RooflineError
from roofline.measure import bench, planner, profile, timing
from roofline.measure import kernels as measure_kernels
from roofline.specs.hardware import load_hardware

runner = CliRunner()
TINY = planner.MeasurePlan(
    squares=(64, 96),
    shapes=((32, 64, 48),),
    decode_m=(1, 2, 4),
    decode_ks=(128, 256),
    buffer_bytes=1 << 20,
    ladder_bytes=4 << 20,
    rounds=3,
    min_reps=2,
    min_time=0.0,
    max_time=0.05,
    max_call=1.0,
    round_time=0.005,
    curve_time=0.02,
    attention_time=0.01,
    budget_s=10.0,
    curve_window=60.0,  # a loaded machine must not cut the curve short: the test checks its shape, not its speed
)


@pytest.fixture(scope="module")
def tiny_result():
    pytest.importorskip("torch")
    return bench.run("cpu", ["fp32", "bf16"], plan=TINY)


def test_a_shape_timed_again_in_the_rounds_keeps_the_median_over_scan_and_rounds():
    from roofline.measure.bench import timed_again

    # Scan: best 4, median 3; three rounds of (best, median) (2.5, 2), (2.6, 2.4), (6, 5): best of all 6; the
    # median of [3, 2, 2.4, 5] is (2.4 + 3) / 2 = 2.7.
    scanned = {"shape": [128, 1024, 4096], "best_flop_per_s": 4.0, "median_flop_per_s": 3.0, "calls": 9}
    again = timed_again(scanned, [(2.5, 2.0), (2.6, 2.4), (6.0, 5.0)])
    assert again == {
        "best_flop_per_s": 6.0,
        "median_flop_per_s": pytest.approx(2.7),
        "median_over": "scan and rounds",
        "rounds": 3,
    }


def test_accounting_by_hand():
    # 2 x 2 x 3 x 4 = 48 FLOP: 2 x 4 outputs, 3 multiply-adds each.
    assert timing.matmul_flops(2, 3, 4) == 48
    # STREAM counts a copy of 100 B as 100 read + 100 written.
    assert timing.copy_bytes(100) == 200
    # 10 units of work in calls of 1, 2 and 5 s: best 10/1 = 10, median 10/2 = 5.
    assert timing.summary(10, [5.0, 1.0, 2.0]) == (10.0, 5.0)


def test_verification_fails_on_a_corrupted_result():
    torch = pytest.importorskip("torch")
    a, b = torch.rand(16, 8), torch.rand(8, 12)
    out = a @ b
    timing.verify_matmul(a, b, out, "fp32", "clean")  # passes
    out[0, 0] += 0.5
    with pytest.raises(timing.MeasureError, match="corrupt: result differs from the float64 reference"):
        timing.verify_matmul(a, b, out, "fp32", "corrupt")
    with pytest.raises(timing.MeasureError):
        timing.verify_close(torch.full((2,), float("nan")), torch.ones(2), "bf16", "nan")


def test_tiny_run_json_contract(tiny_result):
    r = json.loads(json.dumps(tiny_result))  # plain JSON, no NaN or objects
    assert {
        "schema_version",
        "device",
        "matmul",
        "bandwidth",
        "decode_matmul",
        "ridge_point_flop_per_byte",
        "elapsed_s",
    } <= set(r)
    assert {"kind", "name", "threads", "torch_version", "memory_capacity_bytes"} <= set(r["device"])
    assert r["device"]["kind"] == "cpu" and r["device"]["memory_capacity_bytes"] > 0
    for dtype in ("fp32", "bf16"):
        m = r["matmul"][dtype]
        assert {"best_flop_per_s", "median_flop_per_s", "best_shape", "verified"} <= set(m)
        assert m["verified"] is True and m["best_flop_per_s"] >= m["median_flop_per_s"] > 0
        assert len(m["best_shape"]) == 3
        points = r["decode_matmul"][dtype]
        order = [(p["k"], p["m"]) for p in points]
        if any(n.startswith(f"decode-shaped {dtype}: M = 1 and 2") for n in r["notes"]):
            # A dtype timed at under 10% of the fastest (bf16 can be, at these tiny shapes) gets the short curve.
            assert order == [(256, 1), (256, 2)] * 3  # the layer, tall and small weights
        else:
            layer = [(k, m) for k in (128, 256) for m in (1, 2, 4)]
            assert order == layer + [(128, 1), (128, 2), (128, 4)] * 2  # then the tall and the small weights
            assert points[-4]["n"] > points[0]["n"]  # the tall weights at the shortest rows
            assert [p["n"] for p in points if p.get("series") == "small"] == [128] * 3
        assert {"m", "k", "flop_per_s", "bytes_per_s"} <= set(r["decode_matmul"][dtype][0])
    for kernel in ("copy", "read", "weights_read", "gemv"):
        b = r["bandwidth"][kernel]
        assert {"best_bytes_per_s", "median_bytes_per_s", "buffer_bytes", "verified"} <= set(b)
        assert b["verified"] is True and b["best_bytes_per_s"] > 0
    for kernel in ("copy", "read", "weights_read"):  # the headline kernels: timed in interleaved rounds
        b = r["bandwidth"][kernel]
        assert b["rounds"] == 3 and b["cv"] >= 0 and b["unstable"] == (b["cv"] > 0.10)
        assert b["best_bytes_per_s"] >= b["median_bytes_per_s"] * 0.999
    for m in (m for m in r["matmul"].values() if not m.get("probe_only")):  # a slow dtype (no native bf16): probed
        assert m["rounds"] == 3 and m["unstable"] == (m["cv"] > 0.10)
        for s in (s for s in m["shapes"] if "rounds" in s):  # the LLM shape the rounds time again, for prefills
            assert s["rounds"] == 3 and s["best_flop_per_s"] >= s["median_flop_per_s"] > 0
            assert s["median_over"] == "scan and rounds"  # its median is the scan's and the rounds', not the scan's
    assert (
        r["bandwidth"]["copy"]["counts"] == "read + write" and r["bandwidth"]["weights_read"]["counts"] == "weight read"
    )
    assert r["bandwidth"]["copy"]["buffer_bytes"] == TINY.buffer_bytes
    assert {"budget_s", "buffer_bytes", "last_level_cache_bytes", "note"} <= set(r["plan"])
    # A ridge per measured dtype; the headline one is the fastest dtype's.
    assert set(r["ridge_points"]) == {"fp32", "bf16"}
    assert r["ridge_points"][r["ridge_dtype"]] == max(r["ridge_points"].values()) == r["ridge_point_flop_per_byte"]
    assert "tf32" not in r["matmul"]
    for dtype in ("fp32", "bf16"):  # each verified against float64 as it ran
        e = r["elementwise"][dtype]
        assert set(e["bytes_per_s"]) == {"binary", "silu", "tanh", "gelu_tanh", "rms_norm", "layer_norm"}
        assert set(e["bytes_per_s"]) == set(planner.ELEMENTWISE_KERNELS)  # what the planner budgeted
        assert all(rate > 0 for rate in e["bytes_per_s"].values()) and e["shape"][1] == 1024
    assert r["device"]["allocator"].startswith("glibc, keeping") or not sys.platform.startswith("linux")
    assert 0 < r["op_overhead_s"] < 0.01  # one tiny eager op: microseconds here (2.6-5.3 us), never 10 ms
    assert r["decode_attention"]
    for a in r["decode_attention"].values():  # causal prefill attention: the 128-token prompt always runs
        assert [p["prompt"] for p in a["prefill"]][:1] == [128] and all(p["flop_per_s"] > 0 for p in a["prefill"])


def test_decode_curve_bytes_are_weight_bytes(tiny_result):
    # bytes/s = FLOP/s x weight bytes / FLOPs = FLOP/s x (w n k size) / (2 M k w n) = FLOP/s x size / (2 M).
    for point in tiny_result["decode_matmul"]["fp32"]:
        assert point["bytes_per_s"] == pytest.approx(point["flop_per_s"] * 4 / (2 * point["m"]))


def test_a_pass_faster_than_the_rounds_ever_read_is_left_out():
    from roofline.measure.kernels import fast_passes

    # Rounds' best weights_read 16.0 GB/s: a pass whose reference read 20.5 is over 1.25 x 16.0 = 20.0, 19.9 is not.
    assert fast_passes([20.5e9, 16.2e9, 16.1e9], 16.0e9) == {0}
    assert fast_passes([19.9e9, 16.2e9, 16.1e9], 16.0e9) == set()
    assert fast_passes([21e9, 22e9], 16.0e9) == set()  # every pass over: none left out, as none would remain
    assert fast_passes([20.5e9, 16.2e9], None) == set()  # no rounds of this dtype's GEMV: no ceiling


def _scripted_curve(torch, ceiling: float | None, spent_after: int | None = None):
    """decode_curve over the layer, tall and small series at M = 1 (k = 256, a 4 MiB cold set: 4 weights of 1024
    rows), on a clock whose first call takes 1 ms and every other 2 ms, the budget spent after call `spent_after`.
    Returns (curve, notes)."""
    from roofline.measure import kernels
    from roofline.measure.timing import Clock

    class Scripted(Clock):
        calls = 0

        def times(self, fn, warmup=1, min_reps=None, min_time=None, max_time=None):
            fn()
            self.calls += 1
            if self.calls == spent_after:
                self.deadline = 0.0
            return [1e-3 if self.calls == 1 else 2e-3]

    def tensor(*shape, dtype):
        return torch.ones(*shape, dtype=torch.float32)

    plan = TINY._replace(decode_m=(1,), decode_ks=(256,), curve_time=1.0, max_call=1.0)
    notes: list[str] = []
    curve, _ = kernels.decode_curve(
        torch, Scripted(torch, "cpu", plan), tensor, "fp32", None, 1e12, COLD, notes, ceiling
    )
    return curve, notes


COLD = 4 * 2**20  # _scripted_curve's cold set
LAYER_FLOPS = 2 * 256 * 4 * 1024  # its layer point at M = 1: 2 x k x rows (4 weights of 1024 x 256)


def test_the_curve_prices_without_its_fast_pass():
    # Three passes; the layer point's first call (pass 1) takes 1 ms, every other 2 ms. By the stall rule alone the
    # layer point runs at its 1 ms rate (the 2 ms passes are 2x under it). With the rounds' ceiling at the 2 ms rate,
    # pass 1's reference reads 2x that: pass 1 is left out of every point, and the layer point runs at its 2 ms rate
    # from two passes.
    torch = pytest.importorskip("torch")
    curve, notes = _scripted_curve(torch, None)
    assert curve[0]["flop_per_s"] == pytest.approx(LAYER_FLOPS / 1e-3)
    assert [p["passes"] for p in curve] == [3, 3, 3] and not any("left out" in n for n in notes)
    curve, notes = _scripted_curve(torch, COLD / 2e-3)
    assert curve[0]["flop_per_s"] == pytest.approx(LAYER_FLOPS / 2e-3)
    assert [p["passes"] for p in curve] == [2, 2, 2] and sum("left out" in n for n in notes) == 1


def test_a_point_with_only_the_fast_pass_keeps_it():
    # The budget is spent once the second pass's first point ran (call 4): the layer point has passes 1 (1 ms, fast)
    # and 2; the tall and small points pass 1 only. Pass 1 is left out of the layer point, while the tall and small
    # points keep it (their only pass) instead of dropping out of the curve.
    torch = pytest.importorskip("torch")
    curve, _ = _scripted_curve(torch, COLD / 2e-3, spent_after=4)
    assert [p["passes"] for p in curve] == [1, 1, 1]  # layer: pass 2 alone; tall, small: pass 1, their only one
    assert curve[0]["flop_per_s"] == pytest.approx(LAYER_FLOPS / 2e-3)


def test_a_curve_whose_buffer_is_too_slow_to_read_keeps_its_m_1_points():
    # The AMX VM's quick profile: the planner sized 268 MiB buffers from a cache-inflated probe, a call over them
    # took longer than the cap, and every point of every curve was skipped, so validate fell back to the bare
    # roofline (ratios ~0.3). Here: a 64 MiB buffer, a 10 ms cap (curve_time / 2) and a read rate of 1 GB/s: the
    # cold set shrinks to 16 MiB (10 MB, floored at MIN_COLD), each series keeps its M = 1 point, and a note says so.
    torch = pytest.importorskip("torch")
    from roofline.measure import kernels
    from roofline.measure.timing import Clock

    def tensor(*shape, dtype):
        return torch.ones(*shape, dtype=torch.float32)

    plan = TINY._replace(max_call=1e-4, curve_time=0.02, decode_m=(1,), decode_ks=(256,))
    notes: list[str] = []
    curve, _ = kernels.decode_curve(torch, Clock(torch, "cpu", plan), tensor, "fp32", None, 1e9, 64 * 2**20, notes)
    assert [p["m"] for p in curve] == [1, 1, 1]  # the layer, tall and small weights
    # 16 weights of 1024 x 256 fp32 (1 MiB), two tall ones of 8192 rows, 128 small ones of 128 rows: 16 MiB each.
    assert [p["buffer_bytes"] for p in curve] == [16 * 2**20] * 3
    assert any("cold weights of 16 MiB, not the 64 MiB buffer" in n for n in notes)


def test_the_curves_cold_set_is_the_buffer_whatever_the_ladders_knee():
    # The knee once capped the cold set, to leave time for the passes; on a 2-core Zen 4 VM it came out 64 MiB in some
    # quick runs and 128 MiB in others (a 64 MiB set read 1.2x the plateau: cache hits), so the set flipped between
    # runs. Calls read the set in rotation now, so its size costs no time: a 64 MiB buffer is cycled whole with a
    # 32 MiB knee, a 4 MiB one or none (64 layer weights of 1024 x 256 fp32 = 1 MiB each, 64 MiB).
    torch = pytest.importorskip("torch")
    from roofline.measure import kernels
    from roofline.measure.timing import Clock

    def tensor(*shape, dtype):
        return torch.ones(*shape, dtype=torch.float32)

    plan = TINY._replace(max_call=1.0, curve_time=0.01, decode_m=(1,), decode_ks=(256,))
    for knee in (32 * 2**20, 4 * 2**20, None):
        notes: list[str] = []
        curve, _ = kernels.decode_curve(
            torch, Clock(torch, "cpu", plan), tensor, "fp32", None, 1e12, 64 * 2**20, notes, None, knee
        )
        assert [p["buffer_bytes"] for p in curve] == [64 * 2**20] * 3, knee
        assert all(1 <= p["weights_per_call"] <= 64 for p in curve[:1])


def test_the_curves_calls_read_its_weights_in_rotation():
    # A pool of 10 elements, worked by hand: two 1 x 2 weights read [0, 2) and [2, 4), the place at 4; two 1 x 3
    # weights (another point) go on from there, [4, 7) and [7, 10); a 1 x 2 weight would run past the end, so it
    # begins again at 0.
    from roofline.measure.kernels import Rotation

    class Pool:
        def numel(self):
            return 10

        def __getitem__(self, span):
            return Span(span.start, span.stop)

    class Span(tuple):
        def __new__(cls, start, stop):
            return super().__new__(cls, (start, stop))

        def view(self, n, k):
            assert self[1] - self[0] == n * k
            return self

    read: list[tuple[int, int]] = []

    def linear(x, w):
        read.append(tuple(w))
        return x

    turn = Rotation(Pool())
    assert turn.read(linear, "x", 1, 2, 2) == ("x", (2, 4)) and turn.at == 4
    assert turn.read(linear, "x", 1, 3, 2) == ("x", (7, 10)) and turn.at == 10
    assert turn.read(linear, "x", 1, 2, 1) == ("x", (0, 2)) and turn.at == 2
    assert read == [(0, 2), (2, 4), (4, 7), (7, 10), (0, 2)]
    # A place read before gives the view made then (made outside the timing of every later call), not a new one.
    first = turn.views[(0, 1, 2)]
    turn.at = 0
    assert turn.read(linear, "x", 1, 2, 1)[1] is first


def test_a_curve_points_rate_counts_the_weights_its_calls_read(monkeypatch):
    # Every F.linear the timed calls make is counted: a point's FLOPs per call are those of the weights a call read
    # (weights_per_call), so its rate is 2 x M x k x n x weights_per_call / the scripted 2 ms. A pass's share of
    # 10 us fits no F.linear, so every call reads one weight of the several its cold set holds.
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from roofline.measure import kernels
    from roofline.measure.timing import Clock

    linear, calls = F.linear, []
    monkeypatch.setattr(F, "linear", lambda x, w: calls.append(w.shape) or linear(x, w))

    class Scripted(Clock):
        def times(self, fn, warmup=1, min_reps=None, min_time=None, max_time=None):
            calls.clear()
            fn()
            self.read = len(calls)
            return [2e-3]

    def tensor(*shape, dtype):
        return torch.ones(*shape, dtype=torch.float32)

    plan = TINY._replace(decode_m=(1,), decode_ks=(256,), curve_time=3e-5, max_call=1.0)
    clock = Scripted(torch, "cpu", plan)
    curve, _ = kernels.decode_curve(torch, clock, tensor, "fp32", None, 1e12, COLD, [], None)
    assert [p["weights_per_call"] for p in curve] == [1, 1, 1] and clock.read == 1
    assert all(p["buffer_bytes"] > p["n"] * p["k"] * 4 for p in curve)  # several weights in each cold set
    for point in curve:
        assert point["flop_per_s"] == pytest.approx(2 * point["k"] * point["n"] / 2e-3)


def test_a_curve_begun_past_the_deadline_still_times_its_m_1_points():
    # A quick validate here (bf16, 2026-12-01): the phases before the curve spent the budget (the first torch call
    # took 1.6 s of a 5 s one), the curve's passes never began, the profile had no curve and validate printed bare
    # roofline ratios of 0.15-0.44. Past the deadline each series' M = 1 point still runs once; M = 2 does not.
    torch = pytest.importorskip("torch")
    import time

    from roofline.measure import kernels
    from roofline.measure.timing import Clock

    def tensor(*shape, dtype):
        return torch.ones(*shape, dtype=torch.float32)

    plan = TINY._replace(decode_m=(1, 2), decode_ks=(256,))
    notes: list[str] = []
    spent = Clock(torch, "cpu", plan, deadline=time.perf_counter() - 1.0)
    curve, _ = kernels.decode_curve(torch, spent, tensor, "fp32", None, 1e9, 4 * 2**20, notes)
    assert [p["m"] for p in curve] == [1, 1, 1]  # the layer, tall and small weights; no M = 2
    assert [p["passes"] for p in curve] == [1, 1, 1]  # the first pass only
    assert any("the time budget ran out within the curve's passes" in n for n in notes)


def test_saved_profile_loads_as_hardware(tiny_result, tmp_path):
    path = tmp_path / "here.yaml"
    profile.save(tiny_result, str(path))
    hw = load_hardware(str(path))
    assert hw.origin == "measured"
    assert hw.peak_flops["fp32"] == pytest.approx(tiny_result["matmul"]["fp32"]["best_flop_per_s"])
    _, read = bench.decode_bandwidth(tiny_result["bandwidth"])
    assert hw.memory_bandwidth == pytest.approx(read)
    assert hw.measured["decode_matmul"]["bf16"][0]["m"] == 1
    assert "memory_bandwidth is the best *read* bandwidth" in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["here.yaml"]  # no temp file left behind
    r = runner.invoke(
        app, ["estimate", "-q", "--json", "-H", str(path), "-m", "gpt2", "--prompt", "100", "--output", "10"]
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["hardware"]["figures"] == "measured"
    # A measured profile carries the curve, attention kernel and per-op cost: the calibrated prediction is given,
    # beside (never instead of) the roofline bound.
    assert data["calibrated"]["tpot_s"] > 0 and data["tpot_s"] > 0
    assert data["calibrated"]["tpot_s"] == pytest.approx(
        data["calibrated"]["decode_linear_s"]
        + data["calibrated"]["decode_attention_s"]
        + data["calibrated"]["decode_overhead_s"]
    )


def test_decode_bandwidth_prefers_the_best_read():
    bandwidth = {
        "copy": {"best_bytes_per_s": 50.0},
        "read": {"best_bytes_per_s": 30.0},
        "gemv": {"best_bytes_per_s": 40.0},
        "weights_read": {"best_bytes_per_s": 45.0},
    }
    assert bench.decode_bandwidth(bandwidth) == ("weights_read", 45.0)  # reads only: copy is not a decode-like kernel
    del bandwidth["weights_read"]
    assert bench.decode_bandwidth(bandwidth) == ("gemv", 40.0)


def test_ridges_per_dtype_and_the_slow_16_bit_note():
    # 300 GFLOP/s fp32 and 200 bf16 over a 20 GB/s read: ridges 15 and 10 FLOP/B; fp32 is the headline.
    matmul = {"fp32": {"best_flop_per_s": 300e9}, "bf16": {"best_flop_per_s": 200e9}}
    notes = []
    r = bench.ridges(matmul, {"read": {"best_bytes_per_s": 20e9}}, notes)
    assert r["ridge_points"] == {"fp32": pytest.approx(15.0), "bf16": pytest.approx(10.0)}
    assert r["ridge_dtype"] == "fp32" and r["ridge_point_flop_per_byte"] == pytest.approx(15.0)
    assert any("slower than fp32" in n for n in notes)
    notes = []
    r = bench.ridges(
        {"fp32": {"best_flop_per_s": 200e9}, "bf16": {"best_flop_per_s": 400e9}},
        {"read": {"best_bytes_per_s": 20e9}},
        notes,
    )
    assert r["ridge_dtype"] == "bf16" and r["ridge_point_flop_per_byte"] == pytest.approx(20.0) and notes == []


def test_stability_over_rounds_by_hand():
    from roofline.measure.kernels import stability

    # Rounds at 90, 100, 110: mean 100, population sd sqrt(200/3) = 8.165: cv 0.0816, stable.
    s = stability([90.0, 100.0, 110.0], [85.0, 95.0, 105.0])
    assert s["best_bytes_per_s"] == 110.0 and s["median_bytes_per_s"] == 95.0 and s["rounds"] == 3
    assert s["cv"] == pytest.approx((200 / 3) ** 0.5 / 100) and s["unstable"] is False
    assert stability([50.0, 100.0, 150.0], [50.0, 100.0, 150.0])["unstable"] is True  # cv 0.41


# (kind, last-level cache, free memory, read B/s, FLOP/s): a 1 GiB-LLC slow VM, this kind, a GPU, a tiny box
MACHINES = {
    "1 GiB LLC, slow": planner.Machine("cpu", 2**30, 8e9, 5e9, 10e9),
    "2-core VM": planner.Machine("cpu", 32 * 2**20, 20e9, 20e9, 180e9),
    "H200-like": planner.Machine("cuda", 60 * 2**20, 130e9, 4.8e12, 800e12),
    "tiny": planner.Machine("cpu", 8 * 2**20, 1e9, 2e9, 2e9),
    "128 cores": planner.Machine("cpu", 512 * 2**20, 500e9, 300e9, 10e12),
    "480 MiB LLC, AMX VM": planner.Machine("cpu", 480 * 2**20, 20e9, 30e9, 436e9),
}


@pytest.mark.parametrize("name", sorted(MACHINES))
@pytest.mark.parametrize("quick", [False, True])
def test_the_planned_work_fits_the_budget(name, quick):
    m = MACHINES[name]
    budget = planner.QUICK_BUDGET_S if quick else planner.BUDGET_S
    left = planner.PLANNED_SHARE * budget - planner.RESERVE_S - 2.0  # torch's import: ~1.5-2 s on these machines
    # (matmul dtypes, curve dtypes): `measure --dtype fp32` also runs the bf16 weight dtype's curve
    for dtypes, curves in ((1, 1), (1, 2), (3, 3)):
        p = planner.plan(m, quick, left, dtypes, curves)
        assert planner.planned_seconds(p, m, dtypes, curves) <= left, (name, dtypes, curves)
        assert p.buffer_bytes >= 4 * 2**20
        assert (p.note != "") == (p.buffer_bytes < 4 * m.last_level_cache_bytes)


def test_the_read_ladder_reaches_past_the_cache_the_other_buffers_cannot():
    # The AMX VM of the Measure anywhere issue: sysfs says 480 MiB of L3, the host's. In a full run the ladder gets
    # 6% of the ~15 s left, 0.9 s: at 30 GB/s and 16 whole-buffer passes (a fill ~10, reads ~6) that is 1.69e9 B,
    # past twice the reported cache, while the other buffers stay at what a copy in a round allows.
    m = MACHINES["480 MiB LLC, AMX VM"]
    p = planner.plan(m, False, 15.0, 3)
    assert p.ladder_bytes == int(0.06 * 15.0 * 30e9 / 16) // 2**20 * 2**20 and p.ladder_bytes > 2 * 480 * 2**20
    assert p.buffer_bytes < 4 * 480 * 2**20 < p.ladder_bytes * 2
    fast = planner.Machine("cpu", 8 * 2**20, 1e9, 30e9, 100e9)  # 1 GB free: the ladder stops at an eighth of it
    assert planner.plan(fast, False, 15.0, 3).ladder_bytes == int(1e9 / 8) // 2**20 * 2**20


def test_the_read_ladder_stops_before_a_fill_that_would_pass_the_deadline():
    # First-touching memory ran 0.6-4.3 GB/s on the Zen 5 VM (820 MiB took 0.2-1.5 s): a ladder buffer sized
    # beforehand spent the curve's time. The ladder fills as it climbs and, from the rate of its fills so far, stops
    # before one that would pass the deadline. Here a clock with 0 s left: the first point (nothing filled yet, no
    # rate) runs, then a fill of one more 256 KiB would take > 0 s, so it stops there; with time, it climbs to 4 MiB.
    torch = pytest.importorskip("torch")
    from roofline.measure import kernels
    from roofline.measure.timing import Clock

    class Spent(Clock):
        def left(self) -> float:
            return 0.0

    dev = torch.device("cpu")
    assert [p["bytes"] for p in kernels.read_ladder(torch, Spent(torch, "cpu", TINY), dev, 4 * 2**20, 1e-4)] == [
        256 * 2**10
    ]
    full = kernels.read_ladder(torch, Clock(torch, "cpu", TINY), dev, 4 * 2**20, 1e-4)
    assert [p["bytes"] / 2**20 for p in full] == [0.25, 0.5, 1, 2, 4] and all(p["fill_bytes_per_s"] > 0 for p in full)


def test_a_1_gib_cache_gets_buffers_the_budget_allows_and_says_so():
    m = MACHINES["1 GiB LLC, slow"]
    p = planner.plan(m, False, 15.0, 3)
    # The old rule (4 x LLC) would read 4 GiB per call at 5 GB/s: 0.8 s a call. The plan keeps a copy under half a
    # round.
    assert p.buffer_bytes < 4 * 2**30 and 2 * p.buffer_bytes / m.read_bytes_per_s <= p.round_time / 2 + 1e-9
    assert "under 4x the last-level cache (1024 MiB)" in p.note and "time budget" in p.note


def test_layer_sized_weights():
    # k = 4096 in bf16: 4k rows = 16,384 x 4096 x 2 B = 128 MiB > 64 MiB: capped at 8,192 rows (64 MiB).
    assert planner.weight_rows(4096, 2) == 8192
    # k = 512 in fp32: 2,048 rows x 512 x 4 B = 4 MiB: 4k rows as they are.
    assert planner.weight_rows(512, 4) == 2048
    # k = 128 in fp32: 512 rows = 256 KiB < 1 MiB: raised to 1 MiB = 2,048 rows.
    assert planner.weight_rows(128, 4) == 2048


def test_shrinking_halves_on_out_of_memory():
    torch = pytest.importorskip("torch")
    oom = measure_kernels.out_of_memory(torch)[0]
    sizes, notes = [], []

    def allocate(size):
        sizes.append(size)
        if size > 64 << 20:
            raise oom("out of memory")
        return size

    assert measure_kernels.shrinking(torch, allocate, 256 << 20, "buffers", notes) == 64 << 20
    assert sizes == [256 << 20, 128 << 20, 64 << 20] and len(notes) == 2
    with pytest.raises(timing.MeasureError, match="out of device memory"):
        measure_kernels.shrinking(torch, allocate, 256 << 20, "buffers", [], floor=200 << 20)


def test_datasheet_matching_and_comparison():
    assert profile.match_datasheet("NVIDIA H100 80GB HBM3").id == "h100-sxm"
    assert profile.match_datasheet("nvidia  H200").id == "h200"
    assert profile.match_datasheet("NVIDIA A10").id == "a10"  # exact names: not confused with A100
    assert profile.match_datasheet("Some Future GPU") is None
    result = {
        "matmul": {"bf16": {"best_flop_per_s": 742e12}, "fp16": {"best_flop_per_s": 1e12}},
        "bandwidth": {"read": {"best_bytes_per_s": 2.68e12}, "gemv": None},
    }
    c = profile.comparison(result, load_hardware("h100-sxm"))
    # 742 / 989.4 = 75.0% of the dense bf16 peak; 2.68 / 3.35 TB/s = 80%.
    assert c["matmul_fraction_of_peak"]["bf16"] == pytest.approx(0.74995, abs=1e-4)
    assert c["bandwidth_fraction_of_peak"] == {"read": pytest.approx(0.8)}


def test_cli_measure_json_and_save(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setattr(planner, "plan", lambda *args: TINY)
    path = tmp_path / "p.yaml"
    r = runner.invoke(
        app,
        ["measure", "--quick", "--device", "cpu", "--dtype", "fp32", "--json", "--save", str(path), "-H", "epyc-9755"],
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["datasheet"]["id"] == "epyc-9755" and set(data["matmul"]) == {"fp32"}
    assert path.exists() and "saved" in r.stderr
    table = runner.invoke(app, ["measure", "--quick", "--device", "cpu", "--dtype", "fp32"])
    assert table.exit_code == 0 and "copy (read + write)" in table.stdout and "measured ridge" in table.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["--device", "tpu"], "--device: expected one of auto, cpu, cuda, mps"),
        (["--dtype", "fp64"], "--dtype: unknown dtype 'fp64'"),
        (["--dtype", ","], "--dtype: expected a comma-separated list"),
    ],
)
def test_cli_measure_usage_errors(args, words):
    pytest.importorskip("torch")
    r = runner.invoke(app, ["measure", *args])
    assert r.exit_code == 2 and r.stderr.strip().startswith("roofline: error: ") and words in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cuda_requested_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    r = runner.invoke(app, ["measure", "--device", "cuda"])
    assert r.exit_code == 2 and "--device: cuda is not available here" in r.stderr


def test_without_torch_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    r = runner.invoke(app, ["measure"])
    assert r.exit_code == 1
    assert r.stderr.strip() == "roofline: error: roofline measure needs torch: pip install 'roofline[measure]'"


def test_ctrl_c_exits_130_and_writes_nothing(monkeypatch, tmp_path):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run", interrupted)
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["measure", "--save", str(path)])
    assert r.exit_code == 130 and not path.exists()


def test_save_to_a_folder_is_an_error(tiny_result, tmp_path):
    with pytest.raises(RooflineError, match="is a folder"):
        profile.save(tiny_result, str(tmp_path))


def test_writes_go_through_a_symlink_and_never_replace_a_pipe(tmp_path):
    # The writer renames a temp file onto the target: onto a symlink it would replace the link, onto a FIFO or a
    # device node (run as root: /dev/full) the node itself. A link is written through; a pipe is refused.
    import os

    from roofline.files import atomic_write

    real, link, pipe = tmp_path / "real.csv", tmp_path / "link.csv", tmp_path / "pipe"
    link.symlink_to(real)
    with atomic_write(str(link), "--out") as f:
        f.write("a,b\n")
    assert link.is_symlink() and real.read_text() == "a,b\n"
    os.mkfifo(pipe)
    with pytest.raises(RooflineError, match="--per-request: .*pipe' is not a regular file"):
        with atomic_write(str(pipe), "--per-request") as f:
            f.write("x")
    assert not pipe.is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["link.csv", "pipe", "real.csv"]


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not has_cuda(), reason="needs CUDA")
def test_tiny_cuda_run():
    plan = TINY._replace(buffer_bytes=64 << 20)
    r = bench.run("cuda", ["fp32", "tf32", "bf16"], plan=plan)
    assert r["device"]["kind"] == "cuda" and r["matmul"]["tf32"]["verified"]


def test_a_dtype_too_slow_for_the_budget_is_reported_at_the_probe_with_a_note():
    pytest.importorskip("torch")
    r = bench.run("cpu", ["fp32"], plan=TINY._replace(max_call=1e-12, max_time=1e-12, curve_time=1e-12))
    assert r["matmul"]["fp32"]["best_shape"] == [256, 256, 256]
    # The LLM shape's cap (max_time / 2) and the squares' (max_call) each get a note.
    assert any(re.match(r"matmul fp32: 32x64x48 \(\S+ s\) skipped, over 5e-13 s", n) for n in r["notes"])
    assert any(re.match(r"matmul fp32: 64x64x64 \(\S+ s\), 96x96x96 \(\S+ s\) skipped", n) for n in r["notes"])
    assert any("decode-shaped" in n and "skipped" in n for n in r["notes"])


def test_machine_record_reads_caches_per_level_and_flags(tmp_path):
    from roofline.measure import machine

    # A 2-core sysfs as Linux lays it out: a private 48 KiB L1d per core, one 32 MiB L3 both cores share.
    for cpu in (0, 1):
        for index, (level, kind, size, shared) in enumerate(
            [(1, "Data", "48K", str(cpu)), (3, "Unified", "32768K", "0-1")]
        ):
            folder = tmp_path / f"cpu{cpu}" / "cache" / f"index{index}"
            folder.mkdir(parents=True)
            for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
                (folder / name).write_text(f"{value}\n")
    assert machine.cache_levels(str(tmp_path)) == {
        "L1d": {"bytes": 48 * 1024, "instances": 2},
        "L3": {"bytes": 32 * 2**20, "instances": 1},
    }
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: X\nflags\t\t: fpu avx2 amx_tile avx512_bf16 amx_bf16 sse\n")
    assert machine.cpu_flags(str(info)) == ["avx2", "avx512_bf16", "amx_tile", "amx_bf16"]


def test_knee_of_the_read_ladder_by_hand():
    from roofline.measure.kernels import knee

    def ladder(rates):
        return [{"bytes": 2.0**20 * 2**i, "bytes_per_s": r * 1e9} for i, r in enumerate(rates)]

    # In cache up to 4 MiB (100 GB/s), memory speed (40 GB/s) from 8 MiB: the cache the curve shows is 4 MiB.
    found = knee(ladder([100, 100, 100, 40, 41, 40]))
    assert found == {"plateau_bytes_per_s": 40e9, "knee_bytes": 8 * 2**20, "cache_bytes": 4 * 2**20, "reached": True}
    # Still dropping at the end (100 -> 50 GB/s between the last two): no plateau, the last figure may be a cache's.
    assert knee(ladder([100, 100, 100, 50]))["reached"] is False
    # Within 25% of the largest working set's everywhere: no cache seen.
    assert knee(ladder([49, 45, 40, 40]))["cache_bytes"] is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_memory_is_kept_so_a_second_buffer_faults_no_pages():
    import resource

    from roofline.measure.allocator import keep_freed_memory

    assert keep_freed_memory().startswith("glibc, keeping")
    size = 64 * 2**20  # above glibc's largest mmap threshold (32 MiB): by default mapped afresh, faulted again
    buffer = bytearray(size)  # zero-filled: every page touched
    del buffer
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffer = bytearray(size)
    faulted = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    # By default every one of its 16,384 pages faults again.
    assert len(buffer) == size and faulted < 0.05 * size / resource.getpagesize()


def test_an_llm_shape_over_the_cap_is_narrowed_by_hand():
    from roofline.measure.kernels import fitting_outputs

    # 2 x 256 x 4096 = 2,097,152 FLOP an output: 2,479 fit 5.2 GFLOP (140 GFLOP/s x 37 ms); in steps of 256, 2304.
    assert fitting_outputs(256, 4096, 4096, 5.2e9) == 2304
    # 2 x 512 x 4096 = 4,194,304 FLOP an output: 1,239 fit 5.2 GFLOP, so 1024 (halving 14336 would skip 1024: 1792,
    # then 896); 4.0 GFLOP fits 953, under 1024: none.
    assert fitting_outputs(512, 4096, 14336, 5.2e9) == 1024
    assert fitting_outputs(512, 4096, 14336, 4.0e9) is None
    # 2 x 128 x 1024 = 262,144 FLOP an output: 1,483 fit 0.389 GFLOP (134 GFLOP/s x 2.9 ms): 1280.
    assert fitting_outputs(128, 1024, 4096, 0.389e9) == 1280
    assert fitting_outputs(128, 1024, 4096, 1.1e9) == 4096  # 1.07 GFLOP fits as planned
    # A planned shape that fits keeps its outputs, under 1024 or off the 256 grid: 2 x 32 x 64 x 48 = 196,608 FLOP.
    assert fitting_outputs(32, 64, 48, 2e5) == 48
    assert fitting_outputs(128, 1024, 1500, 1e9) == 1500  # 393 MFLOP


class _Fixed:
    """A clock on which every timed call takes 1 ms: the probe's 256^3 (33.6 MFLOP) runs at 33.6 GFLOP/s."""

    kind = "cpu"

    def __init__(self, plan):
        self.plan = plan

    def times(self, fn, **_):
        fn()
        return [1e-3]


def _scan(plan):
    torch = pytest.importorskip("torch")
    notes = []
    result = measure_kernels.matmul_scan(
        torch, _Fixed(plan), lambda *shape, dtype: torch.rand(*shape), "fp32", notes, lambda s: None
    )
    return {tuple(s["shape"]): s for s in result["shapes"]}, notes


def test_the_scan_narrows_llm_shapes_and_keeps_the_probe_square():
    shapes, notes = _scan(TINY._replace(squares=(512,), shapes=((64, 256, 4096),), max_call=1e-3, max_time=3.3e-3))
    # An LLM shape's cap is a third of the planner's 1.5 x max_time for it (1.65 ms, 55.4 MFLOP at 33.6 GFLOP/s):
    # 64 x 256 x 4096 (134 MFLOP; 32,768 FLOP an output) runs with 1536 outputs (1,689 fit; under max_call's cap,
    # 1 ms, 1024 would). Then at its 50.3 GFLOP/s a square's cap (max_call, 1 ms) is 50.3 MFLOP a call: 512^3
    # (268 MFLOP, 5.33 ms) is skipped. No planned square ran: the probe's is reported.
    assert set(shapes) == {(64, 256, 1536), (256, 256, 256)}
    assert shapes[(64, 256, 1536)]["planned_shape"] == [64, 256, 4096]
    assert any("64x256x4096 timed with 1536 outputs, to fit 0.00165 s" in n for n in notes)
    assert any("512x512x512 (0.00533 s) skipped, over 0.001 s per call" in n for n in notes)


def test_a_skipped_shapes_time_goes_to_the_next_llm_shape():
    shapes, notes = _scan(TINY._replace(squares=(384,), shapes=((128, 256, 4096),), max_call=1e-3, max_time=3.3e-3))
    # 384^3 (113 MFLOP) takes 3.4 ms at the probe's 33.6 GFLOP/s, over max_call (1 ms): skipped, and the planner's
    # max_time + max_call for it (4.3 ms) goes to 128 x 256 x 4096 (268 MFLOP; 65,536 FLOP an output). Its cap is
    # then (4.95 + 4.3) / 3 = 3.083 ms, 103.5 MFLOP: 1536 outputs (1,578 fit), where its own 1.65 ms (844) fit none.
    assert set(shapes) == {(128, 256, 1536), (256, 256, 256)}
    assert any("128x256x4096 timed with 1536 outputs, to fit 0.00308333 s" in n for n in notes)
    assert any("384x384x384" in n and "skipped" in n for n in notes)


def test_the_rounds_time_again_the_first_llm_shape_whose_call_fits_a_round():
    plan = TINY._replace(max_call=10.7e-3)  # a quick fp32 plan's round cap on a 2-core Zen 4 VM
    # 2 x 128 x 1024 x 4096 = 1.07 GFLOP at 133 GFLOP/s: 8.1 ms, within the cap.
    assert bench._round_prefill({"shape": [128, 1024, 4096], "best_flop_per_s": 133e9}, plan)
    # 2 x 256 x 4096 x 2048 = 4.29 GFLOP at 160 GFLOP/s: 26.8 ms, which only the scan's own cap lets run.
    assert not bench._round_prefill({"shape": [256, 4096, 2048], "best_flop_per_s": 160e9}, plan)
    assert not bench._round_prefill({"shape": [512, 512, 512], "best_flop_per_s": 1e15}, plan)  # a square


def test_every_curve_point_records_its_passes(tiny_result):
    # Every point records its passes: all CURVE_PASSES of them, less the passes a note says were left out as faster
    # than the rounds' reads (fast_passes), unless the time budget ran out within the passes, which the result then
    # says for that dtype. The tiny plan's 60 s window fits them on a calm machine; on a disturbed 2-core VM it once
    # did not (CI, 2026-12-06), and once one pass was left out as fast (CI, 2026-12-07).
    for dtype, curve in tiny_result["decode_matmul"].items():
        assert curve and all(1 <= p["passes"] <= measure_kernels.CURVE_PASSES for p in curve)
        notes = tiny_result["notes"]
        ran_out = any(n.startswith(f"decode-shaped {dtype}: the time budget ran out") for n in notes)
        left_out = [n for n in notes if n.startswith(f"decode-shaped {dtype}: pass ")]
        kept = measure_kernels.CURVE_PASSES
        if left_out:  # "pass 1, 3 of 3 left out, ..."
            listed, of = re.match(r"decode-shaped \S+: pass ([\d, ]+) of (\d+) left out", left_out[0]).groups()
            kept = int(of) - len(listed.split(","))
        assert ran_out or all(p["passes"] == kept for p in curve), dtype


def test_a_dtype_the_probe_finds_slow_keeps_its_probe_only(monkeypatch):
    # The plan budgets the dtypes the probe finds fast: on a 2-core AVX2 Zen 3 VM (bf16 and fp16 at 1.3 GFLOP/s against
    # fp32's 137) their scans and rounds had taken ~0.3 s of a quick run's ~1.0-1.3 s of timing, unplanned.
    pytest.importorskip("torch")
    real = bench._probe

    def probe(*args):
        read, rates = real(*args)
        return read, {**rates, "bf16": 1e6}

    monkeypatch.setattr(bench, "_probe", probe)
    result = bench.run("cpu", ["fp32", "bf16"], plan=TINY, weight_dtype="fp32")
    bf16, fp32 = result["matmul"]["bf16"], result["matmul"]["fp32"]
    assert bf16["best_flop_per_s"] == 1e6 and bf16["probe_only"] and bf16["verified"] and "rounds" not in bf16
    assert "rounds" in fp32 and "probe_only" not in fp32
    assert any("matmul bf16: its 256^3 probe only (0.001 GFLOP/s" in n for n in result["notes"])
