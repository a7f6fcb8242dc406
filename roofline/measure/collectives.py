"""`measure --collectives`: all-reduce bandwidth and latency over N local processes, as nccl-tests does.

torch.distributed runs one process per device (NCCL across local GPUs, gloo across CPU processes), each
all-reducing float32 buffers from KiB to hundreds of MiB, back to back. Per size: time per all-reduce (the
slowest rank's), algorithm bandwidth = bytes / time and bus bandwidth = algbw x 2 (N - 1) / N, the figure
comparable to one link's speed (nccl-tests, doc/PERFORMANCE.md). Latency is the shortest all-reduce time
(the smallest messages').
A sum of known values checks the reduction first; a wrong sum is an error, not a number.

Under torch.distributed's own launcher (torchrun, or srun + torchrun across nodes: RANK and WORLD_SIZE set),
this process is one rank: it joins the group through env://, uses LOCAL_RANK's GPU, and only global rank 0
returns the result (the others return None and print nothing). A group of more than one node
(WORLD_SIZE > LOCAL_WORLD_SIZE) measures the inter-node tier.
"""

import os
import socket
import statistics
import sys
import time
from typing import Any

from roofline.errors import UsageError
from roofline.measure.timing import MeasureError, synchronizer, torch_module
from roofline.units import KiB

SIZES = [KiB * 4**k for k in range(10)]  # 1 KiB .. 256 MiB
QUICK_SIZES = [KiB * 4**k for k in range(8)]  # 1 KiB .. 16 MiB


def bus_bandwidth(algbw: float, devices: int) -> float:
    """busbw = algbw x 2 (N - 1) / N: what each link carries in a ring all-reduce (nccl-tests)."""
    return algbw * 2.0 * (devices - 1) / devices


def launcher(env: dict[str, str] | None = None) -> dict[str, int] | None:
    """The group torch.distributed's launcher set up for this process ({rank, world, local_rank, local_world,
    nodes}), or None when it runs on its own. torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE."""
    env = os.environ if env is None else env
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local_rank, local_world = int(env.get("LOCAL_RANK", rank)), int(env.get("LOCAL_WORLD_SIZE", world))
    except ValueError:
        raise UsageError(
            "RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE must be integers (as torchrun sets them)"
        ) from None
    if not (0 <= rank < world and 0 <= local_rank < local_world <= world):
        raise UsageError(
            f"RANK {rank}, WORLD_SIZE {world}, LOCAL_RANK {local_rank}, LOCAL_WORLD_SIZE {local_world}: inconsistent"
        )
    return {
        "rank": rank,
        "world": world,
        "local_rank": local_rank,
        "local_world": local_world,
        "nodes": -(-world // local_world),
    }


def run(
    devices: int | None = None,
    device: str = "auto",
    quick: bool = False,
    sizes: list[int] | None = None,
    min_time: float | None = None,
    timeout: float = 300.0,
) -> dict[str, Any] | None:
    """Time all-reduces over the group and summarize (see the module docstring); None on ranks other than 0
    under a launcher."""
    torch = torch_module("measure --collectives")
    cuda = torch.cuda.is_available() and device in ("auto", "cuda")
    if device == "cuda" and not cuda:
        raise UsageError(f"--device: cuda is not available here (torch {torch.__version__})")
    if device not in ("auto", "cpu", "cuda"):
        raise UsageError(f"--device: collectives run on cpu (gloo) or cuda (NCCL), got {device!r}")
    group = launcher()
    if group and devices is not None:
        raise UsageError("--devices: not under a launcher, whose WORLD_SIZE sets the processes (drop --devices)")
    count = group["world"] if group else devices or (torch.cuda.device_count() if cuda else 2)
    if count < 2:
        raise UsageError(f"--devices: an all-reduce needs at least 2 processes, got {count}")
    if cuda and not group and count > torch.cuda.device_count():
        raise UsageError(f"--devices: {count} asked, {torch.cuda.device_count()} GPUs here")
    backend = "nccl" if cuda else "gloo"
    sizes = sizes or (QUICK_SIZES if quick else SIZES)
    plan = {
        "sizes": sizes,
        "min_time": min_time if min_time is not None else (0.02 if quick else 0.1),
        "repeats": 2 if quick else 3,
    }
    started = time.perf_counter()
    if group:
        rows, verified = _launched(torch, backend, group, plan)
        if group["rank"] != 0:
            return None
    else:
        rows, verified = _spawn(torch, backend, count, plan, timeout)
    name = (
        torch.cuda.get_device_name(0)
        if cuda
        else "loopback (gloo, CPU processes)"
        if not group
        else "gloo, CPU processes"
    )
    return {
        "schema_version": 1,
        "backend": backend,
        "devices": count,
        "nodes": group["nodes"] if group else 1,
        "launcher": "torchrun" if group else "spawn",
        "device_name": name,
        "sizes": rows,
        "bus_bandwidth_bytes_per_s": max(r["busbw_bytes_per_s"] for r in rows),
        "latency_s": min(r["time_s"] for r in rows),
        "verified": verified,
        "elapsed_s": time.perf_counter() - started,
    }


def _launched(torch, backend: str, group: dict[str, int], plan: dict) -> tuple[list[dict], bool]:
    """This process as one rank of the launcher's group: env:// rendezvous, LOCAL_RANK's GPU."""
    import datetime

    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(group["local_rank"])
    local = os.environ.get("MASTER_ADDR", "") in ("localhost", "127.0.0.1", "::1")
    if group["nodes"] == 1 and local and sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one node on loopback (torchrun --standalone)
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=300))
    try:
        device = torch.device("cuda", group["local_rank"]) if backend == "nccl" else torch.device("cpu")
        return _measure(torch, dist, device, backend, group["world"], plan)
    finally:
        dist.destroy_process_group()


