"""Time `roofline plan` over the whole catalog (22 devices) x 4 TP degrees x the batch range (target <= 1 s).

Run: python benchmarks/plan_speed.py
Five interleaved rounds of the library call and the CLI (interpreter start included); medians and ranges.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from roofline import load_hardware, load_model
from roofline.calc.plan import plan
from roofline.specs.catalog import catalog

ARGS = [
    "-m",
    "llama-3.1-70b",
    "--rate",
    "20",
    "--prompt",
    "1024",
    "--output",
    "256",
    "--tpot-slo",
    "50ms",
    "--ttft-slo",
    "2s",
    "--tp",
    "1,2,4,8",
]


def main() -> None:
    model = load_model("llama-3.1-70b")
    devices = [load_hardware(h) for h in catalog("hardware")]
    library, cli = [], []
    for _ in range(5):
        start = time.perf_counter()
        result = plan(
            model,
            devices,
            prompt_tokens=1024,
            output_tokens=256,
            rate=20.0,
            tpot_slo=0.05,
            ttft_slo=2.0,
            tps=(1, 2, 4, 8),
        )
        library.append(time.perf_counter() - start)
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "roofline", "plan", "-q", "--json", *ARGS], check=True, capture_output=True
        )
        cli.append(time.perf_counter() - start)
    print(f"{len(devices)} devices x 4 tp degrees -> {len(result.options)} options")
    for name, times in (("library", library), ("CLI (interpreter start included)", cli)):
        print(
            f"{name}: median {statistics.median(times):.3f} s, range {min(times):.3f}-{max(times):.3f} s over "
            f"{len(times)} rounds"
        )
    print("target: <= 1 s")


if __name__ == "__main__":
    main()
