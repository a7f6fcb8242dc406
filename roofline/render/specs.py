"""Spec descriptions (roofline.describe dicts) -> rich tables for `hardware` and `models` list/show."""

from __future__ import annotations

from typing import Any

from roofline.render.tables import listing_table
from roofline.units import binary, number, si

SIXTEEN_BIT_FIRST = ("bf16", "fp16", "fp32")


def hardware_list(rows: list[dict[str, Any]]):
    """Devices with memory, bandwidth, their 16-bit (else fp32) peak and its ridge point."""

    def headline(r: dict[str, Any]) -> str | None:
        return next((d for d in SIXTEEN_BIT_FIRST if d in r["peak_flop_per_s"]), None)

    table = []
    for r in rows:
        dtype = headline(r)
        peak = f"{si(r['peak_flop_per_s'][dtype], 'FLOP/s')} {dtype}" if dtype else "-"
        ridge = number(r["ridge_point_flop_per_byte"][dtype]) if dtype else "-"
        table.append(
            [
                r["id"],
                r["name"],
                binary(r["memory_capacity_bytes"]),
                si(r["memory_bandwidth_bytes_per_s"], "B/s"),
                peak,
                ridge,
            ]
        )
    return listing_table(["id", "name", "memory", "bandwidth", "peak (16-bit)", "ridge FLOP/B"], table, drop=("name",))


def hardware_detail(info: dict[str, Any]):
    """One device: its figures, source and the ridge point of each dtype."""
    from rich.console import Group
    from rich.text import Text

    head = Text.assemble(
        (info["name"], "bold"),
        f" ({info['id']}, {info['figures']} figures)\n",
        f"memory {binary(info['memory_capacity_bytes'])} · bandwidth {si(info['memory_bandwidth_bytes_per_s'], 'B/s')} "
        "· "
        f"interconnect {si(info['interconnect_bandwidth_bytes_per_s'], 'B/s')}\nsource: {info['source']}\n",
    )
    rows = [
        [d, si(p, "FLOP/s"), number(info["ridge_point_flop_per_byte"][d])] for d, p in info["peak_flop_per_s"].items()
    ]
    return Group(head, listing_table(["dtype", "peak", "ridge FLOP/B"], rows, left=1))


def models_list(rows: list[dict[str, Any]]):
    """Models with derived parameter counts and KV cache per token at their dtype."""
    table = [
        [
            r["id"],
            r["name"],
            si(r["params"], ""),
            r.get("quant") or r["dtype"],
            si(r["kv_bytes_per_token"], "B"),
            str(r["max_context"] or "-"),
        ]
        for r in rows
    ]
    return listing_table(["id", "name", "params", "stored as", "KV/token", "max context"], table, drop=("name",))


def model_detail(info: dict[str, Any]):
    """One model: the derived count beside the published one, KV per token, the count by role."""
    from rich.console import Group
    from rich.text import Text

    published = info["published_params"]
    check = f" (published {published:,.0f}: {info['params'] / published - 1:+.2%})" if published else ""
    head = Text.assemble(
        (info["name"], "bold"),
        f" ({info['id']}, {info['dtype']}{', stored as ' + info['quant'] if info.get('quant') else ''})\n",
        f"params {info['params']:,.0f}{check}\n"
        f"KV cache {info['kv_bytes_per_token']:,.0f} B/token at {info.get('kv_dtype', info['dtype'])} · max context "
        f"{info['max_context'] or '-'}\n"
        f"source: {info['source']} ({info.get('source_kind', 'yaml')})\n",
    )
    parts: list[Any] = [head]
    if "weight_bytes" in info:  # read from a model file: its exact bytes
        parts.append(
            Text(
                f"weights {binary(info['weight_bytes'])} ({info['weight_bytes']:,} B) at {info['bits_per_weight']:.3f} "
                "bits "
                f"per weight, {binary(info['weight_bytes_streamed'])} streamed per decode step\n"
            )
        )
        bits = info["bits_per_weight_by_role"]
        rows = [
            [f"{role}", f"{n:,}", binary(n), f"{bits[role]:.3g}" if role in bits else "-"]
            for role, n in info["weight_bytes_by_role"].items()
        ]
        rows += [[f"dtype {d}", f"{n:,}", binary(n), ""] for d, n in info["weight_bytes_by_dtype"].items()]
        parts.append(listing_table(["bytes", "count", "", "bits/weight"], rows, left=1))
        parts.append(Text(""))
    if "params_breakdown" in info:
        rows = [[k, f"{v:,}", si(v, "")] for k, v in info["params_breakdown"].items()]
        parts.append(listing_table(["params", "count", ""], rows, left=1))
    return Group(*parts)
