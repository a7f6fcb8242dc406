"""`validate`: run a real prefill + decode with the model's shapes here and compare with the prediction.

In R rounds, each running every batch once in a rotated order (roofline.measure.stats.schedule): build the
engine for prompt + output tokens, warm up, time the prefill (TTFT) and every decode step. Then per batch:
the median TPOT over all steps of all rounds with its 90% bootstrap interval, p10 and p90, and the
prediction for the same run on the hardware profile given (or a quick `measure` of this device): the pure
roofline bound, and the calibrated prediction when the profile carries the measured curves and the engine's
fixed costs. Ratios are predicted / measured; TTFT (one prefill a round: the interval of its median over the
rounds) and TPOT are judged each, by whether the ratio's interval lies within the tolerance, and a row is
within only when both are. Engines: roofline's own plain decoder ("eager") or Hugging Face transformers.
"""

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from roofline.calc.attention import kv_bytes_per_token
from roofline.calc.estimate import estimate
from roofline.calc.knobs import VALIDATE_BATCHES, VALIDATE_OUTPUT, VALIDATE_PROMPT, VALIDATE_ROUNDS, VALIDATE_TOLERANCE
from roofline.errors import UsageError
from roofline.measure import drift, engine_costs, stats
from roofline.measure.decoder import Decoder, check_supported
from roofline.measure.timing import synchronizer
from roofline.report import Report
from roofline.specs.params import count_params
from roofline.specs.records import DTYPE_BYTES, Hardware, Model

SCHEMA_VERSION = 1
RUN_DTYPES = ("fp32", "bf16", "fp16")
ENGINES = ("eager", "transformers")


def sliced(model: Model, layers: int | None) -> Model:
    """The model with its first `layers` layers (full width), counted again; the prediction uses the same slice."""
    a = check_supported(model)
    if layers is None or layers == a.layers:
        return model
    if not 1 <= layers <= a.layers:
        raise UsageError(f"--layers: expected 1 to {a.layers} for {model.id}, got {layers}")
    arch = a._replace(layers=layers, sliding_layers=tuple(i for i in a.sliding_layers if i < layers))
    return model._replace(arch=arch, counts=count_params(arch), published_params=None, published_active_params=None)


def memory_needed(model: Model, dtype: str, batch: int, tokens: int) -> float:
    """Bytes the run allocates: weights, the KV cache (unwindowed: the engine attends over everything),
    and activations of the prefill (a few hidden-wide and MLP-wide buffers per token)."""
    a = model.arch
    kv = kv_bytes_per_token(model, dtype) * batch * tokens
    activations = (
        batch * tokens * (4 * a.hidden_size + 3 * a.intermediate_size + a.num_heads * tokens) * DTYPE_BYTES[dtype]
    )
    return model.params * DTYPE_BYTES[dtype] + kv + activations


