"""What every command shares: the output streams, the one error handler, output formats and option types.

stdout carries results only (tables, JSON or CSV); notes, warnings, progress and errors go to stderr.
Every user mistake is a RooflineError, printed once as `roofline: error: ...` by `handled`.
Each shared flag is defined once here as an `Annotated` type; its default lives in the library
(roofline.calc.knobs) and --help shows it.
"""

import functools
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from roofline.calc.knobs import BATCH, DEFAULT, HARDWARE, MODEL, OUTPUT_TOKENS, PROMPT_TOKENS, Knobs
from roofline.errors import RooflineError, UsageError

MAX_MESSAGE = 400  # characters of one error line; a value quoted in it is cut, never the line's meaning


def err(message: str) -> None:
    """Write one line to stderr."""
    sys.stderr.write(message + "\n")


_notes: list[str] = []


def note(message: str) -> None:
    """A stderr line shown once the command has succeeded (a failing command prints its one error line only)."""
    _notes.append(message)


def out(renderable: Any) -> None:
    """Print a rich renderable to stdout (rich honours NO_COLOR). A terminal's width, or COLUMNS when set, decides
    which columns a table keeps; a pipe without COLUMNS gets plain text at 160 columns."""
    import os

    from rich.console import Console

    terminal = sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    Console(width=None if terminal else 160).print(renderable)


def emit(result: Any, as_json: bool, as_csv: bool) -> None:
    """Print a result as JSON (its to_dict()), CSV (its csv_rows()) or the table roofline.render draws for it."""
    from roofline import render

    if as_json and as_csv:
        raise UsageError("--json and --csv: choose one output format")
    if as_json:
        typer.echo(render.to_json(result.to_dict()))
    elif as_csv:
        typer.echo(render.to_csv(result.csv_rows()), nl=False)
    else:
        out(render.table(result))


def one_line(message: str) -> str:
    """An error message as one bounded line: newlines folded, the middle of a runaway value cut."""
    message = " ".join(message.split())
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 60] + " [...] " + message[-53:]
    return message


def flag_of(command: Callable, param: str) -> str:
    """The flag a command declares for its parameter `param` (--prompt for prompt_tokens), else `param`."""
    import typing

    hint = typing.get_type_hints(command, include_extras=True).get(param)
    for info in getattr(hint, "__metadata__", ()):
        # In an Annotated option typer reads the first declaration from `default`
        declared = (getattr(info, "default", None), *(getattr(info, "param_decls", None) or ()))
        decls = [d for d in declared if isinstance(d, str) and d.startswith("--")]
        if decls:
            return decls[0]
    return param


def handled(command: Callable) -> Callable:
    """Turn RooflineError into one stderr line and its exit code; Ctrl-C into 130; a closed pipe into 0."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _notes.clear()
        try:
            result = command(*args, **kwargs)
            for line in _notes:
                err(line)
            return result
        except RooflineError as e:
            param = getattr(e, "param", None)
            message = f"{flag_of(command, param)}: {e.detail}" if param else str(e)
            err(f"roofline: error: {one_line(message)}")
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            err("roofline: interrupted")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `roofline ... | head`
            sys.stderr.close()
            raise typer.Exit(0) from None

    return wrapper


def serving(knobs: Knobs) -> Knobs:
    """The knobs with the draft model (a reference on the command line) loaded."""
    if knobs.draft is None or not isinstance(knobs.draft, str):
        return knobs
    from roofline.specs.catalog import load_model

    ref = text_value(knobs.draft, "--draft")
    try:
        return knobs._replace(draft=load_model(ref))
    except UsageError as e:  # an unknown id, a missing file: say which flag named it
        raise UsageError(e.detail if e.param else f"--draft: {e.detail}", e.param) from None


def knobs_from(values: dict[str, Any]) -> Knobs:
    """The Knobs record from a command's parameters (its locals()), which carry the knobs' names; a knob a
    command does not take keeps the library's default."""
    return serving(Knobs(**{name: values.get(name, getattr(DEFAULT, name)) for name in Knobs._fields}))


