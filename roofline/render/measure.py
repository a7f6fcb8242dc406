"""`roofline measure` results -> a rich table (measured figures beside the datasheet's)."""

from __future__ import annotations

from typing import Any

from roofline.units import binary, number, si


def measure_table(result: dict[str, Any]):
    """A rich renderable of a `measure` result, beside the datasheet's peaks when one is known."""
    datasheet = result.get("datasheet")
    from rich.console import Group
    from rich.text import Text

    from roofline.render.grid import Grid

    device = result["device"]
    head = Text.assemble(
        (device["name"], "bold"),
        f" · {device['kind']} · {device['threads']} threads · torch {device['torch_version']} · "
        f"{result['elapsed_s']:.1f} s · {device['date']}",
    )
    rows = []
    peaks = datasheet["peak_flop_per_s"] if datasheet else {}
    for dtype, m in result["matmul"].items():
        fraction = datasheet["matmul_fraction_of_peak"].get(dtype) if datasheet else None
        rows.append(
            [
                f"matmul {dtype}",
                si(m["best_flop_per_s"], "FLOP/s"),
                si(m["median_flop_per_s"], "FLOP/s"),
                _cv(m),
                "x".join(map(str, m["best_shape"])),
                si(peaks.get(dtype), "FLOP/s") if dtype in peaks else "-",
                _fraction(fraction),
            ]
        )
    labels = {
        "copy": "copy (read + write)",
        "read": "read (sum)",
        "weights_read": "weights read (decode-like)",
        "gemv": "matrix-vector",
    }
    for name, b in result["bandwidth"].items():
        if not b:
            continue
        where = f"{binary(b['buffer_bytes'])}" + (f" {b['dtype']} weights" if "dtype" in b else " buffer")
        fraction = datasheet["bandwidth_fraction_of_peak"].get(name) if datasheet else None
        rows.append(
            [
                labels.get(name, name),
                si(b["best_bytes_per_s"], "B/s"),
                si(b["median_bytes_per_s"], "B/s"),
                _cv(b),
                where,
                si(datasheet["memory_bandwidth_bytes_per_s"], "B/s") if datasheet else "-",
                _fraction(fraction),
            ]
        )
    table = Grid(
        ["", "best", "median", "cv", "at", "datasheet", "of peak"], rows, left=1, drop=("datasheet", "median", "at")
    )
    lines = [head, *_machine(device.get("record")), Text(""), table, Text("")]
    ridge, dtype = result["ridge_point_flop_per_byte"], result["ridge_dtype"]
    if ridge is not None:
        decode = result["decode_bandwidth"]
        raw = result["bandwidth"][decode]["best_bytes_per_s"]
        rate = result.get("decode_bandwidth_bytes_per_s", raw)
        carried = f", carried to memory speed by the ladder from {si(raw, 'B/s')}" if rate < 0.995 * raw else ""
        lines.append(
            Text(
                f"measured ridge {number(ridge)} FLOP/byte = {dtype} "
                f"{si(result['matmul'][dtype]['best_flop_per_s'], 'FLOP/s')} / "
                f"{labels.get(decode, decode)} {si(rate, 'B/s')} (the read bandwidth that predicts decode{carried})"
            )
        )
        others = [f"{d} {number(r)}" for d, r in result.get("ridge_points", {}).items() if d != dtype]
        if others:
            lines.append(Text(f"ridge per dtype (FLOP/byte): {', '.join(others)}"))
    lines += _ladder(result["bandwidth"].get("read", {}).get("by_working_set"), device.get("last_level_cache_bytes"))
    plan = result.get("plan") or {}
    if plan:
        lines.append(
            Text(
                f"budget {plan['budget_s']:g} s · buffers {binary(plan['buffer_bytes'])} · "
                f"{plan.get('rounds', '-')} interleaved rounds; cv = spread of the rounds (! above 10%: unstable)"
            )
        )
    lines.append(
        Text("copy counts read + write bytes (STREAM convention); every result was verified against float64 or exactly")
    )
    lines += [
        Text(""),
        Text("decode-shaped matmul (F.linear, M rows, row length k, cold weights): weight GB/s | GFLOP/s"),
        _curve_table(result["decode_matmul"]),
        *[
            Text(
                f"decode attention {d} (SDPA, one query): {si(a['flop_per_s'], 'FLOP/s')} at 4:1 GQA, "
                f"{si(a['bytes_per_s'], 'B/s')} of KV at MHA"
            )
            for d, a in result.get("decode_attention", {}).items()
        ],
        *[
            Text(
                f"prefill attention {d} (causal SDPA): "
                + " · ".join(f"{si(p['flop_per_s'], 'FLOP/s')} at {p['prompt']} tokens" for p in a["prefill"])
            )
            for d, a in result.get("decode_attention", {}).items()
            if a.get("prefill")
        ],
        Text(f"per-op overhead {si(result['op_overhead_s'], 's')} (one tiny eager op)"),
    ]
    lines += [Text(f"note: {n}") for n in result["notes"]]
    if datasheet:
        lines.append(Text(f"datasheet: {datasheet['id']} ({datasheet['name']})"))
    return Group(*lines)


