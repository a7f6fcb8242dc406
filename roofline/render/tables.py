"""Results -> text. JSON needs only the standard library; rich is imported only for tables."""

from __future__ import annotations

from typing import Any

from roofline.calc.estimate import Estimate, held_by
from roofline.calc.inputs import is_preset
from roofline.calc.options import MEETS
from roofline.units import binary, number, percentile_name, si


def estimate_table(e: Estimate):
    """A rich renderable: the prefill/decode table plus verdict lines, one screen."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    i, p, d = e.inputs, e.prefill, e.decode
    head = Text.assemble(
        *([(f"does NOT fit: {e.fits_reason}\n", "bold red")] if not e.fits else []),
        (f"{e.model.name}", "bold"),
        " on ",
        (e.hardware.name, "bold"),
        f"  ({e.hardware.figures} figures)\n",
        f"batch {i.batch}, prompt {i.prompt_tokens}, output {i.output_tokens} tokens{_parallel(i)}; "
        f"weights {i.weight_dtype}{_bits(e)}, KV {i.kv_dtype}, compute {i.compute_dtype}\n"
        f"efficiency: compute {i.compute_efficiency:g}, bandwidth {i.bandwidth_efficiency:g}"
        f"{' (the roofline bound)' if i.compute_efficiency == i.bandwidth_efficiency == 1 else ''}",
    )
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    table.add_column("")
    table.add_column("prefill (batch)", justify="right")
    table.add_column("decode (mean step)", justify="right")
    for label, a, b in (
        ("FLOPs", si(p.flops, "FLOP"), si(d.flops, "FLOP")),
        ("bytes moved", si(p.bytes, "B"), si(d.bytes, "B")),
        ("intensity", si(p.intensity_flop_per_byte, "FLOP/B"), si(d.intensity_flop_per_byte, "FLOP/B")),
        ("compute time", si(p.compute_s, "s"), si(d.compute_s, "s")),
        ("memory time", si(p.memory_s, "s"), si(d.memory_s, "s")),
        *([("comm time", si(p.comm_s, "s"), si(d.comm_s, "s"))] if i.tp > 1 else []),
        ("time", si(p.time_s, "s"), si(d.time_s, "s")),
        ("bound", p.bound, d.bound),
    ):
        table.add_row(label, a, b)
    return Group(head, Text(""), table, Text(""), *[Text(line) for line in summary_lines(e)])


def _parallel(i) -> str:
    if i.pp > 1:
        return (
            f"; tp {i.tp} x pp {i.pp} = {i.tp * i.pp} devices (table: the whole model on tp devices; per-stage "
            f"work is 1/{i.pp})"
        )
    return f"; tp {i.tp} devices (figures per device)" if i.tp > 1 else ""


def _pipeline_line(p) -> str:
    return (
        f"pipeline {p.stages} stages x {p.micro_batches} micro-batches: a decode slot {si(p.stage_decode_s, 's')} "
        "+ hop "
        f"{si(p.hop_decode_s, 's')}, every {p.cycle_stages} slots · bubble prefill {p.bubble_prefill:.0%}, decode "
        f"{p.bubble_decode:.0%}"
    )


def _disagg_line(d) -> str:
    return (
        f"disagg {d.prefill_instances}P:{d.decode_instances}D ({d.prefill_devices} + {d.decode_devices} devices): KV "
        "transfer "
        f"{si(d.kv_transfer_s, 's')} · pools {number(d.prefill_requests_per_s)} / {number(d.decode_requests_per_s)} "
        "requests/s "
        f"(prefill / decode): {d.bottleneck}-bound, fleet {number(d.requests_per_s)} requests/s"
    )


def _bits(e: Estimate) -> str:
    from roofline.specs.records import DTYPE_BYTES

    bits = e.inputs.bits_per_weight
    return "" if bits == 8 * DTYPE_BYTES[e.inputs.weight_dtype] else f" at {bits:.3g} bits/weight"


def summary_lines(e: Estimate) -> list[str]:
    """The verdict lines under the table, each under 80 columns where the numbers allow. Memory figures say whether
    they are per device or the whole model's when more than one device serves it."""
    d, i = e.decode, e.inputs
    limit = "unbounded (no KV cache)" if e.max_batch is None else str(e.max_batch)
    critical = str(e.critical_batch) if e.critical_batch is not None else "none"
    several = i.tp > 1 or i.pp > 1 or i.ep > 1
    whole = " (whole model)" if several else ""
    per_device = " per device" if several else ""
    return [
        f"TTFT {si(e.ttft_s, 's')} · TPOT {si(e.tpot_s, 's')} · request {si(e.request_latency_s, 's')}",
        *([_pipeline_line(e.pipeline)] if e.pipeline else []),
        *([_disagg_line(e.disagg)] if e.disagg else []),
        *(
            [
                f"engine {e.engine.name} ({e.engine.source}): TTFT {si(e.engine.ttft_s, 's')}"
                f"{_typical(e.engine, 'ttft_mean')} · TPOT {si(e.engine.tpot_s, 's')}{_typical(e.engine, 'tpot')} · "
                f"request {si(e.engine.ttft_s + max(i.output_tokens - 1, 0) * e.engine.tpot_s, 's')}"
                f"{_typical(e.engine, 'e2e')} · "
                f"{number(e.engine.output_tokens_per_s)} output tokens/s{_typical(e.engine, 'output_tokens_per_s')}"
                + (f" · max batch {e.engine.max_batch} in its pool " if e.engine.max_batch is not None else " ")
                + (
                    "(its pool holds more than the bound's memory fraction: see the note)"
                    if e.engine.max_batch is not None and e.max_batch is not None and e.engine.max_batch > e.max_batch
                    else "(the bound above is what no engine can beat)"
                    if i.compute_efficiency == i.bandwidth_efficiency == 1
                    else "(the figures above are at the efficiencies given, not the bound)"
                )
            ]
            if e.engine
            else []
        ),
        f"decode {number(d.tokens_per_s)} tokens/s ({number(d.tokens_per_s_per_sequence)} per sequence; B / TPOT) · "
        f"end to end {number(e.output_tokens_per_s)} output tokens/s, {number(e.requests_per_s)} requests/s (prefill "
        "included) · "
        f"MBU {_percent(d.mbu)} · MFU {_percent(d.mfu)}",
        f"weights {si(e.weight_bytes, 'B')} resident{whole}"
        f"{f', {si(e.weight_bytes_per_device, chr(66))} per device' if several else ''}, "
        f"{si(e.weight_bytes_streamed, 'B')} streamed per decode step{' (all devices)' if several else ''}",
        f"KV cache {si(e.kv_bytes_per_token, 'B')}/token, {si(e.kv_bytes_per_sequence, 'B')}/sequence{whole} "
        f"at {i.prompt_tokens + i.output_tokens} tokens",
        f"KV budget {si(e.kv_budget_bytes, 'B')}{per_device} = {i.memory_fraction:g} x "
        f"{binary(e.hardware.memory_capacity_bytes)} "
        f"- weights{per_device}{_held(e)} · max batch {limit} · "
        f"{'fits' if e.fits else 'does NOT fit'}",
        f"ridge {number(e.ridge_point_flop_per_byte)} FLOP/B ({i.compute_dtype}) · critical batch {critical}: "
        f"{e.critical_batch_reason}",
        *([_calibrated_line(e.calibrated)] if e.calibrated else []),
        _verdict("prefill", e.prefill.bound, e.prefill.intensity_flop_per_byte, e.ridge_point_flop_per_byte),
        _verdict("decode", d.bound, d.intensity_flop_per_byte, e.ridge_point_flop_per_byte),
        *[f"note: {n}" for n in e.notes],
    ]


