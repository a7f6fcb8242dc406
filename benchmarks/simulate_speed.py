"""Speed of `roofline simulate` (targets: 10,000 ShareGPT-like requests at 80% load in <= 1 s including start-up;
>= 20,000 simulated requests per second of wall time at 100,000 requests). Median and range of 5 runs each.

ShareGPT-like lengths: lognormal prompts of mean 220 and outputs of mean 200 (CV 1); Llama-3.1-8B on an H100 SXM;
the rate is 80% of the replica's capacity as simulate measures it. Run: python benchmarks/simulate_speed.py
"""

import statistics
import subprocess
import sys
import time

from roofline import load_hardware, load_model
from roofline.calc.prepare import prepare
from roofline.calc.simulate import run_simulation
from roofline.calc.workload import lengths, open_loop

PROMPT, OUTPUT = lengths("lognormal:1", 220, "prompt"), lengths("lognormal:1", 200, "output")


def main() -> None:
    p = prepare(load_model("llama-3.1-8b"), load_hardware("h100-sxm"))
    capacity = run_simulation(p, open_loop(1.0, "poisson", 1.0, 2000, PROMPT, OUTPUT, 0)).max_stable_rate_per_s
    rate = 0.8 * capacity
    command = [
        sys.executable,
        "-m",
        "roofline",
        "simulate",
        "-m",
        "llama-3.1-8b",
        "-H",
        "h100-sxm",
        "--rate",
        f"{rate:.3f}/s",
        "--requests",
        "10000",
        "--prompt",
        "220",
        "--output",
        "200",
        "--prompt-dist",
        "lognormal:1",
        "--output-dist",
        "lognormal:1",
        "--json",
        "-q",
    ]
    cli = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        cli.append(time.perf_counter() - start)
    big = []
    requests = open_loop(rate, "poisson", 1.0, 100_000, PROMPT, OUTPUT, 1)
    for _ in range(5):
        start = time.perf_counter()
        run_simulation(p, requests, capacity=False)
        big.append(100_000 / (time.perf_counter() - start))
    print(f"capacity {capacity:.1f} requests/s; rate {rate:.1f} requests/s (80%)")
    print(
        f"CLI, 10,000 requests, start-up included: median {statistics.median(cli):.3f} s "
        f"({min(cli):.3f}-{max(cli):.3f} s over 5; target <= 1 s)"
    )
    print(
        f"library, 100,000 requests: median {statistics.median(big):,.0f} simulated requests per second of wall "
        f"({min(big):,.0f}-{max(big):,.0f} over 5; target >= 20,000; BLIS here: ~380)"
    )


if __name__ == "__main__":
    main()
