"""Parameter anatomy of a decoder-only transformer: what is stored, multiplied per token and streamed.

Records are NamedTuples rather than dataclasses: immutable all the same, and ~10x cheaper to define,
which keeps `roofline estimate` within its start-up budget (benchmarks/startup.py).

Shapes follow the Hugging Face implementations:
- Attention (LlamaAttention): q hidden x (heads x head_dim), k and v hidden x (kv_heads x head_dim) each
  (GQA; MQA is kv_heads = 1), o (heads x head_dim) x hidden.
- MLA (DeepseekV3Attention): q_a hidden x q_lora_rank, its norm, q_b q_lora_rank x heads x (nope + rope)
  (or q hidden x heads x (nope + rope) without q_lora_rank); kv_a hidden x (kv_lora_rank + rope), its norm,
  kv_b kv_lora_rank x heads x (nope + v_head_dim); o heads x v_head_dim x hidden.
- MLP: 3 matrices (gated, SwiGLU) or 2 (plain, GPT-2). MoE layers hold E routed experts of that shape with
  expert_intermediate_size, optional shared experts, and a router hidden x E (MixtralSparseMoeBlock,
  DeepseekV3MoE); the first `first_dense_layers` layers keep a dense MLP of intermediate_size.
- Norms carry a weight (RMSNorm) or weight and bias (LayerNorm) of size hidden: norms_per_layer per layer
  (2; Gemma-2 has 4) plus a final one.
"""

from typing import NamedTuple


class Architecture(NamedTuple):
    """The shape of a decoder-only transformer, as in a Hugging Face config.json."""

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
    bias: str = "none"  # "none", "qkv" (Qwen2) or "all" (every linear layer: GPT-2, gpt-oss)
    norms_per_layer: int = 2
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank > 0 turns it on.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0  # 0: a plain q projection
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Mixture of experts; num_experts > 0 turns it on.
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    expert_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    first_dense_layers: int = 0
    # Sliding-window attention: these layers keep (and attend over) at most `sliding_window` tokens.
    sliding_window: int = 0
    sliding_layers: tuple[int, ...] = ()
    # Multi-token-prediction modules (DeepSeek-V3's num_nextn_predict_layers): drafters for --mtp, not counted here.
    mtp_layers: int = 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense_layers if self.num_experts else 0


class ParamCounts(NamedTuple):
    """Parameter counts by role [parameters]; experts are counted per expert, for routing."""

    embedding: int  # input token table: a row lookup, resident but not streamed
    position: int  # learned position table: a row lookup too
    attention: int  # attention weight matrices, all layers (MLA's latent norms included)
    dense_mlp: int  # dense MLP weights, all dense layers
    shared_experts: int  # shared-expert weights, all MoE layers
    router: int  # router weights (and biases), all MoE layers
    biases: int  # biases of attention and dense / shared MLP linears
    norms: int  # norm weights (and LayerNorm biases), all layers + final
    head: int  # the lm_head matrix, vocab x hidden, whether tied or not
    tied: bool
    moe_layers: int
    num_experts: int
    experts_per_token: int
    expert: int  # one routed expert: weights
    expert_biases: int  # one routed expert: biases

    @property
    def experts(self) -> int:
        """All routed experts of all MoE layers."""
        return self.moe_layers * self.num_experts * (self.expert + self.expert_biases)

    @property
    def total(self) -> int:
        """Stored parameters: a tied lm_head shares the embedding table and is stored once."""
        head = 0 if self.tied else self.head
        dense = self.attention + self.dense_mlp + self.shared_experts + self.router + self.biases + self.norms
        return self.embedding + self.position + dense + self.experts + head

    @property
    def active(self) -> int:
        """Parameters one token uses: the total less the routed experts it is not sent to (= total if dense)."""
        unused = self.moe_layers * (self.num_experts - self.experts_per_token) * (self.expert + self.expert_biases)
        return self.total - unused

    @property
    def matmul(self) -> int:
        """Weights multiplied per token (2 FLOP each): attention, dense MLP, k routed + shared experts, router,
        lm_head."""
        routed = self.moe_layers * self.experts_per_token * self.expert
        return self.attention + self.dense_mlp + routed + self.shared_experts + self.router + self.head

    def streamed(self, tokens: float) -> float:
        """Parameters read per step that routes `tokens` tokens: all but the lookup tables (lm_head once),
        with routed experts counted by the distinct experts those tokens touch (see expected_experts)."""
        always = (
            self.attention + self.dense_mlp + self.shared_experts + self.router + self.biases + self.norms + self.head
        )
        if not self.moe_layers:
            return float(always)
        touched = expected_experts(self.num_experts, self.experts_per_token, tokens)
        return always + self.moe_layers * touched * (self.expert + self.expert_biases)