def _held(e) -> str:
    """What the KV budget also leaves out beside the weights, when anything, and whose it is."""
    whose = held_by(e.inputs.draft is not None or bool(e.inputs.mtp), bool(e.inputs.shared_prefix))
    return f" - {si(e.held_once_bytes, 'B')} held once ({whose})" if e.held_once_bytes > 0 else ""


def _calibrated_line(c) -> str:
    """The calibrated prediction and its decode step's parts, named as its engine's model has them."""
    if c.engine == "llamacpp":
        label, parts = "llama.cpp's measured profile", ("matmuls", "attention + KV", "fixed")
    elif c.engine == "transformers":
        label, parts = "measured curve + transformers' costs", ("linears", "attention + cache copy", "fixed")
    else:
        label, parts = "measured curve + per-op cost, plain eager PyTorch", ("linears", "attention", "per-op")
    values = (c.decode_linear_s, c.decode_attention_s, c.decode_overhead_s)
    inner = ", ".join(f"{name} {si(v, 's')}" for name, v in zip(parts, values))
    return f"calibrated ({label}): TTFT {si(c.ttft_s, 's')} · TPOT {si(c.tpot_s, 's')} ({inner})"


def _percent(x: float) -> str:
    return f"{x * 100:.3g}%" if x >= 0.01 else f"{x * 100:.2g}%"