def run(
    model: Model,
    hardware: Hardware | None = None,
    device: str = "auto",
    batches: list[int] = VALIDATE_BATCHES,
    prompt: int = VALIDATE_PROMPT,
    output: int = VALIDATE_OUTPUT,
    dtype: str | None = None,
    available_bytes: float | None = None,
    on_step: Callable[[str], None] = lambda s: None,
    repeat: int = VALIDATE_ROUNDS,
    tolerance: float = VALIDATE_TOLERANCE,
    engine: str = "eager",
) -> Report:
    """Measured vs predicted TTFT and TPOT for each batch (see the module docstring): the `validate --json` report.

    `hardware` None: a quick `measure` of this device first. `dtype` None: the model's if it is fp32, bf16 or
    fp16, else bf16, unless this device runs that dtype's matmuls under a tenth as fast as fp32's (native_dtype):
    then fp32, with a note. `available_bytes` None: the free memory of the device. `repeat` rounds interleave the
    batches; `engine` is "eager" (roofline's decoder) or "transformers" (Hugging Face's implementation)."""
    a = check_supported(model)
    asked = dtype
    dtype = dtype if dtype is not None else model.dtype if model.dtype in RUN_DTYPES else "bf16"
    if dtype not in RUN_DTYPES:
        raise UsageError(f"validate runs fp32, bf16 or fp16, got {dtype!r}", "dtype")
    if output < 2:
        raise UsageError(f"--output: expected at least 2 tokens (one decode step), got {output}")
    if not 1 <= repeat <= 100:
        raise UsageError(f"expected 1 to 100 rounds, got {repeat}", "repeat")
    if not 0 < tolerance < 1:
        raise UsageError(f"expected a fraction between 0 and 1, got {tolerance}", "tolerance")
    if engine not in ENGINES:
        raise UsageError(f"expected one of {', '.join(ENGINES)}, got {engine!r}", "engine")
    if a.position_embeddings == "learned" and prompt + output > a.max_positions:
        raise UsageError(
            f"--prompt + --output: {prompt + output} exceeds {model.id}'s {a.max_positions} learned positions"
        )
    if available_bytes is not None:  # refuse before importing torch
        _check_memory(model, dtype, batches, prompt + output, available_bytes)
    from roofline.measure import allocator, machine
    from roofline.measure.timing import pick_device, torch_module

    kept = allocator.keep_freed_memory()  # as serving engines keep their buffers (roofline.measure.allocator)
    torch = torch_module("validate")
    build = engine_builder(engine, model)
    device = pick_device(torch, device)
    notes = []
    if asked is None:
        dtype, note = native_dtype(torch, device, dtype)
        notes += [note] if note else []
    if available_bytes is None:
        available_bytes = torch.cuda.mem_get_info()[0] if device == "cuda" else machine.available_memory()
    _check_memory(model, dtype, batches, prompt + output, available_bytes)
    if hardware is None:
        hardware = _quick_profile(device, dtype, on_step, engine, notes)
    runs: dict[int, list[dict[str, Any]]] = {b: [] for b in batches}
    point, prompt_point = drift.reference_point(hardware.measured, dtype), drift.prompt_point(hardware.measured, dtype)
    with engine_costs.grad_mode(torch, engine):
        buffer = (hardware.measured.get("plan") or {}).get("buffer_bytes", 0) if point else 0
        groups = {1: [point]} if point else {}  # curve M -> its points: M = 1's reference point, and for each
        own_m = {}  # batch nearest a curve M above 1, that M's layer points at every k
        for batch in batches if point else []:
            points = drift.batch_points(hardware.measured, dtype, batch)
            own_m[batch] = points[0]["m"] if points else 1
            groups.setdefault(own_m[batch], points or [point])
        found = drift.decode_references(torch, device, dtype, list(groups.values()), buffer) if groups else []
        at_m = dict(zip(groups, found))
        reference = at_m.pop(1, None)
        prompts = drift.prompt_reference(torch, device, dtype, prompt_point) if prompt_point else None
        references = [x for x in (reference, *at_m.values(), prompts) if x]
        weights, schedule = None, stats.schedule(list(batches), repeat)
        for r, batch in schedule:
            if references:  # before every run (and after the last, below): each run's drift is bracketed
                on_step(f"round {r + 1} of {repeat}: the profile's reference matmuls, for this machine's drift")
                for x in references:
                    x.time()
            on_step(f"round {r + 1} of {repeat}, batch {batch}")
            decoder = build(a, dtype, device, batch, prompt + output, weights)
            weights = decoder.shared_weights()
            runs[batch].append(_time_run(torch, decoder, device, batch, prompt, output, warm_up=r == 0))
            del decoder
        if references:
            on_step("after the last run: the profile's reference matmuls, for this machine's drift")
            for x in references:
                x.time()
    rows = []
    for batch in batches:
        predicted = estimate(
            model,
            hardware,
            batch=batch,
            prompt_tokens=prompt,
            output_tokens=output,
            weight_dtype=dtype,
            kv_dtype=dtype,
            engine=engine if hardware.measured else None,
        )  # a datasheet gives the roofline only
        rows.append(_row(batch, runs[batch], predicted, hardware, tolerance))
    for row in rows:  # the ratios had the machine run as fast as when the profile was measured
        timed = [i for i, (_, b) in enumerate(schedule) if b == row["batch"]]
        if reference:
            m = own_m[row["batch"]]
            row["drift"], row["drift_m"] = at_m.get(m, reference).around(timed), m
            row["drift_corrected_tpot_ratio"] = row["tpot_ratio"] * row["drift"]
        if prompts:
            row["prompt_drift"] = prompts.around(timed)
            row["drift_corrected_ttft_ratio"] = row["ttft_ratio"] * row["prompt_drift"]
    name = torch.cuda.get_device_name(0) if device == "cuda" else machine.cpu_name()
    envelope = {
        "schema_version": SCHEMA_VERSION,
        "engine": engine,
        "rounds": repeat,
        "tolerance": tolerance,
        "model": {"id": model.id, "name": model.name, "params": model.params, "layers": a.layers, "dtype": dtype},
        "device": {
            "kind": device,
            "name": name,
            "threads": torch.get_num_threads(),
            "torch_version": str(torch.__version__),
            "record": machine.record(torch),
            "allocator": kept,
        },
        **run_summary(hardware, prompt, output, batches, rows),
    }
    if reference:  # the profile's rate at its reference point / now (1.3: 30% slower now)
        at = {key: point[key] for key in ("m", "k", "n")}
        envelope["drift"] = {"reference": at, "now_flop_per_s": reference.now, "ratio": reference.drift()}
        if at_m:  # each batch's own M: its layer points at every k, timed as one
            envelope["drift"]["at_m"] = [{"m": m, "now_flop_per_s": x.now, "ratio": x.drift()} for m, x in at_m.items()]
    if prompts:  # likewise at the scan's rounds-timed LLM shape, which prices prefill linears
        envelope.setdefault("drift", {"ratio": None}).update(
            prompt_reference=dict(zip("mkn", prompt_point["shape"])),
            prompt_now_flop_per_s=prompts.now,
            prompt_ratio=prompts.drift(),
        )
    slow = drift.caught_slow(point) if reference else None
    notes += [slow] if slow else []
    notes += [n for n in predicted.notes if n.startswith(f"engine {engine}: its fixed costs were measured in")]
    if hardware.measured and any(r["prediction"] == "roofline" for r in rows):
        notes.append(
            f"{hardware.name} has no calibration for {dtype} (its decode-shaped curve, decode attention or fixed costs "
            f"are missing: see its measured notes, or measure --dtype {dtype}), so the prediction is the roofline bound"
        )
    if notes:
        envelope["notes"] = notes
    return Report("validate", envelope, rows)


