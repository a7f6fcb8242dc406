"""Measured profiles: compare a `measure` result with a datasheet, and save it as a hardware YAML.

No torch here: a profile is plain data, and `roofline estimate -H profile.yaml` loads it like any spec.
"""

from __future__ import annotations

from typing import Any

from roofline.errors import RooflineError
from roofline.report import Report
from roofline.specs.catalog import catalog
from roofline.specs.hardware import hardware_to_mapping, load_hardware
from roofline.specs.records import Hardware

HEADER = """\
# Written by `roofline measure` ({date}). Figures are the best measured over a shape scan (matmul) or a
# buffer >= 4x the last-level cache (bandwidth); raw figures and the context are under `measured:`.
# memory_bandwidth is the best *read* bandwidth ({decode}: the read-only sum or the decode-shaped
# matrix-vector product), because a decode step streams weights and KV cache: it reads. The copy figure
# (read + write bytes, the STREAM convention) pays for writes and write-allocate traffic, so it is kept
# under measured.bandwidth.copy as the conventional number; decode uses it only for the transformers engine's
# copy of its KV cache each step.
"""


def match_datasheet(device_name: str) -> Hardware | None:
    """The bundled spec whose `aliases` include `device_name` (as the driver or OS reports it), if any."""
    wanted = " ".join(device_name.lower().split())
    for spec_id in catalog("hardware"):
        spec = load_hardware(spec_id)
        if any(" ".join(alias.lower().split()) == wanted for alias in spec.aliases):
            return spec
    return None


def report(result: dict[str, Any], datasheet: Hardware | None) -> Report:
    """The `measure --json` report: the result beside the datasheet (given, or matched by device name)."""
    datasheet = datasheet or match_datasheet(result["device"]["name"])
    if datasheet:
        result = {**result, "datasheet": comparison(result, datasheet)}
    rows = [
        {
            "figure": f"matmul {d}",
            "best": m["best_flop_per_s"],
            "median": m["median_flop_per_s"],
            "unit": "FLOP/s",
            "cv": m.get("cv"),
            "unstable": m.get("unstable"),
        }
        for d, m in result["matmul"].items()
    ]
    rows += [
        {
            "figure": f"bandwidth {k}",
            "best": v["best_bytes_per_s"],
            "median": v["median_bytes_per_s"],
            "unit": "B/s",
            "cv": v.get("cv"),
            "unstable": v.get("unstable"),
        }
        for k, v in result["bandwidth"].items()
        if v
    ]
    return Report("measure", result, rows)


def collectives_report(result: dict[str, Any], datasheet: Hardware | None) -> Report:
    """The `measure --collectives --json` report, with the datasheet's link figure when one is known."""
    link = datasheet.interconnect_bandwidth if datasheet else None
    return Report("collectives", {**result, "datasheet_interconnect_bandwidth_bytes_per_s": link}, result["sizes"])


def comparison(result: dict[str, Any], datasheet: Hardware) -> dict[str, Any]:
    """Each measured figure as a fraction of the datasheet's peak (None where the datasheet has no figure)."""
    matmul = {
        d: m["best_flop_per_s"] / datasheet.peak_flops[d] if d in datasheet.peak_flops else None
        for d, m in result["matmul"].items()
    }
    bandwidth = {k: v["best_bytes_per_s"] / datasheet.memory_bandwidth for k, v in result["bandwidth"].items() if v}
    return {
        "id": datasheet.id,
        "name": datasheet.name,
        "peak_flop_per_s": dict(datasheet.peak_flops),
        "memory_bandwidth_bytes_per_s": datasheet.memory_bandwidth,
        "matmul_fraction_of_peak": matmul,
        "bandwidth_fraction_of_peak": bandwidth,
    }


def hardware_spec(result: dict[str, Any]) -> dict[str, Any]:
    """The hardware YAML mapping of a measurement: measured peaks, read bandwidth, capacity, raw figures."""
    from roofline import __version__
    from roofline.measure.bench import decode_bandwidth

    device = result["device"]
    _, bandwidth = decode_bandwidth(result["bandwidth"])
    return {
        "name": f"{device['name']} (measured)",
        "source": (
            f"roofline measure {__version__} (method {result['method_version']}) on {device['date']}: "
            f"{device['kind']}, {device['threads']} threads, torch {device['torch_version']}"
        ),
        "memory_capacity": device["memory_capacity_bytes"],
        "memory_bandwidth": bandwidth,
        "peak_flops": {d: m["best_flop_per_s"] for d, m in result["matmul"].items()},
        "measured": result,
    }


