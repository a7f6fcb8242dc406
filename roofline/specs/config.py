"""Hugging Face config.json -> roofline model keys, offline (a file or a model folder; no hub access).

Field names and defaults differ by family (n_layer vs num_hidden_layers, head_dim given or derived,
tie_word_embeddings defaulting per config class); each family maps explicitly below, and the result is
validated by the same code as a model YAML.
"""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from roofline.errors import RooflineError, UsageError
from roofline.specs.fields import is_dir, is_file, shown, user_path

# torch's dtype names (torch.dtype's str without "torch.") as config.json writes them, and their aliases
DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "float8_e4m3fnuz": "fp8",  # AMD's fp8 variants
    "float8_e5m2fnuz": "fp8",
}


def config_path(ref: str) -> Path | None:
    """The config.json that `ref` names (the file, or a folder holding one); None when it names neither."""
    path = user_path(ref)
    if is_dir(path):
        return path / "config.json" if is_file(path / "config.json") else None
    return path if path.suffix == ".json" and is_file(path) else None


def find_config(ref: str) -> Path:
    """The config.json `ref` names, or the one usage error (exit 2) for a missing one, from any command."""
    path = config_path(ref)
    if path is None:
        name = ref if len(ref) <= 100 else shown(ref)
        found = user_path(ref)
        if is_file(found):  # a file, not a config.json: say what it is
            raise UsageError(f"{name}: expected a Hugging Face config.json (a .json file) or a folder holding one")
        raise UsageError(f"{name}: no such config.json (expected a Hugging Face config.json or a folder holding one)")
    return path


def read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise RooflineError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise RooflineError(f"{path}: not UTF-8 text (expected a Hugging Face config.json)") from None
    except json.JSONDecodeError as e:
        raise RooflineError(f"{path}: line {e.lineno}: JSON syntax error: {e.msg}") from None
    except (RecursionError, ValueError) as e:  # nesting deeper than the parser's stack; integers of 4,300+ digits
        raise RooflineError(
            f"{path}: JSON the parser cannot read ({type(e).__name__}: nesting or a number too large)"
        ) from None
    if not isinstance(data, dict):
        raise RooflineError(f"{path}: expected a JSON object (a Hugging Face config.json)")
    return data


STATE_SPACE = ("mamba", "mamba2", "nemotron_h", "jamba", "zamba", "zamba2", "falcon_h1", "falcon_mamba", "bamba")


def to_model_keys(config: dict[str, Any], where: str) -> dict[str, Any]:
    """Our model keys (as in models/*.yaml) for a config.json mapping."""
    kind = config.get("model_type")
    if kind in STATE_SPACE or any(k in config for k in ("hybrid_override_pattern", "mamba_num_heads", "ssm_cfg")):
        raise RooflineError(
            f"{where}: model_type {shown(kind)} has Mamba (state-space) layers, which are out of scope: roofline "
            "prices attention layers and their KV cache, not a recurrent state"
        )
    if not isinstance(kind, str) or kind not in FAMILIES:
        raise RooflineError(f"{where}: unsupported model_type {shown(kind)} (supported: {', '.join(sorted(FAMILIES))})")
    try:
        keys = FAMILIES[kind](Config(config, where))
    except KeyError as e:
        raise RooflineError(f"{where}: missing key {e.args[0]!r} for model_type {kind!r}") from None
    name = config.get("_name_or_path") or Path(where).parent.name or kind
    return {"name": str(name), "source": where, **{k: v for k, v in keys.items() if v is not None}}


