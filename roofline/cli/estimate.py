"""`estimate`, `sweep`, `compare` and `plot`: the calculator's commands."""

from contextlib import contextmanager
from typing import Annotated

import typer

from roofline.calc.knobs import BATCH, HARDWARE, MODEL, OUTPUT_TOKENS, PROMPT_TOKENS
from roofline.cli.common import (
    Acceptance,
    BandwidthEfficiency,
    BatchList,
    Bits,
    CachedTokens,
    ChunkTokens,
    ComputeDtype,
    ComputeEfficiency,
    Csv,
    D,
    Disagg,
    Draft,
    DraftTokens,
    Engine,
    Ep,
    ExactBytes,
    GoodputOf,
    HardwareRef,
    Json,
    KvDtype,
    MemoryFraction,
    MicroBatches,
    ModelRef,
    Mtp,
    Output,
    OutputList,
    Pp,
    PrefixHitRate,
    Prompt,
    PromptList,
    Quant,
    Quiet,
    SharedPrefix,
    Tp,
    TpotSlo,
    TtftSlo,
    WeightDtype,
    duration,
    emit,
    err,
    given,
    handled,
    knobs_from,
    specs,
    terminal_console,
    text_value,
)
from roofline.cli.common import rate as parse_rate
from roofline.cli.simulate import slo_quantile
from roofline.errors import UsageError

app = typer.Typer()


