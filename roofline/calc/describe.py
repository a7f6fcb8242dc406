"""Specs -> plain dicts: the JSON of `roofline hardware show` and `roofline models show`."""

from __future__ import annotations

from typing import Any

from roofline.calc import formulas as f
from roofline.calc.attention import kv_bytes_per_token
from roofline.specs.records import Hardware, Model


def hardware(h: Hardware) -> dict[str, Any]:
    """A device's figures in SI units, with the ridge point of each compute dtype."""
    return {
        "id": h.id,
        "name": h.name,
        "source": h.source,
        "figures": h.origin,
        "memory_capacity_bytes": h.memory_capacity,
        "memory_bandwidth_bytes_per_s": h.memory_bandwidth,
        "peak_flop_per_s": dict(h.peak_flops),
        "ridge_point_flop_per_byte": {d: f.ridge_point(p, h.memory_bandwidth) for d, p in h.peak_flops.items()},
        "interconnect_bandwidth_bytes_per_s": h.interconnect_bandwidth,
        "power_w": h.power,
        **({"measured": h.measured} if h.measured else {}),
    }


def model(m: Model) -> dict[str, Any]:
    """A model's derived parameter counts and its KV cache per token at the model's dtype."""
    out: dict[str, Any] = {
        "id": m.id,
        "name": m.name,
        "source": m.source,
        "dtype": m.dtype,
        "kv_dtype": m.kv_dtype,
        "quant": m.quant,  # the published checkpoint's format, estimate's default storage (null: the dtype)
        "params": m.params,
        "published_params": m.published_params,
        "max_context": m.max_context,
        "source_kind": m.source_kind,
    }
    if m.weights_file is not None:  # read from a GGUF or safetensors file: its exact bytes
        w = m.weights_file
        out.update(
            weight_bytes=w.total_bytes,
            weight_bytes_streamed=w.streamed_bytes,
            weight_bytes_by_dtype=dict(w.by_dtype),
            weight_bytes_by_role=dict(w.by_role),
            bits_per_weight=w.bits_per_weight,
            bits_per_weight_by_role=w.bits_by_role(),
            weight_elements=w.elements,
        )
    if m.arch is None or m.counts is None:
        out["kv_bytes_per_token"] = kv_bytes_per_token(m)
        return out
    a, c = m.arch, m.counts
    out["kv_bytes_per_token"] = kv_bytes_per_token(m)  # at the model's KV dtype, as estimate uses by default
    out["active_params"] = c.active
    out["params_breakdown"] = {
        "embedding": c.embedding,
        "position": c.position,
        "attention": c.attention,
        "dense_mlp": c.dense_mlp,
        "routed_experts": c.experts,
        "shared_experts": c.shared_experts,
        "router": c.router,
        "biases": c.biases,
        "norms": c.norms,
        "lm_head": 0 if c.tied else c.head,
        "active_per_token": c.active,
        "matmul_per_token": c.matmul,
        "streamed_per_decode_step_at_batch_1": round(c.streamed(1)),
    }
    out["architecture"] = a._asdict()
    if a.kv_lora_rank:  # MLA: one latent per token and layer, no KV heads; a head's width is nope + rope (q, k), v's
        out["architecture"].update(num_kv_heads=None, head_dim=a.qk_nope_head_dim + a.qk_rope_head_dim)
    return out