class Config:
    """A config.json mapping with the reads the families share."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data, self.where = data, where

    def __getitem__(self, key: str) -> Any:
        value = self.data[key]
        if value is None:  # "num_hidden_layers": null is as missing as no key
            raise KeyError(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value

    def typed(self, key: str, kind: type | tuple[type, ...], expected: str, default: Any = None) -> Any:
        """`get`, refusing a value of the wrong JSON type (a string "false" is not false)."""
        value = self.get(key, default)
        if value is not default and (not isinstance(value, kind) or (kind is not bool and isinstance(value, bool))):
            raise RooflineError(f"{self.where}: key '{key}': expected {expected}, got {shown(value)}")
        return value

    def dtype(self, default: str = "bf16") -> str:
        for key in ("torch_dtype", "dtype"):
            value = self.typed(key, str, "a dtype name such as 'bfloat16'")
            if value:
                if value.removeprefix("torch.") not in DTYPES:
                    raise RooflineError(
                        f"{self.where}: key '{key}': expected one of {', '.join(DTYPES)}, got {shown(value)}"
                    )
                return DTYPES[value.removeprefix("torch.")]
        return default

    def base(self, tied_default: bool) -> dict[str, Any]:
        """Keys of a Llama-style decoder: layers, widths, heads (head_dim only when explicit), vocab, context."""
        return {
            "dtype": self.dtype(),
            # fp8 weights compute with 16-bit activations, and a KV cache left to 'auto' is theirs (vLLM)
            "kv_dtype": "bf16" if self.dtype() == "fp8" else None,
            "layers": self["num_hidden_layers"],
            "hidden_size": self["hidden_size"],
            "num_heads": self["num_attention_heads"],
            "num_kv_heads": self.get("num_key_value_heads", self["num_attention_heads"]),
            "head_dim": self.get("head_dim"),
            "intermediate_size": self["intermediate_size"],
            "vocab_size": self["vocab_size"],
            "tied_embeddings": self.typed("tie_word_embeddings", bool, "true or false", tied_default),
            "max_context": self.get("max_position_embeddings"),
            "bias": "qkv" if self.typed("attention_bias", bool, "true or false", False) else None,
        }

    def sliding(self, layers: str | None = None) -> dict[str, Any]:
        """A sliding window when the config sets one: on `layers`, or as layer_types says."""
        window = self.get("sliding_window")
        if not window or self.typed("use_sliding_window", bool, "true or false", None) is False:
            return {}
        types = self.typed("layer_types", list, "a list of attention kinds per layer")
        if types is not None:
            if not all(isinstance(t, str) for t in types):
                raise RooflineError(
                    f"{self.where}: key 'layer_types': expected strings such as 'sliding_attention', got {shown(types)}"
                )
            layers = [i for i, t in enumerate(types) if t == "sliding_attention"]
            if not layers:  # every layer attends fully: no window anywhere
                return {}
        return {"sliding_window": window, "sliding_layers": layers or "all"}


def _llama(c: Config) -> dict[str, Any]:
    return c.base(tied_default=False)


def _mistral(c: Config) -> dict[str, Any]:
    return {**c.base(tied_default=False), **c.sliding()}


def _qwen2(c: Config) -> dict[str, Any]:
    # Qwen2 has q, k, v biases; its sliding window is off unless use_sliding_window is true.
    keys = {**c.base(tied_default=False), "bias": "qkv"}
    return {**keys, **(c.sliding() if c.typed("use_sliding_window", bool, "true or false", False) else {})}


def _qwen3(c: Config) -> dict[str, Any]:
    return {
        **c.base(tied_default=False),
        **(c.sliding() if c.typed("use_sliding_window", bool, "true or false", False) else {}),
    }


def _moe(c: Config, experts: str, size: str) -> dict[str, Any]:
    sparse_step, only_mlp = c.get("decoder_sparse_step", 1), c.get("mlp_only_layers", [])
    if sparse_step != 1 or only_mlp:
        raise RooflineError(
            f"{c.where}: dense layers between MoE layers (decoder_sparse_step {sparse_step}, mlp_only_layers "
            f"{only_mlp}) are not supported"
        )
    return {
        "num_experts": c[experts],
        "experts_per_token": c["num_experts_per_tok"],
        "expert_intermediate_size": c[size],
    }


def _mixtral(c: Config) -> dict[str, Any]:
    return {**c.base(tied_default=False), **c.sliding(), **_moe(c, "num_local_experts", "intermediate_size")}


def _qwen2_moe(c: Config) -> dict[str, Any]:
    shared = c.get("shared_expert_intermediate_size", 0)
    return {
        **_qwen2(c),
        **_moe(c, "num_experts", "moe_intermediate_size"),
        "num_shared_experts": 1 if shared else 0,
        "shared_expert_intermediate_size": shared or None,
    }


def _qwen3_moe(c: Config) -> dict[str, Any]:
    return {**_qwen3(c), **_moe(c, "num_experts", "moe_intermediate_size")}


def _gemma2(c: Config) -> dict[str, Any]:
    # Gemma-2: explicit head_dim, 4 norms per layer, tied by default, even layers slide (HF: not layer_idx % 2).
    return {**c.base(tied_default=True), "norms_per_layer": 4, **c.sliding("even")}


def _phi3(c: Config) -> dict[str, Any]:
    return {**c.base(tied_default=False), **c.sliding()}


def _gpt2(c: Config) -> dict[str, Any]:
    hidden = c["n_embd"]
    return {
        "dtype": c.dtype("fp32"),
        "layers": c["n_layer"],
        "hidden_size": hidden,
        "num_heads": c["n_head"],
        "intermediate_size": c.get("n_inner", 4 * hidden),
        "vocab_size": c["vocab_size"],
        "mlp": "plain",
        "tied_embeddings": c.typed("tie_word_embeddings", bool, "true or false", True),
        "position_embeddings": "learned",
        "norm": "layernorm",
        "bias": "all",
        "max_context": c["n_positions"],
    }


def _deepseek_v3(c: Config) -> dict[str, Any]:
    keys = {k: v for k, v in c.base(tied_default=False).items() if k not in ("num_kv_heads", "head_dim", "bias")}
    quantized = c.typed("quantization_config", dict, "a JSON object", {}).get("quant_method") == "fp8"
    return {
        **keys,
        "dtype": "fp8" if quantized else keys["dtype"],
        "kv_dtype": keys["dtype"],
        "kv_lora_rank": c["kv_lora_rank"],
        "q_lora_rank": c.get("q_lora_rank", 0),
        "qk_rope_head_dim": c["qk_rope_head_dim"],
        "qk_nope_head_dim": c["qk_nope_head_dim"],
        "v_head_dim": c["v_head_dim"],
        "num_experts": c["n_routed_experts"],
        "experts_per_token": c["num_experts_per_tok"],
        "num_shared_experts": c.get("n_shared_experts", 0),
        "expert_intermediate_size": c["moe_intermediate_size"],
        "first_dense_layers": c.get("first_k_dense_replace", 0),
        "mtp_layers": c.get("num_nextn_predict_layers", 0),
    }


def _gpt_oss(c: Config) -> dict[str, Any]:
    return {
        **c.base(tied_default=False),
        "bias": "all" if c.typed("attention_bias", bool, "true or false", True) else None,
        **c.sliding(),
        "num_experts": c["num_local_experts"],
        "experts_per_token": c.get("num_experts_per_tok") or c["experts_per_token"],
    }


FAMILIES: dict[str, Callable[[Config], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "gemma2": _gemma2,
    "phi3": _phi3,
    "gpt2": _gpt2,
    "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss,
}


def to_yaml(config_file: str, name: str | None) -> str:
    """Our model YAML for a config.json (validated first), with its source line and a header comment."""
    import yaml

    from roofline.specs.model_keys import model_from_mapping

    path = find_config(config_file)
    keys = to_model_keys(read_config(path), str(path))
    if name:
        keys["name"] = name
    model_from_mapping(dict(keys), str(path), name or path.parent.name)  # fail here, not when the YAML is used
    header = f"# Converted by `roofline models import` from {path} (model_type {read_config(path)['model_type']}).\n"
    return header + yaml.safe_dump(keys, sort_keys=False, width=120)
