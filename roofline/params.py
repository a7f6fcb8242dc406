"""Parameter anatomy of a decoder-only transformer: what is stored, multiplied and streamed.

Records are NamedTuples rather than dataclasses: immutable all the same, and ~10x cheaper to define,
which keeps `roofline estimate` within its start-up budget (benchmarks/startup.py).

Shapes follow the Hugging Face implementations (LlamaForCausalLM, GPT2LMHeadModel): per layer a
query projection hidden x (heads x head_dim), key and value projections hidden x (kv_heads x head_dim)
each (grouped-query attention), an output projection (heads x head_dim) x hidden, and an MLP of
3 matrices (gated, SwiGLU) or 2 (plain, GPT-2). Norms carry a weight (RMSNorm) or weight and bias
(LayerNorm) of size hidden: two per layer plus a final one.
"""


from typing import NamedTuple


class Architecture(NamedTuple):
    """The shape of a dense decoder-only transformer, as in a Hugging Face config.json."""

    layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    mlp: str = "gated"  # "gated" (3 matrices, SwiGLU) or "plain" (2 matrices, GPT-2)
    tied_embeddings: bool = False
    position_embeddings: str = "rope"  # "rope" or "learned"
    max_positions: int = 0  # rows of a learned position table
    norm: str = "rmsnorm"  # "rmsnorm" (weight) or "layernorm" (weight + bias)
    bias: str = "none"  # "none", "qkv" (Qwen2) or "all" (every linear layer, GPT-2)


class ParamCounts(NamedTuple):
    """Parameter counts by role [parameters]."""

    embedding: int  # input token table: a row lookup, resident but not streamed
    position: int  # learned position table: a row lookup too
    attention: int  # q, k, v, o weight matrices, all layers
    mlp: int  # MLP weight matrices, all layers
    biases: int  # biases of the linear layers, all layers
    norms: int  # norm weights (and LayerNorm biases), all layers + final
    head: int  # the lm_head matrix, vocab x hidden, whether tied or not
    tied: bool

    @property
    def total(self) -> int:
        """Stored parameters: a tied lm_head shares the embedding table and is stored once."""
        head = 0 if self.tied else self.head
        return self.embedding + self.position + self.attention + self.mlp + self.biases + self.norms + head

    @property
    def matmul(self) -> int:
        """Parameters multiplied per token (2 FLOP each): attention, MLP and lm_head matrices."""
        return self.attention + self.mlp + self.head

    @property
    def streamed(self) -> int:
        """Parameters read from memory per decode step: all but the lookup tables; lm_head read once."""
        return self.attention + self.mlp + self.biases + self.norms + self.head


def count_params(a: Architecture) -> ParamCounts:
    """Count parameters by role for architecture `a` (shapes as in the module docstring)."""
    q_width = a.num_heads * a.head_dim
    kv_width = a.num_kv_heads * a.head_dim
    attention = a.hidden_size * (q_width + 2 * kv_width) + q_width * a.hidden_size
    matrices = 3 if a.mlp == "gated" else 2
    mlp = matrices * a.hidden_size * a.intermediate_size
    biases = 0
    if a.bias in ("qkv", "all"):
        biases += q_width + 2 * kv_width
    if a.bias == "all":
        up = (2 if a.mlp == "gated" else 1) * a.intermediate_size
        biases += a.hidden_size + up + a.hidden_size  # attention out, MLP up (and gate), MLP down
    per_norm = a.hidden_size * (2 if a.norm == "layernorm" else 1)
    return ParamCounts(
        embedding=a.vocab_size * a.hidden_size,
        position=a.max_positions * a.hidden_size if a.position_embeddings == "learned" else 0,
        attention=a.layers * attention,
        mlp=a.layers * mlp,
        biases=a.layers * biases,
        norms=(2 * a.layers + 1) * per_norm,
        head=a.vocab_size * a.hidden_size,
        tied=a.tied_embeddings,
    )
