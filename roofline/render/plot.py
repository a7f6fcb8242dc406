"""Plots: the classic log-log roofline, throughput / TPOT against batch, and plan's cost-TPOT frontier
(matplotlib, imported lazily).

The coordinates come from pure functions (`roofline_data`, `sweep_data`, `plan_data`) tested without matplotlib;
`draw_*` only turn them into a PNG or SVG, written atomically.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from roofline.calc.estimate import Estimate
from roofline.calc.plan import Plan
from roofline.calc.sweep import Sweep
from roofline.errors import RooflineError, UsageError, shown
from roofline.specs.records import Hardware

FORMATS = (".png", ".svg")


def roofline_data(hardware: Hardware | list[Hardware], estimates: list[Estimate]) -> dict[str, Any]:
    """Roofs and points in (FLOP/byte, FLOP/s): per device, one compute ceiling per dtype, the bandwidth slope, ridges.

    A measured profile's figures are drawn dashed ("measured"); the datasheet it was compared with, if any,
    solid. Each estimate adds its prefill and mean decode step at (intensity, FLOPs / time), in the series of its
    model on its device (several models or devices overlay, each series in the legend).
    """
    devices = hardware if isinstance(hardware, list) else [hardware]
    roofs = []
    for h in devices:
        sheet = (h.measured or {}).get("datasheet")
        if sheet:
            roofs.append(_roof(sheet["peak_flop_per_s"], sheet["memory_bandwidth_bytes_per_s"], "datasheet", h))
        roofs.append(_roof(h.peak_flops, h.memory_bandwidth, h.origin, h))
    several = len(devices) > 1
    points = []
    for e in estimates:
        i = e.inputs
        series = f"{e.model.id} on {e.hardware.id}" if several else e.model.id
        for phase, step in (("prefill", e.prefill), ("decode", e.decode)):
            points.append(
                {
                    "label": f"{phase} b={i.batch} p={i.prompt_tokens}",
                    "series": series,
                    "phase": phase,
                    "intensity_flop_per_byte": step.intensity_flop_per_byte,
                    "flop_per_s": step.flops / step.time_s,
                    "bound": step.bound,
                }
            )
    intensities = [p["intensity_flop_per_byte"] for p in points] + [
        c["ridge_flop_per_byte"] for r in roofs for c in r["ceilings"]
    ]
    low, high = min([*intensities, 1.0]) / 4, max(intensities) * 4
    models = list(dict.fromkeys(e.model.name for e in estimates))
    title = (", ".join(models) + " on " if models else "") + ", ".join(h.name for h in devices)
    return {
        "title": title,
        "x_range": [low, high],
        "roofs": roofs,
        "points": points,
        "series": list(dict.fromkeys(p["series"] for p in points)),
    }


def _roof(peaks: dict[str, float], bandwidth: float, style: str, hardware: Hardware) -> dict[str, Any]:
    """One compute ceiling per distinct peak (dtypes sharing a peak, like bf16 and fp16, share a line)."""
    by_peak: dict[float, list[str]] = {}
    for dtype, peak in peaks.items():
        by_peak.setdefault(peak, []).append(dtype)
    ceilings = [
        {"dtypes": d, "flop_per_s": p, "ridge_flop_per_byte": p / bandwidth} for p, d in sorted(by_peak.items())
    ]
    return {"style": style, "device": hardware.id, "bandwidth_bytes_per_s": bandwidth, "ceilings": ceilings}


def roof_line(bandwidth: float, peak: float, x_range: list[float], samples: int = 64) -> list[tuple[float, float]]:
    """Points of y = min(peak, bandwidth x) on a log grid over x_range, with the ridge itself included."""
    low, high = (math.log10(x) for x in x_range)
    xs = sorted({10 ** (low + (high - low) * k / (samples - 1)) for k in range(samples)} | {peak / bandwidth})
    return [(x, min(peak, bandwidth * x)) for x in xs if x_range[0] <= x <= x_range[1]]


def sweep_data(sweeps: Sweep | list[Sweep]) -> dict[str, Any]:
    """Throughput and TPOT against batch for each (prompt, output) group of each sweep (one per model x device),
    with the SLO and the batch marks."""
    sweeps = sweeps if isinstance(sweeps, list) else [sweeps]
    several = len(sweeps) > 1
    series = []
    for s in sweeps:
        for g in s.groups:
            rows = [r for r in s.rows if (r.prompt_tokens, r.output_tokens) == (g.prompt_tokens, g.output_tokens)]
            where = f"{s.inputs['model']} on {s.inputs['hardware']}, " if several else ""
            series.append(
                {
                    "label": f"{where}prompt {g.prompt_tokens}, output {g.output_tokens}",
                    "batch": [r.batch for r in rows],
                    "tokens_per_s": [r.tokens_per_s for r in rows],
                    "goodput_tokens_per_s": [r.goodput_tokens_per_s for r in rows],
                    "tpot_s": [r.tpot_s for r in rows],
                    "critical_batch": g.critical_batch,
                    "max_batch": g.max_batch,
                    "best_batch": g.best_batch,
                }
            )
    models = ", ".join(dict.fromkeys(s.inputs["model"] for s in sweeps))
    devices = ", ".join(dict.fromkeys(s.inputs["hardware"] for s in sweeps))
    return {
        "title": f"{models} on {devices}",
        "tpot_slo_s": sweeps[0].inputs["tpot_slo_s"],
        "series": series,
        "marks": not several,
    }


def plan_data(p: Plan) -> dict[str, Any]:
    """Each option that meets the SLOs at (TPOT, cost): $ per million output tokens when every option is priced,
    else devices (plan's own ranking key), with the Pareto frontier: the options no other beats on both."""
    good = [o for o in p.options if o.meets_slo]
    priced = p.inputs["ranked_by"] == "cost"
    points = [
        {
            "label": f"{o.hardware} tp{o.tp}"
            + (f" pp{o.pp}" if o.pp > 1 else "")
            + (f" {o.disagg}" if o.disagg else ""),
            "tpot_s": o.tpot_s,
            "y": o.cost_per_million_tokens if priced else o.devices,
        }
        for o in good
    ]
    frontier, lowest = [], math.inf
    for q in sorted(points, key=lambda q: (q["tpot_s"], q["y"])):
        if q["y"] < lowest:  # cheaper than every faster option
            frontier.append(q["label"])
            lowest = q["y"]
    inputs = p.inputs
    slo = inputs["tpot_slo_s"]
    return {
        "title": f"{inputs['model']}: prompt {inputs['prompt_tokens']}, output {inputs['output_tokens']}",
        "y_label": "$ per million output tokens" if priced else "devices",
        "tpot_slo_s": slo,
        "points": points,
        "frontier": frontier,
    }


def pyplot(command: str = "roofline plot"):
    try:
        import matplotlib
    except ImportError:
        raise RooflineError(f"{command} needs matplotlib: pip install 'roofline[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def draw_roofline(data: dict[str, Any], path: str) -> None:
    """Write the log-log roofline of `roofline_data` to `path` (.png or .svg)."""
    check_path(path)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    from roofline.units import number, si

    devices = list(dict.fromkeys(r["device"] for r in data["roofs"]))
    for roof in data["roofs"]:
        dashed = roof["style"] == "measured"
        bandwidth = roof["bandwidth_bytes_per_s"]
        where = f"{roof['device']} " if len(devices) > 1 else ""
        for k, c in enumerate(roof["ceilings"]):
            xy = roof_line(bandwidth, c["flop_per_s"], data["x_range"])
            color = colors[(devices.index(roof["device"]) if len(devices) > 1 else k) % len(colors)]
            label = (
                f"{where}{', '.join(c['dtypes'])} {si(c['flop_per_s'], 'FLOP/s')} ({roof['style']}), ridge "
                f"{number(c['ridge_flop_per_byte'])}"
            )
            if len(devices) > 1:  # one legend entry a device: its bandwidth and every ceiling's dtypes
                label = (
                    (
                        f"{roof['device']} ({roof['style']}): {si(bandwidth, 'B/s')}, ceilings "
                        f"{'; '.join(', '.join(x['dtypes']) for x in roof['ceilings'])}"
                    )
                    if k == len(roof["ceilings"]) - 1
                    else None
                )
            ax.plot(
                *zip(*xy),
                linestyle="--" if dashed else "-",
                color=color,
                linewidth=1.5 if len(devices) == 1 else 1.0,
                label=label,
            )
            ax.plot([c["ridge_flop_per_byte"]], [c["flop_per_s"]], marker="o", color=color, markersize=4)
        x0 = data["x_range"][0] * 1.3
        ax.annotate(
            f"{where}{si(bandwidth, 'B/s')} ({roof['style']})",
            (x0, bandwidth * x0),
            textcoords="offset points",
            xytext=(-6, 14),
            rotation=28,
            fontsize=7,
        )
    series = data.get("series") or []
    marks = ["black", *colors[::-1]]
    seen = {"prefill": 0, "decode": 0}
    legend_done = set()
    for p in data["points"]:
        marker = "s" if p["phase"] == "prefill" else "^"
        color = marks[series.index(p["series"]) % len(marks)] if p.get("series") in series else "black"
        name = p.get("series") if len(series) > 1 and p.get("series") not in legend_done else None
        legend_done.add(p.get("series"))
        ax.plot(
            [p["intensity_flop_per_byte"]],
            [p["flop_per_s"]],
            marker=marker,
            color=color,
            markersize=6,
            linestyle="none",
            label=f"{name} (square prefill, triangle decode)" if name else None,
        )
        if series and p.get("series") != series[0]:
            continue  # overlaid series: the first one's labels say which batch each point is
        ax.annotate(
            p["label"],
            (p["intensity_flop_per_byte"], p["flop_per_s"]),
            textcoords="offset points",
            xytext=(5, -12 if seen[p["phase"]] % 2 else 6),
            fontsize=7,
        )  # alternate so neighbours don't collide
        seen[p["phase"]] += 1
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.set_title(f"roofline: {data['title']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    _save(fig, plt, path)


def draw_sweep(data: dict[str, Any], path: str) -> None:
    """Write throughput and TPOT against batch (log2 batch axis) with the SLO line and batch marks."""
    check_path(path)
    plt = pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6.5), dpi=100)
    for s in data["series"]:
        top.plot(s["batch"], s["tokens_per_s"], marker="o", markersize=3, label=f"tokens/s, {s['label']}")
        bottom.plot(s["batch"], [t * 1e3 for t in s["tpot_s"]], marker="o", markersize=3, label=s["label"])
        for key, style, name in (
            ("critical_batch", ":", "critical batch"),
            ("max_batch", "--", "memory limit"),
            ("best_batch", "-.", "best goodput"),
        ):
            if s[key] and data.get("marks", True):  # one series' marks; overlaid series would bury the curves in lines
                for ax in (top, bottom):
                    ax.axvline(s[key], linestyle=style, color="gray", linewidth=1)
                top.annotate(
                    f"{name} {s[key]}", (s[key], 0.02), xycoords=("data", "axes fraction"), rotation=90, fontsize=7
                )
    if data["tpot_slo_s"]:
        bottom.axhline(
            data["tpot_slo_s"] * 1e3, color="red", linewidth=1, label=f"TPOT SLO {data['tpot_slo_s'] * 1e3:g} ms"
        )
    top.set_xscale("log", base=2)
    top.set_ylabel("decode tokens/s (all sequences)")
    bottom.set_ylabel("TPOT (ms)")
    bottom.set_xlabel("batch (sequences)")
    top.set_title(f"sweep: {data['title']}")
    for ax in (top, bottom):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    _save(fig, plt, path)


def draw_plan(data: dict[str, Any], path: str) -> None:
    """Write plan's options as cost (or devices) against TPOT, the frontier joined, the SLO marked."""
    check_path(path, "--plot")
    if not data["points"]:
        raise RooflineError("--plot: no option meets the SLOs, so there is nothing to draw")
    plt = pyplot("roofline plan --plot")
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=100)
    by_label = {q["label"]: q for q in data["points"]}
    ax.plot(
        [q["tpot_s"] * 1e3 for q in data["points"]],
        [q["y"] for q in data["points"]],
        "o",
        color="gray",
        markersize=4,
        label="options",
    )
    front = [by_label[name] for name in data["frontier"]]
    ax.plot(
        [q["tpot_s"] * 1e3 for q in front], [q["y"] for q in front], "o-", color="black", markersize=5, label="frontier"
    )
    for q in front:
        ax.annotate(q["label"], (q["tpot_s"] * 1e3, q["y"]), textcoords="offset points", xytext=(5, 4), fontsize=7)
    if data["tpot_slo_s"]:
        ax.axvline(
            data["tpot_slo_s"] * 1e3, color="red", linewidth=1, label=f"TPOT SLO {data['tpot_slo_s'] * 1e3:g} ms"
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")  # 2, 3, 0.4 rather than 2x10^0 on a log axis
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(plain)
    ax.set_xlabel("TPOT (ms)")
    ax.set_ylabel(data["y_label"])
    ax.set_title(f"plan: {data['title']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, plt, path, "--plot")


def check_path(path: str, flag: str = "--out") -> None:
    """Fail before drawing: a .png or .svg name in an existing folder."""
    from roofline.files import checked_target

    if Path(path).suffix.lower() not in FORMATS:
        raise UsageError(f"{flag}: expected a .png or .svg file name, got {shown(path)}")
    checked_target(path, flag)


def _save(fig, plt, path: str, flag: str = "--out") -> None:
    from roofline.files import atomic_write

    try:
        with atomic_write(path, flag, binary=True) as f:
            fig.tight_layout()
            fig.savefig(f, format=Path(path).suffix.lower()[1:])
    finally:
        plt.close(fig)


def knee_data(r: Any) -> dict[str, Any]:
    """A rate sweep's latency-throughput curve: p50 and p99 TTFT and TPOT against output tokens/s, with the rates."""
    points = [
        {
            "rate_per_s": p.inputs["rate_per_s"],
            "tokens_per_s": p.output_tokens_per_s,
            "ttft_p50_s": p.ttft_s["p50"],
            "ttft_p99_s": p.ttft_s["p99"],
            "tpot_p50_s": p.tpot_s["p50"],
            "tpot_p99_s": p.tpot_s["p99"],
            "saturated": p.saturated,
        }
        for p in r.points
    ]
    i = r.inputs
    return {
        "title": f"{i['model']} on {i['hardware']}: prompt {i['prompt_tokens']}, output {i['output_tokens']}",
        "capacity_per_s": r.points[0].max_stable_rate_per_s,
        "ttft_slo_s": i.get("ttft_slo_s"),
        "tpot_slo_s": i.get("tpot_slo_s"),
        "points": points,
    }


def draw_knee(data: dict[str, Any], path: str) -> None:
    """Write the knee chart: TTFT and TPOT percentiles against the arrival rate, the capacity and SLOs marked."""
    check_path(path, "--plot")
    plt = pyplot("roofline simulate --plot")
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 6.5), dpi=100)
    rates = [p["rate_per_s"] for p in data["points"]]
    for ax, key, slo, name in ((top, "ttft", data["ttft_slo_s"], "TTFT"), (bottom, "tpot", data["tpot_slo_s"], "TPOT")):
        ax.plot(rates, [p[f"{key}_p50_s"] * 1e3 for p in data["points"]], "o-", markersize=3, label=f"{name} p50")
        ax.plot(rates, [p[f"{key}_p99_s"] * 1e3 for p in data["points"]], "s--", markersize=3, label=f"{name} p99")
        if slo:
            ax.axhline(slo * 1e3, color="red", linewidth=1, label=f"{name} SLO {slo * 1e3:g} ms")
        if data["capacity_per_s"]:
            ax.axvline(data["capacity_per_s"], color="gray", linestyle=":", linewidth=1, label="capacity")
        ax.set_yscale("log")
        ax.set_ylabel(f"{name} (ms)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    bottom.set_xlabel("arrival rate (requests/s)")
    top.set_title(f"under load: {data['title']}")
    _save(fig, plt, path, "--plot")
