"""`simulate` results -> tables: the percentile table of one run, the curve of a rate sweep."""

from __future__ import annotations

from typing import Any

from roofline.render.grid import Grid
from roofline.units import number, percentile_name, si

ROWS = (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("ITL", "itl_s"), ("E2E", "e2e_s"), ("queue", "queue_s"))
COLUMNS = ("mean", "p50", "p90", "p95", "p99", "max")


def simulation_table(s: Any):
    """The percentiles of each latency, then throughput, goodput, saturation and occupancy."""
    from rich.console import Group
    from rich.text import Text

    i = s.inputs
    load = _load(i)
    sched = i.get("scheduler") or {}
    head = Text.assemble(
        (f"{i['model']} on {i['hardware']}", "bold"),
        f" · {load} · {s.requests} requests measured ({i.get('warmup', 0)} warm-up) · {lengths(i)} · "
        f"{sched.get('policy', 'vllm')} scheduler, max_num_seqs {sched.get('max_num_seqs')}, "
        f"max_num_batched_tokens {sched.get('max_num_batched_tokens')}",
    )
    rows = [[name, *(si(getattr(s, key)[c], "s") for c in COLUMNS)] for name, key in ROWS]
    lines = [head, Text(""), Grid(["", *COLUMNS], rows, left=1, drop=("p90", "p95", "mean")), Text("")]
    slo = ""
    if s.slo_attainment is not None:
        met = ", ".join(f"{k[:-2].upper()} {'met' if v else 'MISSED'}" for k, v in (s.slo_met or {}).items())
        slo = (
            f" · goodput {number(s.goodput_requests_per_s)} requests/s ({s.slo_attainment:.1%} meet every SLO; "
            f"{percentile_name(i['slo_percentile'])}: {met})"
        )
    lines.append(Text(f"{number(s.output_tokens_per_s)} output tokens/s, {number(s.requests_per_s)} requests/s{slo}"))
    capacity = f"capacity {number(s.max_stable_rate_per_s)} requests/s" if s.max_stable_rate_per_s else "closed loop"
    verdict = "SATURATED: its queue grows" if s.saturated else "stable"
    lines.append(
        Text(
            f"{verdict} · {capacity} · running batch mean {number(s.batch['mean'])}, max {s.batch['max']} · "
            "KV "
            f"used mean {s.kv_utilization['mean']:.0%}, max {s.kv_utilization['max']:.0%} · {s.preemptions} "
            f"preemption(s) · {s.steps:,} steps, {si(s.simulated_s, 's')} simulated"
        )
    )
    lines += [Text(f"note: {n}") for n in s.notes]
    return Group(*lines)


def bench_table(b: Any):
    """A server's measured percentiles, as simulate's table shows them, then throughput and errors."""
    from rich.console import Group
    from rich.text import Text

    i = b.inputs
    load = _load(i)
    head = Text.assemble(
        (i["url"], "bold"),
        f" · {load} · {b.requests} requests measured ({i['warmup']} warm-up) · {lengths(i)}",
    )
    rows = [[name, *(si(getattr(b, key)[c], "s") for c in COLUMNS)] for name, key in ROWS if key != "queue_s"]
    lines = [head, Text(""), Grid(["", *COLUMNS], rows, left=1, drop=("p90", "p95", "mean")), Text("")]
    slo = "" if b.slo_attainment is None else f" · {b.slo_attainment:.1%} meet every SLO"
    lines.append(Text(f"{number(b.output_tokens_per_s)} output tokens/s, {number(b.requests_per_s)} requests/s{slo}"))
    if b.errors:
        lines.append(Text("errors: " + ", ".join(f"{n} {kind}" for kind, n in sorted(b.errors.items()))))
    lines.append(Text(f"measured in {si(b.wall_s, 's')}"))
    return Group(*lines)


def bench_comparison_table(c: Any):
    """Measured against predicted for the same requests: p50 and p99 of each latency, and throughput."""
    from rich.console import Group
    from rich.text import Text

    rows = []
    for name, key in ROWS[:4]:
        m, p = getattr(c.measured, key), getattr(c.predicted, key)
        for stat in ("p50", "p99"):
            ratio = p[stat] / m[stat] if m[stat] and p[stat] is not None else None
            rows.append(
                [f"{name} {stat}", si(m[stat], "s"), si(p[stat], "s"), "-" if ratio is None else f"{ratio:.2f}"]
            )
    m, p = c.measured.output_tokens_per_s, c.predicted.output_tokens_per_s
    rows.append(["output tokens/s", number(m), number(p), f"{p / m:.2f}" if m else "-"])
    head = Text.assemble(
        (c.measured.inputs["url"], "bold"),
        f" against {c.predicted.inputs['model']} on {c.predicted.inputs['hardware']} · {_load(c.measured.inputs)}",
    )
    grid = Grid(["", "measured", "predicted", "predicted / measured"], rows, left=1)
    notes = [Text(f"note: {n}") for n in c.predicted.notes]
    errors = c.measured.errors
    if errors:
        notes.append(Text("errors: " + ", ".join(f"{n} {kind}" for kind, n in sorted(errors.items()))))
    return Group(head, Text(""), grid, *notes)


def rate_sweep_table(r: Any):
    """One row per rate: the latency percentiles users act on, throughput and the verdict."""
    from rich.console import Group
    from rich.text import Text

    i = r.inputs
    rows = [
        [
            number(p.inputs["rate_per_s"]),
            si(p.ttft_s["p50"], "s"),
            si(p.ttft_s["p99"], "s"),
            si(p.tpot_s["p50"], "s"),
            si(p.tpot_s["p99"], "s"),
            si(p.itl_s["p99"], "s"),
            si(p.e2e_s["p99"], "s"),
            number(p.output_tokens_per_s) + ("*" if _short(p) else ""),
            number(p.batch["mean"]),
            "yes" if p.saturated else "no",
        ]
        for p in r.points
    ]
    columns = [
        "rate/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "ITL p99",
        "E2E p99",
        "output tok/s",
        "batch",
        "saturated",
    ]
    capacity = r.points[0].max_stable_rate_per_s
    head = Text(f"{i['model']} on {i['hardware']} · {lengths(i)} · capacity {number(capacity)} requests/s")
    grid = Grid(columns, rows, left=0, drop=("E2E p99", "ITL p99", "batch", "TTFT p50"))
    foot = [Text("* a short run: its throughput includes the ramp (its notes in --json; more --requests)")]
    return Group(head, Text(""), grid, *(foot if any(_short(p) for p in r.points) else []))


def _short(s: Any) -> bool:
    """Whether a run's notes say it was too short for its throughput to be the steady state's."""
    return any(n.startswith("short run:") for n in s.notes)


def _load(i: dict[str, Any]) -> str:
    """'10 requests/s (poisson)', '8 clients (closed loop)' or 'a trace': the load a run's inputs describe."""
    if i.get("rate_per_s"):
        return f"{number(i['rate_per_s'])} requests/s ({i['arrival']})"
    return f"{i['concurrency']} clients (closed loop)" if i.get("concurrency") else "a trace"


def lengths(i: dict[str, Any]) -> str:
    """The workload's lengths: each mean and its distribution, or a trace's means."""
    if i.get("prompt_dist") == "trace":
        return f"prompt mean {number(i['prompt_tokens'])}, output mean {number(i['output_tokens'])} (the trace's)"
    return f"prompt {i['prompt_tokens']} ({i['prompt_dist']}), output {i['output_tokens']} ({i['output_dist']})"
