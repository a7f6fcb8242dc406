"""Model files as inputs: a GGUF file or a safetensors checkpoint -> model keys and the exact bytes of its weights.

Bytes are the file's own: each GGUF tensor's blocks, each safetensors tensor's data_offsets span (never shape
x item size: F4 is half a byte, AWQ/GPTQ pack 8 weights per int32, FP8/NVFP4/MXFP4 carry scale tensors).
The estimate then uses them: resident weight bytes are the file's; a decode step streams every tensor but
the input embedding (unless it doubles as the lm_head) and learned position table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from roofline.errors import RooflineError


class WeightBytes(NamedTuple):
    """A checkpoint's weights as stored [B]: in all, streamed per decode step, by dtype and by role."""

    kind: str  # "gguf" or "safetensors"
    total_bytes: int
    streamed_bytes: int  # all but the lookup tables (a tied embedding is the lm_head: streamed)
    elements: int  # weight elements (scale and zero-point tensors not counted)
    by_dtype: dict[str, int]
    by_role: dict[str, int]
    elements_by_role: dict[str, int]
    streamed_by_dtype: dict[str, int] = {}  # streamed matrix bytes by dtype, the lm_head's included; no norms
    head: tuple[str, int] = ("", 0)  # the lm_head's (dtype, bytes): the tied embedding when there is no output.weight

    @property
    def bits_per_weight(self) -> float:
        """All stored bits (scales included) per weight element."""
        return 8 * self.total_bytes / self.elements if self.elements else 0.0

    def bits_by_role(self) -> dict[str, float]:
        """Bits per element of each role (scales spread over the weights they scale: reported apart)."""
        return {r: 8 * b / self.elements_by_role[r] for r, b in self.by_role.items() if self.elements_by_role.get(r)}


def role(name: str) -> str:
    """The role of a tensor from its name (GGUF or Hugging Face naming)."""
    n = name.lower()
    if (
        n.endswith(
            (
                ".scales",
                ".qzeros",
                ".g_idx",
                "_scale",
                ".weight_scale",
                ".weight_scale_inv",
                ".input_scale",
                ".weight_scale_2",
                ".zeros",
                ".absmax",
            )
        )
        or "weight_scale" in n
    ):
        return "scales"
    if n.startswith("token_embd") or "embed_tokens" in n or n.endswith("wte.weight") or "word_embeddings" in n:
        return "embedding"
    if n.startswith("position_embd") or n.endswith("wpe.weight"):
        return "position"
    if n.startswith("output.") or n.startswith("lm_head"):
        return "lm_head" if "norm" not in n else "norms"
    if "norm" in n or ".ln_" in n or n.startswith("ln_"):
        return "norms"
    if "_exps" in n or ".experts." in n:
        return "experts"
    if "attn" in n or "attention" in n:
        return "attention"
    if "ffn" in n or "mlp" in n:
        return "mlp"
    return "other"


def weight_bytes(kind: str, tensors: list[tuple[str, str, int, int]]) -> WeightBytes:
    """Sum (name, dtype, elements, bytes) tensors by dtype and role. The lookup tables are not streamed,
    unless there is no separate lm_head (tied): then the embedding is read as the lm_head every step."""
    by_dtype: dict[str, int] = {}
    by_role: dict[str, int] = {}
    elements_by_role: dict[str, int] = {}
    for name, dtype, elements, nbytes in tensors:
        r = role(name)
        by_dtype[dtype] = by_dtype.get(dtype, 0) + nbytes
        by_role[r] = by_role.get(r, 0) + nbytes
        elements_by_role[r] = elements_by_role.get(r, 0) + elements
    total = sum(by_role.values())
    tied = "lm_head" not in by_role
    lookups = ("position",) if tied else ("position", "embedding")
    matrices: dict[str, int] = {}
    head = ("", 0)
    for name, dtype, _, nbytes in tensors:
        r = role(name)
        if r not in (*lookups, "norms"):
            matrices[dtype] = matrices.get(dtype, 0) + nbytes
        if r == ("embedding" if tied else "lm_head") and not name.endswith(".bias"):
            head = (dtype, head[1] + nbytes)
    weights = sum(e for r, e in elements_by_role.items() if r != "scales")
    lookup_bytes = sum(by_role.get(r, 0) for r in lookups)
    return WeightBytes(kind, total, total - lookup_bytes, weights, by_dtype, by_role, elements_by_role, matrices, head)


