"""The `roofline` command line: a thin client of the library. No formulas here.

stdout carries results only (tables or JSON); notes, warnings and errors go to stderr.
Every user mistake is a RooflineError, printed once as `roofline: error: ...` by `handled`.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, Optional

import typer

from roofline import __version__
from roofline.errors import RooflineError, UsageError

DEFAULTS = {"model": "llama-3.1-8b", "hardware": "h100-sxm", "batch": 1, "prompt": 1024, "output": 256}
FLAGS = {  # library argument -> flag, so errors name what the user typed
    "batch": "--batch", "prompt_tokens": "--prompt", "output_tokens": "--output", "weight_dtype": "--weight-dtype",
    "kv_dtype": "--kv-dtype", "compute_dtype": "--compute-dtype", "bits_per_weight": "--bits-per-weight",
    "memory_fraction": "--memory-fraction", "compute_efficiency": "--compute-efficiency",
    "bandwidth_efficiency": "--bandwidth-efficiency",
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


JSON = typer.Option(False, "--json", help="Print JSON (plain SI numbers) instead of a table.")


@app.command()
@handled
def estimate(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model id or YAML path. [default: llama-3.1-8b]"),
    hardware: Optional[str] = typer.Option(None, "--hardware", "-H", help="Hardware id or YAML path. [default: h100-sxm]"),
    batch: Optional[int] = typer.Option(None, "--batch", "-b", min=1, help="Concurrent sequences. [default: 1]"),
    prompt: Optional[int] = typer.Option(None, "--prompt", min=1, help="Prompt tokens per sequence. [default: 1024]"),
    output: Optional[int] = typer.Option(None, "--output", min=0, help="Output tokens per sequence. [default: 256]"),
    weight_dtype: Optional[str] = typer.Option(None, help="Weight dtype. [default: the model's]"),
    kv_dtype: Optional[str] = typer.Option(None, help="KV cache dtype. [default: the model's]"),
    compute_dtype: Optional[str] = typer.Option(None, help="Matmul dtype. [default: the weight dtype if the device has it, else bf16]"),
    bits_per_weight: Optional[float] = typer.Option(None, help="Override weight storage, e.g. 4.85 for GGUF Q4_K_M."),
    memory_fraction: float = typer.Option(0.9, help="Share of memory for weights + KV cache (vLLM gpu_memory_utilization)."),
    compute_efficiency: float = typer.Option(1.0, help="Achievable share of peak FLOP/s (1.0 = the roofline bound)."),
    bandwidth_efficiency: float = typer.Option(1.0, help="Achievable share of peak bandwidth (1.0 = the roofline bound)."),
    json: bool = JSON,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No notes on stderr."),
) -> None:
    """Estimate TTFT, TPOT, throughput and memory limits for one model on one device.

    Examples:

      roofline estimate

      roofline estimate -m llama-3.1-70b -H h200 -b 32 --prompt 2048 --output 512

      roofline estimate -m qwen2.5-7b -H rtx-4090 --weight-dtype int4 --bits-per-weight 4.85 --json
    """
    from roofline.calc import estimate as run_estimate
    from roofline.specs import load_hardware, load_model

    given = {"model": model, "hardware": hardware, "batch": batch, "prompt": prompt, "output": output}
    defaulted = [f"--{k} {DEFAULTS[k]}" for k, v in given.items() if v is None]
    if defaulted and not quiet:
        err(f"roofline: using defaults: {' '.join(defaulted)}")
    value = {k: DEFAULTS[k] if v is None else v for k, v in given.items()}
    result = run_estimate(
        load_model(value["model"]),
        load_hardware(value["hardware"]),
        batch=value["batch"],
        prompt_tokens=value["prompt"],
        output_tokens=value["output"],
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        compute_dtype=compute_dtype,
        bits_per_weight=bits_per_weight,
        memory_fraction=memory_fraction,
        compute_efficiency=compute_efficiency,
        bandwidth_efficiency=bandwidth_efficiency,
    )
    for warning in result.warnings:
        err(f"roofline: warning: {warning}")
    if json:
        from roofline.render import to_json

        typer.echo(to_json(result.to_dict()))
    else:
        from roofline.render import estimate_table

        out(estimate_table(result))


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
    json: bool = JSON,
) -> None:
    """Measure matmul FLOP/s and memory bandwidth here, and calibrate estimates with them (needs torch).

    Examples:

      roofline measure --quick

      roofline measure --device cuda --save my-gpu.yaml && roofline estimate -H my-gpu.yaml
    """
    from roofline import measure as bench
    from roofline import profile
    from roofline.specs import load_hardware

    datasheet = load_hardware(hardware) if hardware else None
    dtypes = [d.strip() for d in dtype.split(",") if d.strip()] if dtype is not None else None
    if dtypes == []:
        raise UsageError("--dtype: expected a comma-separated list such as fp32,bf16")
    with _progress() as step:
        result = bench.run(device, dtypes, threads, quick, weight_dtype, on_step=step)
    datasheet = datasheet or profile.match_datasheet(result["device"]["name"])
    compared = profile.comparison(result, datasheet) if datasheet else None
    if compared:
        result["datasheet"] = compared
    if save:
        profile.save(result, save)
        err(f"roofline: saved {save}; use it with: roofline estimate -H {save}")
    if json:
        from roofline.render import to_json

        typer.echo(to_json(result))
    else:
        from roofline.render import measure_table

        out(measure_table(result, compared))


class _progress:
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


@hardware_app.command("list")
@handled
def hardware_list(json: bool = JSON) -> None:
    """List bundled devices with memory, bandwidth, bf16 peak and ridge point."""
    from roofline import describe
    from roofline.specs import catalog, load_hardware

    rows = [describe.hardware(load_hardware(i)) for i in catalog("hardware")]
    if json:
        from roofline.render import to_json

        typer.echo(to_json(rows))
        return
    from roofline.render import listing_table
    from roofline.units import number, si

    def best16(r: dict) -> str:
        dtype = next((d for d in ("bf16", "fp16", "fp32") if d in r["peak_flop_per_s"]), None)
        return f"{si(r['peak_flop_per_s'][dtype], 'FLOP/s')} {dtype}" if dtype else "-"

    def ridge16(r: dict) -> str:
        dtype = next((d for d in ("bf16", "fp16", "fp32") if d in r["ridge_point_flop_per_byte"]), None)
        return number(r["ridge_point_flop_per_byte"][dtype]) if dtype else "-"

    table = [
        [r["id"], r["name"], si(r["memory_capacity_bytes"] / 2**30, "") + " GiB", si(r["memory_bandwidth_bytes_per_s"], "B/s"), best16(r), ridge16(r)]
        for r in rows
    ]
    out(listing_table(["id", "name", "memory", "bandwidth", "peak (16-bit)", "ridge FLOP/B"], table))


@hardware_app.command("show")
@handled
def hardware_show(hardware: str = typer.Argument(..., help="Hardware id or YAML path."), json: bool = JSON) -> None:
    """Show one device's figures and the ridge point of each dtype."""
    from roofline import describe
    from roofline.specs import load_hardware

    info = describe.hardware(load_hardware(hardware))
    if json:
        from roofline.render import to_json

        typer.echo(to_json(info))
        return
    from roofline.render import listing_table
    from roofline.units import number, si

    rows = [[d, si(p, "FLOP/s"), number(info["ridge_point_flop_per_byte"][d])] for d, p in info["peak_flop_per_s"].items()]
    link = si(info["interconnect_bandwidth_bytes_per_s"], "B/s")
    out(
        f"[bold]{info['name']}[/bold] ({info['id']}, {info['figures']} figures)\n"
        f"memory {si(info['memory_capacity_bytes'] / 2**30, '')} GiB · bandwidth {si(info['memory_bandwidth_bytes_per_s'], 'B/s')} · "
        f"interconnect {link}\nsource: {info['source']}\n"
    )
    out(listing_table(["dtype", "peak", "ridge FLOP/B"], rows, left=1))


