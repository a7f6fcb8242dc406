"""`roofline validate` over dense shapes nobody tuned on (benchmarks/shapes/*.yaml, from public config.json values).

For each shape and batch: the measured decode step (TPOT) against the calibrated prediction, and the
achieved memory bandwidth against the profile's saved `memory_bandwidth` (MBU). One quick profile of this
machine is measured first, as `roofline validate` does by default, and every shape is predicted with it.
Checks printed at the end: no MBU above 105% (a measured read ceiling that a real decode beats is no ceiling),
and how many decode (TPOT) and prefill (TTFT) ratios fall within the tolerance, raw and times each batch's drift
(TPOT: the decode curve's reference point; TTFT: the scan's rounds-timed LLM shape; roofline.measure.drift).

Run: python benchmarks/validate_shapes.py [--dtype fp32] [--batch 1,4,16] [--shapes a,b] [--json OUT] [--replay OLD]
Large shapes run a slice of their layers at full width (the prediction is for the same slice).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from roofline.measure import engine_costs, profile, validate
from roofline.measure.timing import pick_device, torch_module
from roofline.specs.catalog import load_model
from roofline.specs.hardware import hardware_from_mapping

SHAPES = Path(__file__).resolve().parent / "shapes"
LAYERS = {"gpt2-large": 12, "tinyllama-1.1b": 8, "qwen3-0.6b": 14}  # slices that keep a 2-core run short


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dtype",
        default="fp32",
        help="fp32 (default: CPUs without native 16-bit matmul run bf16 at ~1%% of fp32), bf16 or fp16",
    )
    parser.add_argument("--batch", default="1,4,16")
    parser.add_argument("--shapes", default=None, help="comma-separated names from benchmarks/shapes (default: all)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tolerance", type=float, default=0.15)
    parser.add_argument("--json", default=None, help="also write every row here")
    parser.add_argument("--engine", default="eager", help="eager, transformers, or both")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--replay", default=None, help="predict from the profile an earlier run's --json saved, not a new quick one"
    )
    args = parser.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    names = args.shapes.split(",") if args.shapes else sorted(p.stem for p in SHAPES.glob("*.yaml"))
    started = time.perf_counter()
    engines = ["eager", "transformers"] if args.engine == "both" else [args.engine]
    if args.replay:  # that profile's moment again, against this machine now (its drift says how far apart they are)
        measured = json.loads(Path(args.replay).read_text())["profile"]
        kind = measured["device"]["kind"]
        if args.dtype not in measured["matmul"] or args.device not in ("auto", kind):
            raise SystemExit(
                f"--replay: {args.replay} is a {kind} profile of {', '.join(measured['matmul'])};"
                f" this run asks for {args.dtype} on --device {args.device}"
            )
    else:
        notes: list[str] = []  # a profile measured again, and why (validate.quick_measured)
        measured = validate.quick_measured(pick_device(torch_module(), args.device), args.dtype, lambda s: None, notes)
        for note in notes:
            print(f"note: {note}")
    for engine in engines[1:] if engines[0] == "eager" else engines:
        if engine not in measured["engines"]:
            measured["engines"][engine] = engine_costs.of(engine, measured["device"]["kind"], args.dtype, quick=True)
    hardware = hardware_from_mapping(profile.hardware_spec(measured), "a quick measure of this device", "measured-here")
    print(
        f"{'replayed' if args.replay else 'quick'} profile: {measured['device']['name']}, "
        f"memory_bandwidth {hardware.memory_bandwidth / 1e9:.1f} GB/s "
        f"({measured['decode_bandwidth']}), {args.dtype} matmul {hardware.peak_flops[args.dtype] / 1e9:.0f} GFLOP/s"
    )
    print(
        f"{'engine':12} {'shape':16} {'layers':>6} {'batch':>5} {'TPOT':>9} {'predicted':>9} {'ratio':>6} "
        f"{'90% interval':>13} "
        f"{'verdict':>12} {'roofline':>8} {'MBU':>5} {'x drift':>7} {'TTFT':>9} {'ratio':>6} {'x drift':>7}",
        flush=True,
    )
    rows = []
    for name in names:
        model = validate.sliced(load_model(str(SHAPES / f"{name}.yaml")), LAYERS.get(name))
        for engine in engines:
            report = validate.run(
                model,
                hardware,
                args.device,
                batches,
                dtype=args.dtype,
                repeat=args.repeat,
                tolerance=args.tolerance,
                engine=engine,
            )
            for row in report.rows:
                rows.append({"engine": engine, "shape": name, "layers": model.arch.layers, **row})
                print(
                    f"{engine:12} {name:16} {model.arch.layers:6} {row['batch']:5} "
                    f"{row['measured_tpot_s'] * 1e3:7.1f}ms "
                    f"{row['predicted_tpot_s'] * 1e3:7.1f}ms {row['tpot_ratio']:6.2f}  [{row['tpot_ratio_low']:.2f}, "
                    f"{row['tpot_ratio_high']:.2f}] "
                    f"{row['verdict']:>12} {row['roofline_tpot_ratio']:8.2f} {row['mbu']:5.0%} "
                    f"{row.get('drift_corrected_tpot_ratio', float('nan')):7.2f} "
                    f"{row['measured_ttft_s'] * 1e3:7.1f}ms {row['ttft_ratio']:6.2f} "
                    f"{row.get('drift_corrected_ttft_ratio', float('nan')):7.2f}",
                    flush=True,
                )
    over = [r for r in rows if r["mbu"] > 1.05]
    print(
        f"\nMBU above 105% of the saved bandwidth: {len(over)} of {len(rows)} rows"
        + (": " + ", ".join(f"{r['shape']} b{r['batch']} {r['mbu']:.0%}" for r in over) if over else "")
    )
    for engine in engines:
        mine = [r for r in rows if r["engine"] == engine]
        verdicts = {v: sum(r["verdict"] == v for r in mine) for v in ("within", "inconclusive", "outside")}
        near = lambda key: sum(abs(r.get(key, 0) - 1) <= args.tolerance for r in mine)  # noqa: E731
        print(
            f"{engine}: within +-{args.tolerance:.0%} of {len(mine)} rows: TPOT {near('tpot_ratio')} "
            f"({near('drift_corrected_tpot_ratio')} x drift), TTFT {near('ttft_ratio')} "
            f"({near('drift_corrected_ttft_ratio')} x prompt drift); verdicts {verdicts}"
        )
    print(f"{time.perf_counter() - started:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"profile": measured, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