# ---------------------------------------------------------------- GGUF


def gguf_model(path: Path) -> tuple[dict[str, Any], WeightBytes]:
    """Model keys (as in models/*.yaml) and weight bytes of a GGUF file."""
    from roofline.specs import gguf

    header = gguf.read(path)
    m = header.metadata
    arch = m.get("general.architecture")
    if not isinstance(arch, str) or arch not in GGUF_FAMILIES:
        raise RooflineError(
            f"{path}: general.architecture {arch!r} is not supported (supported: {', '.join(sorted(GGUF_FAMILIES))})"
        )
    names = {t.name for t in header.tensors}
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)

    def get(key: str, default: Any = ...) -> Any:
        value = m.get(f"{arch}.{key}", default)
        if value is ...:
            raise RooflineError(f"{path}: GGUF metadata {arch}.{key} is missing")
        if isinstance(value, list):  # per-layer arrays (e.g. head_count_kv): one value for all layers
            if len(set(value)) != 1:
                raise RooflineError(f"{path}: {arch}.{key} differs between layers ({value[:4]}...): not supported")
            value = value[0]
        return value

    vocab = m.get(f"{arch}.vocab_size") or (embd.dims[1] if embd and len(embd.dims) == 2 else None)
    tokens = m.get("tokenizer.ggml.tokens")
    if vocab is None and isinstance(tokens, tuple):
        vocab = tokens[1]
    keys = {
        "name": str(m.get("general.name") or path.stem),
        "source": str(path),
        "dtype": "bf16",
        "layers": get("block_count"),
        "hidden_size": get("embedding_length"),
        "num_heads": get("attention.head_count"),
        "num_kv_heads": get("attention.head_count_kv", None) or get("attention.head_count"),
        "intermediate_size": get("feed_forward_length", None),
        "vocab_size": vocab,
        "tied_embeddings": "output.weight" not in names,
        "max_context": get("context_length", None),
    }
    head_dim = get("attention.key_length", None)
    if head_dim and head_dim != keys["hidden_size"] // keys["num_heads"]:
        keys["head_dim"] = head_dim
    keys.update(GGUF_FAMILIES[arch](get, names))
    tensors = [(t.name, gguf.TYPES[t.type][0], t.elements, t.bytes) for t in header.tensors]
    weights = weight_bytes("gguf", tensors)
    bits = weights.bits_per_weight
    # The dtype label only picks the compute dtype (quantized ints compute in 16 bits); bytes come from the file.
    keys["dtype"] = "int4" if bits < 6 else "int8" if bits < 12 else "bf16"
    keys["kv_dtype"] = "fp16"  # llama.cpp's default KV cache type
    return {k: v for k, v in keys.items() if v is not None}, weights


def _llama(get, names) -> dict[str, Any]:
    return {"bias": "qkv" if "blk.0.attn_q.bias" in names else None}


def _qwen_moe(get, names) -> dict[str, Any]:
    return {
        "num_experts": get("expert_count"),
        "experts_per_token": get("expert_used_count"),
        "expert_intermediate_size": get("expert_feed_forward_length"),
        "intermediate_size": get("expert_feed_forward_length"),
        **(
            {"num_shared_experts": 1, "shared_expert_intermediate_size": get("expert_shared_feed_forward_length")}
            if get("expert_shared_feed_forward_length", None)
            else {}
        ),
    }


def _gemma2(get, names) -> dict[str, Any]:
    return {"norms_per_layer": 4, "sliding_window": get("attention.sliding_window"), "sliding_layers": "even"}


def _phi3(get, names) -> dict[str, Any]:
    window = get("attention.sliding_window", None)
    return {"sliding_window": window, "sliding_layers": "all"} if window else {}


def _gpt2(get, names) -> dict[str, Any]:
    return {
        "mlp": "plain",
        "position_embeddings": "learned",
        "norm": "layernorm",
        "bias": "all",
        "tied_embeddings": "output.weight" not in names,
    }