def _verdict(phase: str, bound: str, intensity: float, ridge: float) -> str:
    return f"{phase} is {bound}-bound: {si(intensity, 'FLOP/byte')} vs ridge {si(ridge, 'FLOP/byte')}"


def listing_table(
    columns: list[str], rows: list[list[str]], left: int = 2, drop: tuple[str, ...] = (), wrap: tuple[str, ...] = ()
):
    """A plain table: the first `left` columns left-aligned (names), the rest right-aligned (numbers); on a narrow
    terminal the columns in `drop` go first (roofline.render.grid: a number or an id is never cut)."""
    from roofline.render.grid import Grid

    return Grid(columns, rows, left, drop, wrap)


def sweep_table(s: Any):
    """The sweep's rows and, under them, each group's critical, max and best-goodput batch."""
    from rich.console import Group
    from rich.text import Text

    grid = len(s.groups) > 1
    columns = [
        "batch",
        *(["prompt", "output"] if grid else []),
        "TTFT",
        "TPOT",
        "decode tok/s",
        "output tok/s",
        "per seq",
        "MBU",
        "MFU",
        "KV (batch)",
        "fits",
        "bound",
        "SLO",
        "goodput",
    ]
    rows = [
        [
            str(r.batch),
            *([str(r.prompt_tokens), str(r.output_tokens)] if grid else []),
            si(r.ttft_s, "s"),
            si(r.tpot_s, "s"),
            number(r.tokens_per_s),
            number(r.output_tokens_per_s),
            number(r.tokens_per_s_per_sequence),
            _percent(r.mbu),
            _percent(r.mfu),
            si(r.kv_bytes, "B"),
            "yes" if r.fits else "no",
            r.bound,
            "yes" if r.meets_slo else "no",
            number(r.goodput_tokens_per_s),
        ]
        for r in s.rows
    ]
    table = listing_table(columns, rows, left=0, drop=("per seq", "MFU", "output tok/s", "bound", "KV (batch)", "SLO"))
    i = s.inputs
    slo = (
        ", ".join(f"{name} <= {si(v, 's')}" for name, v in (("TPOT", i["tpot_slo_s"]), ("TTFT", i["ttft_slo_s"])) if v)
        or "none"
    )
    head = Text.assemble(
        (f"{i['model']} on {i['hardware']}", "bold"),
        f"  ({i['figures']} figures) · {_layout(i)} · SLO: {slo} · "
        f"weights {i['weight_dtype']}, KV {i['kv_dtype']}, compute {i['compute_dtype']}",
    )
    of = i.get("goodput_of", "output")
    meaning = Text(
        "decode tok/s = B / TPOT (the decode step); output tok/s = B x O / request latency (end to end, prefill "
        f"included); goodput counts {'output' if of == 'output' else 'decode'} tok/s; KV (batch): the whole batch's "
        "cache over all devices"
    )
    lines = [head, meaning, Text(""), table, Text("")]
    for g in s.groups:
        where = f"prompt {g.prompt_tokens}, output {g.output_tokens}: " if grid else ""
        best = (
            f"best batch {g.best_batch}: {number(g.best_goodput_tokens_per_s)} tokens/s goodput, "
            f"TPOT {si(g.best_tpot_s, 's')}, TTFT {si(g.best_ttft_s, 's')}"
            if g.best_batch is not None
            else "no batch meets the SLOs"
            if s.inputs.get("tpot_slo_s") is not None or s.inputs.get("ttft_slo_s") is not None
            else "no batch fits"
        )
        critical = g.critical_batch if g.critical_batch is not None else "none"
        limit = g.max_batch if g.max_batch is not None else "unbounded"
        lines.append(Text(f"{where}critical batch {critical} · max batch {limit} · {best}"))
    return Group(*lines)


