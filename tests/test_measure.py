"""`roofline measure` on the CPU with a tiny plan: accounting, verification, the profile, the CLI."""

import json
import sys

import pytest
from typer.testing import CliRunner

from roofline.measure import bench, timing
from roofline.measure import kernels as measure_kernels
from roofline.measure import profile
from roofline.cli import app
from roofline.errors import RooflineError
from roofline.specs.hardware import load_hardware

runner = CliRunner()
TINY = timing.Plan(
    squares=(64, 96), shapes=((32, 64, 48),), decode_m=(1, 2, 4), decode_ks=(128, 256), buffer_floor=1 << 20,
    min_reps=2, min_time=0.0, max_time=0.05, max_call=1.0,
)


@pytest.fixture(scope="module")
def tiny_result():
    pytest.importorskip("torch")
    return bench.run("cpu", ["fp32", "bf16"], plan=TINY)


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
    assert {"schema_version", "device", "matmul", "bandwidth", "decode_matmul", "ridge_point_flop_per_byte", "elapsed_s"} <= set(r)
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
            assert order == [(256, 1), (256, 2), (256, 1), (256, 2)]
        else:
            assert order == [(128, 1), (128, 2), (128, 4), (256, 1), (256, 2), (256, 4), (128, 1), (128, 2), (128, 4)]
            assert points[-1]["n"] > points[0]["n"]  # the last series is one tall weight at the shortest rows
        assert {"m", "k", "flop_per_s", "bytes_per_s"} <= set(r["decode_matmul"][dtype][0])
    for kernel in ("copy", "read", "gemv"):
        b = r["bandwidth"][kernel]
        assert {"best_bytes_per_s", "median_bytes_per_s", "buffer_bytes", "verified"} <= set(b)
        assert b["verified"] is True and b["best_bytes_per_s"] > 0
    assert r["bandwidth"]["copy"]["counts"] == "read + write"
    # Buffers are at least 4x the last-level cache.
    assert r["bandwidth"]["copy"]["buffer_bytes"] >= min(4 * r["device"]["last_level_cache_bytes"], 2**30) - 2**20
    assert "tf32" not in r["matmul"]
    assert 0 < r["op_overhead_s"] < 0.01  # one tiny eager op: microseconds here (2.6-5.3 us), never 10 ms


def test_decode_curve_bytes_are_weight_bytes(tiny_result):
    # bytes/s = FLOP/s x weight bytes / FLOPs = FLOP/s x (w n k size) / (2 M k w n) = FLOP/s x size / (2 M).
    for point in tiny_result["decode_matmul"]["fp32"]:
        assert point["bytes_per_s"] == pytest.approx(point["flop_per_s"] * 4 / (2 * point["m"]))


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
    r = runner.invoke(app, ["estimate", "-q", "--json", "-H", str(path), "-m", "gpt2", "--prompt", "100", "--output", "10"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["hardware"]["figures"] == "measured"
    # A measured profile carries the curve, attention kernel and per-op cost: the calibrated prediction is given,
    # beside (never instead of) the roofline bound.
    assert data["calibrated"]["tpot_s"] > 0 and data["tpot_s"] > 0
    assert data["calibrated"]["tpot_s"] == pytest.approx(
        data["calibrated"]["decode_linear_s"] + data["calibrated"]["decode_attention_s"] + data["calibrated"]["decode_overhead_s"])


def test_decode_bandwidth_prefers_the_best_read():
    bandwidth = {"copy": {"best_bytes_per_s": 50.0}, "read": {"best_bytes_per_s": 30.0}, "gemv": {"best_bytes_per_s": 40.0}}
    assert bench.decode_bandwidth(bandwidth) == ("gemv", 40.0)  # reads only: copy is not a decode-like kernel


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
    result = {"matmul": {"bf16": {"best_flop_per_s": 742e12}, "fp16": {"best_flop_per_s": 1e12}}, "bandwidth": {"read": {"best_bytes_per_s": 2.68e12}, "gemv": None}}
    c = profile.comparison(result, load_hardware("h100-sxm"))
    # 742 / 989.4 = 75.0% of the dense bf16 peak; 2.68 / 3.35 TB/s = 80%.
    assert c["matmul_fraction_of_peak"]["bf16"] == pytest.approx(0.74995, abs=1e-4)
    assert c["bandwidth_fraction_of_peak"] == {"read": pytest.approx(0.8)}


def test_cli_measure_json_and_save(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setattr(bench, "CPU_QUICK", TINY)
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["measure", "--quick", "--device", "cpu", "--dtype", "fp32", "--json", "--save", str(path), "-H", "epyc-9755"])
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


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.skipif(not has_cuda(), reason="needs CUDA")
def test_tiny_cuda_run():
    plan = TINY._replace(buffer_floor=64 << 20)
    r = bench.run("cuda", ["fp32", "tf32", "bf16"], plan=plan)
    assert r["device"]["kind"] == "cuda" and r["matmul"]["tf32"]["verified"]


def test_a_dtype_too_slow_for_the_budget_is_reported_at_the_probe_with_a_note():
    pytest.importorskip("torch")
    r = bench.run("cpu", ["fp32"], plan=TINY._replace(max_call=1e-12))
    assert r["matmul"]["fp32"]["best_shape"] == [256, 256, 256]
    assert any("matmul fp32: 32x64x48, 64x64x64, 96x96x96 skipped" in n for n in r["notes"])
    assert any("decode-shaped" in n and "skipped" in n for n in r["notes"])