def expected_experts(experts: int, per_token: int, tokens: float) -> float:
    """Distinct experts one MoE layer reads for `tokens` tokens under uniform routing = E (1 - (1 - k/E)^n).

    Each token picks k of E experts; an expert is missed by one token with probability 1 - k/E, so by all
    n tokens with (1 - k/E)^n. One token: k experts; many tokens: all E.
    """
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)


def count_params(a: Architecture) -> ParamCounts:
    """Count parameters by role for architecture `a` (shapes as in the module docstring)."""
    matrices = 3 if a.mlp == "gated" else 2
    ffn_biases = (
        (lambda width: (2 if a.mlp == "gated" else 1) * width + a.hidden_size) if a.bias == "all" else (lambda width: 0)
    )
    attention, attention_biases = _attention(a)
    dense_layers = a.layers - a.moe_layers
    shared_width = a.num_shared_experts * (a.shared_expert_intermediate_size or a.expert_intermediate_size)
    moe = a.moe_layers > 0
    per_norm = a.hidden_size * (2 if a.norm == "layernorm" else 1)
    return ParamCounts(
        embedding=a.vocab_size * a.hidden_size,
        position=a.max_positions * a.hidden_size if a.position_embeddings == "learned" else 0,
        attention=a.layers * attention,
        dense_mlp=dense_layers * matrices * a.hidden_size * a.intermediate_size,
        shared_experts=a.moe_layers * matrices * a.hidden_size * shared_width,
        router=a.moe_layers * (a.hidden_size + (1 if a.bias == "all" else 0)) * a.num_experts,
        biases=a.layers * attention_biases
        + dense_layers * ffn_biases(a.intermediate_size)
        + (a.moe_layers * ffn_biases(shared_width) if shared_width else 0),
        norms=(a.norms_per_layer * a.layers + 1) * per_norm,
        head=a.vocab_size * a.hidden_size,
        tied=a.tied_embeddings,
        moe_layers=a.moe_layers,
        num_experts=a.num_experts,
        experts_per_token=a.experts_per_token,
        expert=matrices * a.hidden_size * a.expert_intermediate_size if moe else 0,
        expert_biases=ffn_biases(a.expert_intermediate_size) if moe else 0,
    )


def _attention(a: Architecture) -> tuple[int, int]:
    """(weights incl. MLA's latent norms, biases) of one layer's attention."""
    h, heads = a.hidden_size, a.num_heads
    if a.mla:
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * heads * qk if a.q_lora_rank else h * heads * qk
        kv = (
            h * (a.kv_lora_rank + a.qk_rope_head_dim)
            + a.kv_lora_rank
            + a.kv_lora_rank * heads * (a.qk_nope_head_dim + a.v_head_dim)
        )
        return q + kv + heads * a.v_head_dim * h, 0
    q_width, kv_width = heads * a.head_dim, a.num_kv_heads * a.head_dim
    weights = h * (q_width + 2 * kv_width) + q_width * h
    biases = (q_width + 2 * kv_width if a.bias in ("qkv", "all") else 0) + (h if a.bias == "all" else 0)
    return weights, biases
