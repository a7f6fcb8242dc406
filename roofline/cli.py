"""The `roofline` command line: a thin client of the library. No formulas here.

stdout carries results only (tables, JSON or CSV); notes, warnings, progress and errors go to stderr.
Every user mistake is a RooflineError, printed once as `roofline: error: ...` by `handled`.
"""


import functools
import sys
from typing import Any, Callable, List, Optional

import typer

from roofline import __version__
from roofline.errors import RooflineError, UsageError

DEFAULTS = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "batch": 1, "prompt": 1024, "output": 256}
FLAGS = {  # library argument -> flag, so errors name what the user typed
    "batch": "--batch", "prompt_tokens": "--prompt", "output_tokens": "--output", "weight_dtype": "--weight-dtype",
    "kv_dtype": "--kv-dtype", "compute_dtype": "--compute-dtype", "bits_per_weight": "--bits-per-weight",
    "memory_fraction": "--memory-fraction", "compute_efficiency": "--compute-efficiency",
    "bandwidth_efficiency": "--bandwidth-efficiency", "tpot_slo": "--tpot-slo", "ttft_slo": "--ttft-slo", "tp": "--tp",
}

app = typer.Typer(
    help="Roofline napkin math for LLM inference: how fast a model runs on a device, and why.",
    add_completion=False,
    pretty_exceptions_enable=False,
)
hardware_app = typer.Typer(help="List and show bundled devices.")
models_app = typer.Typer(help="List and show bundled models.")
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")


def main() -> None:
    """Console-script entry point: usage errors as one stderr line (exit 2), results as the commands print them."""
    try:
        from typer._click.exceptions import ClickException  # typer >= 0.26 vendors click
    except ImportError:  # pragma: no cover - older typer
        from click.exceptions import ClickException
    try:
        code = app(prog_name="roofline", standalone_mode=False)
    except ClickException as e:
        err(f"roofline: error: {e.format_message()} (see `roofline --help`)")
        code = e.exit_code
    except KeyboardInterrupt:
        err("roofline: interrupted")
        code = 130
    sys.exit(code if isinstance(code, int) else 0)


def err(message: str) -> None:
    """Write one line to stderr."""
    sys.stderr.write(message + "\n")


def out(renderable: Any) -> None:
    """Print a rich renderable to stdout (rich honours NO_COLOR; pipes get plain text, 160 columns, no wrapping)."""
    from rich.console import Console

    Console(width=None if sys.stdout.isatty() else 160).print(renderable)


def emit(data: Any, as_json: bool, table: Callable[[], Any], csv_rows: list | None = None) -> None:
    """Print `data` as JSON, the records `csv_rows` as CSV, or the rich renderable `table()` builds."""
    from roofline.render import to_csv, to_json

    if as_json:
        typer.echo(to_json(data))
    elif csv_rows is not None:
        typer.echo(to_csv(csv_rows), nl=False)
    else:
        out(table())


