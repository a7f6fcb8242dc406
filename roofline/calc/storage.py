"""How a model's weights are stored: resident bytes, and bytes a decode step streams — from one dtype, a named
quantization format, or the exact bytes of a model file.

A quantization format stores each role at its own precision, scales included (bits per weight): the linear
layers at the format's bits, while the embedding, the lm_head, norms and biases follow the format's convention.
Sources: ggml's block sizes (Q4_0: 18 B / 32 weights = 4.5 bits; Q4_K: 144 B / 256 = 4.5; Q6_K: 210 B / 256 =
6.5625; Q8_0: 34 B / 32 = 8.5; llama.cpp's Q4_K_M / Q5_K_M mixes: 4.85 / 5.69 bits on the linear layers, its
quantize README's 4.84 / 5.68 overall for Llama-2-7B, whose embedding (Q4_K / Q5_K) and lm_head (Q6_K) are priced at
their own bits here: 4.88 / 5.70 overall), AWQ/GPTQ int4 with group 128 (4 bits + an fp16 scale and a 4-bit zero per 128
weights = 4.156 bits; embeddings and lm_head kept in 16 bits), FP8 (8 bits; one fp32 scale per tensor, or per
128 x 128 block: 8.002 bits), NVFP4 (4 bits + an fp8 scale per 16 = 4.5 bits), MXFP4 (4 bits + an 8-bit
power-of-two scale per 32 = 4.25 bits), the OCP MX and NVIDIA NVFP4 specs; mxfp4-moe (gpt-oss's checkpoint): MXFP4
routed experts, every other tensor in bf16.
ggml's block formats multiply against activations quantized to 8-bit blocks (ggml-cpu.c type_traits_cpu:
vec_dot_type Q8_0 for q4_0/q8_0, Q8_K for the k-quants; ggml-cuda's MMQ quantizes activations to q8_1), so
their matmuls run in int8; AWQ/GPTQ kernels (Marlin, exllama) dequantize to 16 bits.
"""

from typing import NamedTuple

from roofline.specs.params import expected_experts
from roofline.specs.records import Model


class Quant(NamedTuple):
    """A named weight format: bits per weight (scales included) of the linears, the embedding and the lm_head."""

    linear_bits: float
    embedding_bits: float
    head_bits: float
    compute: str  # the weight dtype it reports as: int4 / int8 / fp8 / fp4 (weight-only ints compute in 16 bits)
    activations: str | None = None  # the dtype its matmuls run in when the device has a peak for it (ggml: int8)
    expert_bits: float | None = None  # the routed experts' bits when they differ from the other linears'


QUANTS = {
    "q4_0": Quant(4.5, 4.5, 6.5625, "int4", "int8"),  # lm_head at Q6_K, as llama.cpp's quantize keeps output.weight
    "q4_k_m": Quant(4.85, 4.5, 6.5625, "int4", "int8"),
    "q5_k_m": Quant(5.69, 5.5, 6.5625, "int4", "int8"),
    "q6_k": Quant(6.5625, 6.5625, 6.5625, "int8", "int8"),
    "q8_0": Quant(8.5, 8.5, 8.5, "int8", "int8"),
    "awq": Quant(4.15625, 16, 16, "int4"),
    "gptq": Quant(4.15625, 16, 16, "int4"),
    "fp8": Quant(8.002, 16, 16, "fp8"),
    "nvfp4": Quant(4.5, 16, 16, "fp4"),
    "mxfp4": Quant(4.25, 16, 16, "fp4"),
    # gpt-oss's published checkpoint: MXFP4 routed experts, everything else bf16 (its model card, sec. 2.1).
    "mxfp4-moe": Quant(16, 16, 16, "fp4", expert_bits=4.25),
}
# KV cache formats beyond the plain dtypes: bytes per element, scales included (ggml's Q8_0 / Q4_0 blocks).
KV_BYTES = {"q8_0": 34 / 32, "q4_0": 18 / 32}


class Storage(NamedTuple):
    """Weight bytes of the whole model [B]: resident, streamed by every step, and per routed expert."""

    resident: float
    fixed_streamed: float  # read by every decode step (routed experts apart)
    per_expert: float  # one routed expert of one layer
    bits_per_weight: float  # resident bits per stored parameter (for the output)


def uniform(model: Model, bits: float) -> Storage:
    """Every parameter at `bits` (a plain dtype, or the --bits-per-weight override)."""
    b = bits / 8
    c = model.counts
    if c is None:
        return Storage(model.params * b, model.params * b, 0.0, bits)
    return Storage(c.total * b, c.streamed(0) * b, (c.expert + c.expert_biases) * b, bits)


def quantized(model: Model, q: Quant) -> Storage:
    """A named format: linears at its bits, embedding and lm_head at theirs, norms, biases and routers in 16 bits."""
    c = model.counts
    if c is None:
        return uniform(model, q.linear_bits)
    lin, emb, head, half = q.linear_bits / 8, q.embedding_bits / 8, q.head_bits / 8, 2.0
    shared = (c.attention + c.dense_mlp + c.shared_experts) * lin + (c.router + c.biases + c.norms) * half
    lm_head = c.head * (emb if c.tied else head)
    per_expert = c.expert * (q.expert_bits / 8 if q.expert_bits else lin) + c.expert_biases * half
    resident = (
        c.embedding * emb
        + c.position * half
        + shared
        + c.moe_layers * c.num_experts * per_expert
        + (0 if c.tied else lm_head)
    )
    return Storage(resident, shared + lm_head, per_expert, 8 * resident / c.total)


def from_file(model: Model) -> Storage:
    """The exact bytes of the model's file: routed experts' bytes spread evenly over experts and layers."""
    w, c = model.weights_file, model.counts
    experts = w.by_role.get("experts", 0)
    per_expert = experts / (c.moe_layers * c.num_experts) if c is not None and c.moe_layers and experts else 0.0
    stored = c.total if c is not None else model.params
    return Storage(float(w.total_bytes), float(w.streamed_bytes - experts), per_expert, 8 * w.total_bytes / stored)


def streamed(s: Storage, model: Model, tokens: float) -> float:
    """Bytes a step that routes `tokens` tokens reads: the fixed part and the distinct experts it touches."""
    c = model.counts
    if c is None or not c.moe_layers:
        return s.fixed_streamed
    return s.fixed_streamed + c.moe_layers * expected_experts(c.num_experts, c.experts_per_token, tokens) * s.per_expert