def native_dtype(torch, device: str, dtype: str) -> tuple[str, str | None]:
    """(the dtype to run, a note or None): `dtype`, unless a 256^3 matmul in it runs under a tenth of fp32's here
    (bench.slow_dtypes: a CPU without native 16-bit arithmetic), where a validate in it would take ~100x as long and
    match no deployment: then fp32."""
    from roofline.measure import bench
    from roofline.measure.timing import STORAGE

    if dtype == "fp32":
        return dtype, None

    def tensor(*shape: int, dtype: str):
        return torch.rand(*shape, dtype=getattr(torch, STORAGE[dtype]), device=device)

    rates = bench.matmul_probe(torch, device, tensor, [dtype, "fp32"])
    if dtype not in bench.slow_dtypes(rates):
        return dtype, None
    return "fp32", (
        f"{dtype} matmuls run at {rates[dtype] / 1e9:.3g} GFLOP/s here against fp32's {rates['fp32'] / 1e9:.3g} (no "
        f"native {dtype} arithmetic), so this validate runs fp32; --dtype {dtype} runs {dtype} anyway"
    )


def run_summary(hardware: Hardware, prompt: int, output: int, batches: list[int], rows: list) -> dict[str, Any]:
    """The report's hardware, inputs and rows keys, as every engine's validate writes them."""
    return {
        "hardware": {
            "id": hardware.id,
            "name": hardware.name,
            "figures": hardware.origin,
            "memory_bandwidth_bytes_per_s": hardware.memory_bandwidth,
            "peak_flop_per_s": dict(hardware.peak_flops),
        },
        "inputs": {"prompt_tokens": prompt, "output_tokens": output, "batches": list(batches)},
        "rows": rows,
    }


