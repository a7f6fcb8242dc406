"""Median wall time of `roofline estimate --json` against `python -c "import typer, yaml"` (target <= 1.5x, the
README's 1.2-1.5x).

Run: python benchmarks/startup.py [--runs 21]
Both commands start a fresh interpreter, so the ratio measures what roofline adds on top of its CLI stack.
The package is byte-compiled first, as `pip install .` does for typer and yaml: an editable checkout run
with PYTHONDONTWRITEBYTECODE=1 would otherwise recompile roofline's sources on every start. The two
commands alternate, so drift in the machine's speed affects both alike.
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import subprocess
import sys
import time
from pathlib import Path


def seconds(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    runs = parser.parse_args().runs
    python = sys.executable
    import roofline

    compileall.compile_dir(str(Path(roofline.__file__).parent), quiet=1)
    commands = {
        "baseline": [python, "-c", "import typer, yaml"],
        "ours": [python, "-m", "roofline", "estimate", "--json", "-q"],
    }
    for command in commands.values():
        seconds(command)  # warm the file cache
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            times[name].append(seconds(command))
    baseline, ours = statistics.median(times["baseline"]), statistics.median(times["ours"])
    print(f"python -c 'import typer, yaml'   median {baseline * 1000:7.1f} ms over {runs} runs")
    print(f"roofline estimate --json         median {ours * 1000:7.1f} ms over {runs} runs")
    print(f"ratio {ours / baseline:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