def handled(command: Callable) -> Callable:
    """Turn RooflineError into one stderr line and its exit code; Ctrl-C into 130."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except RooflineError as e:
            message = str(e)
            name = message.split(":", 1)[0]
            if name in FLAGS:
                message = FLAGS[name] + message[len(name):]
            err(f"roofline: error: {message}")
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            err("roofline: interrupted")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `roofline ... | head`
            sys.stderr.close()
            raise typer.Exit(0) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"roofline {__version__}")
        raise typer.Exit()


def _help_without_command(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """Roofline napkin math for LLM inference."""
    _help_without_command(ctx)


@hardware_app.callback(invoke_without_command=True)
def hardware_group(ctx: typer.Context) -> None:
    """List and show bundled devices."""
    _help_without_command(ctx)


@models_app.callback(invoke_without_command=True)
def models_group(ctx: typer.Context) -> None:
    """List and show bundled models."""
    _help_without_command(ctx)


# Options shared by estimate, sweep, compare and plot.
JSON = typer.Option(False, "--json", help="Print JSON (plain SI numbers) instead of a table.")
CSV = typer.Option(False, "--csv", help="Print CSV (one header row; units in the column names).")
MODEL = typer.Option(None, "--model", "-m", help="Model id, YAML path, or Hugging Face config.json / model folder. [default: llama-3.1-8b]")
HARDWARE = typer.Option(None, "--hardware", "-H", help="Hardware id or YAML path. [default: h100-sxm]")
WEIGHT_DTYPE = typer.Option(None, "--weight-dtype", help="Weight dtype. [default: the model's]")
KV_DTYPE = typer.Option(None, "--kv-dtype", help="KV cache dtype. [default: the model's]")
COMPUTE_DTYPE = typer.Option(None, "--compute-dtype", help="Matmul dtype. [default: the weight dtype if the device has it, else bf16]")
BITS = typer.Option(None, "--bits-per-weight", help="Override weight storage, e.g. 4.85 for GGUF Q4_K_M.")
FRACTION = typer.Option(0.9, "--memory-fraction", help="Share of memory for weights + KV cache (vLLM gpu_memory_utilization).")
COMPUTE_EFF = typer.Option(1.0, "--compute-efficiency", help="Achievable share of peak FLOP/s (1.0 = the roofline bound).")
BANDWIDTH_EFF = typer.Option(1.0, "--bandwidth-efficiency", help="Achievable share of peak bandwidth (1.0 = the roofline bound).")
TPOT_SLO = typer.Option(None, "--tpot-slo", help="Latency objective per output token, e.g. 50ms.")
TTFT_SLO = typer.Option(None, "--ttft-slo", help="Latency objective to the first token, e.g. 2s.")
QUIET = typer.Option(False, "--quiet", "-q", help="No notes on stderr.")
TP = typer.Option(1, "--tp", min=1, help="Tensor-parallel devices: weights, KV and FLOPs split; all-reduces added.")


def _options(weight_dtype, kv_dtype, compute_dtype, bits_per_weight, memory_fraction, compute_efficiency, bandwidth_efficiency, tp) -> dict:
    return dict(
        weight_dtype=weight_dtype, kv_dtype=kv_dtype, compute_dtype=compute_dtype, bits_per_weight=bits_per_weight,
        memory_fraction=memory_fraction, compute_efficiency=compute_efficiency, bandwidth_efficiency=bandwidth_efficiency, tp=tp,
    )


def _duration(text: str | None, flag: str) -> float | None:
    from roofline.units import parse

    if text is None:
        return None
    try:
        value = parse(text, "seconds")
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None
    if not value > 0:
        raise UsageError(f"{flag}: expected a positive duration such as 50ms, got {text!r}")
    return value


def _specs(model: str | None, hardware: str | None, quiet: bool, **more: Any):
    """Load the model and hardware, naming on stderr the defaults that were used."""
    from roofline.specs import load_hardware, load_model

    given = {"model": model, "hardware": hardware, **more}
    defaulted = [f"--{k} {DEFAULTS[k]}" for k, v in given.items() if v is None]
    if defaulted and not quiet:
        err(f"roofline: using defaults: {' '.join(defaulted)}")
    return load_model(model or DEFAULTS["model"]), load_hardware(hardware or DEFAULTS["hardware"])


@app.command()
@handled
def estimate(
    model: Optional[str] = MODEL,
    hardware: Optional[str] = HARDWARE,
    batch: Optional[int] = typer.Option(None, "--batch", "-b", min=1, help="Concurrent sequences. [default: 1]"),
    prompt: Optional[int] = typer.Option(None, "--prompt", min=1, help="Prompt tokens per sequence. [default: 1024]"),
    output: Optional[int] = typer.Option(None, "--output", min=0, help="Output tokens per sequence. [default: 256]"),
    weight_dtype: Optional[str] = WEIGHT_DTYPE,
    kv_dtype: Optional[str] = KV_DTYPE,
    compute_dtype: Optional[str] = COMPUTE_DTYPE,
    bits_per_weight: Optional[float] = BITS,
    memory_fraction: float = FRACTION,
    compute_efficiency: float = COMPUTE_EFF,
    bandwidth_efficiency: float = BANDWIDTH_EFF,
    tp: int = TP,
    json: bool = JSON,
    quiet: bool = QUIET,
) -> None:
    """Estimate TTFT, TPOT, throughput and memory limits for one model on one device.

    Examples:

      roofline estimate

      roofline estimate -m llama-3.1-70b -H h200 -b 32 --prompt 2048 --output 512

      roofline estimate -m qwen2.5-7b -H rtx-4090 --weight-dtype int4 --bits-per-weight 4.85 --json
    """
    from roofline.calc import estimate as run_estimate

    m, h = _specs(model, hardware, quiet, batch=batch, prompt=prompt, output=output)
    options = _options(weight_dtype, kv_dtype, compute_dtype, bits_per_weight, memory_fraction, compute_efficiency, bandwidth_efficiency, tp)
    result = run_estimate(
        m, h, batch=batch or DEFAULTS["batch"], prompt_tokens=prompt or DEFAULTS["prompt"],
        output_tokens=DEFAULTS["output"] if output is None else output, **options,
    )
    for warning in result.warnings:
        err(f"roofline: warning: {warning}")

    def table():
        from roofline.render import estimate_table

        return estimate_table(result)

    emit(result.to_dict() if json else None, json, table)


@app.command()
@handled
def sweep(
    model: Optional[str] = MODEL,
    hardware: Optional[str] = HARDWARE,
    batch: Optional[str] = typer.Option(None, "--batch", "-b", help="List (1,8,64) or range (1:512 doubling, 8:128:8). [default: powers of two up to the max batch, and the max batch]"),
    prompt: str = typer.Option("1024", "--prompt", help="Prompt tokens: a value, list or range."),
    output: str = typer.Option("256", "--output", help="Output tokens: a value, list or range."),
    tpot_slo: Optional[str] = TPOT_SLO,
    ttft_slo: Optional[str] = TTFT_SLO,
    weight_dtype: Optional[str] = WEIGHT_DTYPE,
    kv_dtype: Optional[str] = KV_DTYPE,
    compute_dtype: Optional[str] = COMPUTE_DTYPE,
    bits_per_weight: Optional[float] = BITS,
    memory_fraction: float = FRACTION,
    compute_efficiency: float = COMPUTE_EFF,
    bandwidth_efficiency: float = BANDWIDTH_EFF,
    tp: int = TP,
    json: bool = JSON,
    csv: bool = CSV,
    quiet: bool = QUIET,
) -> None:
    """Sweep batch (and prompt/output lengths): throughput, latency, memory and goodput under SLOs.

    Examples:

      roofline sweep -m llama-3.1-8b -H h100-sxm --tpot-slo 20ms

      roofline sweep -m llama-3.1-70b -H h200 --batch 1:256 --prompt 512,2048,8192 --csv
    """
    from roofline import sweep as sweeps

    if json and csv:
        raise UsageError("--json and --csv: choose one output format")
    m, h = _specs(model, hardware, quiet)
    result = sweeps.sweep(
        m, h,
        batches=sweeps.parse_counts(batch, "--batch") if batch is not None else None,
        prompts=sweeps.parse_counts(prompt, "--prompt"),
        outputs=sweeps.parse_counts(output, "--output", low=0),
        tpot_slo=_duration(tpot_slo, "--tpot-slo"),
        ttft_slo=_duration(ttft_slo, "--ttft-slo"),
        **_options(weight_dtype, kv_dtype, compute_dtype, bits_per_weight, memory_fraction, compute_efficiency, bandwidth_efficiency, tp),
    )

    def table():
        from roofline.render import sweep_table

        return sweep_table(result)

    emit(result.to_dict() if json else None, json, table, result.rows if csv else None)


@app.command()
@handled
def compare(
    model: List[str] = typer.Option(..., "--model", "-m", help="Model id or YAML path; repeat to compare several."),
    hardware: List[str] = typer.Option(..., "--hardware", "-H", help="Hardware id or YAML path; repeat to compare several."),
    batch: int = typer.Option(1, "--batch", "-b", min=1, help="Batch for the TTFT / TPOT / tokens/s columns."),
    prompt: int = typer.Option(1024, "--prompt", min=1, help="Prompt tokens per sequence."),
    output: int = typer.Option(256, "--output", min=0, help="Output tokens per sequence."),
    tpot_slo: Optional[str] = TPOT_SLO,
    ttft_slo: Optional[str] = TTFT_SLO,
    sort: Optional[str] = typer.Option(None, "--sort", help="Sort by a column (JSON key); prefix - for descending, e.g. -tokens_per_s."),
    weight_dtype: Optional[str] = WEIGHT_DTYPE,
    kv_dtype: Optional[str] = KV_DTYPE,
    compute_dtype: Optional[str] = COMPUTE_DTYPE,
    bits_per_weight: Optional[float] = BITS,
    memory_fraction: float = FRACTION,
    compute_efficiency: float = COMPUTE_EFF,
    bandwidth_efficiency: float = BANDWIDTH_EFF,
    tp: int = TP,
    json: bool = JSON,
    csv: bool = CSV,
) -> None:
    """Compare models x devices side by side: fit, max batch, ridge, TTFT, TPOT, tokens/s, best goodput batch.

    Examples:

      roofline compare -m llama-3.1-8b -m qwen2.5-7b -H h100-sxm -H l40s -H rtx-4090 --sort -tokens_per_s

      roofline compare -m llama-3.1-70b -H h200 -H mi300x -H b200 -b 32 --tpot-slo 30ms --json
    """
    from roofline import sweep as sweeps
    from roofline.calc import plain
    from roofline.specs import load_hardware, load_model

    if json and csv:
        raise UsageError("--json and --csv: choose one output format")
    rows = sweeps.compare(
        [load_model(m) for m in model], [load_hardware(h) for h in hardware],
        batch=batch, prompt_tokens=prompt, output_tokens=output,
        tpot_slo=_duration(tpot_slo, "--tpot-slo"), ttft_slo=_duration(ttft_slo, "--ttft-slo"), sort=sort,
        **_options(weight_dtype, kv_dtype, compute_dtype, bits_per_weight, memory_fraction, compute_efficiency, bandwidth_efficiency, tp),
    )

    def table():
        from roofline.render import compare_table

        return compare_table(rows)

    emit({"schema_version": 1, "rows": plain(rows)} if json else None, json, table, rows if csv else None)


@app.command()
@handled
def plot(
    model: Optional[str] = MODEL,
    hardware: Optional[str] = HARDWARE,
    batch: Optional[str] = typer.Option(None, "--batch", "-b", help="Batches: list or range. [default: 1,8,64; with --sweep, powers of two up to the max batch]"),
    prompt: str = typer.Option("1024", "--prompt", help="Prompt tokens: a value, list or range."),
    output: int = typer.Option(256, "--output", min=0, help="Output tokens per sequence."),
    out_path: str = typer.Option("roofline.png", "--out", "-o", help="Image to write: .png or .svg."),
    sweep_plot: bool = typer.Option(False, "--sweep", help="Plot throughput and TPOT against batch instead of the roofline."),
    tpot_slo: Optional[str] = TPOT_SLO,
    ttft_slo: Optional[str] = TTFT_SLO,
    weight_dtype: Optional[str] = WEIGHT_DTYPE,
    kv_dtype: Optional[str] = KV_DTYPE,
    compute_dtype: Optional[str] = COMPUTE_DTYPE,
    bits_per_weight: Optional[float] = BITS,
    memory_fraction: float = FRACTION,
    compute_efficiency: float = COMPUTE_EFF,
    bandwidth_efficiency: float = BANDWIDTH_EFF,
    tp: int = TP,
    quiet: bool = QUIET,
) -> None:
    """Draw the device's roofline with the model's prefill and decode points (needs matplotlib).

    Examples:

      roofline plot -m llama-3.1-8b -H h100-sxm --batch 1,16,256 -o roofline.png

      roofline plot --sweep -m llama-3.1-70b -H h200 --tpot-slo 50ms -o sweep.svg
    """
    from roofline import plot as plots
    from roofline import sweep as sweeps
    from roofline.calc import estimate as run_estimate

    m, h = _specs(model, hardware, quiet)
    options = _options(weight_dtype, kv_dtype, compute_dtype, bits_per_weight, memory_fraction, compute_efficiency, bandwidth_efficiency, tp)
    prompts = sweeps.parse_counts(prompt, "--prompt")
    if sweep_plot:
        result = sweeps.sweep(
            m, h, batches=sweeps.parse_counts(batch, "--batch") if batch else None, prompts=prompts, outputs=[output],
            tpot_slo=_duration(tpot_slo, "--tpot-slo"), ttft_slo=_duration(ttft_slo, "--ttft-slo"), **options,
        )
        plots.draw_sweep(plots.sweep_data(result), out_path)
    else:
        estimates = [
            run_estimate(m, h, batch=b, prompt_tokens=p, output_tokens=output, **options)
            for p in prompts for b in sweeps.parse_counts(batch or "1,8,64", "--batch")
        ]
        plots.draw_roofline(plots.roofline_data(h, estimates), out_path)
    if not quiet:
        err(f"roofline: wrote {out_path}")


@hardware_app.command("list")
@handled
def hardware_list(json: bool = JSON) -> None:
    """List bundled devices with memory, bandwidth, 16-bit peak and ridge point."""
    from roofline import describe
    from roofline.render_specs import hardware_list as table
    from roofline.specs import catalog, load_hardware

    rows = [describe.hardware(load_hardware(i)) for i in catalog("hardware")]
    emit(rows, json, lambda: table(rows))


@hardware_app.command("show")
@handled
def hardware_show(hardware: str = typer.Argument(..., help="Hardware id or YAML path."), json: bool = JSON) -> None:
    """Show one device's figures and the ridge point of each dtype."""
    from roofline import describe
    from roofline.render_specs import hardware_detail
    from roofline.specs import load_hardware

    info = describe.hardware(load_hardware(hardware))
    emit(info, json, lambda: hardware_detail(info))