def engine_builder(engine: str, model: Model) -> Callable[..., Any]:
    """build(arch, dtype, device, batch, max_tokens, weights) -> a decoder with prefill, decode, shared_weights."""
    if engine == "transformers":
        from roofline.measure import hf_decoder

        return hf_decoder.builder(model)
    return lambda a, dtype, device, batch, tokens, weights: Decoder(a, dtype, device, batch, tokens, weights=weights)


def _check_memory(model: Model, dtype: str, batches: list[int], tokens: int, available_bytes: float) -> None:
    need = memory_needed(model, dtype, max(batches), tokens)
    if need > available_bytes:
        raise UsageError(
            f"--batch: {model.id} at batch {max(batches)} needs about {need / 1e9:.3g} GB here, "
            f"{available_bytes / 1e9:.3g} GB are available (try --layers or a smaller batch)"
        )


def _quick_profile(kind: str, dtype: str, on_step: Callable[[str], None], engine: str, notes: list[str]) -> Hardware:
    """A quick `measure` of this device (quick_measured) and of `engine`'s fixed costs, as a hardware spec the
    calculator takes."""
    from roofline.measure import engine_costs, profile
    from roofline.specs.hardware import hardware_from_mapping

    measured = quick_measured(kind, dtype, on_step, notes)
    if engine != "eager":
        on_step(f"{engine} fixed costs (tiny models)")
        measured["engines"][engine] = engine_costs.of(engine, kind, dtype, quick=True)
    return hardware_from_mapping(profile.hardware_spec(measured), "a quick measure of this device", "measured-here")


RETAKES = 1  # quick profiles measured again when one's moment is not the machine's a moment later


def quick_measured(kind: str, dtype: str, on_step: Callable[[str], None], notes: list[str]) -> dict[str, Any]:
    """A quick `measure` of this device (bench.run's result), measured again (RETAKES times at most) when its
    reference kernels, timed again right after, run more than drift.SPLIT x faster or slower than the profile saw
    them (drift.offset); of those, the one nearest the machine's speed then. A 4 s profile of a shared VM can catch a
    slow moment: on a 2-core Zen 4 VM one fp32 quick profile of three (2026-12-07) had its decode reference at 0.74-0.81
    of the rate the runs' timings found and its matmuls at 138 GFLOP/s against 192-200 in the other two, and 3 of 24
    held-out TPOTs came within 15% (22 and 23 from the other two; 23 times each batch's drift). Said in `notes`."""
    from roofline.measure import bench
    from roofline.measure.timing import torch_module

    torch, best = torch_module("validate"), None
    for attempt in range(RETAKES + 1):
        on_step("quick measure of this device" + (" again" if attempt else ""))
        measured = bench.run(kind, [dtype], None, True, dtype, on_step=on_step)
        off = drift.offset(torch, kind, dtype, measured)
        if off is None and attempt:
            notes.append(f"quick profile {attempt + 1}: no reference kernels to check it by; kept")
        off = 0.0 if off is None else off  # no reference kernels to check it by: taken as it is
        if best is None or off < best[0]:
            best = (off, measured, attempt)
        if off <= math.log(drift.SPLIT):
            break
        notes.append(
            f"quick profile {attempt + 1}: its reference kernels ran {math.exp(off):.2f}x apart from their speed a "
            "moment later (a slow or fast moment of the machine)"
            + ("; measured again" if attempt < RETAKES else f"; kept profile {best[2] + 1}, the nearest")
        )
    return best[1]


