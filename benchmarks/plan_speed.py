"""Time `roofline plan` over the whole catalog x 4 TP degrees, both ways it sizes a replica.

- Little's law (`--no-queueing`): each option priced in closed form; target <= 1 s through the CLI, interpreter start
  included. Llama-3.1-70B at 20/s, 1024/256 tokens, TPOT <= 50 ms, TTFT <= 2 s.
- Queued (the default with a rate): each option's capacity found by simulating it (roofline.calc.plan_queue: a
  bisection of 1,500-request runs, then 20,000 requests at the rate found); target <= 30 s on 2 cores, the options
  spread over one process per core. Llama-3.1-8B at 5/s, 1024/256 tokens (no SLO), and the README's example
  (Qwen2.5-72B at 5/s, TPOT <= 50 ms).

Run: python benchmarks/plan_speed.py [--rounds N] [--little-only]
Interleaved rounds (default 3); medians and ranges; the core count is printed beside them, since the queued path
scales with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from roofline import load_hardware, load_model
from roofline.calc.plan import plan
from roofline.specs.catalog import catalog

LITTLE = [
    *("-m", "llama-3.1-70b", "--rate", "20/s", "--prompt", "1024", "--output", "256"),
    *("--tpot-slo", "50ms", "--ttft-slo", "2s", "--tp", "1,2,4,8", "--no-queueing"),
]
QUEUED = {
    "llama-3.1-8b at 5/s": ["-m", "llama-3.1-8b", "--rate", "5/s"],
    "qwen2.5-72b at 5/s, TPOT <= 50 ms": ["-m", "qwen2.5-72b", "--rate", "5/s", "--tpot-slo", "50ms"],
}


def cli(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "roofline", "plan", "-q", "--json", *args], check=True, capture_output=True)
    return time.perf_counter() - start


def say(name: str, times: list[float], target: str) -> None:
    print(
        f"{name}: median {statistics.median(times):.3f} s, range {min(times):.3f}-{max(times):.3f} s over "
        f"{len(times)} rounds (target {target})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--little-only", action="store_true", help="skip the queued plans (minutes on 2 cores)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: expected 1 or more")
    model = load_model("llama-3.1-70b")
    devices = [load_hardware(h) for h in catalog("hardware")]
    times: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        start = time.perf_counter()
        result = plan(
            model, devices, prompt_tokens=1024, output_tokens=256, rate=20.0, tpot_slo=0.05, ttft_slo=2.0,
            tps=(1, 2, 4, 8), queueing=False,
        )  # fmt: skip
        times.setdefault("library, Little's law", []).append(time.perf_counter() - start)
        times.setdefault("CLI, Little's law (interpreter start included)", []).append(cli(LITTLE))
        if not args.little_only:
            for name, queued in QUEUED.items():
                times.setdefault(f"CLI, queued: {name}", []).append(cli(queued))
    print(f"{len(devices)} devices x 4 tp degrees -> {len(result.options)} options; {os.cpu_count()} cores")
    for name, each in times.items():
        say(name, each, "<= 30 s" if "queued" in name else "<= 1 s")


if __name__ == "__main__":
    main()
