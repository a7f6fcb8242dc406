"""`measure --collectives` with 2 gloo processes on the CPU (as CI runs it), and the all-reduce formulas."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from roofline.calc.formulas import ring_allreduce_seconds
from roofline.cli import app
from roofline.errors import UsageError
from roofline.measure import collectives, profile
from roofline.specs.hardware import load_hardware

runner = CliRunner()


def test_bus_bandwidth_by_hand():
    # nccl-tests: busbw = algbw x 2 (N - 1) / N: x 1 for 2 ranks, x 1.75 for 8.
    assert collectives.bus_bandwidth(100.0, 2) == 100.0
    assert collectives.bus_bandwidth(100.0, 8) == 175.0


def test_ring_allreduce_by_hand():
    # 8 devices, 16 MiB message, 450 GB/s links, 10 us: 2 x 7/8 x 16,777,216 / 450e9 + 10e-6 = 75.24 us.
    assert ring_allreduce_seconds(16 * 2**20, 8, 450e9, 10e-6) == pytest.approx(2 * 7 / 8 * 16 * 2**20 / 450e9 + 10e-6)


@pytest.fixture(scope="module")
def two_gloo_processes():
    pytest.importorskip("torch")
    return collectives.run(devices=2, device="cpu", sizes=[4096, 65536], min_time=0.0)


def test_two_gloo_processes(two_gloo_processes):
    r = json.loads(json.dumps(two_gloo_processes))
    assert r["backend"] == "gloo" and r["devices"] == 2 and r["verified"] is True
    assert [row["bytes"] for row in r["sizes"]] == [4096, 65536]
    for row in r["sizes"]:
        assert row["algbw_bytes_per_s"] == pytest.approx(row["bytes"] / row["time_s"])
        assert row["busbw_bytes_per_s"] == pytest.approx(row["algbw_bytes_per_s"])  # 2 (N-1)/N = 1 for N = 2
    assert r["latency_s"] == min(row["time_s"] for row in r["sizes"]) > 0


def test_cli_collectives_save_updates_a_copy_of_the_datasheet(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    monkeypatch.setattr(collectives, "QUICK_SIZES", [4096, 65536])
    path = tmp_path / "cpu.yaml"
    r = runner.invoke(
        app,
        ["measure", "--collectives", "--quick", "--device", "cpu", "--json", "--save", str(path), "-H", "epyc-9755"],
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    saved = load_hardware(str(path))
    assert saved.interconnect_bandwidth == pytest.approx(data["bus_bandwidth_bytes_per_s"])
    assert saved.interconnect_latency == pytest.approx(data["latency_s"])
    assert saved.peak_flops == load_hardware("epyc-9755").peak_flops and saved.measured["collectives"]["devices"] == 2
    e = runner.invoke(
        app, ["estimate", "-q", "--json", "-H", str(path), "-m", "gpt2", "--tp", "2", "--prompt", "64", "--output", "4"]
    )
    assert e.exit_code == 0 and json.loads(e.stdout)["inputs"]["collective_latency_s"] == pytest.approx(
        data["latency_s"]
    )


def test_cli_collectives_errors(tmp_path):
    r = runner.invoke(app, ["measure", "--collectives", "--devices", "1"])
    assert r.exit_code == 2
    r = runner.invoke(app, ["measure", "--collectives", "--save", str(tmp_path / "none.yaml")])
    assert r.exit_code == 2 and "does not exist" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_launcher_detection():
    assert collectives.launcher({}) is None
    # torchrun across 2 nodes of 8 GPUs: rank 9 is node 1's second process.
    env = {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "8"}
    assert collectives.launcher(env) == {"rank": 9, "world": 16, "local_rank": 1, "local_world": 8, "nodes": 2}
    assert collectives.launcher({"RANK": "0", "WORLD_SIZE": "2"})["nodes"] == 1  # LOCAL_* default to one node
    with pytest.raises(UsageError):
        collectives.launcher({"RANK": "5", "WORLD_SIZE": "2"})


def test_devices_is_refused_under_a_launcher(monkeypatch):
    pytest.importorskip("torch")
    for key, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    r = runner.invoke(app, ["measure", "--collectives", "--devices", "2", "--device", "cpu"])
    assert r.exit_code == 2 and "--devices: not under a launcher" in r.stderr


def test_a_measurement_across_nodes_saves_the_internode_tier(tmp_path):
    base = load_hardware("h100-sxm")
    result = {
        "backend": "nccl",
        "devices": 16,
        "nodes": 2,
        "bus_bandwidth_bytes_per_s": 45e9,
        "latency_s": 30e-6,
        "sizes": [],
    }
    path = tmp_path / "two-nodes.yaml"
    profile.save_collectives(result, str(path), base)
    saved = load_hardware(str(path))
    assert saved.internode_bandwidth == 45e9 and saved.internode_latency == 30e-6 and saved.devices_per_node == 8
    assert saved.interconnect_bandwidth == base.interconnect_bandwidth  # the NVLink figure is left as it was


def test_torchrun_two_gloo_processes():
    # What CI runs: torch.distributed's own launcher, 2 CPU processes, only rank 0 prints.
    pytest.importorskip("torch")
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "roofline",
        "measure",
        "--collectives",
        "--quick",
        "--device",
        "cpu",
        "--json",
    ]
    r = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads(r.stdout)  # one JSON document: rank 1 printed nothing
    assert data["launcher"] == "torchrun" and data["devices"] == 2 and data["nodes"] == 1 and data["verified"] is True