def _time_run(torch, engine, device: str, batch: int, prompt: int, output: int, warm_up: bool = True) -> dict[str, Any]:
    """One round of one batch: a warm-up (the first round's only), then the timed prefill (TTFT) and every
    decode step [s]."""
    sync = synchronizer(torch, device)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, engine.a.vocab_size, (batch, prompt), generator=generator).to(engine.device)
    if warm_up:  # first calls pay allocation and kernel selection
        first = engine.prefill(tokens)
        for j in range(2):
            first = engine.decode(first, prompt + j)
    sync()
    start = time.perf_counter()
    token = engine.prefill(tokens)
    sync()
    ttft = time.perf_counter() - start
    steps = []
    for j in range(output - 1):
        start = time.perf_counter()
        token = engine.decode(token, prompt + j)
        sync()
        steps.append(time.perf_counter() - start)
    return {"ttft_s": ttft, "steps_s": steps}


def _row(batch: int, runs: list[dict[str, Any]], e, hardware: Hardware, tolerance: float) -> dict[str, Any]:
    """One batch's row: medians over rounds and steps, the bootstrap interval of the TPOT median, the ratios."""
    rounds = [r["steps_s"] for r in runs]
    pooled = [s for steps in rounds for s in steps]
    tpot = statistics.median(pooled)
    low, high = stats.median_interval(rounds)
    ttft = statistics.median(r["ttft_s"] for r in runs)
    ttft_low, ttft_high = stats.median_interval([[r["ttft_s"]] for r in runs])  # one prefill a round
    calibrated = e.calibrated
    predicted_tpot = calibrated.tpot_s if calibrated else e.tpot_s
    predicted_ttft = calibrated.ttft_s if calibrated else e.ttft_s
    ratio_low, ratio_high = predicted_tpot / high, predicted_tpot / low
    ttft_verdict = stats.verdict(predicted_ttft / ttft_high, predicted_ttft / ttft_low, tolerance)
    tpot_verdict = stats.verdict(ratio_low, ratio_high, tolerance)
    return {
        "batch": batch,
        "measured_ttft_s": ttft,
        "measured_tpot_s": tpot,
        "measured_tpot_p10_s": stats.percentile(pooled, 0.10),
        "measured_tpot_p90_s": stats.percentile(pooled, 0.90),
        "measured_tpot_low_s": low,
        "measured_tpot_high_s": high,
        "predicted_ttft_s": predicted_ttft,
        "predicted_tpot_s": predicted_tpot,
        "roofline_ttft_s": e.ttft_s,
        "roofline_tpot_s": e.tpot_s,
        "prediction": "calibrated" if calibrated else "roofline",
        "tpot_ratio": predicted_tpot / tpot,
        "tpot_ratio_low": ratio_low,
        "tpot_ratio_high": ratio_high,
        "tpot_verdict": tpot_verdict,
        "verdict": stats.both(ttft_verdict, tpot_verdict),
        "ttft_ratio": predicted_ttft / ttft,
        "ttft_ratio_low": predicted_ttft / ttft_high,
        "ttft_ratio_high": predicted_ttft / ttft_low,
        "ttft_verdict": ttft_verdict,
        "roofline_tpot_ratio": e.tpot_s / tpot,
        "achieved_flop_per_s": e.decode.flops / tpot,
        "achieved_bytes_per_s": e.decode.bytes / tpot,
        "mfu": e.decode.flops / tpot / e.hardware.peak_flop_per_s,
        "mbu": e.decode.bytes / tpot / hardware.memory_bandwidth,
        "expected_bound": e.decode.bound,
    }
