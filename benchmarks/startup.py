"""Median wall time of `roofline estimate --json` against `python -c "import typer, yaml"` (target <= 1.3x).

Run: python benchmarks/startup.py [--runs 21]
Both commands start a fresh interpreter, so the ratio measures what roofline adds on top of its CLI stack.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def median_seconds(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    runs = parser.parse_args().runs
    python = sys.executable
    median_seconds([python, "-m", "roofline", "estimate", "--json", "-q"], 3)  # warm the file cache
    baseline = median_seconds([python, "-c", "import typer, yaml"], runs)
    ours = median_seconds([python, "-m", "roofline", "estimate", "--json", "-q"], runs)
    print(f"python -c 'import typer, yaml'   median {baseline * 1000:7.1f} ms over {runs} runs")
    print(f"roofline estimate --json         median {ours * 1000:7.1f} ms over {runs} runs")
    print(f"ratio {ours / baseline:.2f}x (target <= 1.3x)")


if __name__ == "__main__":
    main()
