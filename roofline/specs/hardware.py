"""Hardware specs: validate a device's keys (from a YAML file or a fresh measurement) into a Hardware."""

import os
from collections.abc import Callable
from typing import Any

from roofline import units
from roofline.errors import UsageError
from roofline.specs.catalog import resolve
from roofline.specs.fields import Fields, number_between, positive, positive_int, read_yaml, text
from roofline.specs.records import COMPUTE_DTYPES, Hardware

HARDWARE_KEYS = [
    "name",
    "source",
    "memory_capacity",
    "memory_bandwidth",
    "peak_flops",
    "interconnect_bandwidth",
    "interconnect_latency",
    "internode_bandwidth",
    "internode_latency",
    "devices_per_node",
    "engines",
    "power",
    "price_per_hour",
    "measured",
    "aliases",
]


def load_hardware(ref: str) -> Hardware:
    """Load a hardware spec by bundled id or YAML path."""
    ref = os.fspath(ref) if isinstance(ref, os.PathLike) else ref
    if not isinstance(ref, str) or not ref.strip():
        raise UsageError(f"expected a hardware id or path such as 'h100-sxm', got {ref!r}", "hardware")
    path = resolve(ref, "hardware")
    return hardware_from_mapping(read_yaml(path), str(path), path.stem)


def hardware_from_mapping(data: dict[str, Any], where: str, spec_id: str) -> Hardware:
    """Validate hardware keys (from a YAML file or a fresh measurement) into a Hardware."""
    f = Fields(data, where)
    name = f.take("name", text, "a non-empty string")
    source = f.take("source", text, "a datasheet URL or a description of the measurement")
    capacity = f.take("memory_capacity", positive("bytes"), "a size such as '80 GiB'")
    bandwidth = f.take("memory_bandwidth", positive("bytes/s"), "a rate such as '3.35 TB/s'")
    peaks = f.take("peak_flops", _peak_table(where), "a mapping of dtype to FLOP/s")
    link = f.take("interconnect_bandwidth", positive("bytes/s"), "a rate such as '450 GB/s'", None)
    measured = f.take("measured", _mapping, "a mapping of raw measured figures", None)
    aliases = f.take("aliases", _strings, "a list of device names", ())
    latency = f.take("interconnect_latency", positive("seconds"), "a duration such as '10us'", None)
    internode = f.take("internode_bandwidth", positive("bytes/s"), "a rate per device such as '50 GB/s'", None)
    internode_latency = f.take("internode_latency", positive("seconds"), "a duration such as '20us'", None)
    per_node = f.take("devices_per_node", positive_int, "a positive integer such as 8", None)
    engines = f.take("engines", _engines, "a mapping of engine name to its measured fixed costs", None)
    power = f.take("power", _watts, "board power in watts, e.g. 700 or '700 W'", None)
    price = f.take("price_per_hour", number_between(1e-6, 1e4), "USD per device-hour, e.g. 2.5", None)
    f.done(HARDWARE_KEYS)
    return Hardware(
        spec_id,
        name,
        source,
        capacity,
        bandwidth,
        peaks,
        link,
        measured,
        aliases,
        latency,
        internode,
        internode_latency,
        per_node,
        engines,
        power,
        price,
    )


def hardware_to_mapping(h: Hardware) -> dict[str, Any]:
    """A Hardware back as the YAML mapping hardware_from_mapping reads: every key it holds, none it lacks, so a
    device round-trips (the one writer of hardware specs)."""
    spec = {
        "name": h.name,
        "source": h.source,
        "memory_capacity": h.memory_capacity,
        "memory_bandwidth": h.memory_bandwidth,
        "peak_flops": dict(h.peak_flops),
        "interconnect_bandwidth": h.interconnect_bandwidth,
        "interconnect_latency": h.interconnect_latency,
        "internode_bandwidth": h.internode_bandwidth,
        "internode_latency": h.internode_latency,
        "devices_per_node": h.devices_per_node,
        "engines": h.engines,
        "power": h.power,
        "price_per_hour": h.price_per_hour,
        "measured": h.measured,
        "aliases": list(h.aliases) or None,
    }
    return {k: v for k, v in spec.items() if v is not None}


