"""Results -> text. JSON and CSV need only the standard library; rich is imported only for tables."""

import json
from typing import Any


def to_json(data: Any, depth: int = 2) -> str:
    """Stable JSON of a result's to_dict() (plain SI numbers, no unit strings; NaN and inf are bugs), indented for
    its first `depth` levels and compact below: a sweep's rows one per line. (json.dumps with indent= runs the
    pure-Python encoder, 1 s for a 10,000-row sweep; the compact C encoder takes 0.1 s.)"""
    return _json(data, depth, "")


_COMPACT = json.JSONEncoder(allow_nan=False)  # built once: json.dumps(allow_nan=False) builds one per call


def _json(value: Any, depth: int, pad: str) -> str:
    nested = isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value))
    if depth == 0 or not nested or not value:
        return _COMPACT.encode(value)
    inner = pad + "  "
    if isinstance(value, dict):
        items = [f"{inner}{_COMPACT.encode(str(k))}: {_json(v, depth - 1, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    return "[\n" + ",\n".join(f"{inner}{_json(v, depth - 1, inner)}" for v in value) + f"\n{pad}]"


def to_csv(rows: list[Any]) -> str:
    """CSV of records (NamedTuples or dicts, nested ones flattened to dotted names): one header row, whose
    names carry the units (_s, _bytes, _per_s); lists are joined with '; '."""
    import csv
    import io

    flat = [_flat(r._asdict() if hasattr(r, "_asdict") else r) for r in rows]
    header = list(dict.fromkeys(k for r in flat for k in r))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for r in flat:
        writer.writerow([_cell(r.get(k)) for k in header])
    return buffer.getvalue()


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if hasattr(value, "_asdict"):
        value = value._asdict()
    if not isinstance(value, dict):
        return {prefix.rstrip("."): value}
    out: dict[str, Any] = {}
    for k, v in value.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) or hasattr(v, "_asdict") else {f"{prefix}{k}": v})
    return out


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "; ".join(str(_cell(x)) for x in v)
    return v


def table(result: Any) -> Any:
    """The rich renderable for a result: chosen by its kind (a Report) or its type (Estimate, Sweep, Comparison)."""
    kind = getattr(result, "kind", None) if type(result).__name__ == "Report" else type(result).__name__
    if kind in ("Simulation", "RateSweep", "Bench", "BenchComparison"):
        from roofline.render import simulate

        if kind == "BenchComparison":
            return simulate.bench_comparison_table(result)
        if kind == "Bench":
            return simulate.bench_table(result)
        return simulate.simulation_table(result) if kind == "Simulation" else simulate.rate_sweep_table(result)
    if kind in ("Estimate", "Sweep", "Comparison", "Fit", "Plan"):
        from roofline.render import tables

        if kind == "Plan":
            return tables.plan_table(result)
        if kind == "Fit":
            return tables.fit_table(result)
        if kind == "Comparison":
            return tables.compare_table(result)
        return tables.estimate_table(result) if kind == "Estimate" else tables.sweep_table(result)
    if kind in ("hardware_list", "hardware_detail", "models_list", "model_detail"):
        from roofline.render import specs

        return getattr(specs, kind)(result.data)
    from roofline.render import measure

    if kind == "llamacpp-profile":
        return measure.llamacpp_table({"rows": result.rows, "data": result.data})
    tables = {
        "measure": measure.measure_table,
        "collectives": measure.collectives_table,
        "validate": measure.validate_table,
        "engine": measure.engine_table,
    }
    return tables[kind](result.data)
