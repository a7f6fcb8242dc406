"""Synthetic GGUF files: a model's shape with random weights, in any weight type llama.cpp runs.

Written as general.architecture "llama" (RoPE, RMSNorm, gated MLP; q/k/v biases, which only Qwen2 has and which are
a few thousand bytes, are left out), so llama.cpp's own kernels run it and roofline's GGUF reader prices the file by
its exact bytes. Single types (f32, f16, bf16, q4_0 ... q8_0, q2_k ... q6_k) are written directly: floats are N(0,
0.02) (f32) or of magnitude 2^-6 to 2^-5 with random signs (f16, bf16), quantized blocks random bytes with every f16
scale set to a small finite value (a block layout from ggml/src/ggml-common.h). A matrix whose rows do not split
into a type's blocks falls back as llama-quantize does (llama-quant.cpp: Q4_K -> Q5_0, Q6_K -> Q8_0, ...). Mixes
(q4_k_m, q3_k_l, ...) are written in f16 and converted by llama-quantize, which picks each tensor's type as it would
for a real model.
The vocabulary is a placeholder "llama" one (<unk>, <s>, </s>, the 256 byte tokens, then t259, t260, ...):
engines load it; prompts are sent as token ids.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from roofline.errors import RooflineError, UsageError
from roofline.files import atomic_path
from roofline.specs.params import Architecture

# type -> byte offsets of the f16 scales in one block (ggml-common.h: block_q4_0 {d; qs}, block_q2_K {scales; qs;
# d; dmin}, block_q3_K {hmask; qs; scales; d}, block_q6_K {ql; qh; scales; d}, ...).
SCALES = {
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q8_0": (0,),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
}
FLOATS = ("F32", "F16", "BF16")
# llama-quant.cpp (llama_tensor_get_type): the type used when a row does not split into a K-quant's 256 blocks.
FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
# llama-quantize's mixed presets (tools/quantize/quantize.cpp QUANT_OPTIONS): per-tensor types chosen by it.
MIXES = ("Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M")
DIRECT = (*FLOATS, *SCALES)  # written without llama-quantize
TYPES = (*DIRECT, *MIXES)
# f16 / bf16 bits: (sign and mantissa kept, exponent set) for magnitudes in [2^-6, 2^-5): f16 exponent 9 of bias 15,
# bf16 121 of bias 127.
HALF_BITS = {"F16": (0x83FF, 9 << 10), "BF16": (0x807F, 121 << 7)}
SCALE_VALUE = 1e-3  # every block's f16 scale (and min): finite, so activations stay finite


def check_type(name: str, flag: str = "--type") -> str:
    """The canonical (upper-case) name of a weight type, or a UsageError naming the `flag` and listing them."""
    wanted = name.strip().upper()
    if wanted not in TYPES:
        raise UsageError(f"{flag}: expected one of {', '.join(t.lower() for t in TYPES)}, got {name!r}")
    return wanted


def check_shape(a: Architecture, model_id: str) -> None:
    """Refuse shapes the llama layout cannot hold (written as llama: dense, gated MLP, RoPE)."""
    if a.mla or a.num_experts or a.mlp != "gated" or a.position_embeddings != "rope":
        raise UsageError(
            f"--model: {model_id} cannot be written as a llama-layout GGUF (needs dense attention, a gated MLP and "
            "RoPE: Llama, Mistral, Qwen, SmolLM, TinyLlama shapes)"
        )


def tensors(a: Architecture) -> list[tuple[str, tuple[int, ...]]]:
    """(name, (rows, cols)) of every tensor, as PyTorch orders a weight (out x in); norms are vectors."""
    q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (a.vocab_size, a.hidden_size))]
    out.append(("output_norm.weight", (a.hidden_size,)))
    if not a.tied_embeddings:
        out.append(("output.weight", (a.vocab_size, a.hidden_size)))
    for i in range(a.layers):
        out += [
            (f"blk.{i}.attn_norm.weight", (a.hidden_size,)),
            (f"blk.{i}.attn_q.weight", (q, a.hidden_size)),
            (f"blk.{i}.attn_k.weight", (kv, a.hidden_size)),
            (f"blk.{i}.attn_v.weight", (kv, a.hidden_size)),
            (f"blk.{i}.attn_output.weight", (a.hidden_size, q)),
            (f"blk.{i}.ffn_norm.weight", (a.hidden_size,)),
            (f"blk.{i}.ffn_gate.weight", (a.intermediate_size, a.hidden_size)),
            (f"blk.{i}.ffn_up.weight", (a.intermediate_size, a.hidden_size)),
            (f"blk.{i}.ffn_down.weight", (a.hidden_size, a.intermediate_size)),
        ]
    return out


def stored_type(wanted: str, cols: int) -> str:
    """The type a matrix with rows of `cols` is stored in: `wanted` when its blocks divide the row, else the
    fallback llama-quantize uses, else F16."""
    import gguf

    for name in (wanted, FALLBACK.get(wanted, "F16"), "F16"):
        block, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name]]
        if cols % block == 0:
            return name
    return "F16"


def write(
    a: Architecture,
    path: Path,
    weight_type: str,
    name: str = "synthetic",
    seed: int = 0,
    quantize: Path | None = None,
    context: int = 4096,
    flag: str = "a synthetic GGUF",
) -> Path:
    """Write the shape `a` as a GGUF at `path` in `weight_type` (see check_type), atomically (files.atomic_path:
    nothing half-written is left); `path` is returned as given. Mixes need
    `quantize` (the llama-quantize binary). `flag` names the path's origin in an error (write-gguf's --out)."""
    weight_type = check_type(weight_type)
    if weight_type in MIXES and quantize is None:
        raise UsageError(f"--type {weight_type.lower()} is a llama-quantize mix: it needs llama.cpp's llama-quantize")
    with atomic_path(str(path), flag) as tmp:
        if weight_type in MIXES:
            f16 = tmp.with_name(tmp.name + ".f16")
            try:
                _write(a, f16, "F16", name, seed, context)
                _quantize(quantize, f16, tmp, weight_type)
            finally:
                f16.unlink(missing_ok=True)
        else:
            _write(a, tmp, weight_type, name, seed, context)
    return Path(path)


def _quantize(binary: Path, source: Path, target: Path, mix: str) -> None:
    done = subprocess.run([str(binary), str(source), str(target), mix], capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RooflineError(f"llama-quantize {mix} failed (exit {done.returncode}): {tail[0]}")


def _write(a: Architecture, path: Path, weight_type: str, name: str, seed: int, context: int) -> None:
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_block_count(a.layers)
    w.add_context_length(context)
    w.add_embedding_length(a.hidden_size)
    w.add_feed_forward_length(a.intermediate_size)
    w.add_head_count(a.num_heads)
    w.add_head_count_kv(a.num_kv_heads)
    w.add_key_length(a.head_dim)
    w.add_value_length(a.head_dim)
    w.add_rope_dimension_count(a.head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(a.vocab_size)
    w.add_file_type(_file_type(gguf, weight_type))
    _vocabulary(w, a.vocab_size)
    for tensor, shape in tensors(a):
        if len(shape) == 1:
            w.add_tensor(tensor, np.ones(shape, dtype=np.float32))
            continue
        kind = stored_type(weight_type, shape[1])
        data = _random(rng, np, shape, kind)
        w.add_tensor(tensor, data, raw_dtype=gguf.GGMLQuantizationType[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _random(rng, np, shape: tuple[int, ...], kind: str):
    """A matrix of `shape` (rows, cols) as stored in `kind`: f32 N(0, 0.02), f16 and bf16 of magnitude 2^-6 to 2^-5
    with random signs; blocks of random bytes with finite
    scales. Quantized and bf16 data go as raw bytes (gguf derives the element shape from the type's block)."""
    import gguf

    rows, cols = shape
    if kind == "F32":
        return rng.standard_normal((rows, cols), dtype=np.float32) * np.float32(0.02)
    if kind in HALF_BITS:
        # Random bits under a fixed exponent, 3x faster than drawing normals (0.61 against 0.18 GB/s here, where the
        # profile's f16 probes are 0.6 GB): magnitudes in [2^-6, 2^-5), random signs, std 0.024, near f32's 0.02.
        keep, exponent = HALF_BITS[kind]
        bits = _bits(rng, np, rows * cols * 2).view(np.uint16).reshape(rows, cols)
        bits = bits & np.uint16(keep) | np.uint16(exponent)
        return bits.view(np.float16) if kind == "F16" else bits.view(np.uint8)
    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[kind]]
    data = _bits(rng, np, rows * (cols // block) * size).reshape(rows, cols // block, size)
    scale = np.array([SCALE_VALUE], dtype=np.float16).view(np.uint8)
    for at in SCALES[kind]:
        data[:, :, at : at + 2] = scale
    return data.reshape(rows, cols // block * size)


def _bits(rng, np, count: int):
    """`count` random bytes (uint8), drawn as 64-bit integers: 5x faster than drawing bytes one by one (256 MB in
    0.1 s against 0.6 s here)."""
    return rng.integers(0, 2**64, size=-(-count // 8), dtype=np.uint64).view(np.uint8)[:count]


def _file_type(gguf, weight_type: str) -> int:
    """general.file_type: llama.cpp's LLAMA_FTYPE of the whole file (informational; each tensor has its own)."""
    names = {"F32": "ALL_F32", "Q3_K": "MOSTLY_Q3_K_M", "Q4_K": "MOSTLY_Q4_K_M", "Q5_K": "MOSTLY_Q5_K_M"}
    return int(gguf.LlamaFileType[names.get(weight_type, f"MOSTLY_{weight_type}")])


def _vocabulary(w, size: int) -> None:
    """A placeholder SentencePiece ("llama") vocabulary of `size` tokens: <unk>, <s>, </s>, 256 byte tokens
    (llama.cpp looks up the newline byte), then plain tokens."""
    import gguf

    special = ["<unk>", "<s>", "</s>"]
    byte = [f"<0x{i:02X}>" for i in range(256)] if size >= 3 + 256 else []
    tokens = special + byte + [f"t{i}" for i in range(len(special) + len(byte), size)]
    tokens = tokens[:size]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * len(byte) + [gguf.TokenType.NORMAL] * (size - len(special) - len(byte))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * size)
    w.add_token_types(types[:size])
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