def _cv(figure: dict[str, Any]) -> str:
    if "cv" not in figure:
        return "-"
    return f"{figure['cv']:.1%}" + (" !" if figure.get("unstable") else "")


def _fraction(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _curve_table(curves: dict[str, list[dict[str, Any]]]):
    """Decode-shaped matmul: weight bytes/s and FLOP/s against the number of rows M, per dtype and row length k."""
    from roofline.render.grid import Grid

    ms = sorted({p["m"] for points in curves.values() for p in points})
    rows = []
    for dtype, points in curves.items():
        series = sorted({(p.get("k", 0), p.get("n", 0)) for p in points})
        for k, n in series:
            by_m = {p["m"]: p for p in points if (p.get("k", 0), p.get("n", 0)) == (k, n)}
            cells = [
                f"{by_m[m]['bytes_per_s'] / 1e9:.3g} | {by_m[m]['flop_per_s'] / 1e9:.3g}" if m in by_m else "-"
                for m in ms
            ]
            tall = any(other_k == k and other_n < n for other_k, other_n in series)
            rows.append([f"{dtype} k={k}" + (f" n={n} (tall)" if tall else ""), *cells])
    return Grid(["M", *map(str, ms)], rows, left=1)


def collectives_table(result: dict[str, Any]):
    """All-reduce time, algorithm and bus bandwidth per message size, beside the datasheet's link figure."""
    from rich.console import Group
    from rich.text import Text

    from roofline.render.grid import Grid

    rows = [
        [
            binary(row["bytes"]),
            si(row["time_s"], "s"),
            si(row["median_time_s"], "s"),
            si(row["algbw_bytes_per_s"], "B/s"),
            si(row["busbw_bytes_per_s"], "B/s"),
        ]
        for row in result["sizes"]
    ]
    table = Grid(["size", "time", "median", "algbw", "busbw"], rows, left=0)
    link = result.get("datasheet_interconnect_bandwidth_bytes_per_s")
    versus = f" (datasheet {si(link, 'B/s')}: {result['bus_bandwidth_bytes_per_s'] / link:.0%})" if link else ""
    return Group(
        Text.assemble(
            (f"all-reduce, {result['devices']} x {result['device_name']}", "bold"),
            f" · {result['backend']} · {result['elapsed_s']:.1f} s",
        ),
        Text(""),
        table,
        Text(""),
        Text(
            f"bus bandwidth {si(result['bus_bandwidth_bytes_per_s'], 'B/s')}{versus} · latency "
            f"{si(result['latency_s'], 's')} · "
            "busbw = algbw x 2(N-1)/N (nccl-tests); the sum of known values was verified"
        ),
    )


def validate_table(result: dict[str, Any]):
    """Measured against predicted TTFT and TPOT per batch, stacked (a TTFT line and a TPOT line a batch): each
    ratio with its 90% interval and verdict, the roofline bound beside the calibrated figure, and under the table
    each batch's verdict (within only when TTFT and TPOT both are)."""
    from rich.console import Group
    from rich.text import Text

    from roofline.render.grid import Grid

    m, d, h = result["model"], result["device"], result["hardware"]
    columns = [
        "batch",
        "",
        "measured",
        "p10-p90",
        "predicted",
        "ratio [90%]",
        "verdict",
        "roofline",
        "ratio",
        "achieved",
        "MBU",
        "bound",
    ]
    rows = []
    for r in result["rows"]:
        roofline_ttft = r.get("roofline_ttft_s")
        rows.append(
            [
                str(r["batch"]),
                "TTFT",
                si(r["measured_ttft_s"], "s"),
                "-",
                si(r["predicted_ttft_s"], "s"),
                _ratio(r, "ttft"),
                r.get("ttft_verdict", "-"),
                si(roofline_ttft, "s"),
                f"{roofline_ttft / r['measured_ttft_s']:.2f}" if roofline_ttft else "-",
                "-",
                "-",
                "-",
            ]
        )
        rows.append(
            [
                "",
                "TPOT",
                si(r["measured_tpot_s"], "s"),
                f"{si(r['measured_tpot_p10_s'], 's')}-{si(r['measured_tpot_p90_s'], 's')}",
                si(r["predicted_tpot_s"], "s"),
                _ratio(r, "tpot"),
                r.get("tpot_verdict", r["verdict"]),
                si(r["roofline_tpot_s"], "s"),
                f"{r['roofline_tpot_ratio']:.2f}",
                si(r["achieved_bytes_per_s"], "B/s"),
                f"{r['mbu']:.0%}",
                r["expected_bound"],
            ]
        )
    kind = result["rows"][0]["prediction"] if result["rows"] else "roofline"
    drop = ("p10-p90", "achieved", "bound", "MBU", "ratio", "roofline")
    verdicts = " · ".join(f"batch {r['batch']} {r['verdict']}" for r in result["rows"])
    return Group(
        Text.assemble(
            (f"{m['name']} ({m['layers']} layers, {m['dtype']})", "bold"),
            f" on {d['name']} ({d['kind']}, {d['threads']} threads), engine {result.get('engine', 'eager')}",
        ),
        Text(
            f"prediction: {kind} from {h['name']} ({h['figures']} figures); ratio = predicted / measured; "
            f"{result.get('rounds', 1)} interleaved rounds; verdict at +-{result.get('tolerance', 0.15):.0%}"
        ),
        Text(""),
        Grid(columns, rows, left=2, drop=drop),
        Text(f"verdict (within only when TTFT and TPOT both are): {verdicts}"),
        *[Text(f"note: {n}", style="yellow") for n in result.get("notes", [])],
        *_drift(result),
        *_machine(d.get("record")),
    )


def _machine(record: dict[str, Any] | None) -> list:
    """Where a result was measured: the CPU, its kernel-relevant flags, its caches and torch's build."""
    from rich.text import Text

    if not record:
        return []
    caches = ", ".join(f"{name} {binary(c['bytes'])} x{c.get('instances', 1)}" for name, c in record["caches"].items())
    torch = record.get("torch")
    build = f" · torch {torch['version']} ({torch['cpu_capability']})" if torch else ""
    flags = " ".join(record["cpu_flags"]) or "none reported"
    return [Text(f"machine: {record['cpu']} · flags {flags} · {caches or 'caches not reported'}{build}")]


def _own(row: dict[str, Any]) -> str:
    """A row's own decode drift, and the curve M it was timed at when above 1 ("" for llama.cpp's shared one)."""
    if "drift" not in row:
        return ""
    at = f" at M = {row['drift_m']}" if row.get("drift_m", 1) > 1 else ""
    return f" (its runs' drift {row['drift']:.2f}{at})"


def _drift(result: dict[str, Any]) -> list:
    """How fast the profile's references (llama.cpp: its probes; torch: its decode curve's M = 1 point and the scan's
    rounds-timed LLM shape) ran this time against the profile, and the ratios corrected for them."""
    from rich.text import Text

    lines = []
    drift = (result.get("drift") or {}).get("ratio")
    if drift is not None:
        corrected = " · ".join(
            f"batch {r['batch']} TPOT {r['drift_corrected_tpot_ratio']:.2f}{_own(r)}" for r in result["rows"]
        )
        lines.append(
            Text(
                f"drift: the profile's reference ran at {drift:.2f}x its profile time this run; "
                f"TPOT ratios x drift: {corrected}"
            )
        )
    prompts = (result.get("drift") or {}).get("prompt_ratio")
    if prompts is not None:
        corrected = " · ".join(
            f"batch {r['batch']} TTFT {r['drift_corrected_ttft_ratio']:.2f}"
            + (f" (its runs' prompt drift {r['prompt_drift']:.2f})" if "prompt_drift" in r else "")
            for r in result["rows"]
        )
        lines.append(Text(f"prompt drift: prompts ran at {prompts:.2f}x; TTFT ratios x prompt drift: {corrected}"))
    return lines


def _ratio(row: dict[str, Any], what: str) -> str:
    """'0.97 [0.91, 1.03]': a ratio and its interval (older results carry no TTFT interval)."""
    if f"{what}_ratio_low" not in row:
        return f"{row[f'{what}_ratio']:.2f}"
    return f"{row[f'{what}_ratio']:.2f} [{row[f'{what}_ratio_low']:.2f}, {row[f'{what}_ratio_high']:.2f}]"


def engine_table(result: dict[str, Any]):
    """An engine's fixed costs per archetype and batch."""
    from rich.console import Group
    from rich.text import Text

    from roofline.render.grid import Grid

    rows = [
        [kind, b, si(costs["per_step_s"][b], "s"), si(costs["per_layer_s"][b], "s")]
        for kind, costs in result["archetypes"].items()
        for b in costs["per_layer_s"]
    ]
    return Group(
        Text(f"{result['engine']} engine fixed costs ({result['device']}, {result['dtype']})", style="bold"),
        Grid(["archetype", "batch", "per step", "per layer"], rows, left=1),
    )


def _or_dash(value: float | None, unit: str) -> str:
    """A figure with its SI unit, or "-" where there is none (a type whose prompts alone were measured)."""
    return "-" if value is None else si(value, unit)


def llamacpp_table(result: dict[str, Any]):
    """llama.cpp's measured costs per weight type."""
    from rich.console import Group
    from rich.text import Text

    from roofline.render.grid import Grid

    rows = [
        [
            r["type"].lower() + (" (prompts alone)" if r.get("prompts_alone") else ""),
            _or_dash(r["decode_bytes_per_s"], "B/s"),
            f"{si(r['prefill_flop_per_s'], 'FLOP/s')} (pp{r['prefill_rows']})",
            _or_dash(r["per_step_s"], "s"),
            _or_dash(r["per_layer_s"], "s"),
            "-" if r.get("deep_prompt_ratio") is None else f"{r['deep_prompt_ratio']:.2f}x",
            "on" if r["repack"] else "off",
            "-" if r.get("seconds") is None else f"{r['seconds']:.1f} s",
        ]
        for r in result["rows"]
    ]
    return Group(
        Text(
            f"llama.cpp costs here ({result['data']['build']}, {result['data'].get('threads')} threads, "
            f"{result['data'].get('seconds')} s)",
            style="bold",
        ),
        Grid(["type", "decode", "prefill", "per step", "per layer", "deep prompt", "repack", "took"], rows, left=1),
        *_server_line(result["data"].get("server")),
    )


def _server_line(server: dict[str, Any] | None) -> list:
    """llama-server's own cost a step (measure_server), where the profile measured it."""
    from rich.text import Text

    if not server:
        return []
    low, high = (f"{x * 1e3:.2f}" for x in server["spread"])
    return [
        Text(
            f"llama-server's own cost: {server['step_s'] * 1e3:.2f} ms a decode step beyond llama-bench's ({low} to "
            f"{high} over {server['rounds']} rounds: served {server['served_s'] * 1e3:.2f} ms a token, llama-bench "
            f"{server['bench_s'] * 1e3:.2f}); simulate, bench --compare and plan --rate add it to each step"
        )
    ]


def _ladder(ladder: dict[str, Any] | None, sysfs_cache: float | None) -> list:
    """The read bandwidth by working set, and the cache the curve shows beside the one the OS reports."""
    from rich.text import Text

    if not ladder or not ladder.get("points"):
        return []
    steps = " · ".join(f"{binary(p['bytes'])} {si(p['bytes_per_s'], 'B/s')}" for p in ladder["points"])
    if ladder["reached"]:
        cache = binary(ladder["cache_bytes"]) if ladder["cache_bytes"] else "none seen"
        found = (
            f"plateau {si(ladder['plateau_bytes_per_s'], 'B/s')} from {binary(ladder['knee_bytes'])}; cache from the "
            f"curve {cache}"
        )
    else:
        found = "no plateau within the buffer: its largest working sets still read faster, from a cache"
    reported = f" (the OS reports {binary(sysfs_cache)})" if sysfs_cache else ""
    return [Text(f"read by working set: {steps}"), Text(f"  {found}{reported}")]
