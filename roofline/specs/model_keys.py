"""Model spec keys: validation of a model YAML (or a converted config.json) into a Model.

Dense transformers take the Llama-style keys; mixture-of-experts, multi-head latent attention and
sliding-window keys come in groups that must be given together. Every mistake names the key.
"""

from collections.abc import Callable
from typing import Any

from roofline import units
from roofline.errors import RooflineError
from roofline.specs.fields import MAX_INT, Fields, boolean, choice, one_of, positive_int, text
from roofline.specs.params import Architecture, count_params
from roofline.specs.records import DTYPE_BYTES, Model

ARCH_KEYS = [
    "layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "mlp",
    "tied_embeddings",
    "position_embeddings",
    "norm",
    "bias",
    "norms_per_layer",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "num_experts",
    "experts_per_token",
    "num_shared_experts",
    "expert_intermediate_size",
    "shared_expert_intermediate_size",
    "first_dense_layers",
    "sliding_window",
    "sliding_layers",
    "mtp_layers",
]
MODEL_KEYS = [
    "name",
    "source",
    "dtype",
    "kv_dtype",
    "quant",
    "params",
    "kv_bytes_per_token",
    "max_context",
    "published_params",
    "published_active_params",
    *ARCH_KEYS,
]


def model_from_mapping(data: dict[str, Any], where: str, spec_id: str) -> Model:
    """Validate model keys (from a YAML file or a converted config.json) into a Model."""
    f = Fields(data, where)
    name = f.take("name", text, "a non-empty string")
    source = f.take("source", text, "the config.json location or paper the figures come from")
    dtype = f.take("dtype", choice(*DTYPE_BYTES), f"a weight dtype: {one_of(*DTYPE_BYTES)}")
    max_context = f.take("max_context", positive_int, "a positive integer (tokens)", None)
    published = f.take("published_params", count, "a positive parameter count such as 8.03e9", None)
    published_active = f.take("published_active_params", count, "a positive parameter count such as 12.9e9", None)
    kv_dtype = f.take("kv_dtype", choice(*DTYPE_BYTES), f"a KV cache dtype: {one_of(*DTYPE_BYTES)}", dtype)
    quant = f.take(
        "quant",
        text,
        "a weight format such as mxfp4-moe (the published checkpoint's; `roofline estimate --help` lists them)",
        None,
    )
    common = dict(
        id=spec_id,
        name=name,
        source=source,
        dtype=dtype,
        kv_dtype=kv_dtype,
        quant=quant,
        max_context=max_context,
        published_params=published,
        published_active_params=published_active,
    )
    if "params" in f.data:
        for key in ARCH_KEYS:
            if key in f.data:
                raise RooflineError(
                    f"{where}: key '{key}': a params-only model (with 'params') takes no architecture keys"
                )
        params = f.take("params", count, "a positive parameter count such as 7e9")
        kv = f.take("kv_bytes_per_token", _non_negative, "a number of bytes per token (>= 0)", None)
        f.done(MODEL_KEYS)
        return Model(**common, params_given=params, kv_bytes_per_token_given=kv)
    if "kv_bytes_per_token" in f.data:
        raise RooflineError(f"{where}: key 'kv_bytes_per_token': only a params-only model (with 'params') takes it")
    arch = _architecture(f, max_context)
    f.done(MODEL_KEYS)
    return Model(**common, arch=arch, counts=count_params(arch))


def _non_negative(value: Any) -> float:
    number = units.parse(value, "bytes")
    if not 0 <= number <= 1e15:  # a KV cache of a PB per token describes no model; NaN is no number
        raise TypeError
    return number