def compare_table(c: Any):
    """One row per (model, hardware), under a line of the inputs every row shares."""
    from rich.console import Group
    from rich.text import Text

    table = [
        [
            r.model,
            r.hardware,
            "yes" if r.fits else "no",
            si(r.weight_bytes, "B"),
            "-" if r.max_batch is None else str(r.max_batch),
            number(r.ridge_point_flop_per_byte),
            si(r.ttft_s, "s"),
            si(r.tpot_s, "s"),
            number(r.tokens_per_s),
            r.decode_bound,
            "-" if r.best_batch is None else str(r.best_batch),
            "-" if r.best_goodput_tokens_per_s is None else number(r.best_goodput_tokens_per_s),
        ]
        for r in c.rows
    ]
    i = c.inputs
    columns = [
        "model",
        "hardware",
        "fits",
        "weights (total)",
        "max batch",
        "ridge",
        "TTFT",
        "TPOT",
        "decode tok/s",
        "decode",
        "best batch",
        "goodput",
    ]
    slo = ", ".join(f"{n} <= {si(v, 's')}" for n, v in (("TPOT", i["tpot_slo_s"]), ("TTFT", i["ttft_slo_s"])) if v)
    head = Text(
        f"batch {i['batch']}, prompt {i['prompt_tokens']}, output {i['output_tokens']} tokens · {_layout(i)}"
        f"{' · SLO ' + slo if slo else ''} · weights are the whole model's, TTFT/TPOT/decode tok/s (B / TPOT) at "
        f"batch {i['batch']}"
    )
    if not slo:  # no objective: no best batch and no goodput to show
        columns, table = columns[:-2], [r[:-2] for r in table]
    return Group(head, Text(""), listing_table(columns, table, drop=("ridge", "decode", "weights (total)")))


def _layout(i: dict) -> str:
    """'tp 2 x pp 2 = 4 devices' (ep when set) or '1 device'."""
    tp, pp, ep = i.get("tp", 1), i.get("pp", 1), i.get("ep", 1)
    parts = [f"tp {tp}"] + ([f"pp {pp}"] if pp > 1 else [])
    devices = max(tp, ep) * pp
    return (
        (" x ".join(parts) + (f", ep {ep}" if ep > 1 else "") + f" = {devices} devices") if devices > 1 else "1 device"
    )


def fit_table(f: Any):
    """The three answers of `fit`, each with its reason."""
    from rich.console import Group
    from rich.text import Text

    i = f.inputs
    answer = lambda value, unit: "-" if value is None else f"{value:,} {unit}{'' if value == 1 else 's'}"  # noqa: E731
    rows = [
        ["largest context", f"batch {i['batch']}", answer(f.max_context_tokens, "token"), f.max_context_reason],
        ["largest batch", f"context {i['context_tokens']:,}", answer(f.max_batch, "sequence"), f.max_batch_reason],
        ["smallest tp", f"context {i['context_tokens']:,}", answer(f.min_tp, "device"), f.min_tp_reason],
    ]
    head = Text.assemble(
        (f"{f.model['name']} on {f.hardware['name']}", "bold"),
        f"  weights {i['weight_dtype']} at {i['bits_per_weight']:.3g} bits, KV {i['kv_dtype']}, memory fraction "
        f"{i['memory_fraction']:g}, tp {i['tp']}",
    )
    return Group(head, Text(""), listing_table(["question", "at", "answer", "why"], rows, left=2, wrap=("why",)))