@app.command()
@handled
def estimate(
    model: ModelRef = None,
    hardware: HardwareRef = None,
    batch: Annotated[
        int | None, typer.Option("--batch", "-b", min=1, help=f"Concurrent sequences. [default: {BATCH}]")
    ] = None,
    prompt_tokens: Annotated[
        int | None, typer.Option("--prompt", min=1, help=f"Prompt tokens per sequence. [default: {PROMPT_TOKENS}]")
    ] = None,
    output_tokens: Annotated[
        int | None, typer.Option("--output", min=0, help=f"Output tokens per sequence. [default: {OUTPUT_TOKENS}]")
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
    pp: Pp = D.pp,
    micro_batches: MicroBatches = None,
    disagg: Disagg = None,
    engine: Engine = D.engine,
    draft: Draft = None,
    draft_tokens: DraftTokens = None,
    acceptance: Acceptance = None,
    mtp: Mtp = None,
    cached_tokens: CachedTokens = None,
    prefix_hit_rate: PrefixHitRate = None,
    shared_prefix: SharedPrefix = 0,
    chunk_tokens: ChunkTokens = None,
    exact_bytes: ExactBytes = False,
    json: Json = False,
    csv: Csv = False,
    quiet: Quiet = False,
) -> None:
    """Estimate TTFT, TPOT, throughput and memory limits for one model on one device.

    \b
    Examples:
      roofline estimate
      roofline estimate -m llama-3.1-70b -H h200 -b 32 --prompt 2048 --output 512
      roofline estimate -m qwen2.5-7b -H rtx-4090 --weight-dtype int4 --bits-per-weight 4.85 --json
    """
    from roofline.calc.estimate import estimate as run_estimate

    m, h = specs(model, hardware, quiet, exact_bytes, batch=batch, prompt=prompt_tokens, output=output_tokens)
    result = run_estimate(
        m,
        h,
        batch=BATCH if batch is None else batch,
        prompt_tokens=PROMPT_TOKENS if prompt_tokens is None else prompt_tokens,
        output_tokens=OUTPUT_TOKENS if output_tokens is None else output_tokens,
        knobs=knobs_from(locals()),
    )
    if not result.fits:
        err(f"roofline: warning: does not fit: {result.fits_reason}")
    for warning in result.warnings:
        err(f"roofline: warning: {warning}")
    emit(result, json, csv)


@app.command()
@handled
def sweep(
    model: ModelRef = None,
    hardware: HardwareRef = None,
    batch: BatchList = None,
    prompt_tokens: PromptList = str(PROMPT_TOKENS),
    output_tokens: OutputList = str(OUTPUT_TOKENS),
    tpot_slo: TpotSlo = None,
    ttft_slo: TtftSlo = None,
    goodput_of: GoodputOf = "output",
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
    pp: Pp = D.pp,
    micro_batches: MicroBatches = None,
    disagg: Disagg = None,
    engine: Engine = D.engine,
    draft: Draft = None,
    draft_tokens: DraftTokens = None,
    acceptance: Acceptance = None,
    mtp: Mtp = None,
    cached_tokens: CachedTokens = None,
    prefix_hit_rate: PrefixHitRate = None,
    shared_prefix: SharedPrefix = 0,
    chunk_tokens: ChunkTokens = None,
    json: Json = False,
    csv: Csv = False,
    quiet: Quiet = False,
) -> None:
    """Sweep batch (and prompt/output lengths): throughput, latency, memory and goodput under SLOs.

    \b
    Examples:
      roofline sweep -m llama-3.1-8b -H h100-sxm --tpot-slo 20ms
      roofline sweep -m llama-3.1-70b -H h200 --batch 1:256 --prompt 512,2048,8192 --csv
    """
    from roofline.calc import sweep as sweeps

    m, h = specs(model, hardware, quiet)
    result = sweeps.sweep(
        m,
        h,
        batches=sweeps.parse_counts(batch, "--batch") if batch is not None else None,
        prompts=sweeps.parse_counts(prompt_tokens, "--prompt"),
        outputs=sweeps.parse_counts(output_tokens, "--output", low=0),
        tpot_slo=duration(tpot_slo, "--tpot-slo"),
        ttft_slo=duration(ttft_slo, "--ttft-slo", "s"),
        goodput_of=goodput_of,
        knobs=knobs_from(locals()),
    )
    emit(result, json, csv)


@app.command()
@handled
def compare(
    model: Annotated[
        list[str], typer.Option("--model", "-m", help="Model id or YAML path; repeat to compare several.")
    ],
    hardware: Annotated[
        list[str], typer.Option("--hardware", "-H", help="Hardware id or YAML path; repeat to compare several.")
    ],
    batch: Annotated[
        int, typer.Option("--batch", "-b", min=1, help="Batch for the TTFT / TPOT / tokens/s columns.")
    ] = BATCH,
    prompt_tokens: Prompt = PROMPT_TOKENS,
    output_tokens: Output = OUTPUT_TOKENS,
    tpot_slo: TpotSlo = None,
    ttft_slo: TtftSlo = None,
    sort: Annotated[
        str | None,
        typer.Option(
            "--sort",
            help="Sort by a column (JSON key); prefix - for descending, e.g. -tokens_per_s. [default: as given]",
        ),
    ] = None,
    goodput_of: GoodputOf = "output",
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
    pp: Pp = D.pp,
    micro_batches: MicroBatches = None,
    disagg: Disagg = None,
    engine: Engine = D.engine,
    draft: Draft = None,
    draft_tokens: DraftTokens = None,
    acceptance: Acceptance = None,
    mtp: Mtp = None,
    cached_tokens: CachedTokens = None,
    prefix_hit_rate: PrefixHitRate = None,
    shared_prefix: SharedPrefix = 0,
    chunk_tokens: ChunkTokens = None,
    json: Json = False,
    csv: Csv = False,
    quiet: Quiet = False,
) -> None:
    """Compare models x devices side by side: fit, max batch, ridge, TTFT, TPOT, tokens/s, best goodput batch.

    \b
    Examples:
      roofline compare -m llama-3.1-8b -m qwen2.5-7b -H h100-sxm -H l40s -H rtx-4090 --sort -tokens_per_s
      roofline compare -m llama-3.1-70b -H h200 -H mi300x -H b200 -b 32 --tpot-slo 30ms --json
    """
    from roofline.calc import sweep as sweeps
    from roofline.specs.catalog import load_model
    from roofline.specs.hardware import load_hardware

    result = sweeps.compare(
        [load_model(text_value(m, "--model")) for m in model],
        [load_hardware(text_value(h, "--hardware")) for h in hardware],
        batch=batch,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        tpot_slo=duration(tpot_slo, "--tpot-slo"),
        ttft_slo=duration(ttft_slo, "--ttft-slo", "s"),
        sort=text_value(sort, "--sort"),
        goodput_of=goodput_of,
        knobs=knobs_from(locals()),
    )
    emit(result, json, csv)


@app.command()
@handled
def plot(
    model: Annotated[
        list[str] | None,
        typer.Option("--model", "-m", help="Model id or YAML path; repeat to overlay several. [default: llama-3.1-8b]"),
    ] = None,
    hardware: Annotated[
        list[str] | None,
        typer.Option(
            "--hardware", "-H", help="Hardware id or YAML path; repeat to overlay several. [default: h100-sxm]"
        ),
    ] = None,
    batch: Annotated[
        str | None,
        typer.Option(
            "--batch",
            "-b",
            help="Batches: list or range. [default: 1,8,64; with --sweep, powers of two up to the max batch]",
        ),
    ] = None,
    prompt_tokens: PromptList = str(PROMPT_TOKENS),
    output_tokens: Output = OUTPUT_TOKENS,
    out_path: Annotated[str, typer.Option("--out", "-o", help="Image to write: .png or .svg.")] = "roofline.png",
    sweep_plot: Annotated[
        bool, typer.Option("--sweep", help="Plot throughput and TPOT against batch instead of the roofline.")
    ] = False,
    rate: Annotated[
        str | None,
        typer.Option(
            "--rate",
            help="Plot the knee chart of a simulated rate sweep instead (start:stop:step/s, e.g. 1:20:1/s): p50/p99 "
            "TTFT and TPOT against throughput, as `roofline simulate --rate ... --plot` draws it. [default: none]",
        ),
    ] = None,
    tpot_slo: TpotSlo = None,
    ttft_slo: TtftSlo = None,
    goodput_of: GoodputOf = "output",
    weight_dtype: WeightDtype = D.weight_dtype,
    kv_dtype: KvDtype = D.kv_dtype,
    compute_dtype: ComputeDtype = D.compute_dtype,
    bits_per_weight: Bits = D.bits_per_weight,
    quant: Quant = D.quant,
    memory_fraction: MemoryFraction = D.memory_fraction,
    compute_efficiency: ComputeEfficiency = D.compute_efficiency,
    bandwidth_efficiency: BandwidthEfficiency = D.bandwidth_efficiency,
    tp: Tp = D.tp,
    engine: Engine = D.engine,
    quiet: Quiet = False,
) -> None:
    """Draw the devices' rooflines with the models' prefill and decode points (needs matplotlib); several -m and -H
    overlay, each model on each device a series in the legend.

    \b
    Examples:
      roofline plot -m llama-3.1-8b -H h100-sxm --batch 1,16,256 -o roofline.png
      roofline plot -m llama-3.1-8b -m qwen2.5-7b -H h100-sxm -H l40s -o compare.png
      roofline plot --sweep -m llama-3.1-70b -H h200 --tpot-slo 50ms -o sweep.svg
      roofline plot --rate 2:40:2/s -m llama-3.1-8b -H h100-sxm -o knee.png
    """
    from roofline.calc import sweep as sweeps
    from roofline.calc.estimate import estimate as run_estimate
    from roofline.render import plot as plots
    from roofline.specs.catalog import load_model
    from roofline.specs.hardware import load_hardware

    knobs = knobs_from(locals())
    slos = {"tpot_slo": duration(tpot_slo, "--tpot-slo"), "ttft_slo": duration(ttft_slo, "--ttft-slo", "s")}
    prompts = sweeps.parse_counts(prompt_tokens, "--prompt")
    plots.check_path(out_path)
    specs(model[0] if model else None, hardware[0] if hardware else None, quiet)  # names the defaults used
    models = [load_model(text_value(m, "--model")) for m in model or [MODEL]]
    devices = [load_hardware(text_value(h, "--hardware")) for h in hardware or [HARDWARE]]
    if rate is not None:
        from roofline.calc.simulate import rate_sweep
        from roofline.cli.simulate import rate_list

        rates = rate_list(rate)
        if sweep_plot or len(rates) < 2 or len(models) * len(devices) * len(prompts) > 1:
            raise UsageError("--rate: the knee chart is one model on one device at one prompt, over a rate sweep")
        plots.pyplot("roofline plot --rate")
        result = rate_sweep(models[0], devices[0], rates, prompt_tokens=prompts[0], output_tokens=output_tokens,
                            knobs=knobs, **slos)  # fmt: skip
        plots.draw_knee(plots.knee_data(result), out_path)
    elif sweep_plot:
        batches = sweeps.parse_counts(batch, "--batch") if batch is not None else None
        results = [
            sweeps.sweep(m, h, batches=batches, prompts=prompts, outputs=[output_tokens], knobs=knobs, **slos)
            for m in models
            for h in devices
        ]
        plots.draw_sweep(plots.sweep_data(results), out_path)
    else:
        batches = sweeps.parse_counts("1,8,64" if batch is None else batch, "--batch")
        if len(batches) * len(prompts) * len(models) * len(devices) > 1000:
            raise UsageError("--batch: at most 1000 points (batches x prompts x models x devices) fit one plot")
        estimates = [
            run_estimate(m, h, batch=b, prompt_tokens=p, output_tokens=output_tokens, knobs=knobs)
            for m in models
            for h in devices
            for p in prompts
            for b in batches
        ]
        plots.draw_roofline(plots.roofline_data(devices, estimates), out_path)
    if not quiet:
        err(f"roofline: wrote {out_path}")


@app.command()
@handled
def fit(
    model: ModelRef = None,
    hardware: HardwareRef = None,
    batch: Annotated[int, typer.Option("--batch", "-b", min=1, help="Sequences for the largest-context answer.")] = 1,
    context: Annotated[
        int | None,
        typer.Option(
            "--context",
            min=1,
            help="Tokens per sequence for the largest-batch and smallest-tp answers. [default: the model's "
            "max_context]",
        ),
    ] = None,
    weight_dtype: WeightDtype = D.weight_dtype,
    kv_dtype: KvDtype = D.kv_dtype,
    bits_per_weight: Bits = D.bits_per_weight,
    quant: Quant = D.quant,
    memory_fraction: MemoryFraction = D.memory_fraction,
    tp: Tp = D.tp,
    json: Json = False,
    csv: Csv = False,
    quiet: Quiet = False,
) -> None:
    """What fits: the largest context at a batch, the largest batch at a context, the smallest tensor-parallel degree.

    Memory only: the weights' and the KV cache's bytes against the memory fraction (no speed flags).

    \b
    Examples:
      roofline fit -m llama-3.1-70b -H h100-sxm --context 32768
      roofline fit -m llama-3.1-8b -H rtx-4090 --quant q4_k_m --kv-dtype q8_0 -b 4 --json
    """
    from roofline.calc.estimate import kv_unpriced
    from roofline.calc.fit import fit as run_fit

    m, h = specs(model, hardware, quiet)
    result = run_fit(m, h, batch=batch, context=context, knobs=knobs_from(locals()))
    if m.max_context is not None and result.inputs["context_tokens"] > m.max_context:
        err(f"roofline: warning: --context {context} exceeds {m.id}'s max_context {m.max_context}")
    if kv_unpriced(m):
        err(f"roofline: warning: {kv_unpriced(m)}")
    emit(result, json, csv)


@app.command()
@handled
def plan(
    ctx: typer.Context,
    model: ModelRef = None,
    hardware: Annotated[
        list[str] | None,
        typer.Option("--hardware", "-H", help="Devices to consider; repeat. [default: every bundled device]"),
    ] = None,
    prompt_tokens: Prompt = PROMPT_TOKENS,
    output_tokens: Annotated[
        int, typer.Option("--output", min=1, help="Output tokens per request (plan sizes for their rate).")
    ] = OUTPUT_TOKENS,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", min=1, help="Requests in flight at once. [default: none: give this or --rate]"),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option(
            "--rate",
            help="Request arrival rate with its unit: 20/s, 1200/min (each replica simulated under Poisson arrivals; "
            "--no-queueing: Little's law). [default: none: give this or --concurrency]",
        ),
    ] = None,
    tpot_slo: TpotSlo = None,
    ttft_slo: TtftSlo = None,
    tp_degrees: Annotated[str, typer.Option("--tp", help="Tensor-parallel degrees to consider.")] = "1,2,4,8",
    pp_degrees: Annotated[str, typer.Option("--pp", help="Pipeline-parallel degrees to consider.")] = "1",
    disagg: Annotated[
        str | None,
        typer.Option(
            "--disagg",
            help="auto: also try disaggregated prefill/decode pools for each option. [default: colocated only]",
        ),
    ] = None,
    price: Annotated[
        list[str] | None,
        typer.Option(
            "--price", help="USD per device-hour, ID=USD; repeat (never bundled: prices change weekly). [default: none]"
        ),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Also list the options that cannot meet the SLOs, with the reason.")
    ] = False,
    queueing: Annotated[
        bool,
        typer.Option(
            "--queueing/--no-queueing",
            help="With --rate: size each replica by simulating it under Poisson arrivals (its SLOs at "
            "--slo-percentile); --no-queueing: static batches and Little's law at full utilization.",
        ),
    ] = True,
    slo_percentile: Annotated[
        str, typer.Option("--slo-percentile", help="The percentile the SLOs apply to with queueing, e.g. p99 or p95.")
    ] = "p99",
    plot_path: Annotated[
        str | None,
        typer.Option(
            "--plot",
            help="Also draw cost (or devices) against TPOT with the frontier: .png or .svg (needs matplotlib). "
            "[default: no plot]",
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
    engine: Engine = D.engine,
    draft: Draft = None,
    draft_tokens: DraftTokens = None,
    acceptance: Acceptance = None,
    mtp: Mtp = None,
    cached_tokens: CachedTokens = None,
    prefix_hit_rate: PrefixHitRate = None,
    shared_prefix: SharedPrefix = 0,
    chunk_tokens: ChunkTokens = None,
    json: Json = False,
    csv: Csv = False,
    quiet: Quiet = False,
) -> None:
    """The smallest or cheapest fleet: devices x tensor parallelism x batch for a workload under SLOs.

    \b
    Examples:
      roofline plan -m llama-3.1-70b --rate 20/s --prompt 1024 --output 256 --tpot-slo 50ms --ttft-slo 2s
      roofline plan -m llama-3.1-8b -H h100-sxm -H l40s --concurrency 256 --tpot-slo 30ms --plot plan.png
    """
    from roofline.calc import sweep as sweeps
    from roofline.calc.plan import plan as run_plan
    from roofline.specs.catalog import catalog
    from roofline.specs.hardware import load_hardware

    knobs = knobs_from({**locals(), "tp": 1, "pp": 1, "disagg": None})
    m, _ = specs(model, "h100-sxm", quiet)
    if rate is None and (given(ctx, "queueing") or given(ctx, "slo_percentile")):
        flag = "--slo-percentile" if given(ctx, "slo_percentile") else "--queueing/--no-queueing"
        raise UsageError(f"{flag}: how a --rate is served: give a rate (a --concurrency is a static batch)")
    if not queueing and given(ctx, "slo_percentile"):
        raise UsageError("--slo-percentile: the percentile of a simulated queue: not with --no-queueing")
    devices = [load_hardware(text_value(h, "--hardware")) for h in (hardware or catalog("hardware"))]
    twice = next((d.id for i, d in enumerate(devices) if d.id in {e.id for e in devices[:i]}), None)
    if twice:
        raise UsageError(f"--hardware: {twice} is given twice")
    prices = {}
    for item in price or []:
        name, _, usd = item.partition("=")
        if name.strip().lower() in {n.lower() for n in prices}:
            raise UsageError(f"--price: {name.strip()} is given twice")
        try:
            prices[name.strip()] = float(usd)
        except ValueError:
            raise UsageError(f"--price: expected ID=USD such as h100-sxm=2.5, got {item!r}") from None
        if not 0 < prices[name.strip()] < 1e4:
            raise UsageError(f"--price: expected a positive price under 10,000 USD per hour, got {item!r}")
    if plot_path is not None:
        from roofline.render import plot as plots

        plots.check_path(plot_path, "--plot")
        plots.pyplot("roofline plan --plot")  # fail before the search, not after the table
    ids = {d.id.lower(): d.id for d in devices}  # ids as -H takes them: in any case
    unknown = sorted(n for n in prices if n.lower() not in ids)
    if unknown:
        raise UsageError(f"--price: {unknown[0]} is not among the devices considered")
    prices = {ids[n.lower()]: usd for n, usd in prices.items()}
    with _options_bar(quiet) as progress:
        result = run_plan(
            m,
            devices,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            concurrency=concurrency,
            rate=parse_rate(rate, "--rate"),
            tpot_slo=duration(tpot_slo, "--tpot-slo"),
            ttft_slo=duration(ttft_slo, "--ttft-slo", "s"),
            tps=tuple(sweeps.parse_counts(tp_degrees, "--tp")),
            pps=tuple(sweeps.parse_counts(pp_degrees, "--pp")),
            disagg=text_value(disagg, "--disagg"),
            prices=prices,
            queueing=queueing,
            slo_percentile=slo_quantile(slo_percentile),
            progress=progress,
            knobs=knobs,
        )
    drawing = plots.plan_data(result) if plot_path is not None else None
    if not show_all:
        result = result._replace(options=[o for o in result.options if o.meets_slo])
    emit(result, json, csv)
    if drawing is not None:
        plots.draw_plan(drawing, plot_path)
        if not quiet:
            err(f"roofline: wrote {plot_path}")


@contextmanager
def _options_bar(quiet: bool):
    """plan's progress on stderr, one tick per simulated option (the queued search takes seconds to a minute over
    the catalog): a callback for roofline.calc.plan.plan, None when quiet. The bar starts with the first call (a plan
    that simulates nothing shows none) and redraws only when called: no thread runs while the search forks its
    processes."""
    console = None if quiet else terminal_console()
    if console is None:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("simulating options"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    bar = Progress(*columns, console=console, transient=True, auto_refresh=False)
    task = bar.add_task("options", total=None)

    def tick(done: int, total: int) -> None:
        if not bar.live.is_started:
            bar.start()
        bar.update(task, completed=done, total=total, refresh=True)

    try:
        yield tick
    finally:
        if bar.live.is_started:
            bar.stop()
