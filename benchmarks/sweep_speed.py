"""Time a 10,000-point sweep (100 batches x 100 prompt lengths) in the library and through the CLI (target <= 1 s).

Run: python benchmarks/sweep_speed.py
Each point is a full estimate: decode's mean over steps is closed-form, so no point iterates over its tokens.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from roofline import load_hardware, load_model
from roofline.calc.sweep import sweep


def main() -> None:
    model, device = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    batches, prompts = list(range(1, 101)), list(range(128, 12801, 128))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        result = sweep(model, device, batches=batches, prompts=prompts, outputs=[256], tpot_slo=0.05)
        json.dumps(result.to_dict())
        best = min(best, time.perf_counter() - start)
    print(f"library: {len(result.rows)} points in {best:.3f} s (sweep + to_dict + json.dumps, best of 3)")
    start = time.perf_counter()
    command = [
        sys.executable,
        "-m",
        "roofline",
        "sweep",
        "-q",
        "--json",
        "--batch",
        "1:100:1",
        "--prompt",
        "128:12800:128",
        "--tpot-slo",
        "50ms",
    ]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    elapsed = time.perf_counter() - start
    print(
        f"CLI:     {len(json.loads(out)['rows'])} points in {elapsed:.3f} s (roofline sweep --json, interpreter start "
        "included)"
    )
    print("target: <= 1 s")


if __name__ == "__main__":
    main()
