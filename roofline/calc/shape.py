"""Per-step work of one model at chosen dtypes and tensor parallelism: bytes, FLOPs, KV, communication.

Everything here is per device when tp > 1 (weights and KV split over the devices, FLOPs too), in SI units.
Conventions: a decode token at cached context c attends over c + 1 keys (its own included) and reads the
cached K and V; a sliding-window layer keeps at most `window` tokens and attends over at most `window`
keys; MLA reads its latent cache and decodes in the absorbed form (DeepSeek-V2 sec. 2.1.3), prefill runs
the naive form; MoE steps read the distinct experts their tokens touch (params.expected_experts).
"""

from roofline.calc import formulas as f
from roofline.calc.attention import attention
from roofline.calc.storage import Storage, streamed, uniform
from roofline.specs.records import Model

ACTIVATION_BYTES = {"fp32": 4.0, "tf32": 4.0}  # all-reduce message element size; 2 B (bf16) otherwise


class Shape:
    """One model's per-step quantities for given dtypes and tensor parallelism (SI units, per device)."""

    def __init__(
        self,
        model: Model,
        storage: "Storage | float",
        kv_dtype: str,
        compute_dtype: str,
        tp: int = 1,
        ep: int = 1,
        stream_scale: float = 1.0,
    ):
        """`storage`: how the weights are stored (roofline.calc.storage), or plain bits per weight. `ep` > 1 spreads
        whole routed experts over ep devices (expert parallelism); everything else splits over tp as before.
        `stream_scale`: the time a weight byte takes to stream against any other byte (an engine whose kernels for
        the weights' format reach bandwidth share w where its other reads reach b: b / w); the streamed weight bytes
        are priced as that many, while `weights` (memory) stays in bytes."""
        self.model, self.tp, self.ep, self.stream_scale = model, tp, ep, stream_scale
        # Experts spread over max(ep, tp) devices (ep < tp: each expert group tensor-split over tp / ep devices, as
        # SGLang's ep_size); ep > tp runs attention data-parallel in ep / tp groups of tp devices, each holding its
        # share of the sequences (vLLM's EP = DP x TP).
        self.expert_split = max(ep, tp)
        self.dp = ep // tp if ep > tp else 1
        self.storage = storage if isinstance(storage, Storage) else uniform(model, storage)
        self.activation_bytes = ACTIVATION_BYTES.get(compute_dtype, 2.0)
        self.counts = model.counts
        self.attention = att = attention(model, kv_dtype)
        self.layers, self.hidden = att.layers, model.arch.hidden_size if model.arch else 0
        self.window, self.full_layers = att.window, att.full_layers
        self.key_flops_decode, self.key_flops_prefill = att.key_flops_decode, att.key_flops_prefill
        self.kv_share = att.kv_share(tp)
        # The KV cache and the keys a token attends over come from the attention seam, the one implementation.
        self.kv_cached, self.kv_own, self.keys = att.kv_cached, att.kv_own, att.keys
        c = self.counts  # the per-token constants, computed once: a sweep calls the step formulas thousands of times
        self.matmul = float(c.matmul) if c else model.params
        self.head = float(c.head) if c else 0.0
        self.routed = float(c.moe_layers * c.experts_per_token * c.expert) if c is not None and c.moe_layers else 0.0
        self.expert_bytes = (
            c.moe_layers * c.num_experts * self.storage.per_expert if c is not None and c.moe_layers else 0.0
        )
        self._moe = bool(c is not None and c.moe_layers)

    # ---- weights

    @property
    def weights(self) -> float:
        """Resident weight bytes per device: the routed experts over expert_split, the rest over tp."""
        return (self.storage.resident - self.expert_bytes) / self.tp + self.expert_bytes / self.expert_split

    def streamed(self, tokens: float) -> float:
        """Weight bytes per device read by a step that routes `tokens` tokens (times stream_scale)."""
        fixed = self.storage.fixed_streamed
        if not self._moe:
            return self.stream_scale * fixed / self.tp
        routed = (streamed(self.storage, self.model, tokens) - fixed) / self.expert_split
        return self.stream_scale * (fixed / self.tp + routed)

    def group(self, batch: int) -> int:
        """Sequences on the busiest attention group: the batch split over the dp groups (all of it when dp = 1)."""
        return batch if self.dp == 1 else -(-batch // self.dp)

    def matmul_flops(self, batch: int, tokens: float, weights: float | None = None) -> float:
        """Matmul FLOPs per device when each of `batch` sequences runs `tokens` tokens through `weights` (default:
        all active matmul weights): the routed experts see the whole batch over expert_split devices, the rest its
        attention group's sequences over tp."""
        weights = self.matmul if weights is None else weights
        if not self.routed:
            return (
                2.0 * weights * batch * tokens / self.tp
            )  # = formulas.matmul_flops / tp, inlined: the hottest line of a sweep
        routed = min(self.routed, weights)
        return (
            f.matmul_flops(weights - routed, self.group(batch) * tokens) / self.tp
            + f.matmul_flops(routed, batch * tokens) / self.expert_split
        )

    # ---- KV cache

    @property
    def kv_per_token(self) -> float:
        """KV bytes one token adds over all layers (before any window caps it), whole model."""
        return self.attention.kv_per_token

    @property
    def sliding(self) -> int:
        return self.layers - self.full_layers

    # ---- per-step work (per device)

    def decode_flops(self, batch: int, cached: float) -> float:
        """FLOPs per device of one decode step: 2 x active matmul params + attention, per sequence."""
        return self.matmul_flops(batch, 1) + self.group(batch) * self.key_flops_decode * self.keys(cached) / self.tp

    def decode_bytes(self, batch: int, cached: float) -> float:
        """Bytes per device of one decode step: weights its tokens touch, KV read at `cached`, one token written."""
        kv = self.kv_cached(cached) + self.kv_per_token
        return self.streamed(batch) + self.group(batch) * kv * self.kv_share

    def decode_breakpoints(self, prompt: int) -> list[float]:
        """Steps j where the per-step work changes slope: where a window fills (cached = W - 1 and W)."""
        return [self.window - 1 - prompt, self.window - prompt] if self.window else []

    def prefill_flops(self, batch: int, prompt: int, cached: int = 0, logits: bool = True) -> float:
        """FLOPs per device of the prefill of tokens cached+1..prompt: each through the matmuls, the lm_head on the
        last position only (`logits`: a chunk that ends the prompt), causal attention over the whole context
        (windowed on sliding layers)."""
        dense = self.matmul_flops(batch, prompt - cached, self.matmul - self.head)
        head = self.group(batch) * f.matmul_flops(self.head, 1) / self.tp if logits else 0.0
        return dense + head + self.prefill_attention_flops(batch, prompt, cached)

    def prefill_attention_flops(self, batch: int, prompt: int, cached: int = 0) -> float:
        """The attention part of prefill_flops: queries cached+1..prompt, each over its causal keys."""
        pairs = self.full_layers * (prompt * (prompt + 1) / 2 - cached * (cached + 1) / 2) + self.sliding * (
            windowed_pairs(prompt, self.window) - windowed_pairs(cached, self.window)
        )
        return self.group(batch) * self.key_flops_prefill * pairs / self.tp

    def prefill_bytes(self, batch: int, prompt: int, cached: int = 0) -> float:
        """Bytes per device of the prefill of tokens cached+1..prompt: weights its tokens touch, once, the cached
        tokens' KV read and the rest written."""
        kv = self.kv_cached(cached) + (self.kv_cached(prompt) - self.kv_cached(cached))
        return self.streamed(batch * (prompt - cached)) + self.group(batch) * kv * self.kv_share

    def verify_flops(self, batch: int, cached: float, tokens: int) -> float:
        """FLOPs per device of one step that runs `tokens` new tokens per sequence (speculative verification,
        a chunk of decodes): each token through the matmuls, attending over the cache and the tokens before it."""
        keys = sum(self.keys(cached + j) for j in range(tokens))
        return self.matmul_flops(batch, tokens) + self.group(batch) * self.key_flops_decode * keys / self.tp

    def verify_bytes(self, batch: int, cached: float, tokens: int) -> float:
        """Bytes per device of that step: the weights its tokens touch, once; each sequence's KV read once and
        `tokens` tokens' KV written."""
        kv = self.kv_cached(cached) + tokens * self.kv_per_token
        return self.streamed(batch * tokens) + self.group(batch) * kv * self.kv_share

    def comm_seconds(
        self, tokens: int, link_bytes_per_s: float | None, latency_s: float, ep_link: tuple | None = None
    ) -> float:
        """Communication of one step: the tensor-parallel all-reduces plus the expert-parallel all-to-alls."""
        return self.tp_seconds(tokens, link_bytes_per_s, latency_s) + self.ep_seconds(
            tokens, *(ep_link or (link_bytes_per_s, latency_s))
        )

    def tp_seconds(self, tokens: int, link_bytes_per_s: float | None, latency_s: float) -> float:
        """Tensor-parallel communication of one step: two all-reduces per layer of the activations of the step's
        `tokens` tokens that fall in one attention group."""
        if self.tp == 1:
            return 0.0
        message = -(-tokens // self.dp) * self.hidden * self.activation_bytes
        return self.layers * 2 * f.ring_allreduce_seconds(message, self.tp, link_bytes_per_s, latency_s)

    def ep_seconds(self, tokens: int, link_bytes_per_s: float | None, latency_s: float) -> float:
        """Expert-parallel communication of one step: per MoE layer a dispatch and a combine all-to-all. Each of
        the ep devices sends its 1 / ep of the step's `tokens`, k copies of hidden x bytes each, to the experts
        outside its attention group: a share (ep - tp) / ep of them (ep <= tp: every device holds every token,
        and the combine is tp's all-reduce)."""
        c = self.counts
        if self.ep <= self.tp or c is None or not c.moe_layers:
            return 0.0
        per_device = (
            tokens / self.ep * self.hidden * self.activation_bytes * c.experts_per_token * (self.ep - self.tp) / self.ep
        )
        return c.moe_layers * 2 * (per_device / link_bytes_per_s + latency_s)


def windowed_pairs(tokens: int, window: int) -> float:
    """Causal (query, key) pairs of a `tokens`-long prompt with at most `window` keys per query:
    sum_i=1..P min(i, W) = P (P + 1) / 2 if P <= W, else W (W + 1) / 2 + (P - W) W."""
    if not window or tokens <= window:
        return tokens * (tokens + 1) / 2
    return window * (window + 1) / 2 + (tokens - window) * window
