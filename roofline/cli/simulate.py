"""`simulate`: continuous batching under a workload, its latency percentiles and capacity."""

from typing import Annotated

import typer

from roofline.calc.knobs import OUTPUT_TOKENS, PROMPT_TOKENS
from roofline.cli.common import (
    BandwidthEfficiency,
    Bits,
    CachedTokens,
    ComputeDtype,
    ComputeEfficiency,
    Csv,
    D,
    Engine,
    Ep,
    HardwareRef,
    Json,
    KvDtype,
    KvUnified,
    MemoryFraction,
    ModelRef,
    PrefixHitRate,
    Quant,
    Quiet,
    ReserveFullIsl,
    Tp,
    TpotSlo,
    TtftSlo,
    WeightDtype,
    check_workload_flags,
    duration,
    emit,
    err,
    given,
    handled,
    knobs_from,
    specs,
    text_value,
)
from roofline.errors import UsageError

# The workload flags, shared with `roofline bench` (the same workload, run against a server).
Rate = Annotated[
    str | None,
    typer.Option(
        "--rate",
        help="Arrival rate with its unit (10/s, 600/min), or a sweep "
        "start:stop:step/s (1:20:1/s). [default: none: give this, --concurrency or --trace]",
    ),
]
Arrival = Annotated[
    str, typer.Option("--arrival", help="Arrival process with --rate: poisson, gamma (with --cv) or constant.")
]
Cv = Annotated[
    float,
    typer.Option("--cv", help="Coefficient of variation of the gamma arrivals' gaps (1: Poisson; above 1: bursty)."),
]
Concurrency = Annotated[
    int | None,
    typer.Option(
        "--concurrency",
        min=1,
        help="Closed loop: clients each sending its next request when the last finishes. [default: none]",
    ),
]
Requests = Annotated[int, typer.Option("--requests", min=1, help="Requests to simulate.")]
Warmup = Annotated[
    int | None, typer.Option("--warmup", min=0, help="Requests left out of the statistics. [default: a tenth]")
]
Seed = Annotated[
    int, typer.Option("--seed", help="Seed of the arrivals and lengths (the same seed, the same numbers).")
]
MeanPrompt = Annotated[int, typer.Option("--prompt", min=1, help="Mean prompt tokens per request.")]
MeanOutput = Annotated[int, typer.Option("--output", min=1, help="Mean output tokens per request.")]
PromptDist = Annotated[
    str | None,
    typer.Option("--prompt-dist", help="fixed, exponential, uniform or lognormal:CV. [default: fixed]"),
]
OutputDist = Annotated[
    str | None,
    typer.Option("--output-dist", help="fixed, exponential, uniform or lognormal:CV. [default: fixed]"),
]
Trace = Annotated[
    str | None,
    typer.Option(
        "--trace",
        help="JSON Lines or CSV of requests (prompt and output "
        "lengths, optional arrival times; Azure trace columns too). [default: none]",
    ),
]

app = typer.Typer()


