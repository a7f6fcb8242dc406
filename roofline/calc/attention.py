"""The one seam for attention variants: KV bytes per token and per sequence, and attention FLOPs per key.

Every part of roofline that needs them (the calculator's Shape, `models show`, validate's memory check, the
engines' support check) asks here, so adding an attention variant is a change to this file.
Variants: standard multi-head attention with GQA/MQA KV heads (Ainslie et al. 2023); multi-head latent
attention, whose cache is one latent + rope key per token shared by all heads (DeepSeek-V2 sec. 2.1);
params-only napkin models, whose KV bytes per token are given literally. Sliding-window layers keep at
most `window` tokens (Mistral 7B sec. 2).
"""

from typing import NamedTuple

from roofline.calc import formulas as f
from roofline.calc.storage import KV_BYTES
from roofline.specs.records import DTYPE_BYTES, Model


class Attention(NamedTuple):
    """One model's attention at one KV dtype, per token and per layer [B, FLOP]."""

    kind: str  # "gqa" (MHA, GQA, MQA), "mla" (latent), "given" (params-only: literal bytes per token)
    layers: int
    full_layers: int  # layers without a sliding window
    window: int  # tokens a sliding layer keeps (0: none)
    kv_layer_bytes: float  # K and V (or the latent) one token adds to one layer
    key_flops_decode: float  # FLOPs per (query, key) pair in decode, one layer
    key_flops_prefill: float  # FLOPs per (query, key) pair in prefill, one layer
    kv_heads: int  # heads the KV cache splits into under tensor parallelism (1: replicated, as MLA's latent)

    @property
    def sliding_layers(self) -> int:
        return self.layers - self.full_layers

    @property
    def kv_per_token(self) -> float:
        """KV bytes one token adds over all layers, before any window caps it
        = 2 x layers x kv_heads x head_dim x bytes."""
        return self.kv_layer_bytes * self.layers

    def kv_cached(self, context: float) -> float:
        """KV bytes one sequence holds at `context` tokens (sliding layers capped at the window)."""
        return self.kv_layer_bytes * (self.full_layers * context + self.sliding_layers * min(context, self.window))

    def kv_own(self, context: float, shared: float) -> float:
        """KV bytes one sequence holds of its own when its first `shared` tokens are a prefix the batch holds once:
        its other context - shared tokens, at most the window on sliding layers."""
        return self.kv_cached(context - shared)

    def keys(self, cached: float) -> float:
        """Sum over layers of the keys a decode token attends over with `cached` tokens before it (its own included)."""
        return self.full_layers * (cached + 1) + self.sliding_layers * min(cached + 1, self.window)

    def kv_share(self, tp: int) -> float:
        """Share of a sequence's KV each of `tp` devices keeps: the KV heads split; beyond them, replicated."""
        return max(1.0 / tp, 1.0 / self.kv_heads)


def attention(model: Model, kv_dtype: str | None = None) -> Attention:
    """The attention facts of `model` with its KV cache stored in `kv_dtype` (default: the model's)."""
    kv_bytes = {**DTYPE_BYTES, **KV_BYTES}[kv_dtype or model.kv_dtype]
    a = model.arch
    if a is None:  # params-only napkin model: one "layer" holding the literal KV bytes per token
        return Attention("given", 1, 1, 0, model.kv_bytes_per_token_given or 0.0, 0.0, 0.0, 1 << 30)
    window = a.sliding_window if a.sliding_layers else 0
    full = a.layers - len(a.sliding_layers) if window else a.layers
    if a.mla:
        return Attention(
            "mla",
            a.layers,
            full,
            window,
            kv_layer_bytes=(a.kv_lora_rank + a.qk_rope_head_dim) * kv_bytes,
            key_flops_decode=2.0 * a.num_heads * (2 * a.kv_lora_rank + a.qk_rope_head_dim),  # absorbed form
            key_flops_prefill=2.0
            * a.num_heads
            * (a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim),  # naive form
            kv_heads=1,
        )
    per_key = f.attention_flops(1, a.num_heads, a.head_dim, 1)
    return Attention(
        "gqa",
        a.layers,
        full,
        window,
        f.kv_bytes_per_token(1, a.num_kv_heads, a.head_dim, kv_bytes),
        per_key,
        per_key,
        a.num_kv_heads,
    )


def kv_bytes_per_token(model: Model, kv_dtype: str | None = None) -> float:
    """KV bytes one token adds to one sequence's cache, all layers, at `kv_dtype` (default: the model's)."""
    return attention(model, kv_dtype).kv_per_token


def engine_support(model: Model) -> str | None:
    """Why roofline's plain decoder (and the calibrated prediction) cannot run this model; None when it can."""
    a = model.arch
    if a is None:
        return "is a params-only napkin model (no architecture to build)"
    if a.mla:
        return "uses multi-head latent attention"
    if a.num_experts:
        return "uses mixture of experts"
    return None
