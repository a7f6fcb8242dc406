"""`bench`: a workload against an OpenAI-compatible streaming server, timed as `simulate` reports it."""

from typing import Annotated

import typer

from roofline.calc.knobs import OUTPUT_TOKENS, PROMPT_TOKENS
from roofline.cli.common import (
    Csv,
    D,
    Engine,
    HardwareRef,
    Json,
    KvDtype,
    KvUnified,
    ModelRef,
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
    terminal_console,
    text_value,
)
from roofline.cli.simulate import (
    Arrival,
    Concurrency,
    Cv,
    MeanOutput,
    MeanPrompt,
    OutputDist,
    PromptDist,
    Rate,
    Requests,
    Seed,
    Trace,
    Warmup,
    rate_list,
    write_requests,
)

app = typer.Typer()

COMPARE_ONLY = {
    "model": "--model",
    "hardware": "--hardware",
    "engine": "--engine",
    "tp": "--tp",
    "weight_dtype": "--weight-dtype",
    "kv_dtype": "--kv-dtype",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "kv_unified": "--kv-unified/--no-kv-unified",
    "reserve_full_isl": "--scheduler-reserve-full-isl/--no-scheduler-reserve-full-isl",
}  # bench's flags that describe the simulation --compare runs


@app.command()
@handled
def bench(
    ctx: typer.Context,
    url: Annotated[
        str, typer.Argument(help="The server's base URL, e.g. http://127.0.0.1:8080 (POST /v1/completions).")
    ],
    served_model: Annotated[
        str | None, typer.Option("--served-model", help="The `model` field to send. [default: none]")
    ] = None,
    rate: Rate = None,
    arrival: Arrival = "poisson",
    cv: Cv = 1.0,
    concurrency: Concurrency = None,
    requests: Requests = 100,
    warmup: Warmup = None,
    seed: Seed = 0,
    prompt_tokens: MeanPrompt = PROMPT_TOKENS,
    output_tokens: MeanOutput = OUTPUT_TOKENS,
    prompt_dist: PromptDist = None,
    output_dist: OutputDist = None,
    trace: Trace = None,
    text: Annotated[
        bool, typer.Option("--text", help="Send text prompts (a word a token) instead of random token ids.")
    ] = False,
    vocab: Annotated[int, typer.Option("--vocab", min=1, help="Token ids are drawn from [0, vocab).")] = 1000,
    time_limit: Annotated[
        str, typer.Option("--time-limit", help="Stop the run after this long; unfinished requests are counted.")
    ] = "10min",
    request_timeout: Annotated[
        str, typer.Option("--request-timeout", help="Give up on one request after this.")
    ] = "5min",
    ttft_slo: TtftSlo = None,
    tpot_slo: TpotSlo = None,
    per_request: Annotated[
        str | None,
        typer.Option("--per-request", help="Write every request's times and errors to this CSV file. [default: none]"),
    ] = None,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Also simulate the same requests for -m on -H (with --engine, --tp, dtypes, --max-num-seqs as the "
            "server's slots) and print predicted beside measured.",
        ),
    ] = False,
    model: ModelRef = None,
    hardware: HardwareRef = None,
    engine: Engine = D.engine,
    tp: Tp = D.tp,
    weight_dtype: WeightDtype = D.weight_dtype,
    kv_dtype: KvDtype = D.kv_dtype,
    max_num_seqs: Annotated[
        int | None,
        typer.Option("--max-num-seqs", min=1, help="With --compare: the server's slots. [default: the engine's]"),
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option("--max-num-batched-tokens", min=1, help="With --compare: tokens a step. [default: the engine's]"),
    ] = None,
    kv_unified: KvUnified = None,
    reserve_full_isl: ReserveFullIsl = None,
    json: Json = False,
    csv: Csv = False,
    quiet: Quiet = False,
) -> None:
    """Load an OpenAI-compatible streaming server (llama-server, vLLM, SGLang: /v1/completions) with simulate's
    workload and time TTFT, every inter-token gap, TPOT and E2E from the stream; prints simulate's JSON keys.

    \b
    Examples:
      roofline bench http://127.0.0.1:8080 --concurrency 4 --requests 40 --prompt 128 --output 64
      roofline bench http://127.0.0.1:8000 --served-model meta-llama/Llama-3.1-8B --rate 2/s --requests 200 --json
      roofline bench http://127.0.0.1:8080 --concurrency 4 --compare -m tiny.gguf -H profile.yaml --max-num-seqs 4
    """
    from roofline.bench import bench as run_bench
    from roofline.calc.simulate import workload, workload_inputs
    from roofline.calc.workload import Request
    from roofline.errors import UsageError

    rates = rate_list(rate)
    if rates is not None and len(rates) > 1:
        raise UsageError("--rate: bench runs one rate at a time")
    check_workload_flags(ctx, trace, rate, arrival)
    if not compare:  # they describe the simulation --compare runs; alone they would be ignored
        for name, flag in COMPARE_ONLY.items():
            if given(ctx, name):
                raise UsageError(f"{flag}: describes the prediction --compare prints; give it with --compare")
    loaded = None
    if trace is not None:
        from roofline.specs.trace import load_trace

        loaded = [Request(*row) for row in load_trace(text_value(trace, "--trace"))]
    chosen = workload(
        rates[0] if rates else None,
        text_value(arrival, "--arrival"),
        cv,
        concurrency,
        requests,
        seed,
        prompt_tokens,
        output_tokens,
        prompt_dist,
        output_dist,
        loaded,
    )
    closed = concurrency if concurrency is not None or chosen[0].arrival_s is not None else len(chosen)
    warm = len(chosen) // 10 if warmup is None else warmup
    if warm >= len(chosen):
        raise UsageError(f"--warmup: expected fewer than the {len(chosen)} requests, got {warm}")
    if per_request is not None:
        from roofline.files import checked_target

        checked_target(text_value(per_request, "--per-request"), "--per-request")  # before a request is sent
    if compare:  # the model, profile, engine and scheduler checked before the run, not after it
        from roofline.calc.prepare import prepare
        from roofline.calc.replica import Scheduler
        from roofline.calc.simulate import check_scheduler, engine_scheduler, preset_knobs, replica_setup

        m, h = specs(model, hardware, quiet)
        prepared = prepare(m, h, knobs_from(locals()))
        sched = engine_scheduler(
            prepared, Scheduler(None, max_num_seqs, max_num_batched_tokens, None, kv_unified, reserve_full_isl)
        )
        check_scheduler(sched)
        preset_knobs(prepared)
        replica_setup(prepared, bool(sched.kv_unified), sched.policy)  # its KV budget, its engine's costs
    inputs = {
        "url": url,
        "served_model": served_model,
        **workload_inputs(
            rates[0] if rates else None,
            arrival,
            cv,
            concurrency,
            len(chosen),
            warm,
            seed,
            prompt_tokens,
            output_tokens,
            prompt_dist,
            output_dist,
            loaded,
        ),  # fmt: skip
        "text_prompts": text,
    }
    progress = None
    console = None if quiet else terminal_console()
    if console is not None:
        from rich.progress import Progress

        bar = Progress(console=console, transient=True)
        task = bar.add_task("requests", total=len(chosen))
        bar.start()
        progress = lambda: bar.advance(task)  # noqa: E731
    try:
        result = run_bench(
            url,
            chosen,
            concurrency=closed if chosen[0].arrival_s is None else None,
            warmup=warm,
            model=served_model,
            text=text,
            vocab=vocab,
            seed=seed,
            time_limit_s=duration(time_limit, "--time-limit", "s"),
            request_timeout_s=duration(request_timeout, "--request-timeout", "s"),
            ttft_slo=duration(ttft_slo, "--ttft-slo", "s"),
            tpot_slo=duration(tpot_slo, "--tpot-slo"),
            inputs=inputs,
            progress=progress,
        )
    finally:
        if progress is not None:
            bar.stop()
    done = result.requests > 0
    cut = result.errors.get("time limit", 0)
    if cut and not done:
        err(
            f"roofline: error: the time limit cut {cut} of {len(chosen)} requests before one beyond the warm-up "
            f"({warm}) finished: raise --time-limit, or lower --requests or --warmup"
        )
    elif cut:
        err(f"roofline: warning: the time limit cut {cut} of {len(chosen)} requests (unsent or unfinished)")
    failed = {kind: n for kind, n in result.errors.items() if kind != "time limit"}
    if failed:
        each = ", ".join(f"{n} {kind}" for kind, n in sorted(failed.items()))
        level = "warning" if done else "error"  # none completed: the run failed (exit 1)
        first = f"; the first said {result.said!r}" if result.said else ""
        hint = " (the URL is the server's root: drop /v1)" if url.rstrip("/").endswith("/v1") else ""
        err(f"roofline: {level}: {sum(failed.values())} of {len(chosen)} requests failed ({each}){first}{hint}")
    if per_request is not None:
        write_requests(result, text_value(per_request, "--per-request"))
    if compare:
        from roofline.bench import BenchComparison, client_starts
        from roofline.calc.simulate import run_simulation, scheduler_inputs

        loop = chosen[0].arrival_s is None  # a closed loop: its clients start when bench sent their first requests
        predicted = run_simulation(
            prepared,
            client_starts(chosen, result, closed) if loop else chosen,
            concurrency=closed if loop else None,
            warmup=warm,
            scheduler=sched,
            capacity=False,
            inputs={**inputs, "model": m.id, "hardware": h.id, "scheduler": scheduler_inputs(sched)},
            seed=seed,
        )
        result = BenchComparison(result, predicted)
    emit(result, json, csv)
    if not done:  # a load test that measured nothing failed, though its report (the errors) is printed
        raise typer.Exit(1)