def _engines(value: Any) -> dict[str, Any]:
    """Engine name -> {archetypes: {name: {per_step_s, per_layer_s: {batch: seconds}}},
    conv1d_slowdown: {"KxN": {rows: ratio}} (transformers)}, as `measure` writes it."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise TypeError
    for name, engine in value.items():
        if name == "llamacpp":
            _llamacpp(engine)
            continue
        archetypes = engine.get("archetypes") if isinstance(engine, dict) else None
        if not isinstance(archetypes, dict) or not archetypes:
            raise ValueError(f"engine {name!r}: expected 'archetypes' with measured costs")
        for kind, costs in archetypes.items():
            for key in ("per_step_s", "per_layer_s"):
                table = costs.get(key) if isinstance(costs, dict) else None
                if (
                    not isinstance(table, dict)
                    or not table
                    or not all(
                        isinstance(s, (int, float)) and not isinstance(s, bool) and 0 <= s < 10 for s in table.values()
                    )
                ):
                    raise ValueError(
                        f"engine {name!r} archetype {kind!r}: expected {key} as batch -> seconds from 0 to 10"
                    )
                try:
                    [int(b) for b in table]
                except (TypeError, ValueError):
                    raise ValueError(f"engine {name!r} archetype {kind!r}: {key} keys must be batch sizes") from None
        slowdown = engine.get("conv1d_slowdown")
        if slowdown is not None and not _conv1d(slowdown):
            raise ValueError(
                f"engine {name!r}: expected conv1d_slowdown as a weight's 'KxN' -> rows -> a ratio above 0, got"
                f" {str(slowdown)[:60]}"
            )
    return value


def _conv1d(value: Any) -> bool:
    """Whether `value` is a conv1d_slowdown: "KxN" -> rows -> ratio, or rows -> ratio (profiles that timed one
    shape)."""
    if not isinstance(value, dict) or not value:
        return False
    if all(isinstance(v, dict) for v in value.values()):
        return all(_weight_shape(s) and _conv1d_rows(t) for s, t in value.items())
    return _conv1d_rows(value)


def _weight_shape(key: Any) -> bool:
    """Whether `key` is a weight's "KxN" (in x out, both positive)."""
    parts = str(key).split("x")
    return len(parts) == 2 and all(p.isdecimal() and p.isascii() and int(p) > 0 for p in parts)


def _conv1d_rows(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and bool(value)
        and all(str(m).isdecimal() and str(m).isascii() and int(m) > 0 for m in value)
        and all(isinstance(r, (int, float)) and not isinstance(r, bool) and 0 < r < 100 for r in value.values())
    )


# engines.llamacpp: the profile's shortest prompt (llama-bench), the rows from which roofline.calc.llamacpp prices
# prompts at the depth of a model's weights and a type's prompts run alone apply
PROMPT_ROWS = 128