def _deepseek2(get, names) -> dict[str, Any]:
    rope = get("rope.dimension_count")
    return {
        "kv_lora_rank": get("attention.kv_lora_rank"),
        "q_lora_rank": get("attention.q_lora_rank", 0) or 0,
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": get("attention.key_length") - rope,
        "v_head_dim": get("attention.value_length"),
        "num_experts": get("expert_count"),
        "experts_per_token": get("expert_used_count"),
        "num_shared_experts": get("expert_shared_count", 0),
        "expert_intermediate_size": get("expert_feed_forward_length"),
        "first_dense_layers": get("leading_dense_block_count", 0),
        "head_dim": None,
    }


def _gpt_oss(get, names) -> dict[str, Any]:
    return {
        "bias": "all",
        "num_experts": get("expert_count"),
        "experts_per_token": get("expert_used_count"),
        "intermediate_size": get("expert_feed_forward_length", None) or get("feed_forward_length"),
        "sliding_window": get("attention.sliding_window"),
        "sliding_layers": "even",
    }


GGUF_FAMILIES = {
    "llama": _llama,
    "qwen2": _llama,
    "qwen3": _llama,
    "mistral": _llama,
    "qwen3moe": _qwen_moe,
    "qwen2moe": _qwen_moe,
    "gemma2": _gemma2,
    "phi3": _phi3,
    "gpt2": _gpt2,
    "deepseek2": _deepseek2,
    "gpt-oss": _gpt_oss,
}


# ---------------------------------------------------------------- safetensors

MAX_HEADER = 100 * 2**20  # a safetensors header over 100 MB is refused (the format's own limit)


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file: 8-byte little-endian length, then the JSON."""
    import json
    import struct

    try:
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise RooflineError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (length,) = struct.unpack("<Q", raw)
            if length > MAX_HEADER:
                raise RooflineError(f"{path}: safetensors header of {length} bytes is over the 100 MB limit")
            text = f.read(length)
    except OSError as e:
        raise RooflineError(f"{path}: cannot read ({e.strerror})") from None
    try:
        header = json.loads(text)
    except (ValueError, RecursionError):
        raise RooflineError(f"{path}: the safetensors header is not valid JSON") from None
    if not isinstance(header, dict):
        raise RooflineError(f"{path}: the safetensors header is not a JSON object")
    return header


def safetensors_bytes(files: list[Path]) -> WeightBytes:
    """Weight bytes of a (sharded) safetensors checkpoint, from each tensor's data_offsets."""
    tensors = []
    for path in files:
        for name, info in safetensors_header(path).items():
            if name == "__metadata__":
                continue
            try:
                start, end = info["data_offsets"]
                elements = 1
                for d in info["shape"]:
                    elements *= int(d)
                dtype = str(info["dtype"])
            except (KeyError, TypeError, ValueError):
                raise RooflineError(f"{path}: tensor {name!r} lacks a valid dtype, shape or data_offsets") from None
            if not 0 <= start <= end:
                raise RooflineError(
                    f"{path}: tensor {name!r} has data_offsets {start}, {end} (expected 0 <= start <= end)"
                )
            tensors.append((name, dtype, weight_elements(name, dtype, elements), end - start))
    if not tensors:
        raise RooflineError(f"{files[0]}: no tensors in the safetensors header")
    return weight_bytes("safetensors", tensors)


def weight_elements(name: str, dtype: str, elements: int) -> int:
    """Weights a tensor stores: packed int32 (AWQ/GPTQ qweight) hold 8 4-bit weights; U8 of FP4 formats hold 2."""
    if name.endswith((".qweight",)) and dtype in ("I32", "U32"):
        return 8 * elements
    if dtype in ("U8",) and name.endswith((".weight", ".weight_packed")) and role(name) != "scales":
        return 2 * elements  # NVFP4 / MXFP4 packed two 4-bit values per byte
    return elements


def safetensors_files(folder: Path) -> list[Path]:
    """The checkpoint's shards: those the index names, else every *.safetensors in the folder."""
    import json

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text()).get("weight_map", {})
        except (ValueError, AttributeError):
            raise RooflineError(f"{index}: not a valid safetensors index (expected a weight_map)") from None
        files = sorted({folder / str(f) for f in weight_map.values()})
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise RooflineError(f"{index}: names shard {missing[0]}, which is not in {folder}")
        return files
    return sorted(folder.glob("*.safetensors"))
