"""The `roofline` command line: a thin client of the library. No formulas here.

The root app merges one typer app per command group: roofline.cli.estimate (estimate, sweep, compare, plot),
roofline.cli.simulate (simulate), roofline.cli.bench (bench), roofline.cli.specs (hardware, models) and
roofline.cli.measure (measure, validate). Shared option types,
output and error handling live in roofline.cli.common.
"""

import sys

import typer

from roofline import __version__
from roofline.cli import bench, estimate, measure, simulate, specs
from roofline.cli.common import err

app = typer.Typer(
    help="Roofline napkin math for LLM inference: how fast a model runs on a device, and why.",
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text is plain: "[engines]" and "[default: 4]" are text, not rich markup
)
app.add_typer(estimate.app)
app.add_typer(simulate.app)
app.add_typer(bench.app)
app.add_typer(measure.app)
app.add_typer(specs.hardware_app, name="hardware")
app.add_typer(specs.models_app, name="models")


def main() -> None:
    """Console-script entry point: usage errors as one stderr line (exit 2), results as the commands print them."""
    sys.exit(run())


def run(args: list[str] | None = None) -> int:
    """Run the command line on `args` (default: sys.argv[1:]) and return the exit code."""
    args = sys.argv[1:] if args is None else list(args)
    name = _command_name(args)
    try:
        one = _app_for(args)
        _refuse_repeats(one, name, args)
        code = one(args=args, prog_name="roofline", standalone_mode=False)
    except typer.TyperException as e:  # click's usage errors (typer vendors click and re-bases them here)
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        where = f"roofline {_known(name)} --help".replace("  ", " ")
        words = (w if len(w) <= 60 else f"{w[:28]}...{w[-28:]}" for w in message.split())  # click quotes values whole
        err(f"roofline: error: {' '.join(words)} (see `{where}`)")
        code = getattr(e, "exit_code", 2)
    except KeyboardInterrupt:
        err("roofline: interrupted")
        code = 130
    return code if isinstance(code, int) else 0


def _command_name(args: list[str]) -> str | None:
    """The command `args` name ('hardware list' for a group's), or None."""
    words = [a for a in args if not a.startswith("-")][:2]
    if not words:
        return None
    return " ".join(words) if words[0] in ("hardware", "models") and len(words) > 1 else words[0]


def _known(name: str | None) -> str:
    """The longest registered part of a command name ('' when none: a typo gets the root's help)."""
    command, known = typer.main.get_command(app), []
    for word in (name or "").split():
        command = getattr(command, "commands", {}).get(word)
        if command is None:
            break
        known.append(word)
    return " ".join(known)


def _refuse_repeats(one: typer.Typer, name: str | None, args: list[str]) -> None:
    """A value option given twice is an error, never a silent last-one-wins (--model twice: plot draws one model;
    compare takes several, as its --help says)."""
    command = typer.main.get_command(one)
    for word in (name or "").split():
        command = getattr(command, "commands", {}).get(word)
        if command is None:
            return
    end = args.index("--") if "--" in args else len(args)
    for param in command.params:
        if param.param_type_name != "option" or param.multiple or param.is_flag or param.count:
            continue
        given = [
            a
            for a in args[:end]
            if a in param.opts or any(a.startswith(o + "=") for o in param.opts if o.startswith("--"))
        ]
        if len(given) > 1:
            flag = next((o for o in param.opts if o.startswith("--")), param.opts[0])
            error = typer.TyperException(f"{flag} given {len(given)} times: `roofline {name}` takes one")
            error.exit_code = 2
            raise error


def _app_for(args: list[str]) -> typer.Typer:
    """The root app with only the command `args` names: typer builds every registered command's options on each
    run (~15 ms for all of ours, benchmarks/startup.py), so a run registers just the one it needs. Without a
    known command name (`roofline`, `roofline --help`, a typo) the whole app answers."""
    name = next((a for a in args if not a.startswith("-")), None)
    for group in (estimate.app, simulate.app, measure.app):
        chosen = [c for c in group.registered_commands if (c.name or c.callback.__name__) == name]
        if chosen:
            one = typer.Typer(
                add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None, help=app.info.help
            )
            one.registered_callback = app.registered_callback
            one.registered_commands = chosen
            return one
    return app


def _version(value: bool) -> None:
    if value:
        typer.echo(f"roofline {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Roofline napkin math for LLM inference."""
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit()