def _llamacpp(engine: Any) -> None:
    """engines.llamacpp as `measure --engine llamacpp` writes it: widths [narrow, wide] and, per ggml type,
    per_step_s, per_layer_s, seconds_per_byte by rows and optionally prompt_depth and at_width; optionally attention,
    server (llama-server's own step_s beyond llama-bench's) and prompt_types (a skipped type's prompts alone:
    seconds_per_byte by prompt tokens) (roofline.calc.llamacpp)."""
    types = engine.get("types") if isinstance(engine, dict) else None
    widths = engine.get("widths") if isinstance(engine, dict) else None
    if not isinstance(types, dict) or not types or not (isinstance(widths, list) and len(widths) == 2):
        raise ValueError("engine 'llamacpp': expected 'widths' [narrow, wide] and 'types' with measured costs")
    number = lambda v, top: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < top  # noqa: E731
    attention = engine.get("attention")
    if attention is not None:
        if not isinstance(attention, dict):
            raise ValueError("engine 'llamacpp': expected attention as a mapping (seconds_per_head_cell, ...)")
        seconds = (lambda v: number(v, 1e-3) and v > 0, "seconds, above 0 and under 1e-3")
        count = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0, "an integer above 0")
        required = {"seconds_per_head_cell": seconds, "head_dim": count, "threads": count}
        for key, (ok, what) in {**required, "split_seconds_per_head_cell": seconds}.items():
            if (key in required or key in attention) and not ok(attention.get(key)):
                raise ValueError(f"engine 'llamacpp' attention: {key} must be {what} (got {attention.get(key)!r})")
    server = engine.get("server")
    if server is not None and not (isinstance(server, dict) and number(server.get("step_s"), 1)):
        got = server.get("step_s") if isinstance(server, dict) else server
        raise ValueError(f"engine 'llamacpp' server: step_s must be seconds, 0 or more and under 1 (got {got!r})")
    for kind, costs in types.items():
        table = costs.get("seconds_per_byte") if isinstance(costs, dict) else None
        fixed_ok = isinstance(costs, dict) and all(number(costs.get(k), 10) for k in ("per_step_s", "per_layer_s"))
        if not fixed_ok or not isinstance(table, dict) or not table or not all(number(v, 1) for v in table.values()):
            raise ValueError(
                f"engine 'llamacpp' type {kind!r}: expected per_step_s, per_layer_s [s] and seconds_per_byte as "
                "rows -> seconds"
            )
        _prompt_depth(costs.get("prompt_depth"), f"type {kind!r}")
        own = costs.get("at_width")
        if own is not None and not (
            isinstance(own, dict)
            and all(str(w).isdigit() and int(w) > 0 for w in own)
            and all(
                isinstance(e, dict)
                and isinstance(e.get("seconds_per_byte"), dict)
                and e["seconds_per_byte"]
                and all(number(v, 1) for v in e["seconds_per_byte"].values())
                and (e.get("prompt_bytes") is None or (number(e["prompt_bytes"], 1e15) and e["prompt_bytes"] > 0))
                for e in own.values()
            )
        ):
            raise ValueError(
                f"engine 'llamacpp' type {kind!r}: expected at_width as hidden size -> {{seconds_per_byte: rows -> "
                "seconds, prompt_bytes [B]}"
            )
    prompts = engine.get("prompt_types", {})
    if not isinstance(prompts, dict):
        raise ValueError("engine 'llamacpp': expected prompt_types as a mapping (type -> seconds_per_byte)")
    for kind, costs in prompts.items():
        table = costs.get("seconds_per_byte") if isinstance(costs, dict) else None
        if not (
            isinstance(table, dict)
            and table
            and all(str(m).isdigit() and int(m) >= PROMPT_ROWS for m in table)
            and all(number(v, 1) and v > 0 for v in table.values())
        ):
            raise ValueError(
                f"engine 'llamacpp' prompt_types {kind!r}: expected seconds_per_byte as prompt tokens (at least "
                f"{PROMPT_ROWS}) -> seconds, above 0"
            )
        _prompt_depth(costs.get("prompt_depth"), f"prompt_types {kind!r}")


def _prompt_depth(depth: Any, where: str) -> None:
    """A llama.cpp type's prompt_depth, if any: shallow_bytes < deep_bytes [B] and ratio > 0."""
    if depth is not None and not (
        isinstance(depth, dict)
        and all(
            isinstance(depth.get(k), (int, float)) and not isinstance(depth.get(k), bool) and 0 < depth[k] < 1e15
            for k in ("shallow_bytes", "deep_bytes", "ratio")
        )
        and depth["deep_bytes"] > depth["shallow_bytes"]
    ):
        raise ValueError(
            f"engine 'llamacpp' {where}: expected prompt_depth with shallow_bytes < deep_bytes [B] and ratio > 0"
        )


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise TypeError
    return tuple(value)


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError
    return value


def _peak_table(where: str) -> Callable[[Any], dict[str, float]]:
    def check(value: Any) -> dict[str, float]:
        if not isinstance(value, dict) or not value:
            raise TypeError
        peaks = Fields(value, f"{where}: peak_flops")
        table = {
            d: peaks.take(d, positive("flop/s"), "a rate such as '989 TFLOP/s'") for d in COMPUTE_DTYPES if d in value
        }
        peaks.done(list(COMPUTE_DTYPES))
        return table

    return check


def _watts(value: Any) -> float:
    """Board power [W]: a plain number, or one with its unit ('700 W', '1 kW')."""
    return number_between(1, 1e5)(units.parse(value, "watts"))
