"""What every point of a sweep shares, built once (`prepare` -> Prepared): the validated inputs, the model's per-step
shape and the drafter's, the device's roofs, the links each parallel group communicates over, and the engine
preset's own prepared setup. roofline.calc.estimate.estimate_at prices any batch and lengths of it.
"""

import os
from typing import Any, NamedTuple

from roofline.calc import cache
from roofline.calc.inputs import Inputs, resolve
from roofline.calc.knobs import Knobs, knobs_of
from roofline.calc.serving import disagg, speculative
from roofline.calc.shape import Shape
from roofline.calc.storage import Storage
from roofline.errors import UsageError
from roofline.specs.records import Hardware, Model

DEVICES_PER_NODE = 8  # when the hardware YAML gives none: an HGX / DGX board


class ModelInfo(NamedTuple):
    id: str
    name: str
    params: float
    active_params: float  # used per token (= params for dense models)
    matmul_params: float  # multiplied per token
    source_kind: str = "yaml"  # "yaml", "config", "gguf", "safetensors" or "hub"


class HardwareInfo(NamedTuple):
    id: str
    name: str
    figures: str  # "datasheet" or "measured"
    peak_flop_per_s: float
    memory_bandwidth_bytes_per_s: float
    memory_capacity_bytes: float


class Prepared(NamedTuple):
    """The validated inputs and everything derived from them that does not depend on the batch and lengths."""

    model: Model
    hardware: Hardware
    knobs: Knobs
    inputs: Inputs  # at batch 1, prompt 1, output 0: estimate_at fills in each point's
    storage: Storage
    shape: Shape
    draft: Shape | None  # the drafter of speculative decoding
    peak: float  # peak FLOP/s of the compute dtype
    F: float  # achievable FLOP/s
    W: float  # achievable bytes/s
    link: float | None  # the tp group's all-reduce link [B/s] and latency [s]
    latency: float
    ep_link: tuple | None
    pp_link: tuple | None  # the pipeline's point-to-point link (bandwidth, latency) when pp > 1
    pools: tuple | None  # (prefill instances, decode instances, their link) when disaggregated
    notes: tuple[str, ...]
    model_info: ModelInfo
    hardware_info: HardwareInfo
    preset: Any  # the engine's preset (roofline.specs.presets.Preset); None without one
    preset_setup: "Prepared | None"  # the same inputs under the preset's efficiencies and memory fraction


def spec_of(value: Any, kind: type, name: str) -> Any:
    """A `kind` record (Model or Hardware) as the library takes it, or the one its id or path names (as the command
    line takes them); anything else a UsageError naming the argument `name` (model and hardware swapped, a dict)."""
    if isinstance(value, kind):
        return value
    if isinstance(value, (str, os.PathLike)):
        from roofline.specs.catalog import load_model
        from roofline.specs.hardware import load_hardware

        return (load_hardware if kind is Hardware else load_model)(os.fspath(value))
    loader = "load_hardware('h100-sxm')" if kind is Hardware else "load_model('llama-3.1-8b')"
    raise UsageError(f"expected a {kind.__name__} (roofline.{loader}) or its id, got {type(value).__name__}", name)


def with_specs(model: Any, hardware: Any, k: Knobs) -> tuple[Model, Hardware, Knobs]:
    """The model, the device and a drafter given by id or path, loaded (spec_of)."""
    if k.draft is not None and not isinstance(k.draft, Model):
        k = k._replace(draft=spec_of(k.draft, Model, "draft"))
    return spec_of(model, Model, "model"), spec_of(hardware, Hardware, "hardware"), k