def save(result: dict[str, Any], path: str) -> None:
    """Write the profile YAML to `path` atomically (a temp file in the same folder, then a rename)."""

    from roofline.measure.bench import decode_bandwidth

    header = HEADER.format(date=result["device"]["date"], decode=decode_bandwidth(result["bandwidth"])[0])
    write_spec(path, header, hardware_spec(result))


def write_spec(path: str, header: str, spec: dict[str, Any]) -> None:
    """The header comment and the spec as YAML, written atomically to `path` (the --save target)."""
    import yaml

    from roofline.files import atomic_write

    text = header + yaml.safe_dump(_plain(spec), sort_keys=False, width=120)
    with atomic_write(path, "--save") as f:
        f.write(text)


def _plain(value: Any) -> Any:
    """Floats and plain containers only, so safe_dump writes no Python tags."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    for kind in (str, int, float):  # exact types: str subclasses such as torch's version string
        if isinstance(value, kind):
            return kind(value)
    raise RooflineError(f"cannot save a value of type {type(value).__name__} in a profile")


def _links(base: Hardware, result: dict[str, Any]) -> dict[str, Any]:
    """The interconnect keys of the saved spec: a measurement that spans nodes sets the internode tier and
    keeps the intra-node figures as they were; one inside a node sets the intra-node tier."""
    links = {
        "interconnect_bandwidth": base.interconnect_bandwidth,
        "interconnect_latency": base.interconnect_latency,
        "internode_bandwidth": base.internode_bandwidth,
        "internode_latency": base.internode_latency,
        "devices_per_node": base.devices_per_node,
    }
    tier = "internode" if result.get("nodes", 1) > 1 else "interconnect"
    links[f"{tier}_bandwidth"], links[f"{tier}_latency"] = result["bus_bandwidth_bytes_per_s"], result["latency_s"]
    if result.get("nodes", 1) > 1:
        links["devices_per_node"] = result["devices"] // result["nodes"]
    return {k: v for k, v in links.items() if v is not None}


def save_collectives(result: dict[str, Any], path: str, base: Hardware) -> None:
    """Write `base` with the measured interconnect (bus bandwidth and latency) to `path`, atomically."""

    spec = {
        **hardware_to_mapping(base),
        **_links(base, result),
        "measured": {**(base.measured or {}), "collectives": result},
    }
    tier = "internode" if result.get("nodes", 1) > 1 else "interconnect"
    header = (
        f"# {tier}_bandwidth and {tier}_latency measured by `roofline measure --collectives` "
        f"({result['backend']}, {result['devices']} processes on {result.get('nodes', 1)} node(s)):\n# the best "
        "all-reduce bus "
        f"bandwidth and the shortest all-reduce time; raw figures under measured.collectives.\n"
    )
    write_spec(path, header, spec)


def engine_report(result: dict[str, Any]) -> Report:
    """`measure --engine NAME --json`: fixed costs per archetype and batch; CSV one row per (archetype, batch)."""
    rows = [
        {
            "engine": result["engine"],
            "archetype": kind,
            "batch": int(b),
            "per_step_s": costs["per_step_s"][b],
            "per_layer_s": costs["per_layer_s"][b],
        }
        for kind, costs in result["archetypes"].items()
        for b in costs["per_layer_s"]
    ]
    return Report("engine", result, rows)


def save_engine(result: dict[str, Any], path: str, base: Hardware) -> None:
    """Write the profile at `path` again with the measured fixed costs, atomically: under engines[NAME], or beside
    costs of NAME timed in another dtype under engines[NAME@DTYPE] (a run in that dtype is priced with them:
    roofline.calc.inputs.engine_costs_for)."""
    from roofline.calc.inputs import costs_timed_in, engine_costs

    spec = hardware_to_mapping(base)
    engines = dict(base.engines or {})
    name, dtype = result["engine"], result.get("dtype") or "fp32"
    first = engine_costs(base).get(name)  # a full measure's own (measured.engines) count as the first too
    key = name if first is None or costs_timed_in(first) == dtype else f"{name}@{dtype}"
    engines[key] = {k: v for k, v in result.items() if k not in ("engine", "device")}
    spec["engines"] = engines
    header = f"# engines.{key}: fixed costs per decode step and per layer measured by `roofline measure --engine`.\n"
    write_spec(path, header, spec)