def terminal_console():
    """A rich console on stderr where stderr is a terminal (or FORCE_COLOR says to draw as on one), for progress
    bars; None elsewhere: a bar stopped in a file or a pipe leaves a blank line there."""
    from rich.console import Console

    console = Console(stderr=True)
    return console if console.is_terminal else None


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the flag of parameter `name` was given on the command line (not its default)."""
    return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"


def check_workload_flags(ctx: typer.Context, trace: str | None, rate: str | None, arrival: str) -> None:
    """One line for a workload flag that would be ignored: a length or count flag beside --trace (the trace gives
    them), --arrival without --rate, --cv without gamma arrivals."""
    if trace is not None:
        for name, flag in TRACE_FIXES.items():
            if given(ctx, name):
                raise UsageError(f"{flag}: a trace gives every request's lengths and their count; drop it with --trace")
    if given(ctx, "arrival") and rate is None:
        raise UsageError("--arrival: the arrival process of a --rate: give a rate, or drop it")
    if given(ctx, "cv") and arrival != "gamma":
        raise UsageError("--cv: the burstiness of gamma arrivals: give it with --arrival gamma")


TRACE_FIXES = {
    "requests": "--requests",
    "prompt_tokens": "--prompt",
    "output_tokens": "--output",
    "prompt_dist": "--prompt-dist",
    "output_dist": "--output-dist",
}  # what --trace sets: simulate's and bench's flags that it replaces


def text_value(value: str | None, flag: str) -> str | None:
    """A given text value, stripped; a blank one is an error, never a silent default."""
    if value is not None and not value.strip():
        raise UsageError(f"{flag}: expected a value, got an empty one")
    return value.strip() if value is not None else None


def duration(text: str | None, flag: str, likely: str = "ms") -> float | None:
    """A positive, finite duration with its unit, such as 50ms; None when not given. A bare number is refused (is
    50 fifty seconds or fifty milliseconds?), the message giving the form `likely` meant."""
    from roofline.units import parse

    if text is None:
        return None
    if _bare_number(text):
        raise UsageError(
            f"{flag}: a duration needs its unit: did you mean {text.strip()}{likely}? (units: h, min, s, ms, us or "
            f"ns; got {text!r})"
        )
    try:
        value = parse(text, "seconds")
    except ValueError as e:
        raise UsageError(f"{flag}: {e}") from None
    if not 0 < value < float("inf"):
        raise UsageError(f"{flag}: expected a positive, finite duration such as 50ms, got {text!r}")
    return value


RATE_UNITS = {"/s": 1.0, "/min": 1 / 60, "/h": 1 / 3600}


def rate(text: str | None, flag: str) -> float | None:
    """Requests per second from '20/s', '1200/min' or '72000/h' ('req' may precede the slash); a bare number is
    refused with the per-second form it likely meant."""
    import re

    if text is None:
        return None
    if _bare_number(text):
        raise UsageError(
            f"{flag}: a rate needs its unit: did you mean {text.strip()}/s? (requests per /s, /min or /h; got {text!r})"
        )
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(?:req(?:uests)?)?\s*(/s|/min|/h)\s*", text)
    try:
        value = float(match[1]) * RATE_UNITS[match[2]] if match else None
    except ValueError:
        value = None
    if value is not None and not value > 0:
        raise UsageError(f"{flag}: expected a positive rate such as 20/s, got {text!r}")
    if value is None or not value < float("inf"):
        raise UsageError(f"{flag}: expected requests per unit of time such as 20/s, 1200/min or 72000/h, got {text!r}")
    return value


def _bare_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def specs(model: str | None, hardware: str | None, quiet: bool, exact_bytes: bool = False, **more: Any):
    """Load the model and hardware, naming on stderr the defaults that were used."""
    from roofline.specs.catalog import load_model
    from roofline.specs.hardware import load_hardware

    model, hardware = text_value(model, "--model"), text_value(hardware, "--hardware")
    defaults = {"model": MODEL, "hardware": HARDWARE, "batch": BATCH, "prompt": PROMPT_TOKENS, "output": OUTPUT_TOKENS}
    given = {"model": model, "hardware": hardware, **more}
    loaded = (
        load_model(MODEL if model is None else model, exact_bytes),
        load_hardware(HARDWARE if hardware is None else hardware),
    )
    defaulted = [f"--{k} {defaults[k]}" for k, v in given.items() if v is None]
    if defaulted and not quiet:
        note(f"roofline: using defaults: {' '.join(defaulted)}")
    return loaded


# ---------------------------------------------------------------- shared options (each defined once)

Json = Annotated[bool, typer.Option("--json", help="Print JSON (plain SI numbers) instead of a table.")]
Csv = Annotated[bool, typer.Option("--csv", help="Print CSV (one header row; units in the column names).")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No notes on stderr.")]
ModelRef = Annotated[
    str | None,
    typer.Option(
        "--model", "-m", help=f"Model id, YAML path, or Hugging Face config.json / model folder. [default: {MODEL}]"
    ),
]
HardwareRef = Annotated[
    str | None, typer.Option("--hardware", "-H", help=f"Hardware id or YAML path. [default: {HARDWARE}]")
]
WeightDtype = Annotated[str | None, typer.Option("--weight-dtype", help="Weight dtype. [default: the model's]")]
KvDtype = Annotated[
    str | None,
    typer.Option("--kv-dtype", help="KV cache dtype (also q8_0, q4_0 with their block scales). [default: the model's]"),
]
ComputeDtype = Annotated[
    str | None,
    typer.Option("--compute-dtype", help="Matmul dtype. [default: the weight dtype if the device has it, else bf16]"),
]
Bits = Annotated[
    float | None,
    typer.Option(
        "--bits-per-weight",
        help="Override weight storage, e.g. 4.85 for GGUF Q4_K_M. [default: the dtype's or format's bits]",
    ),
]
MemoryFraction = Annotated[
    float,
    typer.Option("--memory-fraction", help="Share of memory for weights + KV cache (vLLM gpu_memory_utilization)."),
]
ComputeEfficiency = Annotated[
    float, typer.Option("--compute-efficiency", help="Achievable share of peak FLOP/s (1.0 = the roofline bound).")
]
BandwidthEfficiency = Annotated[
    float, typer.Option("--bandwidth-efficiency", help="Achievable share of peak bandwidth (1.0 = the roofline bound).")
]
Tp = Annotated[
    int, typer.Option("--tp", min=1, help="Tensor-parallel devices: weights, KV and FLOPs split; all-reduces added.")
]
Quant = Annotated[
    str | None,
    typer.Option(
        "--quant",
        help="Named weight format with its scales and 16-bit tensors: q4_0, q4_k_m, q5_k_m, q6_k, q8_0, awq, "
        "gptq, fp8, "
        "nvfp4, mxfp4, mxfp4-moe. [default: the model's published checkpoint format, else its dtype]",
    ),
]
GoodputOf = Annotated[
    str,
    typer.Option(
        "--goodput-of",
        help="What goodput counts: output (end-to-end output tokens/s, prefill included) or decode (the decode "
        "step's B "
        "/ TPOT).",
    ),
]
Draft = Annotated[
    str | None,
    typer.Option("--draft", help="Speculative decoding: the draft model (id, YAML, config.json). [default: none]"),
]
DraftTokens = Annotated[
    int | None, typer.Option("--draft-tokens", help="Tokens drafted per iteration. [default: 4; --mtp: its value]")
]
Acceptance = Annotated[
    float | None,
    typer.Option("--acceptance", help="I.i.d. acceptance of a drafted token. [default: 0.7; --mtp 0.85]"),
]
Mtp = Annotated[
    int | None,
    typer.Option("--mtp", help="Multi-token prediction: tokens its module drafts (DeepSeek-V3: 1). [default: off]"),
]
CachedTokens = Annotated[
    int | None,
    typer.Option("--cached-tokens", help="Prefix caching: prompt tokens per sequence whose KV is cached. [default: 0]"),
]
PrefixHitRate = Annotated[
    float | None,
    typer.Option("--prefix-hit-rate", help="Prefix caching: the cached share of the prompt, e.g. 0.5. [default: 0]"),
]
SharedPrefix = Annotated[
    int, typer.Option("--shared-prefix", help="Prompt tokens the batch shares, held once in memory.")
]
ChunkTokens = Annotated[
    int | None,
    typer.Option(
        "--chunk-tokens",
        help="Chunked prefill: tokens per engine step (decodes + a prompt chunk). [default: off, one-pass prefill]",
    ),
]
ExactBytes = Annotated[
    bool,
    typer.Option(
        "--exact-bytes",
        help="For a Hub id not in the local cache: read the checkpoint's safetensors headers from the Hub (range "
        "requests) for its exact bytes.",
    ),
]
Pp = Annotated[
    int, typer.Option("--pp", min=1, help="Pipeline stages: layers split over them, micro-batches and the bubble.")
]
MicroBatches = Annotated[
    int | None, typer.Option("--micro-batches", min=1, help="Pipeline micro-batches. [default: min(batch, pp)]")
]
Disagg = Annotated[
    str | None,
    typer.Option(
        "--disagg", help="Disaggregated prefill/decode pools: instances as xP:yD, e.g. 1P:3D. [default: colocated]"
    ),
]
Ep = Annotated[
    int, typer.Option("--ep", min=1, help="Expert-parallel devices (MoE): experts spread over them, all-to-alls added.")
]
Engine = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="Engine whose prediction to print beside the bound: a preset learned from published benchmarks (vllm: "
        "0.14 and later, or with --async-scheduling; vllm-0.10: 0.10-0.13; vllm-legacy; sglang, trtllm; llamacpp, "
        "which picks its CUDA or Metal preset by the device), or on a "
        "measured profile eager (roofline's own decoder) or one `roofline measure --engine` measured. [default: "
        "eager]",
    ),
]
KvUnified = Annotated[
    bool | None,
    typer.Option(
        "--kv-unified/--no-kv-unified",
        help="With --engine llamacpp (bench: with --compare): llama-server's slots share one KV stream (its -kvu, "
        "and its default when the slot count is left to it: -np auto, 4 slots), so a step is cut into 512-token "
        "ubatches; --no-kv-unified: a stream per slot (--parallel N), each ubatch a run of consecutive slots. "
        "[default: shared unless --max-num-seqs gives the slots]",
    ),
]
ReserveFullIsl = Annotated[
    bool | None,
    typer.Option(
        "--scheduler-reserve-full-isl/--no-scheduler-reserve-full-isl",
        help="With vLLM's scheduler: admit a waiting request only when its whole prompt fits the KV cache (vLLM's "
        "default from 0.19; SGLang admits so too), or on its first chunk as builds before 0.19 did (then a request "
        "admitted into a nearly full cache is preempted at a later chunk): give --no-... for a 0.14-0.18 build "
        "under --engine vllm. [default: the whole prompt; its first chunk with --engine vllm-0.10 or vllm-legacy]",
    ),
]
TpotSlo = Annotated[
    str | None,
    typer.Option("--tpot-slo", help="Latency objective per output token, with its unit: 50ms. [default: none]"),
]
TtftSlo = Annotated[
    str | None,
    typer.Option("--ttft-slo", help="Latency objective to the first token, with its unit: 2s. [default: none]"),
]
PromptList = Annotated[str, typer.Option("--prompt", help="Prompt tokens: a value, list or range.")]
OutputList = Annotated[str, typer.Option("--output", help="Output tokens: a value, list or range.")]
BatchList = Annotated[
    str | None,
    typer.Option(
        "--batch",
        "-b",
        help="List (1,8,64) or range (1:512 doubling, 8:128:8). [default: powers of two up to the max batch, and the "
        "max batch]",
    ),
]
Prompt = Annotated[int, typer.Option("--prompt", min=1, help="Prompt tokens per sequence.")]
Output = Annotated[int, typer.Option("--output", min=0, help="Output tokens per sequence.")]
Device = Annotated[str, typer.Option("--device", help="auto (cuda, then mps, then cpu), cpu, cuda or mps.")]

# Defaults of the knobs, from the library: `memory_fraction: MemoryFraction = D.memory_fraction`.
D = DEFAULT