@models_app.command("list")
@handled
def models_list(json: bool = JSON) -> None:
    """List bundled models with derived parameter counts and KV cache per token."""
    from roofline import describe
    from roofline.render_specs import models_list as table
    from roofline.specs import catalog, load_model

    rows = [describe.model(load_model(i)) for i in catalog("models")]
    emit(rows, json, lambda: table(rows))


@models_app.command("import")
@handled
def models_import(
    config: str = typer.Argument(..., help="A Hugging Face config.json, or a model folder holding one."),
    name: Optional[str] = typer.Option(None, "--name", help="The model's name (and the id to save it under)."),
    out_path: Optional[str] = typer.Option(None, "--out", "-o", help="Write the YAML here (e.g. models/ID.yaml) instead of stdout."),
) -> None:
    """Convert a config.json into a model YAML (offline: no hub access).

    Example:

      roofline models import ~/models/Qwen3-8B --name qwen3-8b -o models/qwen3-8b.yaml
    """
    from roofline import hf

    text = hf.to_yaml(config, name)
    if out_path is None:
        typer.echo(text, nl=False)
        return
    from roofline.files import atomic_write

    with atomic_write(out_path, "--out") as f:
        f.write(text)
    err(f"roofline: wrote {out_path}")


@models_app.command("show")
@handled
def models_show(model: str = typer.Argument(..., help="Model id, YAML path, or config.json / model folder."), json: bool = JSON) -> None:
    """Show a model's derived parameter count (by role) and KV cache per token."""
    from roofline import describe
    from roofline.render_specs import model_detail
    from roofline.specs import load_model

    info = describe.model(load_model(model))
    emit(info, json, lambda: model_detail(info))


# The torch-backed commands (measure, validate) live in their own module; importing it registers them.
from roofline import cli_measure  # noqa: E402,F401
