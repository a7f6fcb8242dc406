"""The bytes a prefill's elementwise kernels move, and their time at the profile's measured rates.

Between its matmuls an eager prefill runs norms, rotary, the MLP activation, residual adds and copies over
tokens x width activations: at a 2048-token prefill of a 0.5B model, ~190 MB a layer, 7% of a bf16 prefill on
a 2-core Zen 5 VM (torch.profiler: 0.34 s of 4.97 s; elementwise kernels there run at 4-50 GB/s, not at memory
bandwidth). Each kernel reads and writes whole tensors (out of place, as roofline.measure.decoder runs them):
bytes = elements x element size x the tensors it touches. A decode step's are a few rows: its engine's fixed
costs (roofline.measure.engine_costs) hold them. Kernels are grouped by the rate that prices them, measured by
roofline.measure.kernels.elementwise: "binary" (multiply, add, copy), "silu", "tanh", "gelu_tanh", "rms_norm",
"layer_norm". Not counted: the biases (fused in addmm), the final norm (one row), table lookups.
"""

from roofline.specs.params import Architecture

# Transformers' GPT-2 GELU ("gelu_new", transformers.activations.NewGELUActivation):
# 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), 8 kernels: tanh (1 read + 1 write) and 7 others,
# pow, x 0.044715, x sqrt(2 / pi), 1 + and 0.5 x (2 tensors each), x + and the final product (3 each).
NEW_GELU_PASSES = {"tanh": 2, "binary": 5 * 2 + 2 * 3}


def prefill_bytes(a: Architecture, batch: int, prompt: int, element: float, engine: str = "eager") -> dict[str, float]:
    """Bytes [B] each kernel class moves in a prefill of `batch` x `prompt` tokens (all layers), `element` bytes per
    activation value; `engine` "transformers" runs GPT-2's GELU as NEW_GELU_PASSES."""
    n = batch * prompt  # tokens
    h, i = a.hidden_size, a.intermediate_size
    q, kv = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    passes: dict[str, float] = {"binary": 0.0}
    norm = "rms_norm" if a.norm == "rmsnorm" else "layer_norm"
    passes[norm] = a.layers * a.norms_per_layer * 2 * n * h  # each norm: read x, write the result
    layer = 2 * 3 * n * h  # two residual adds: read both, write one
    layer += 2 * n * q  # the heads merged back: attention's output copied
    layer += 2 * 2 * n * kv  # K and V copied into the cache
    if a.position_embeddings == "rope":
        # rotate(x) per tensor of width w: negated half (w/2 read + w/2 write), the concatenation (2 w), x * cos
        # and rotated * sin (2 w each), their sum (3 w): 10 n w; the cos and sin rows gathered (read + write
        # [prompt, head_dim] each) and read by the products: 6 prompt x head_dim
        layer += sum(10 * n * w + 6 * prompt * a.head_dim for w in (q, kv))
    if a.mlp == "gated":
        passes["silu"] = a.layers * 2 * n * i
        layer += 3 * n * i  # silu(gate) * up
    elif engine == "transformers" and a.position_embeddings == "learned":
        passes["tanh"] = a.layers * NEW_GELU_PASSES["tanh"] * n * i
        layer += NEW_GELU_PASSES["binary"] * n * i
    else:
        passes["gelu_tanh"] = a.layers * 2 * n * i
    steps = 2 * n * h  # the embedding rows gathered: read, write
    if a.position_embeddings == "learned":
        steps += 2 * prompt * h + 2 * n * h + prompt * h  # the position rows gathered; x + them: read both, write
    passes["binary"] = a.layers * layer + steps
    return {kernel: count * element for kernel, count in passes.items()}


def prefill_seconds(rates: dict[str, float], moved: dict[str, float]) -> float:
    """Seconds of the elementwise kernels: each class's bytes at its measured bytes/s."""
    return sum(nbytes / rates[kernel] for kernel, nbytes in moved.items() if nbytes)
