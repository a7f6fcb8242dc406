"""`roofline measure` against the best local references, in one run on the same machine.

  (a) numpy float32 matmul at its best size (OpenBLAS/MKL as installed),
  (b) torch fp32 matmul at the best of a wider shape scan than measure's,
  (c) numpy copy bandwidth (np.copyto, read + write bytes, buffers 4x the last-level cache).
Target: measure's fp32 matmul and copy bandwidth reach >= 95% of the best reference.

Run: python benchmarks/measure_vs_reference.py
(Where OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set for old OpenBLAS builds, numpy may run a slower
kernel; for the fairest reference run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python ...)
"""

from __future__ import annotations

import time

import numpy as np
import torch

from roofline.measure import bench as measure
from roofline.measure import machine


def best_seconds(fn, reps: int = 7, min_time: float = 0.3) -> float:
    fn()
    times, start = [], time.perf_counter()
    while len(times) < reps or time.perf_counter() - start < min_time:
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
    return min(times)


def numpy_matmul() -> tuple[float, str]:
    best = (0.0, "")
    for n in (512, 1000, 1024, 1536, 2000, 2048, 3000, 4096):
        a = np.random.rand(n, n).astype(np.float32)
        b = np.random.rand(n, n).astype(np.float32)
        rate = 2 * n**3 / best_seconds(lambda: a @ b, reps=3)
        best = max(best, (rate, f"{n}^3"))
    return best


def torch_matmul() -> tuple[float, str]:
    shapes = [(n, n, n) for n in (256, 384, 512, 768, 1000, 1024, 1280, 1536, 1792, 2000, 2048, 2560, 3000, 3072, 4096)]
    shapes += [
        (256, 4096, 4096),
        (512, 4096, 4096),
        (1024, 4096, 4096),
        (4096, 4096, 1024),
        (2000, 4000, 2000),
        (1000, 8000, 1000),
    ]
    best = (0.0, "")
    for m, k, n in shapes:
        a, b = torch.rand(m, k), torch.rand(k, n)
        out = torch.empty(m, n)
        rate = 2 * m * k * n / best_seconds(lambda: torch.matmul(a, b, out=out), reps=3)
        best = max(best, (rate, f"{m}x{k}x{n}"))
    return best


def numpy_copy(buffer_bytes: int) -> float:
    src = np.ones(buffer_bytes // 4, dtype=np.float32)
    dst = np.zeros_like(src)
    return 2 * src.nbytes / best_seconds(lambda: np.copyto(dst, src), reps=20)


def main() -> None:
    result = measure.run("cpu", ["fp32"])
    buffer_bytes = result["bandwidth"]["copy"]["buffer_bytes"]
    np_mm, np_shape = numpy_matmul()
    torch_mm, torch_shape = torch_matmul()
    np_copy = numpy_copy(buffer_bytes)
    ours_mm = result["matmul"]["fp32"]["best_flop_per_s"]
    ours_copy = result["bandwidth"]["copy"]["best_bytes_per_s"]
    best_mm = max(np_mm, torch_mm)
    print(
        f"machine: {machine.cpu_name()}, torch {torch.__version__} ({torch.get_num_threads()} threads), numpy "
        f"{np.__version__}"
    )
    print(f"{'figure':46} {'reference':>14} {'measure':>14} {'ratio':>7}")
    print(f"{'fp32 matmul, numpy best (' + np_shape + ')':46} {np_mm / 1e9:10.1f} GF/s")
    print(f"{'fp32 matmul, torch wide scan (' + torch_shape + ')':46} {torch_mm / 1e9:10.1f} GF/s")
    print(
        f"{'fp32 matmul vs best reference':46} {best_mm / 1e9:10.1f} GF/s {ours_mm / 1e9:10.1f} GF/s "
        f"{ours_mm / best_mm:7.1%}"
    )
    print(
        f"{'copy, numpy copyto (r+w)':46} {np_copy / 1e9:10.1f} GB/s {ours_copy / 1e9:10.1f} GB/s "
        f"{ours_copy / np_copy:7.1%}"
    )
    print("target: >= 95% for both")


if __name__ == "__main__":
    main()
