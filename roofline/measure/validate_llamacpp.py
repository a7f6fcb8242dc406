"""`validate --engine llamacpp`: llama.cpp's own benchmarks beside roofline's prediction for the same GGUF file.

The model is a GGUF file given with -m, or a model's shape written as one (roofline.measure.synthetic) in the
weight type asked. In R rounds, each running every batch once in a rotated order: batch 1 by llama-bench (a prompt
processing test of P tokens, and a token generation test of O - 1 tokens after P tokens of context, `-d P`: its
steps attend over the prompt as a served request's do; each one repetition after its warm-up run),
larger batches by llama-batched-bench (B prompts prefilled together, then O - 1 steps of B tokens). TTFT is the
prompt's time, TPOT a generated step's mean. The prediction is the profile's (roofline.calc.llamacpp) for that very
file; rows, intervals and verdicts are those of the other engines (roofline.measure.validate).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roofline.calc.estimate import estimate
from roofline.calc.inputs import engine_costs
from roofline.calc.llamacpp import measured_type
from roofline.errors import RooflineError, UsageError
from roofline.measure import llamacpp, llamacpp_profile, stats, synthetic
from roofline.report import Report
from roofline.specs.records import Hardware, Model


def run(
    model: Model,
    hardware: Hardware | None,
    batches: list[int],
    prompt: int,
    output: int,
    weight_type: str,
    build: llamacpp.Build,
    repeat: int,
    tolerance: float,
    on_step: Callable[[str], None] = lambda s: None,
    threads: int | None = None,
) -> Report:
    """Measured vs predicted TTFT and TPOT per batch (see the module docstring): the `validate --json` report."""
    from roofline.measure import machine
    from roofline.measure.validate import SCHEMA_VERSION, _row, run_summary
    from roofline.specs.catalog import load_model

    if output < 2:
        raise UsageError(f"--output: expected at least 2 tokens (one decode step), got {output}")
    with tempfile.TemporaryDirectory(prefix="roofline-validate-") as folder:
        if model.source_kind == "gguf":
            path = Path(model.source)
        else:
            weight_type = synthetic.check_type(weight_type)
            synthetic.check_shape(model.arch, model.id)
            on_step(f"writing {model.id} as a {weight_type.lower()} GGUF")
            quantize = build.tool("llama-quantize") if weight_type in synthetic.MIXES else None
            path = synthetic.write(model.arch, Path(folder) / "model.gguf", weight_type, model.name, quantize=quantize)
            model = load_model(str(path))
        if hardware is None or "llamacpp" not in engine_costs(hardware):
            hardware = _quick_profile(build, hardware, model, on_step, threads)
        profile = engine_costs(hardware)["llamacpp"]
        main = _main_type(model)
        kind = measured_type(profile, main)
        entry = profile["types"][kind]
        runs: dict[int, list[dict[str, Any]]] = {b: [] for b in batches}
        reference: list[float] = []
        prompt_reference: list[float] = []  # now / profile, per prompt point and round
        info: dict[str, Any] = {}
        for r, batch in stats.schedule(list(batches), repeat):
            if "probe_layers" in entry and batch == batches[r % len(batches)]:  # each round's first run
                on_step(f"round {r + 1} of {repeat}: the profile's {kind.lower()} probe, for this machine's drift")
                reference.append(
                    llamacpp_profile.reference_seconds_per_byte(build, entry, kind, Path(folder) / "wide.gguf", threads)
                )
                prompts = llamacpp_profile.reference_prompt_seconds_per_byte(
                    build, entry, kind, Path(folder) / "wide_prompt.gguf", threads
                )
                table = entry["seconds_per_byte"]
                prompt_reference += [s / table[m] for m, s in prompts.items() if m in table]
            on_step(f"round {r + 1} of {repeat}, batch {batch}")
            measured, info = _time_run(build, path, batch, prompt, output, threads)
            runs[batch].append(measured)
    drift = statistics.median(reference) / entry["seconds_per_byte"]["1"] if reference else None
    prompt_drift = statistics.median(prompt_reference) if prompt_reference else None
    rows = []
    for batch in batches:
        predicted = estimate(
            model, hardware, batch=batch, prompt_tokens=prompt, output_tokens=output, engine="llamacpp"
        )
        row = _row(batch, runs[batch], predicted, hardware, tolerance)
        if drift is not None:  # the TPOT ratio had memory run as fast as when the profile was measured
            row["drift_corrected_tpot_ratio"] = row["tpot_ratio"] * drift
        if prompt_drift is not None:  # the TTFT ratio had prompts run as fast as when the profile was measured
            row["drift_corrected_ttft_ratio"] = row["ttft_ratio"] * prompt_drift
        rows.append(row)
    a = model.arch
    envelope = {
        "schema_version": SCHEMA_VERSION,
        "engine": "llamacpp",
        "rounds": repeat,
        "tolerance": tolerance,
        "model": {
            "id": model.id,
            "name": model.name,
            "params": model.params,
            "layers": a.layers,
            "dtype": "+".join(sorted(model.weights_file.by_dtype)),
            "file_bytes": model.weights_file.total_bytes,
        },
        "device": {
            "kind": "cpu",
            "name": machine.cpu_name(),
            "threads": info.get("n_threads"),
            "torch_version": None,
            "record": machine.record(),
        },
        "llama_cpp": {"found": build.found, "folder": str(build.folder), **info},
        # The profile's wide probe decoding one row, rerun each round: now / in the profile (1.3: 30% slower now);
        # its prompt probe's prompts likewise (prompt_ratio: the median over the rounds and the prompt lengths).
        "drift": {"type": kind, "now_s_per_byte": reference, "ratio": drift, "prompt_ratio": prompt_drift},
        **run_summary(hardware, prompt, output, batches, rows),
    }
    return Report("validate", envelope, rows)


def _quick_profile(build, hardware: Hardware | None, model: Model, on_step, threads) -> Hardware:
    """A profile carrying llama.cpp's costs for the file's main weight type, measured now (on `hardware`'s
    figures when given, else this machine's read by llama.cpp itself), its probes sized as a bare `measure --engine
    llamacpp` sizes them (llamacpp_profile.probe_cache: `hardware`'s read ladder, else one timed now, else the OS)."""
    from roofline.measure import machine

    main = _main_type(model)
    on_step(f"measuring llama.cpp's {main.lower()} costs here")
    torch_profile = hardware.measured if hardware else None
    cache, _ = llamacpp_profile.probe_cache(torch_profile, machine.cpu_cache(), ladder=llamacpp_profile.ladder_cache)
    entry = llamacpp_profile.run(build, cache, (main,), threads, on_step, server=False)  # validate runs llama-bench
    return llamacpp_profile.as_hardware(entry, hardware)


def _main_type(model: Model) -> str:
    """The weight type holding most of the file's matrix bytes that the probes can be written in."""
    kinds = sorted(model.weights_file.streamed_by_dtype, key=model.weights_file.streamed_by_dtype.get)
    return next((k for k in reversed(kinds) if k in synthetic.DIRECT), "Q8_0")


def _time_run(build, path: Path, batch: int, prompt: int, output: int, threads) -> tuple[dict[str, Any], dict]:
    """One round of one batch: TTFT [s] and the mean decode step [s] (as a one-step list for the row's pooling)."""
    steps = output - 1
    if batch == 1:  # the steps after the prompt, as batched-bench and the prediction have them: -d prompt
        results, repack = llamacpp.bench(build, path, [prompt], 0, threads, reps=1)
        pp = next(r for r in results if r["n_prompt"])
        try:
            results, repack = llamacpp.bench(build, path, [], steps, threads, reps=1, repack=repack, depth=prompt)
        except llamacpp.Crashed:
            raise  # a crash names its own cause; the hint below is for a build that refuses -d
        except RooflineError as e:
            raise RooflineError(
                f"{e}; validate's batch 1 generates after the prompt with llama-bench -d (n_depth, in llama.cpp since "
                "2025): with an older build, run batches above 1 only (--batch 2,4)"
            ) from None
        tg = next(r for r in results if r["n_gen"])
        info = {"n_threads": pp["n_threads"], "build_commit": pp.get("build_commit"), "repack": repack}
        return {"ttft_s": pp["samples_ns"][0] / 1e9, "steps_s": [tg["samples_ns"][0] / 1e9 / steps]}, info
    rows, repack = llamacpp.batched(build, path, prompt, steps, [batch], threads)
    row = rows[0]
    info = {"n_threads": row.get("n_threads"), "repack": repack}
    return {"ttft_s": row["t_pp"], "steps_s": [row["t_tg"] / row["tg"]]}, info
