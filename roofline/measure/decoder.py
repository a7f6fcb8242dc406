"""A plain PyTorch decoder with a model spec's exact shapes and random weights (for `roofline validate`).

No download and no transformers: embedding, attention with the spec's head counts and GQA grouping (SDPA with
enable_gqa, so KV heads are never copied), rotary or learned positions, gated or plain MLP, RMSNorm or
LayerNorm (2 or 4 per layer), biases where the spec has them, lm_head tied or not, and a KV cache
preallocated for prompt + output tokens that each step writes in place. Dense attention only.
"""

from typing import Any

from roofline.calc.attention import engine_support
from roofline.errors import UsageError
from roofline.specs.params import Architecture
from roofline.specs.records import Model

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def check_supported(model: Model) -> Architecture:
    """The architecture, or a one-line error for what the engine does not build."""
    why = engine_support(model)
    if why:
        raise UsageError(f"validate builds dense-attention, dense-MLP models; {model.id} {why}", "model")
    return model.arch


class Decoder:
    """Weights, a preallocated KV cache and prefill / decode steps for one batch."""

    def __init__(
        self,
        arch: Architecture,
        dtype: str,
        device: str,
        batch: int,
        max_tokens: int,
        seed: int = 0,
        weights: dict[str, Any] | None = None,
    ):
        import torch

        self.torch, self.a, self.batch, self.max_tokens = torch, arch, batch, max_tokens
        self.dtype = getattr(torch, TORCH_DTYPES[dtype])
        self.device = torch.device(device)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        a = arch
        if weights is None:  # random weights (building a 1B model takes seconds: reuse them across batches)
            q_width, kv_width = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
            tables = {"embedding": self._weight(a.vocab_size, a.hidden_size)}
            if a.position_embeddings == "learned":
                tables["position"] = self._weight(a.max_positions, a.hidden_size)
            head = tables["embedding"] if a.tied_embeddings else self._weight(a.vocab_size, a.hidden_size)
            weights = {
                "tables": tables,
                "layers": [self._layer(q_width, kv_width) for _ in range(a.layers)],
                "final_norm": self._norm(),
                "head": head,
            }
        self.weights, self.layers = weights["tables"], weights["layers"]
        self.final_norm, self.head = weights["final_norm"], weights["head"]
        self._shared = weights
        shape = (a.layers, batch, a.num_kv_heads, max_tokens, a.head_dim)
        self.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        if a.position_embeddings == "rope":
            self.cos, self.sin = self._rope_tables(max_tokens)

    # ---- construction

    def _weight(self, *shape: int, scale: float | None = None):
        scale = scale if scale is not None else shape[-1] ** -0.5
        values = self.torch.empty(shape, dtype=self.torch.float32).uniform_(-scale, scale, generator=self.generator)
        return values.to(self.dtype).to(self.device)

    def _bias(self, width: int, on: bool):
        return self._weight(width, scale=0.02) if on else None

    def _norm(self):
        width = self.a.hidden_size
        ones = self.torch.ones(width, dtype=self.dtype, device=self.device)
        return (ones, self.torch.zeros_like(ones)) if self.a.norm == "layernorm" else (ones, None)

    def _layer(self, q_width: int, kv_width: int) -> dict[str, Any]:
        a, h = self.a, self.a.hidden_size
        qkv_bias, all_bias = a.bias in ("qkv", "all"), a.bias == "all"
        layer = {
            "norms": [self._norm() for _ in range(a.norms_per_layer)],
            "q": (self._weight(q_width, h), self._bias(q_width, qkv_bias)),
            "k": (self._weight(kv_width, h), self._bias(kv_width, qkv_bias)),
            "v": (self._weight(kv_width, h), self._bias(kv_width, qkv_bias)),
            "o": (self._weight(h, q_width), self._bias(h, all_bias)),
            "down": (self._weight(h, a.intermediate_size), self._bias(h, all_bias)),
            "up": (self._weight(a.intermediate_size, h), self._bias(a.intermediate_size, all_bias)),
        }
        if a.mlp == "gated":
            layer["gate"] = (self._weight(a.intermediate_size, h), self._bias(a.intermediate_size, all_bias))
        return layer

    def _rope_tables(self, length: int):
        torch, d = self.torch, self.a.head_dim
        inverse = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        angles = torch.outer(torch.arange(length, dtype=torch.float32), inverse)
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(self.dtype).to(self.device), angles.sin().to(self.dtype).to(self.device)

    def shared_weights(self) -> dict[str, Any]:
        """The weights, to build a decoder for another batch without drawing them again."""
        return self._shared

    def parameters(self) -> int:
        """Stored parameters (a tied head counted once), as the calculator counts them."""
        tensors = [*self.weights.values(), self.final_norm[0], self.final_norm[1]]
        for layer in self.layers:
            for key, value in layer.items():
                tensors += [t for pair in value for t in pair] if key == "norms" else list(value)
        if not self.a.tied_embeddings:
            tensors.append(self.head)
        return sum(t.numel() for t in tensors if t is not None)

    def cache_bytes(self) -> int:
        return (self.k_cache.numel() + self.v_cache.numel()) * self.k_cache.element_size()

    # ---- the forward pass

    def _normed(self, x, norm):
        F = self.torch.nn.functional
        weight, bias = norm
        if self.a.norm == "layernorm":
            return F.layer_norm(x, (x.shape[-1],), weight, bias)
        return F.rms_norm(x, (x.shape[-1],), weight)

    def _rotate(self, x, positions):
        cos, sin = self.cos[positions], self.sin[positions]  # [T, d]
        half = x.shape[-1] // 2
        rotated = self.torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def forward(self, tokens, start: int):
        """Logits of the last position for tokens [B, T] at positions start..start+T-1; fills the KV cache."""
        torch, F, a = self.torch, self.torch.nn.functional, self.a
        B, T = tokens.shape
        positions = torch.arange(start, start + T, device=self.device)
        x = F.embedding(tokens, self.weights["embedding"])
        if a.position_embeddings == "learned":
            x = x + self.weights["position"][positions]
        for index, layer in enumerate(self.layers):
            norms = layer["norms"]
            h = self._normed(x, norms[0])
            q = F.linear(h, *layer["q"]).view(B, T, a.num_heads, a.head_dim).transpose(1, 2)
            k = F.linear(h, *layer["k"]).view(B, T, a.num_kv_heads, a.head_dim).transpose(1, 2)
            v = F.linear(h, *layer["v"]).view(B, T, a.num_kv_heads, a.head_dim).transpose(1, 2)
            if a.position_embeddings == "rope":
                q, k = self._rotate(q, positions), self._rotate(k, positions)
            self.k_cache[index, :, :, start : start + T] = k
            self.v_cache[index, :, :, start : start + T] = v
            keys, values = self.k_cache[index, :, :, : start + T], self.v_cache[index, :, :, : start + T]
            attended = F.scaled_dot_product_attention(
                q, keys, values, is_causal=T > 1, enable_gqa=a.num_heads != a.num_kv_heads
            )
            out = F.linear(attended.transpose(1, 2).reshape(B, T, -1), *layer["o"])
            x = x + (self._normed(out, norms[2]) if len(norms) == 4 else out)
            h = self._normed(x, norms[1])
            if a.mlp == "gated":
                h = F.silu(F.linear(h, *layer["gate"])) * F.linear(h, *layer["up"])
            else:
                h = F.gelu(F.linear(h, *layer["up"]), approximate="tanh")
            out = F.linear(h, *layer["down"])
            x = x + (self._normed(out, norms[3]) if len(norms) == 4 else out)
        last = self._normed(x[:, -1], self.final_norm)
        return F.linear(last, self.head)

    def prefill(self, prompt):
        """Run the prompt [B, P]; returns the first output tokens [B] (greedy)."""
        return self.forward(prompt, 0).argmax(dim=-1)

    def decode(self, tokens, position: int):
        """One decode step for tokens [B] at `position`; returns the next tokens [B]."""
        return self.forward(tokens[:, None], position).argmax(dim=-1)
