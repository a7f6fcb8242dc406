"""Do quick and full profiles of this machine agree, and do repeated runs? (the Measure anywhere issue's check)

Runs `measure` and `measure --quick` in alternating order, `--runs` times each, then prints for every figure a
prediction uses (memory_bandwidth, the matmul peaks, and the calibrated TPOT and TTFT of every benchmarks/shapes
shape at batches 1, 4, 16, sliced as validate_shapes.py slices them) the median of each kind, its spread over runs
((max - min) / median) and quick / full. Nothing is timed but the profiles: the TPOTs and TTFTs are predictions.

    python benchmarks/profile_agreement.py [--runs 3] [--dtype fp32] [--json OUT]

About 1.5 minutes per full + quick pair on a 2-core VM.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from roofline import estimate
from roofline.measure import bench, profile, validate
from roofline.specs.catalog import load_model
from roofline.specs.hardware import hardware_from_mapping

SHAPES = Path(__file__).resolve().parent / "shapes"
LAYERS = {"gpt2-large": 12, "tinyllama-1.1b": 8, "qwen3-0.6b": 14}  # validate_shapes.py's slices
BATCHES = (1, 4, 16)


def figures(measured: dict, dtype: str) -> dict[str, float]:
    """The figures a prediction uses, by name."""
    hardware = hardware_from_mapping(profile.hardware_spec(measured), "a measure of this device", "measured-here")
    out = {"memory_bandwidth GB/s": hardware.memory_bandwidth / 1e9}
    out.update({f"peak {d} GFLOP/s": f / 1e9 for d, f in hardware.peak_flops.items()})
    for path in sorted(SHAPES.glob("*.yaml")):
        model = validate.sliced(load_model(str(path)), LAYERS.get(path.stem))
        for b in BATCHES:
            e = estimate(model, hardware, batch=b, prompt_tokens=128, output_tokens=32, weight_dtype=dtype)
            if e.calibrated:
                out[f"TPOT {path.stem} b{b} ms"] = e.calibrated.tpot_s * 1e3
                out[f"TTFT {path.stem} b{b} ms"] = e.calibrated.ttft_s * 1e3
    return out


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"full": [], "quick": []}
    raw = []
    for r in range(args.runs):
        for kind in ("full", "quick") if r % 2 == 0 else ("quick", "full"):
            measured = bench.run("auto", [args.dtype], None, kind == "quick", args.dtype)
            runs[kind].append(figures(measured, args.dtype))
            raw.append({"kind": kind, "run": r, "profile": measured})
    names = [n for n in runs["full"][0] if all(n in f for k in runs for f in runs[k])]
    print("| figure | full median | full spread | quick median | quick spread | quick / full |")
    print("| --- | --- | --- | --- | --- | --- |")
    worst = {"full": 0.0, "quick": 0.0, "quick / full": 0.0}
    for name in names:
        full = [f[name] for f in runs["full"]]
        quick = [f[name] for f in runs["quick"]]
        ratio = statistics.median(quick) / statistics.median(full)
        worst = {"full": max(worst["full"], spread(full)), "quick": max(worst["quick"], spread(quick))} | {
            "quick / full": max(worst["quick / full"], abs(ratio - 1))
        }
        print(
            f"| {name} | {statistics.median(full):.4g} | {spread(full):.0%} | {statistics.median(quick):.4g} | "
            f"{spread(quick):.0%} | {ratio:.2f} |"
        )
    print(
        f"\nworst spread over runs: full {worst['full']:.0%}, quick {worst['quick']:.0%}; "
        f"worst quick / full: {worst['quick / full']:.0%} off"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"figures": runs, "raw": raw}, indent=1))


if __name__ == "__main__":
    main()
