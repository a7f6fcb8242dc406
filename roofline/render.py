"""Results -> text. JSON needs only the standard library; rich is imported only for tables."""

from __future__ import annotations

import json
from typing import Any

from roofline.calc import Estimate
from roofline.units import binary, number, si


def to_json(data: Any) -> str:
    """Stable, indented JSON of a result's to_dict() (plain SI numbers, no unit strings)."""
    return json.dumps(data, indent=2, allow_nan=False)


def estimate_table(e: Estimate):
    """A rich renderable: the prefill/decode table plus verdict lines, one screen."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    i, p, d = e.inputs, e.prefill, e.decode
    head = Text.assemble(
        (f"{e.model.name}", "bold"), " on ", (e.hardware.name, "bold"), f"  ({e.hardware.figures} figures)\n",
        f"batch {i.batch}, prompt {i.prompt_tokens}, output {i.output_tokens} tokens; "
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
        ("time", si(p.time_s, "s"), si(d.time_s, "s")),
        ("bound", p.bound, d.bound),
    ):
        table.add_row(label, a, b)
    return Group(head, Text(""), table, Text(""), *[Text(line) for line in summary_lines(e)])


def _bits(e: Estimate) -> str:
    from roofline.specs import DTYPE_BYTES

    bits = e.inputs.bits_per_weight
    return "" if bits == 8 * DTYPE_BYTES[e.inputs.weight_dtype] else f" at {bits:g} bits/weight"


def summary_lines(e: Estimate) -> list[str]:
    """The verdict lines under the table, each under 80 columns where the numbers allow."""
    d, i = e.decode, e.inputs
    fits = "fits" if e.fits else f"does NOT fit: {e.fits_reason}"
    limit = "unbounded (no KV cache)" if e.max_batch is None else str(e.max_batch)
    critical = str(e.critical_batch) if e.critical_batch is not None else "none"
    return [
        f"TTFT {si(e.ttft_s, 's')} · TPOT {si(e.tpot_s, 's')} · request {si(e.request_latency_s, 's')}",
        f"throughput {number(d.tokens_per_s)} tokens/s ({number(d.tokens_per_s_per_sequence)} per sequence) · "
        f"MBU {_percent(d.mbu)} · MFU {_percent(d.mfu)}",
        f"weights {si(e.weight_bytes, 'B')} resident, {si(e.weight_bytes_streamed, 'B')} streamed per decode step",
        f"KV cache {si(e.kv_bytes_per_token, 'B')}/token, {si(e.kv_bytes_per_sequence, 'B')}/sequence "
        f"at {i.prompt_tokens + i.output_tokens} tokens",
        f"KV budget {si(e.kv_budget_bytes, 'B')} = {i.memory_fraction:g} x {binary(e.hardware.memory_capacity_bytes)} "
        f"- weights · max batch {limit} · {fits}",
        f"ridge {number(e.ridge_point_flop_per_byte)} FLOP/B ({i.compute_dtype}) · critical batch {critical}: "
        f"{e.critical_batch_reason}",
        _verdict("prefill", e.prefill.bound, e.prefill.intensity_flop_per_byte, e.ridge_point_flop_per_byte),
        _verdict("decode", d.bound, d.intensity_flop_per_byte, e.ridge_point_flop_per_byte),
        *[f"note: {n}" for n in e.notes],
    ]


def _percent(x: float) -> str:
    return f"{x * 100:.3g}%" if x >= 0.01 else f"{x * 100:.2g}%"


def _verdict(phase: str, bound: str, intensity: float, ridge: float) -> str:
    return f"{phase} is {bound}-bound: {si(intensity, 'FLOP/byte')} vs ridge {si(ridge, 'FLOP/byte')}"


def listing_table(columns: list[str], rows: list[list[str]], left: int = 2):
    """A plain rich table: the first `left` columns left-aligned (names), the rest right-aligned (numbers)."""
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for k, name in enumerate(columns):
        table.add_column(name, justify="left" if k < left else "right")
    for row in rows:
        table.add_row(*row)
    return table


def measure_table(result: dict[str, Any], datasheet: dict[str, Any] | None):
    """A rich renderable of a `measure` result, beside the datasheet's peaks when one is known."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    device = result["device"]
    head = Text.assemble(
        (device["name"], "bold"),
        f" · {device['kind']} · {device['threads']} threads · torch {device['torch_version']} · "
        f"{result['elapsed_s']:.1f} s · {device['date']}",
    )
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name, justify in (("", "left"), ("best", "right"), ("median", "right"), ("at", "left"), ("datasheet", "right"), ("of peak", "right")):
        table.add_column(name, justify=justify)
    peaks = datasheet["peak_flop_per_s"] if datasheet else {}
    for dtype, m in result["matmul"].items():
        fraction = datasheet["matmul_fraction_of_peak"].get(dtype) if datasheet else None
        table.add_row(
            f"matmul {dtype}", si(m["best_flop_per_s"], "FLOP/s"), si(m["median_flop_per_s"], "FLOP/s"),
            "x".join(map(str, m["best_shape"])), si(peaks.get(dtype), "FLOP/s") if dtype in peaks else "-", _fraction(fraction),
        )
    labels = {"copy": "copy (read + write)", "read": "read (sum)", "gemv": "matrix-vector"}
    for name, b in result["bandwidth"].items():
        if not b:
            continue
        where = f"{binary(b['buffer_bytes'])}" + (f" {b['dtype']} weight" if "dtype" in b else " buffer")
        fraction = datasheet["bandwidth_fraction_of_peak"].get(name) if datasheet else None
        table.add_row(
            labels[name], si(b["best_bytes_per_s"], "B/s"), si(b["median_bytes_per_s"], "B/s"), where,
            si(datasheet["memory_bandwidth_bytes_per_s"], "B/s") if datasheet else "-", _fraction(fraction),
        )
    lines = [head, Text(""), table, Text("")]
    ridge, dtype = result["ridge_point_flop_per_byte"], result["ridge_dtype"]
    if ridge is not None:
        decode = result["decode_bandwidth"]
        lines.append(Text(
            f"measured ridge {number(ridge)} FLOP/byte = {dtype} {si(result['matmul'][dtype]['best_flop_per_s'], 'FLOP/s')} / "
            f"{labels[decode]} {si(result['bandwidth'][decode]['best_bytes_per_s'], 'B/s')} (the read bandwidth that predicts decode)"
        ))
    lines.append(Text("copy counts read + write bytes (STREAM convention); every result was verified against float64 or exactly"))
    lines += [Text(""), Text("decode-shaped matmul (F.linear with M rows): weight GB/s | GFLOP/s"), _curve_table(result["decode_matmul"])]
    lines += [Text(f"note: {n}") for n in result["notes"]]
    if datasheet:
        lines.append(Text(f"datasheet: {datasheet['id']} ({datasheet['name']})"))
    return Group(*lines)


def _fraction(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _curve_table(curves: dict[str, list[dict[str, Any]]]):
    """Decode-shaped matmul: weight bytes/s and FLOP/s against the number of rows M."""
    from rich.table import Table

    ms = sorted({p["m"] for points in curves.values() for p in points})
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("M")
    for m in ms:
        table.add_column(str(m), justify="right")
    for dtype, points in curves.items():
        by_m = {p["m"]: p for p in points}
        table.add_row(dtype, *[f"{by_m[m]['bytes_per_s'] / 1e9:.3g} | {by_m[m]['flop_per_s'] / 1e9:.3g}" if m in by_m else "-" for m in ms])
    return table