def prepare(
    model: Model, hardware: Hardware, knobs: Knobs | None = None, *, weight_share: float | None = None, **overrides: Any
) -> Prepared:
    """Validate the knobs and build the per-step model once; `estimate_at` then prices any batch and lengths.
    `weight_share`: the share of peak bandwidth the weights' reads run at where it is not the bandwidth efficiency's
    (an engine preset's weight format, presets.weight_share); its streamed weight bytes are priced as that many more."""
    model, hardware, k = with_specs(model, hardware, knobs_of(knobs, overrides))
    notes: list[str] = []
    inputs, storage = resolve(model, hardware, k, notes)
    ep = ep_degree(model, hardware, k, notes)
    check_layout(model, k)
    scale = k.bandwidth_efficiency / weight_share if weight_share else 1.0
    shape = Shape(model, storage, inputs.kv_dtype, inputs.compute_dtype, k.tp, ep, stream_scale=scale)
    link, latency = tier(hardware, k.tp, f"tp {k.tp}", inputs, notes)
    ep_link = tier(hardware, max(k.tp, ep), f"ep {ep}", inputs, notes) if ep > 1 else None
    draft = speculative.drafter(model, k, inputs.weight_dtype, inputs.kv_dtype, inputs.compute_dtype, k.tp, storage)
    pp_link, pools = _pipeline_links(hardware, k, inputs, notes)
    notes += shape_notes(model, k.tp)
    peak = hardware.peak_flops[inputs.compute_dtype]
    active = float(model.counts.active) if model.counts else model.params
    preset, preset_setup = _preset(model, hardware, k, inputs, shape.weights)
    streamed = shape.streamed(1) / scale  # bytes
    faster = cache.speedup(cache.ladder(hardware.measured), streamed)
    if faster > 1.005:
        notes.append(
            f"the weights a step streams ({streamed / 1e6:.0f} MB) fit where the profile's read ladder ran "
            f"{faster:.2f}x its memory speed: the bound reads them at "
            f"{hardware.memory_bandwidth * faster / 1e9:.1f} GB/s"
        )
    return Prepared(
        model=model,
        hardware=hardware,
        knobs=k,
        inputs=inputs,
        storage=storage,
        shape=shape,
        draft=draft,
        peak=peak,
        F=peak * k.compute_efficiency,
        W=hardware.memory_bandwidth * faster * k.bandwidth_efficiency,
        link=link,
        latency=latency,
        ep_link=ep_link,
        pp_link=pp_link,
        pools=pools,
        notes=tuple(notes),
        model_info=ModelInfo(model.id, model.name, model.params, active, shape.matmul, model.source_kind),
        hardware_info=HardwareInfo(
            hardware.id, hardware.name, hardware.origin, peak, hardware.memory_bandwidth, hardware.memory_capacity
        ),
        preset=preset,
        preset_setup=preset_setup,
    )


def _preset(
    model: Model, hardware: Hardware, k: Knobs, inputs: Inputs, weights: float
) -> tuple[Any, "Prepared | None"]:
    """The engine's preset for this device, and the setup its knobs make, prepared once for every point (None
    for no engine, eager or a measured one; no prediction with a pipeline or pools: presets were fitted without)."""
    name = inputs.engine
    if name is None or name == "eager":
        return None, None
    from roofline.calc import presets
    from roofline.calc.inputs import engine_costs, is_preset

    if not is_preset(name) or name in engine_costs(hardware):  # measured here (llamacpp): the profile prices it
        return None, None
    preset = presets.for_device(name, hardware)
    if k.pp > 1 or k.disagg:
        return preset, None
    return preset, _preset_setup(model, hardware, k, inputs, preset, weights)


def with_preset(p: Prepared, preset: Any) -> Prepared:
    """`p` priced with `preset` (a roofline.specs.presets.Preset), as `--engine` would: how benchmarks/fit_engines.py
    tries candidate parameters through the code path users run."""
    setup = _preset_setup(p.model, p.hardware, p.knobs, p.inputs, preset, p.shape.weights)
    return p._replace(preset=preset, preset_setup=setup)


def _preset_setup(model: Model, hardware: Hardware, k: Knobs, inputs: Inputs, preset: Any, weights: float) -> Prepared:
    """The setup under the preset's knobs; `weights`: bytes per device, for a KV pool of what they leave."""
    from roofline.calc import presets

    compute_dtype = inputs.compute_dtype
    applied = presets.knobs(preset, hardware, compute_dtype)
    if getattr(preset, "kv_pool", "memory") == "free":  # a share of what the weights leave (TensorRT-LLM's rule)
        reserve = (preset.reserve_bytes or 0.0) / hardware.memory_capacity  # kept out after the share is taken
        share = min(presets.of_free(preset.memory_fraction, weights, hardware), 1.0)  # weights over memory: none
        applied["memory_fraction"] = max(share - reserve, 0.01)
    share = presets.weight_share(preset, inputs.weight_dtype, hardware)
    return prepare(model, hardware, k._replace(engine=None, compute_dtype=compute_dtype, **applied), weight_share=share)


def _pipeline_links(
    hardware: Hardware, k: Knobs, inputs: Inputs, notes: list[str]
) -> tuple[tuple | None, tuple | None]:
    """The pipeline's point-to-point link and the disaggregated pools with theirs, when asked for."""
    if k.pp == 1 and k.disagg is None:
        return None, None
    if hardware.interconnect_bandwidth is None:
        raise UsageError(
            f"{hardware.id} has no interconnect_bandwidth, needed for pp > 1 or disaggregated pools "
            "(add it to its hardware YAML)",
            "pp" if k.pp > 1 else "disagg",
        )
    pp_link = (
        tier(hardware, k.tp * k.pp, f"pp {k.pp} x tp {k.tp} = {k.tp * k.pp} devices", inputs, notes)
        if k.pp > 1
        else None
    )
    pools = None
    if k.disagg is not None:
        x, y = disagg.parse(k.disagg)
        group = (x + y) * k.tp * k.pp
        pools = (x, y, tier(hardware, group, f"the {x}P:{y}D pools' {group} devices", inputs, notes))
    return pp_link, pools


