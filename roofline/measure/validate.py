"""`validate`: run a real prefill + decode with the model's shapes here and compare with the prediction.

For each batch: build the KV cache for prompt + output tokens, warm up, time the prefill (TTFT) and every
decode step (median and p90), then predict the same run with the calculator on the hardware profile given
(or a quick `measure` of this device): the pure roofline bound, and the calibrated prediction when the
profile carries the measured curves. Ratios are predicted / measured.
"""

import statistics
import time
from typing import Any, Callable

from roofline.calc.estimate import estimate
from roofline.calc.knobs import VALIDATE_BATCHES, VALIDATE_OUTPUT, VALIDATE_PROMPT
from roofline.measure.engine import Decoder, check_supported
from roofline.calc.attention import kv_bytes_per_token
from roofline.errors import UsageError
from roofline.report import Report
from roofline.specs.params import count_params
from roofline.specs.records import DTYPE_BYTES, Hardware, Model

SCHEMA_VERSION = 1
RUN_DTYPES = ("fp32", "bf16", "fp16")


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
    activations = batch * tokens * (4 * a.hidden_size + 3 * a.intermediate_size + a.num_heads * tokens) * DTYPE_BYTES[dtype]
    return model.params * DTYPE_BYTES[dtype] + kv + activations


def run(model: Model, hardware: Hardware | None = None, device: str = "auto", batches: list[int] = VALIDATE_BATCHES,
        prompt: int = VALIDATE_PROMPT, output: int = VALIDATE_OUTPUT, dtype: str | None = None, available_bytes: float | None = None,
        on_step: Callable[[str], None] = lambda s: None) -> Report:
    """Measured vs predicted TTFT and TPOT for each batch (see the module docstring): the `validate --json` report.

    `hardware` None: a quick `measure` of this device first. `dtype` None: the model's if it is fp32, bf16 or
    fp16, else bf16. `available_bytes` None: the free memory of the device."""
    a = check_supported(model)
    dtype = dtype if dtype is not None else model.dtype if model.dtype in RUN_DTYPES else "bf16"
    if dtype not in RUN_DTYPES:
        raise UsageError(f"validate runs fp32, bf16 or fp16, got {dtype!r}", "dtype")
    if output < 2:
        raise UsageError(f"--output: expected at least 2 tokens (one decode step), got {output}")
    if a.position_embeddings == "learned" and prompt + output > a.max_positions:
        raise UsageError(f"--prompt + --output: {prompt + output} exceeds {model.id}'s {a.max_positions} learned positions")
    if available_bytes is not None:  # refuse before importing torch
        _check_memory(model, dtype, batches, prompt + output, available_bytes)
    from roofline.measure import machine
    from roofline.measure.timing import pick_device, torch_module

    torch = torch_module("validate")
    device = pick_device(torch, device)
    if available_bytes is None:
        _check_memory(model, dtype, batches, prompt + output, torch.cuda.mem_get_info()[0] if device == "cuda" else machine.available_memory())
    if hardware is None:
        hardware = _quick_profile(device, dtype, on_step)
    rows = []
    with torch.inference_mode():
        weights = None
        for batch in batches:
            on_step(f"batch {batch}")
            engine = Decoder(a, dtype, device, batch, prompt + output, weights=weights)
            weights = engine.shared_weights()
            measured = _time_run(torch, engine, device, batch, prompt, output)
            predicted = estimate(model, hardware, batch=batch, prompt_tokens=prompt, output_tokens=output, weight_dtype=dtype, kv_dtype=dtype)
            rows.append(_row(batch, measured, predicted, hardware))
            del engine
    name = torch.cuda.get_device_name(0) if device == "cuda" else machine.cpu_name()
    envelope = {
        "schema_version": SCHEMA_VERSION,
        "model": {"id": model.id, "name": model.name, "params": model.params, "layers": a.layers, "dtype": dtype},
        "device": {"kind": device, "name": name, "threads": torch.get_num_threads(), "torch_version": str(torch.__version__)},
        "hardware": {"id": hardware.id, "name": hardware.name, "figures": hardware.origin,
                     "memory_bandwidth_bytes_per_s": hardware.memory_bandwidth, "peak_flop_per_s": dict(hardware.peak_flops)},
        "inputs": {"prompt_tokens": prompt, "output_tokens": output, "batches": list(batches)},
        "rows": rows,
    }
    return Report("validate", envelope, rows)


def _check_memory(model: Model, dtype: str, batches: list[int], tokens: int, available_bytes: float) -> None:
    need = memory_needed(model, dtype, max(batches), tokens)
    if need > available_bytes:
        raise UsageError(f"--batch: {model.id} at batch {max(batches)} needs about {need / 1e9:.3g} GB here, "
                         f"{available_bytes / 1e9:.3g} GB are available (try --layers or a smaller batch)")


def _quick_profile(kind: str, dtype: str, on_step: Callable[[str], None]) -> Hardware:
    """A quick `measure` of this device, as a hardware spec the calculator takes."""
    from roofline.measure import bench, profile
    from roofline.specs.hardware import hardware_from_mapping

    on_step("quick measure of this device")
    measured = bench.run(kind, [dtype], None, True, dtype, on_step=on_step)
    return hardware_from_mapping(profile.hardware_spec(measured), "a quick measure of this device", "measured-here")


def _time_run(torch, engine: Decoder, device: str, batch: int, prompt: int, output: int) -> dict[str, Any]:
    sync = torch.cuda.synchronize if device == "cuda" else torch.mps.synchronize if device == "mps" else (lambda: None)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, engine.a.vocab_size, (batch, prompt), generator=generator).to(engine.device)
    first = engine.prefill(tokens)  # warm-up: first calls pay allocation and kernel selection
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
    ordered = sorted(steps)
    return {"ttft_s": ttft, "tpot_s": statistics.median(steps), "tpot_p90_s": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]}


def _row(batch: int, measured: dict[str, Any], e, hardware: Hardware) -> dict[str, Any]:
    calibrated = e.calibrated
    return {
        "batch": batch,
        "measured_ttft_s": measured["ttft_s"],
        "measured_tpot_s": measured["tpot_s"],
        "measured_tpot_p90_s": measured["tpot_p90_s"],
        "predicted_ttft_s": calibrated.ttft_s if calibrated else e.ttft_s,
        "predicted_tpot_s": calibrated.tpot_s if calibrated else e.tpot_s,
        "roofline_ttft_s": e.ttft_s,
        "roofline_tpot_s": e.tpot_s,
        "prediction": "calibrated" if calibrated else "roofline",
        "tpot_ratio": (calibrated.tpot_s if calibrated else e.tpot_s) / measured["tpot_s"],
        "ttft_ratio": (calibrated.ttft_s if calibrated else e.ttft_s) / measured["ttft_s"],
        "roofline_tpot_ratio": e.tpot_s / measured["tpot_s"],
        "achieved_flop_per_s": e.decode.flops / measured["tpot_s"],
        "achieved_bytes_per_s": e.decode.bytes / measured["tpot_s"],
        "mfu": e.decode.flops / measured["tpot_s"] / e.hardware.peak_flop_per_s,
        "mbu": e.decode.bytes / measured["tpot_s"] / hardware.memory_bandwidth,
        "expected_bound": e.decode.bound,
    }
