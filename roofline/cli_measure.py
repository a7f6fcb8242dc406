"""The torch-backed commands: `measure` (and `--collectives`) and `validate`. Registered on roofline.cli's app."""

from typing import Any, Callable, Optional

import typer

from roofline.cli import JSON, app, emit, err, handled
from roofline.errors import UsageError


@app.command()
@handled
def measure(
    device: str = typer.Option("auto", "--device", help="auto (cuda, then mps, then cpu), cpu, cuda or mps."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Comma-separated matmul dtypes: fp32,tf32,bf16,fp16. [default: all that apply]"),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads for torch. [default: torch's]"),
    quick: bool = typer.Option(False, "--quick", help="A ~5 s run: fewer shapes and shorter repeats."),
    weight_dtype: str = typer.Option("bf16", "--weight-dtype", help="Dtype of the matrix-vector bandwidth kernel."),
    save: Optional[str] = typer.Option(None, "--save", help="Write a hardware YAML that `roofline estimate -H PATH` takes."),
    hardware: Optional[str] = typer.Option(None, "--hardware", "-H", help="Datasheet to compare with. [default: matched by device name]"),
    collectives: bool = typer.Option(False, "--collectives", help="Measure all-reduce bandwidth and latency across processes instead."),
    devices: Optional[int] = typer.Option(None, "--devices", min=2, help="Processes for --collectives. [default: the GPUs, or 2 CPU processes]"),
    json: bool = JSON,
) -> None:
    """Measure matmul FLOP/s and memory bandwidth here, and calibrate estimates with them (needs torch).

    Examples:

      roofline measure --quick

      roofline measure --device cuda --save my-gpu.yaml && roofline estimate -H my-gpu.yaml

      roofline measure --collectives --save my-gpu.yaml   # adds the measured interconnect to that profile
    """
    from roofline import profile
    from roofline.specs import load_hardware

    datasheet = load_hardware(hardware) if hardware else None
    if collectives:
        return _measure_collectives(devices, device, quick, save, datasheet, json)
    from roofline import measure as bench

    dtypes = [d.strip() for d in dtype.split(",") if d.strip()] if dtype is not None else None
    if dtypes == []:
        raise UsageError("--dtype: expected a comma-separated list such as fp32,bf16")
    with _Progress() as step:
        result = bench.run(device, dtypes, threads, quick, weight_dtype, on_step=step)
    datasheet = datasheet or profile.match_datasheet(result["device"]["name"])
    compared = profile.comparison(result, datasheet) if datasheet else None
    if compared:
        result["datasheet"] = compared
    if save:
        profile.save(result, save)
        err(f"roofline: saved {save}; use it with: roofline estimate -H {save}")

    def table():
        from roofline.render_measure import measure_table

        return measure_table(result, compared)

    emit(result, json, table)


def _measure_collectives(devices, device, quick, save, datasheet, as_json) -> None:
    """`measure --collectives`: time all-reduces; --save updates the profile at PATH (or copies -H's spec)."""
    from pathlib import Path

    from roofline import collectives, profile
    from roofline.specs import load_hardware

    base = load_hardware(save) if save and Path(save).is_file() else datasheet
    if save and base is None:
        raise UsageError(f"--save: {save} does not exist; run `roofline measure --save {save}` first, or give -H with the device's datasheet")
    with _Progress() as step:
        step("all-reduce over message sizes")
        result = collectives.run(devices, device, quick)
    if save:
        profile.save_collectives(result, save, base)
        err(f"roofline: saved the interconnect to {save}")

    def table():
        from roofline.render_measure import collectives_table

        return collectives_table(result, base)

    emit(result, as_json, table)


class _Progress:
    """A rich progress display on stderr while `measure` runs; the callback names the current step."""

    def __enter__(self) -> Callable[[str], None]:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
            console=Console(stderr=True), transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task("measuring", total=None)
        return lambda label: self.progress.update(self.task, description=f"measuring: {label}", advance=1)

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()


@app.command()
@handled
def validate(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model id, YAML or config.json (dense attention). [default: gpt2]"),
    device: str = typer.Option("auto", "--device", help="auto (cuda, then mps, then cpu), cpu, cuda or mps."),
    batch: str = typer.Option("1,4,16", "--batch", "-b", help="Batches to run: a list or range."),
    prompt: int = typer.Option(128, "--prompt", min=1, help="Prompt tokens per sequence."),
    output: int = typer.Option(32, "--output", min=2, help="Output tokens per sequence (decode steps + 1)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="fp32, bf16 or fp16. [default: the model's, else bf16]"),
    layers: Optional[int] = typer.Option(None, "--layers", min=1, help="Run (and predict) the first N layers only, at full width."),
    hardware: Optional[str] = typer.Option(None, "--hardware", "-H", help="Profile or datasheet to predict with. [default: a quick measure of this device]"),
    json: bool = JSON,
) -> None:
    """Run a real decode with the model's shapes here and compare it with the prediction (needs torch).

    Examples:

      roofline validate -m gpt2

      roofline validate -m llama-3.2-1b --batch 1,4,16 --prompt 128 --output 32 -H here.yaml --json
    """
    from roofline import machine, sweep as sweeps
    from roofline import validate as check
    from roofline.measure import pick_device, torch_module
    from roofline.specs import load_hardware, load_model

    spec = check.sliced(load_model(model or "gpt2"), layers)  # refuse unsupported models before importing torch
    torch = torch_module("validate")
    kind = pick_device(torch, device)
    run_dtype = dtype or (spec.dtype if spec.dtype in ("fp32", "bf16", "fp16") else "bf16")
    batches = sweeps.parse_counts(batch, "--batch")
    with _Progress() as step:
        used = load_hardware(hardware) if hardware else _quick_profile(kind, run_dtype, step)
        available = torch.cuda.mem_get_info()[0] if kind == "cuda" else machine.available_memory()
        result = check.run(spec, used, kind, batches, prompt, output, run_dtype, available, on_step=step)
    name = torch.cuda.get_device_name(0) if kind == "cuda" else machine.cpu_name()
    a = spec.arch
    result = {
        "schema_version": result["schema_version"],
        "model": {"id": spec.id, "name": spec.name, "params": spec.params, "layers": a.layers, "dtype": run_dtype},
        "device": {"kind": kind, "name": name, "threads": torch.get_num_threads(), "torch_version": str(torch.__version__)},
        "hardware": {"id": used.id, "name": used.name, "figures": used.origin, "memory_bandwidth_bytes_per_s": used.memory_bandwidth,
                     "peak_flop_per_s": dict(used.peak_flops)},
        "inputs": {"prompt_tokens": prompt, "output_tokens": output, "batches": batches},
        "rows": result["rows"],
    }

    def table():
        from roofline.render_measure import validate_table

        return validate_table(result)

    emit(result, json, table)


def _quick_profile(kind: str, dtype: str, step):
    """A quick `measure` of this device, as a hardware spec the calculator takes."""
    from roofline import measure as bench
    from roofline import profile
    from roofline.specs import hardware_from_mapping

    step("quick measure of this device")
    measured = bench.run(kind, [dtype], None, True, dtype, on_step=step)
    return hardware_from_mapping(profile.hardware_spec(measured), "a quick measure of this device", "measured-here")