def _spawn(torch, backend: str, count: int, plan: dict, timeout: float) -> tuple[list[dict], bool]:
    context = torch.multiprocessing.get_context("spawn")
    queue = context.SimpleQueue()
    port = _free_port()
    workers = [
        context.Process(target=worker, args=(rank, count, backend, port, plan, queue), daemon=True)
        for rank in range(count)
    ]
    for w in workers:
        w.start()
    deadline = time.monotonic() + timeout
    try:
        for w in workers:
            w.join(max(0.0, deadline - time.monotonic()))
    finally:
        for w in workers:
            if w.is_alive():
                w.terminate()
    messages = []
    while not queue.empty():
        messages.append(queue.get())
    errors = [m for kind, m in messages if kind == "error"]
    if errors:
        raise MeasureError(f"collectives: {errors[0]}")
    results = [m for kind, m in messages if kind == "ok"]
    if not results:
        raise MeasureError(f"collectives: no result from the {count} processes within {timeout:g} s")
    return results[0]["rows"], results[0]["verified"]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))  # loopback only: the processes are all on this machine
        return s.getsockname()[1]


def worker(rank: int, world: int, backend: str, port: int, plan: dict, queue) -> None:
    """One process: join the group, verify a sum, time all-reduces per size; rank 0 reports."""
    try:
        import datetime

        import torch
        import torch.distributed as dist

        if sys.platform.startswith("linux"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback; other platforms name it differently
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=120),
        )
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
        if backend == "nccl":
            torch.cuda.set_device(device)
        rows, verified = _measure(torch, dist, device, backend, world, plan)
        if rank == 0:
            queue.put(("ok", {"rows": rows, "verified": verified}))
        dist.destroy_process_group()
    except Exception as e:  # reported to the parent, which raises one MeasureError
        queue.put(("error", f"rank {rank}: {type(e).__name__}: {e}"))


def _measure(torch, dist, device, backend: str, world: int, plan: dict) -> tuple[list[dict], bool]:
    """Verify a sum of known values, then time all-reduces per size (every rank runs this)."""
    sync = synchronizer(torch, "cuda" if backend == "nccl" else "cpu")
    check = torch.full((1024,), float(dist.get_rank() + 1), device=device)
    dist.all_reduce(check)
    verified = bool(torch.all(check == world * (world + 1) / 2).item())
    if not verified:
        raise MeasureError(f"all-reduce sum {check[0].item():g}, expected {world * (world + 1) / 2:g}")
    return [_time_size(torch, dist, device, sync, size, world, plan) for size in plan["sizes"]], verified


def _time_size(torch, dist, device, sync, size: int, world: int, plan: dict) -> dict[str, float]:
    """Seconds per all-reduce of `size` bytes: back-to-back calls, the slowest rank's time, best and median."""
    buffer = torch.zeros(size // 4, dtype=torch.float32, device=device)  # zeros stay zeros under SUM
    for _ in range(2):
        dist.all_reduce(buffer)
    sync()
    first = _elapsed(dist, sync, buffer, 1, torch, device)
    calls = max(3, min(1000, int(plan["min_time"] / max(first, 1e-7))))
    times = [_elapsed(dist, sync, buffer, calls, torch, device) for _ in range(plan["repeats"])]
    best, median = min(times), statistics.median(times)
    algbw = size / best
    return {
        "bytes": size,
        "time_s": best,
        "median_time_s": median,
        "algbw_bytes_per_s": algbw,
        "busbw_bytes_per_s": bus_bandwidth(algbw, world),
        "calls": calls,
    }


def _elapsed(dist, sync, buffer, calls: int, torch, device) -> float:
    """Seconds per call over `calls` back-to-back all-reduces, the maximum over ranks (all ranks agree)."""
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(buffer)
    sync()
    seconds = torch.tensor([(time.perf_counter() - start) / calls], dtype=torch.float64, device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
    return float(seconds.item())