@models_app.command("list")
@handled
def models_list(json: bool = JSON) -> None:
    """List bundled models with derived parameter counts and KV cache per token."""
    from roofline import describe
    from roofline.specs import catalog, load_model

    rows = [describe.model(load_model(i)) for i in catalog("models")]
    if json:
        from roofline.render import to_json

        typer.echo(to_json(rows))
        return
    from roofline.render import listing_table
    from roofline.units import si

    table = [
        [r["id"], r["name"], si(r["params"], ""), r["dtype"], si(r["kv_bytes_per_token"], "B"), str(r["max_context"] or "-")]
        for r in rows
    ]
    out(listing_table(["id", "name", "params", "dtype", "KV/token", "max context"], table))


@models_app.command("show")
@handled
def models_show(model: str = typer.Argument(..., help="Model id or YAML path."), json: bool = JSON) -> None:
    """Show a model's derived parameter count (by role) and KV cache per token."""
    from roofline import describe
    from roofline.specs import load_model

    info = describe.model(load_model(model))
    if json:
        from roofline.render import to_json

        typer.echo(to_json(info))
        return
    from roofline.render import listing_table
    from roofline.units import si

    published = info["published_params"]
    check = f" (published {published:,.0f}: {info['params'] / published - 1:+.2%})" if published else ""
    out(
        f"[bold]{info['name']}[/bold] ({info['id']}, {info['dtype']})\n"
        f"params {info['params']:,.0f}{check}\n"
        f"KV cache {info['kv_bytes_per_token']:,.0f} B/token at {info['dtype']} · max context {info['max_context'] or '-'}\n"
        f"source: {info['source']}\n"
    )
    if "params_breakdown" in info:
        rows = [[k, f"{v:,}", si(v, "")] for k, v in info["params_breakdown"].items()]
        out(listing_table(["params", "count", ""], rows, left=1))
