"""`hardware list|show` and `models list|show|import`: the bundled specs."""

from typing import Annotated

import typer

from roofline.cli.common import Csv, ExactBytes, Json, emit, err, handled, text_value

hardware_app = typer.Typer(help="List and show bundled devices.")
models_app = typer.Typer(help="List and show bundled models, or import a config.json.")


def _help_without_command(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit()


@hardware_app.callback(invoke_without_command=True)
def hardware_group(ctx: typer.Context) -> None:
    """List and show bundled devices."""
    _help_without_command(ctx)


@models_app.callback(invoke_without_command=True)
def models_group(ctx: typer.Context) -> None:
    """List and show bundled models, or import a config.json."""
    _help_without_command(ctx)


@hardware_app.command("list")
@handled
def hardware_list(json: Json = False, csv: Csv = False) -> None:
    """List bundled devices with memory, bandwidth, 16-bit peak and ridge point."""
    from roofline.calc import describe
    from roofline.report import Report
    from roofline.specs.catalog import catalog
    from roofline.specs.hardware import load_hardware

    emit(Report("hardware_list", [describe.hardware(load_hardware(i)) for i in catalog("hardware")]), json, csv)


@hardware_app.command("show")
@handled
def hardware_show(
    hardware: Annotated[str, typer.Argument(help="Hardware id or YAML path.")], json: Json = False, csv: Csv = False
) -> None:
    """Show one device's figures and the ridge point of each dtype."""
    from roofline.calc import describe
    from roofline.report import Report
    from roofline.specs.hardware import load_hardware

    emit(Report("hardware_detail", describe.hardware(load_hardware(text_value(hardware, "HARDWARE")))), json, csv)


@models_app.command("list")
@handled
def models_list(json: Json = False, csv: Csv = False) -> None:
    """List bundled models with derived parameter counts and KV cache per token."""
    from roofline.calc import describe
    from roofline.report import Report
    from roofline.specs.catalog import catalog, load_model

    emit(Report("models_list", [describe.model(load_model(i)) for i in catalog("models")]), json, csv)


@models_app.command("show")
@handled
def models_show(
    model: Annotated[str, typer.Argument(help="Model id, YAML, GGUF, config.json / model folder, or Hub id.")],
    json: Json = False,
    csv: Csv = False,
    exact_bytes: ExactBytes = False,
) -> None:
    """Show a model's derived parameter count (by role) and KV cache per token."""
    from roofline.calc import describe
    from roofline.report import Report
    from roofline.specs.catalog import load_model

    emit(Report("model_detail", describe.model(load_model(text_value(model, "MODEL"), exact_bytes))), json, csv)


@models_app.command("import")
@handled
def models_import(
    config: Annotated[str, typer.Argument(help="A Hugging Face config.json, or a model folder holding one.")],
    name: Annotated[
        str | None,
        typer.Option(
            "--name", help="The model's name (and the id to save it under). [default: the config's folder name]"
        ),
    ] = None,
    out_path: Annotated[
        str | None,
        typer.Option(
            "--out", "-o", help="Write the YAML here (e.g. models/ID.yaml) instead of stdout ('-'). [default: stdout]"
        ),
    ] = None,
) -> None:
    """Convert a config.json into a model YAML (offline: no hub access).

    Example:

      roofline models import ~/models/Qwen3-8B --name qwen3-8b -o models/qwen3-8b.yaml
    """
    from roofline.specs import config as hf

    text = hf.to_yaml(text_value(config, "CONFIG"), text_value(name, "--name"))
    if out_path is None or out_path == "-":
        typer.echo(text, nl=False)
        return
    from roofline.files import atomic_write

    with atomic_write(out_path, "--out") as f:
        f.write(text)
    err(f"roofline: wrote {out_path}")
