"""Summarize a benchmarks/gpu_check.sh folder: measured figures beside the datasheet, validate's ratios.
Run: python benchmarks/gpu_summary.py OUTDIR"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def main(folder: str) -> None:
    out = Path(folder)
    print((out / "device.txt").read_text().strip())
    print((out / "steps.txt").read_text().strip())
    for name in ("measure-default", "measure-quick"):
        r = load(out / f"{name}.json")
        if not r:
            print(f"{name}: no result (see {name}.log)")
            continue
        sheet = r.get("datasheet") or {}
        print(
            f"\n{name}: {r['device']['name']}, {r['elapsed_s']:.1f} s, budget {r['plan']['budget_s']} s, datasheet "
            f"{sheet.get('id', '-')}"
        )
        for d, m in r["matmul"].items():
            frac = (sheet.get("matmul_fraction_of_peak") or {}).get(d)
            print(
                f"  matmul {d:5} {m['best_flop_per_s'] / 1e12:8.1f} TFLOP/s  cv "
                + (f"{m['cv']:.1%}" if "cv" in m else "- (probe only)")
                + f"  at {m['best_shape']}"
                + (f"  {frac:.0%} of datasheet" if frac else "")
            )
        for k, b in r["bandwidth"].items():
            if b:
                frac = (sheet.get("bandwidth_fraction_of_peak") or {}).get(k)
                print(
                    f"  {k:13} {b['best_bytes_per_s'] / 1e12:8.2f} TB/s    cv {b.get('cv', 0):.1%}"
                    + (f"  {frac:.0%} of datasheet" if frac else "")
                )
        print(
            f"  ridge {r['ridge_point_flop_per_byte']:.0f} FLOP/B ({r['ridge_dtype']}); decode bandwidth from "
            f"{r['decode_bandwidth']}"
        )
    for name in ("validate-gpt2", "validate-llama-3.2-1b"):
        r = load(out / f"{name}.json")
        if not r:
            print(f"\n{name}: no result (see {name}.log)")
            continue
        print(f"\n{name}: {r['model']['name']} {r['model']['dtype']} on {r['device']['name']}")
        for row in r["rows"]:
            print(
                f"  batch {row['batch']:3}  TPOT {row['measured_tpot_s'] * 1e3:7.2f} ms  predicted/measured "
                f"{row['tpot_ratio']:.2f}"
                f"  roofline {row['roofline_tpot_ratio']:.2f}  MBU {row['mbu']:.0%}"
            )
    r = load(out / "simulate-llama-3.2-1b.json")
    if r is not None:
        print(
            f"\nsimulate-llama-3.2-1b: 20/s, TTFT p50 {r['ttft_s']['p50'] * 1e3:.1f} ms, "
            f"p99 {r['ttft_s']['p99'] * 1e3:.1f} ms, TPOT p50 {r['tpot_s']['p50'] * 1e3:.2f} ms, "
            f"saturated {r['saturated']}"
        )
    r = load(out / "collectives.json")
    if r:
        print(
            f"\ncollectives: {r['devices']} x {r['device_name']}: busbw {r['bus_bandwidth_bytes_per_s'] / 1e9:.0f} "
            f"GB/s, latency {r['latency_s'] * 1e6:.1f} us"
        )


if __name__ == "__main__":
    main(sys.argv[1])