@app.command()
@handled
def simulate(
    ctx: typer.Context,
    model: ModelRef = None,
    hardware: HardwareRef = None,
    rate: Rate = None,
    arrival: Arrival = "poisson",
    cv: Cv = 1.0,
    concurrency: Concurrency = None,
    requests: Requests = 1000,
    warmup: Warmup = None,
    seed: Seed = 0,
    prompt_tokens: MeanPrompt = PROMPT_TOKENS,
    output_tokens: MeanOutput = OUTPUT_TOKENS,
    prompt_dist: PromptDist = None,
    output_dist: OutputDist = None,
    trace: Trace = None,
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            help=(
                "vllm (V1 continuous batching, chunked prefill), trtllm (TensorRT-LLM's: admits a request only when "
                "its whole KV fits, never preempts) or static (a batch runs to its end). [default: the --engine "
                "preset's, else vllm]"
            ),
        ),
    ] = None,
    max_num_seqs: Annotated[
        int | None,
        typer.Option(
            "--max-num-seqs",
            min=1,
            help="Running requests at most. [default: the engine's: vLLM V1's 1024 on 70 GiB+ devices, else 256; "
            "TensorRT-LLM's 2048; llama-server's 4]",
        ),
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-num-batched-tokens",
            min=1,
            help="Tokens a step at most. [default: the engine's: vLLM V1's 8192 on 70 GiB+ devices, else 2048; "
            "TensorRT-LLM's 8192; llama-server's 2048]",
        ),
    ] = None,
    block_size: Annotated[
        int | None,
        typer.Option(
            "--block-size", min=1, help="KV cache block, tokens. [default: the engine's: vLLM 16, TensorRT-LLM 32]"
        ),
    ] = None,
    kv_unified: KvUnified = None,
    reserve_full_isl: ReserveFullIsl = None,
    ttft_slo: TtftSlo = None,
    tpot_slo: TpotSlo = None,
    slo_percentile: Annotated[
        str, typer.Option("--slo-percentile", help="The percentile the SLOs apply to, e.g. p99 or p95.")
    ] = "p99",
    per_request: Annotated[
        str | None,
        typer.Option("--per-request", help="Write every request's times to this CSV file. [default: none]"),
    ] = None,
    plot_path: Annotated[
        str | None,
        typer.Option(
            "--plot",
            help="With a rate sweep: draw the latency-throughput "
            "knee chart, .png or .svg (needs matplotlib). [default: none]",
        ),
    ] = None,
    weight_dtype: WeightDtype = D.weight_dtype,
    kv_dtype: KvDtype = D.kv_dtype,
    compute_dtype: ComputeDtype = D.compute_dtype,
    bits_per_weight: Bits = D.bits_per_weight,
    quant: Quant = D.quant,
    memory_fraction: MemoryFraction = D.memory_fraction,
    compute_efficiency: ComputeEfficiency = D.compute_efficiency,
    bandwidth_efficiency: BandwidthEfficiency = D.bandwidth_efficiency,
    tp: Tp = D.tp,
    ep: Ep = D.ep,
    engine: Engine = D.engine,
    cached_tokens: CachedTokens = None,
    prefix_hit_rate: PrefixHitRate = None,
    json: Json = False,
    csv: Csv = False,
    quiet: Quiet = False,
) -> None:
    """Simulate serving under load: continuous batching of random arrivals (or a closed loop, or a trace), with
    TTFT, TPOT, ITL, E2E and queueing percentiles, goodput under SLOs and the replica's capacity.

    \b
    Examples:
      roofline simulate -m llama-3.1-8b -H h100-sxm --rate 50/s --prompt 220 --output 200 --prompt-dist lognormal:1
      roofline simulate -m llama-3.1-70b -H h200 --tp 2 --concurrency 64 --ttft-slo 2s --tpot-slo 50ms --json
      roofline simulate -m llama-3.1-8b --rate 10:150:20/s --output-dist exponential --plot knee.png
    """
    from roofline.calc import simulate as sim
    from roofline.calc.replica import Scheduler
    from roofline.calc.workload import Request

    given_lengths = {"prompt": prompt_tokens, "output": output_tokens}  # None where specs() names a default used
    lengths = {} if trace else {n: v if given(ctx, f"{n}_tokens") else None for n, v in given_lengths.items()}
    m, h = specs(model, hardware, quiet, **lengths)  # names --prompt/--output too when their defaults are used
    rates = rate_list(rate)
    policy = None if scheduler is None else text_value(scheduler, "--scheduler")  # None: the engine preset's
    sched = Scheduler(policy, max_num_seqs, max_num_batched_tokens, block_size, kv_unified, reserve_full_isl)
    check_workload_flags(ctx, trace, rate, arrival)
    loaded = None
    if trace is not None:
        from roofline.specs.trace import load_trace

        loaded = [Request(*row) for row in load_trace(text_value(trace, "--trace"))]
    options = dict(
        arrival=text_value(arrival, "--arrival"),
        cv=cv,
        concurrency=concurrency,
        requests=requests,
        warmup=warmup,
        seed=seed,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        prompt_dist=prompt_dist,
        output_dist=output_dist,
        trace=loaded,
        scheduler=sched,
        ttft_slo=duration(ttft_slo, "--ttft-slo", "s"),
        tpot_slo=duration(tpot_slo, "--tpot-slo"),
        slo_percentile=slo_quantile(slo_percentile),
        knobs=knobs_from(locals()),
    )
    if plot_path is not None:
        from roofline.render import plot as plots

        if rates is None or len(rates) < 2:
            raise UsageError("--plot: draws the knee chart of a rate sweep: give --rate start:stop:step/s")
        plots.check_path(plot_path, "--plot")
        plots.pyplot("roofline simulate --plot")
    if rates is not None and len(rates) > 1:
        if per_request is not None:
            raise UsageError("--per-request: one run's requests: give one rate")
        result = sim.rate_sweep(m, h, rates, **options)
        emit(result, json, csv)
        if plot_path is not None:
            plots.draw_knee(plots.knee_data(result), plot_path)
            if not quiet:
                err(f"roofline: wrote {plot_path}")
        return
    if per_request is not None:
        from roofline.files import checked_target

        checked_target(text_value(per_request, "--per-request"), "--per-request")  # before the run, not after it
    result = sim.simulate(m, h, rate=rates[0] if rates else None, **options)
    if result.saturated:
        err("roofline: warning: saturated: the queue grows over the run (its notes say why)")
    if per_request is not None:
        write_requests(result, text_value(per_request, "--per-request"))
        if not quiet:
            err(f"roofline: wrote {per_request}")
    emit(result, json, csv)


def rate_list(text: str | None) -> list[float] | None:
    """'10/s' -> [10.0]; '1:20:1/s' (start:stop:step, the unit at the end, or on each) -> [1, 2, ..., 20]."""
    from roofline.cli.common import rate

    if text is None:
        return None
    if ":" not in text:
        return [rate(text, "--rate")]
    parts = text.split(":")
    unit = next((u for u in ("/s", "/min", "/h") if parts[-1].strip().endswith(u)), None)
    if len(parts) != 3 or unit is None:
        raise UsageError(f"--rate: a sweep is start:stop:step with its unit, such as 1:20:1/s, got {text!r}")
    start, stop, step = (rate(p if p.strip().endswith(unit) else p + unit, "--rate") for p in parts)
    if stop < start or (stop - start) / step > 200:
        raise UsageError(f"--rate: expected start <= stop and at most 200 rates, got {text!r}")
    return [start + k * step for k in range(int((stop - start) / step + 1e-9) + 1)]


def slo_quantile(text: str) -> float:
    value = text.strip().lower().removeprefix("p")
    try:
        q = float(value) / 100
    except ValueError:
        q = -1.0
    if not 0.5 <= q <= 1:
        raise UsageError(f"--slo-percentile: expected a percentile from p50 to p100 such as p99, got {text!r}")
    return q


def write_requests(result, path: str) -> None:
    import csv as csvlib
    import io

    from roofline.files import atomic_write

    buffer = io.StringIO()
    writer = csvlib.DictWriter(buffer, fieldnames=list(result.per_request[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(result.per_request)
    with atomic_write(path, "--per-request") as f:
        f.write(buffer.getvalue())