def plan_table(p: Any):
    """Ranked fleet options: devices, batch, latencies, throughput per device, cost and energy when known."""
    from rich.console import Group
    from rich.text import Text

    dash = lambda v, f: "-" if v is None else f(v)  # noqa: E731
    i = p.inputs
    queued = i.get("method") == "simulated"
    pct = percentile_name(i.get("slo_percentile", 0.99))
    seconds = lambda v: si(v, "s")  # noqa: E731
    static = lambda o: queued and o.method != "simulated"  # noqa: E731  (pools, pipelines: Little's law)
    mark = lambda o, v: dash(v, seconds) + ("*" if static(o) and v is not None else "")  # noqa: E731
    rows = [
        [
            o.hardware,
            str(o.tp),
            str(o.pp),
            o.disagg or "-",
            dash(o.replicas, str),
            *([dash(o.utilization, lambda v: f"{v:.0%}")] if queued else [dash(o.batch, str)]),
            dash(o.devices, str),
            mark(o, o.ttft_p99_s if queued and not static(o) else o.ttft_s),
            mark(o, o.tpot_p99_s if queued and not static(o) else o.tpot_s),
            dash(o.output_tokens_per_s, number),
            dash(o.goodput_per_device, number),
            dash(o.cost_per_hour, dollars),
            dash(o.cost_per_million_tokens, dollars),
            dash(o.energy_j_per_million_tokens, lambda v: si(v, "J")),
            "" if o.meets_slo else o.reason,
        ]
        for o in p.options
    ]
    load = f"{i['concurrency']} in flight" if i["concurrency"] is not None else f"{i['rate_per_s']:g} requests/s"
    slo = (
        ", ".join(f"{n} <= {si(v, 's')}" for n, v in (("TPOT", i["tpot_slo_s"]), ("TTFT", i["ttft_slo_s"])) if v)
        or "none"
    )
    engine = i.get("engine")
    preset = engine is not None and is_preset(engine)  # eager and measured engines: their costs, not a preset's
    named = f"the {engine} preset, " if preset else ""
    how = (
        f" · each replica simulated under Poisson arrivals ({named}{i['scheduler']['description']}), "
        f"its SLOs at {pct}; util = its share of the rate over its saturation rate"
        if queued
        else f" · static batches, Little's law{f', the {engine} preset' if preset else ''}"
    )
    head = Text.assemble(
        (f"{i['model']}: {load}, prompt {i['prompt_tokens']}, output {i['output_tokens']}", "bold"),
        f" · SLO {slo} · ranked by {i['ranked_by']}{how}",
    )
    columns = [
        "hardware",
        "tp",
        "pp",
        "pools",
        "replicas",
        "util" if queued else "batch",
        "devices",
        f"TTFT {pct}" if queued else "TTFT",
        f"TPOT {pct}" if queued else "TPOT",
        "output tok/s",
        "per device",
        "$/hour",
        "$/M tokens",
        "energy/M tokens",
        "why not",
    ]
    if not rows:
        slos = i.get("tpot_slo_s") is not None or i.get("ttft_slo_s") is not None
        what = "meets the SLOs" if slos else "can serve this workload"
        return Group(head, Text(f"no device and tp {what} (--all lists why)"))
    keep = [
        n not in (("pp",) if i.get("pp", [1]) == [1] else ()) + (() if i.get("disagg") else ("pools",)) for n in columns
    ]
    if all(o.meets_slo for o in p.options):  # no refusals listed: no empty "why not" column
        keep[-1] = False
    columns = [c for c, k in zip(columns, keep) if k]
    rows = [[v for v, k in zip(r, keep) if k] for r in rows]
    lines = [
        head,
        *(
            [Text(f"no price for {', '.join(i['unpriced'])}: ranked after the priced options (--price ID=USD)")]
            if i.get("unpriced")
            else []
        ),
        Text(""),
    ]
    drop = ("energy/M tokens", "output tok/s", "TTFT", f"TTFT {pct}", "replicas", "pp", "pools", "$/hour", "per device")
    caveats = [  # an option that meets the SLOs with a doubt on its figures (options.served_option)
        Text(f"note: {o.hardware} tp {o.tp}: {o.reason.removeprefix(MEETS + '; ')}")
        for o in p.options
        if o.meets_slo and o.reason != MEETS
    ]
    if any(static(o) and (o.ttft_s is not None or o.tpot_s is not None) for o in p.options):
        caveats.insert(0, Text(
            f"* sized by Little's law (pools, pipelines): a static batch's mean TTFT and TPOT, not a simulated {pct}; "
            "the SLOs are checked against them"
        ))  # fmt: skip
    return Group(*lines, listing_table(columns, rows, left=1, drop=drop, wrap=("why not",)), *caveats)


def dollars(v: float) -> str:
    """US dollars to the cent ($3.80, $2.17, $1,204.00); under a cent, 2 significant figures ($0.0042)."""
    return f"${v:,.2f}" if v >= 0.01 else f"${v:.2g}"


def _typical(engine, metric: str) -> str:
    """' (vllm preset, +-9% on 40 published runs)': a preset's held-out median error for `metric` on this device, or
    ''; on a device its runs are on, the error of a model left out of the fit (unmarked); on one none of its runs
    is on, of a device left out; a run left out where no such fold could score the metric."""
    from roofline.calc.presets import MARK

    entry = engine.typical_error.get(metric)
    if not entry or entry.get("case") is None:
        return ""
    applies = entry.get("applies", "case")
    where = MARK.get(applies, "")  # a setup's figure, the usual one on a preset's own device, unmarked
    return f" ({engine.name} preset, +-{entry[applies] * 100:.0f}% on {entry['runs']} published runs{where})"