def count(value: Any) -> float:
    """A positive parameter count: 7e9, 7000000000 or '7e9' (YAML reads 7e9 without a dot as text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError
    try:
        number = float(value)
    except ValueError:
        raise TypeError from None
    if not 0 < number <= 1e16:  # a parameter count; 1e16 is 10,000x the largest published model
        raise TypeError
    return number


def _architecture(f: Fields, max_context: int | None) -> Architecture:
    layers = f.take("layers", positive_int, "a positive integer (or give 'params' for a napkin model)")
    hidden = f.take("hidden_size", positive_int, "a positive integer")
    heads = f.take("num_heads", positive_int, "a positive integer")
    kv_heads = f.take("num_kv_heads", positive_int, "a positive integer", heads)
    head_dim = f.take("head_dim", positive_int, "a positive integer", None)
    if head_dim is None:
        if hidden % heads:
            raise RooflineError(
                f"{f.where}: key 'head_dim' is needed: hidden_size {hidden} is not a multiple of num_heads {heads}"
            )
        head_dim = hidden // heads
    if heads % kv_heads:
        raise RooflineError(f"{f.where}: key 'num_kv_heads': expected a divisor of num_heads ({heads}), got {kv_heads}")
    intermediate = f.take("intermediate_size", positive_int, "a positive integer (the dense MLP width)")
    position = f.take("position_embeddings", choice("rope", "learned"), one_of("rope", "learned"), "rope")
    if position == "learned" and max_context is None:
        raise RooflineError(
            f"{f.where}: key 'max_context' is needed: learned position embeddings have max_context rows"
        )
    return Architecture(
        layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=f.take("vocab_size", positive_int, "a positive integer"),
        mlp=f.take("mlp", choice("gated", "plain"), one_of("gated", "plain"), "gated"),
        tied_embeddings=f.take("tied_embeddings", boolean, "true or false", False),
        position_embeddings=position,
        max_positions=max_context if position == "learned" else 0,
        norm=f.take("norm", choice("rmsnorm", "layernorm"), one_of("rmsnorm", "layernorm"), "rmsnorm"),
        bias=f.take("bias", choice("none", "qkv", "all"), one_of("none", "qkv", "all"), "none"),
        norms_per_layer=f.take("norms_per_layer", positive_int, "a positive integer (Gemma-2: 4)", 2),
        mtp_layers=f.take(
            "mtp_layers",
            non_negative_int,
            "an integer >= 0 (multi-token-prediction modules: num_nextn_predict_layers)",
            0,
        ),
        **_mla(f),
        **_moe(f, layers, intermediate),
        **_sliding(f, layers),
    )


def non_negative_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise TypeError
    return value


def _mla(f: Fields) -> dict[str, int]:
    """Multi-head latent attention keys: all or none (q_lora_rank optional)."""
    if "kv_lora_rank" not in f.data:
        for key in ("q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if key in f.data:
                raise RooflineError(f"{f.where}: key '{key}' is for multi-head latent attention: give kv_lora_rank too")
        return {}
    return {
        "kv_lora_rank": f.take("kv_lora_rank", positive_int, "a positive integer"),
        "q_lora_rank": f.take("q_lora_rank", non_negative_int, "an integer >= 0 (0: no query compression)", 0),
        "qk_rope_head_dim": f.take("qk_rope_head_dim", positive_int, "a positive integer (needed with kv_lora_rank)"),
        "qk_nope_head_dim": f.take("qk_nope_head_dim", positive_int, "a positive integer (needed with kv_lora_rank)"),
        "v_head_dim": f.take("v_head_dim", positive_int, "a positive integer (needed with kv_lora_rank)"),
    }


def _moe(f: Fields, layers: int, intermediate: int) -> dict[str, int]:
    """Mixture-of-experts keys, with their defaults."""
    if "num_experts" not in f.data:
        for key in (
            "experts_per_token",
            "num_shared_experts",
            "expert_intermediate_size",
            "shared_expert_intermediate_size",
            "first_dense_layers",
        ):
            if key in f.data:
                raise RooflineError(f"{f.where}: key '{key}' is for mixture-of-experts models: give num_experts too")
        return {}
    experts = f.take("num_experts", positive_int, "a positive integer (routed experts per MoE layer)")
    per_token = f.take("experts_per_token", positive_int, "a positive integer (needed with num_experts)")
    if per_token > experts:
        raise RooflineError(
            f"{f.where}: key 'experts_per_token': expected at most num_experts ({experts}), got {per_token}"
        )
    dense = f.take("first_dense_layers", non_negative_int, "an integer >= 0", 0)
    if dense >= layers:
        raise RooflineError(f"{f.where}: key 'first_dense_layers': expected fewer than layers ({layers}), got {dense}")
    size = f.take(
        "expert_intermediate_size", positive_int, "a positive integer (default: intermediate_size)", intermediate
    )
    return {
        "num_experts": experts,
        "experts_per_token": per_token,
        "num_shared_experts": f.take("num_shared_experts", non_negative_int, "an integer >= 0", 0),
        "expert_intermediate_size": size,
        "shared_expert_intermediate_size": f.take(
            "shared_expert_intermediate_size",
            positive_int,
            "a positive integer (default: expert_intermediate_size)",
            size,
        ),
        "first_dense_layers": dense,
    }


def _sliding(f: Fields, layers: int) -> dict[str, Any]:
    """Sliding-window keys: the window and its layers ('all', 'even', 'odd' or a list of layer indices)."""
    if "sliding_window" not in f.data:
        if "sliding_layers" in f.data:
            raise RooflineError(f"{f.where}: key 'sliding_layers' needs sliding_window")
        return {}
    window = f.take("sliding_window", positive_int, "a positive integer (tokens)")
    which = f.take(
        "sliding_layers",
        _layer_set(layers),
        "'all', 'even', 'odd' or a list of layer indices below layers",
        tuple(range(layers)),
    )
    return {"sliding_window": window, "sliding_layers": which}


def _layer_set(layers: int) -> Callable[[Any], tuple[int, ...]]:
    def check(value: Any) -> tuple[int, ...]:
        named = {"all": range(layers), "even": range(0, layers, 2), "odd": range(1, layers, 2)}
        if isinstance(value, str) and value in named:
            return tuple(named[value])
        if isinstance(value, list) and all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in value
        ):
            return tuple(sorted(set(value)))
        raise TypeError

    return check