def tier(hardware: Hardware, devices: int, group: str, inputs: Inputs, notes: list[str]) -> tuple[float | None, float]:
    """The link a group of `devices` (named `group` in the notes) communicates over: the intra-node interconnect
    while the group fits in one node (devices_per_node, default 8), else the slower inter-node tier
    (internode_bandwidth / _latency)."""
    per_node = hardware.devices_per_node or DEVICES_PER_NODE
    if devices <= per_node:
        return hardware.interconnect_bandwidth, inputs.collective_latency_s
    if hardware.internode_bandwidth is None:  # the layout keeps working as before; the note says what was assumed
        notes.append(
            f"{group} spans nodes of {per_node} devices but {hardware.id} gives no internode_bandwidth: its "
            "intra-node figure is assumed, optimistic (add internode_bandwidth, e.g. 50 GB/s for 400 Gb/s "
            "InfiniBand)"
        )
        return hardware.interconnect_bandwidth, inputs.collective_latency_s
    notes.append(
        f"{group} spans nodes of {per_node} devices: its traffic runs at the inter-node "
        f"{hardware.internode_bandwidth / 1e9:.3g} GB/s per device"
    )
    latency = hardware.internode_latency if hardware.internode_latency is not None else inputs.collective_latency_s
    return hardware.internode_bandwidth, latency


def shape_notes(model: Model, tp: int) -> list[str]:
    notes = []
    a = model.arch
    if a is not None and a.num_experts:
        notes.append(
            "MoE: a step reads the distinct experts its tokens touch, E (1 - (1 - k/E)^tokens), assuming "
            "uniform routing"
        )
    if tp > 1 and a is not None and a.mla:
        notes.append(f"tp {tp}: MLA's latent KV cache is shared by all heads, so every device keeps all of it")
    elif tp > 1 and a is not None and tp > a.num_kv_heads:
        notes.append(
            f"tp {tp} > {a.num_kv_heads} KV heads: each device keeps 1 KV head, replicated {tp // a.num_kv_heads}x"
        )
    if tp > 1:
        notes.append("tp: communication (two all-reduces per layer) is added to each step's time, not overlapped")
    return notes


def check_layout(model: Model, k: Knobs) -> None:
    """Refuse layouts no engine can build: tp must split the attention heads evenly (and the KV heads, or be a
    multiple of them: vLLM's rule), pp at most one layer a stage."""
    a = model.arch
    if a is None:
        return
    if k.tp > 1 and (a.num_heads % k.tp or (not a.mla and a.num_kv_heads % k.tp and k.tp % a.num_kv_heads)):
        valid = [
            t
            for t in range(1, a.num_heads + 1)
            if not a.num_heads % t and (a.mla or not a.num_kv_heads % t or not t % a.num_kv_heads)
        ]
        kv = "" if a.mla else f" and {a.num_kv_heads} KV heads"
        raise UsageError(
            f"tp {k.tp} does not split {model.id}'s {a.num_heads} attention heads{kv} evenly "
            f"(valid: {', '.join(map(str, valid))})",
            "tp",
        )
    if k.pp > a.layers:
        raise UsageError(
            f"pp {k.pp} stages for {model.id}'s {a.layers} layers: at most one stage a layer (valid: 1 to {a.layers})",
            "pp",
        )


def ep_degree(model: Model, hardware: Hardware, k: Knobs, notes: list[str]) -> int:
    """The expert-parallel degree: MoE models only, dividing the experts, over the tp devices or a multiple of them
    (ep > tp: attention data-parallel in ep / tp groups)."""
    ep, tp = k.ep, k.tp
    if ep == 1:
        return 1
    c = model.counts
    if c is None or not c.moe_layers:
        raise UsageError(f"{model.id} has no routed experts: expert parallelism needs a mixture-of-experts model", "ep")
    if c.num_experts % ep:
        valid = [e for e in range(1, c.num_experts + 1) if not c.num_experts % e]
        raise UsageError(
            f"ep {ep} does not split {model.id}'s {c.num_experts} experts evenly (valid: {', '.join(map(str, valid))})",
            "ep",
        )
    if max(ep, tp) % min(ep, tp):
        raise UsageError(
            f"ep {ep} and tp {tp}: one must divide the other (EP runs over the tp devices or a multiple)", "ep"
        )
    if hardware.interconnect_bandwidth is None:
        raise UsageError(
            f"{hardware.id} has no interconnect_bandwidth, needed for ep > 1 (add it to its hardware YAML)", "ep"
        )
    layout = (
        f"attention data-parallel in {ep // tp} groups of tp {tp}, each with its share of the sequences; "
        "all-to-all dispatch and combine each MoE layer"
        if ep > tp
        else "every device holds every token: no all-to-all, tp's all-reduce combines"
    )
    notes.append(
        f"ep {ep}: {c.num_experts / max(ep, tp):g} experts' worth per device; {layout}; uniform routing "
        "assumed (real load imbalance makes the busiest device slower)"
    )
    return ep
