"""The cost of one engine step that mixes decode tokens at their own contexts with prefill chunks at their offsets:
the same per-step work as estimate (roofline.calc.shape), from aggregates so the simulator prices a step in O(1).

A step runs T tokens: n decodes (each attending over its cached context c + 1 and reading its KV) and prefill
chunks covering prompt positions s+1..e (attending causally over everything before them, reading the KV of the s
earlier tokens). Weights are read once for all T tokens (the experts they touch, for MoE); the lm_head runs for the
decodes and the chunks that end a prompt. Time = max(FLOPs / F, bytes / W) + the step's collectives + an engine's
fixed cost per step (a preset's, or a measured engine's at the step's batch). Per device; attention groups
(ep > tp) split the sequences evenly.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

from roofline.calc import formulas as f
from roofline.calc.llamacpp import Decode, series
from roofline.calc.shape import windowed_pairs


class Decodes(NamedTuple):
    """The running decodes of a step as sums over them: count, Σ keys(c) over layers, Σ KV bytes they read."""

    n: int
    keys: float  # Σ over sequences of the keys a token attends over, summed over layers
    kv_read: float  # Σ over sequences of the cached KV bytes read (whole model)


class StepModel:
    """Prices steps of one prepared setup (roofline.calc.prepare.Prepared), with an engine's fixed cost per step."""

    # the full-attention layers' share of a token in the KV budget where vLLM's hybrid cache pads the layer groups
    # (simulate.replica_setup sets it; replica.full_share reads it); None: their share of the KV bytes
    budget_full_share: float | None = None

    def __init__(self, p: Any, overhead_s: float = 0.0, measured: Any = None, engine_step: Any = None):
        s = self.shape = p.shape
        # an engine's measured step (llama.cpp: roofline.calc.llamacpp.Step): (rows, logit rows, matmul FLOPs, attention
        # FLOPs, KV bytes, decode=Decode) -> seconds, and .breaks(rows, keys, keys slope, steps) of a decode run
        self.engine_step = engine_step
        self.F, self.W, self.link, self.latency, self.ep_link = p.F, p.W, p.link, p.latency, p.ep_link
        self.overhead = overhead_s
        self.measured = measured  # batch -> seconds: a measured engine's fixed cost per step (None: none)
        self.head = f.matmul_flops(s.head, 1) / s.tp  # one token's logits
        self.key_decode, self.key_prefill = s.key_flops_decode / s.tp / s.dp, s.key_flops_prefill / s.tp / s.dp
        self.kv_scale = s.kv_share / s.dp
        self.kv_token = s.kv_per_token
        att = s.attention
        self.full, self.sliding, self.window = att.full_layers, att.sliding_layers, att.window
        self.kv_full, self.kv_slide = att.kv_layer_bytes * att.full_layers, att.kv_layer_bytes * att.sliding_layers

    def work(self, d: Decodes, chunks: list[tuple[int, int, bool]]) -> tuple[float, float, int]:
        """(FLOPs, bytes, tokens) of a step: the decodes `d` and `chunks` of (start, end, ends the prompt)."""
        s = self.shape
        tokens, logits, matmuls, attention, kv = self.parts(d, chunks)
        return matmuls + self.head * logits + attention, s.streamed(tokens) + self.kv_scale * kv, tokens

    def parts(self, d: Decodes, chunks: list[tuple[int, int, bool]]) -> tuple[int, int, float, float, float]:
        """(tokens, logit rows, matmul FLOPs without the lm_head, attention FLOPs, KV bytes read and written over
        the whole model) of a step."""
        s = self.shape
        tokens = d.n + sum(e - b for b, e, _ in chunks)
        logits = d.n + sum(1 for _, _, last in chunks if last)
        attention = self.key_decode * d.keys
        kv = d.kv_read + d.n * self.kv_token
        for b, e, _ in chunks:
            pairs = self.full * (e * (e + 1) / 2 - b * (b + 1) / 2)
            if self.sliding:
                pairs += self.sliding * (windowed_pairs(e, self.window) - windowed_pairs(b, self.window))
            attention += self.key_prefill * pairs
            kv += s.kv_cached(e)  # the earlier tokens' KV read, the chunk's written
        return tokens, logits, s.matmul_flops(tokens, 1, s.matmul - s.head), attention, kv

    def seconds(self, d: Decodes, chunks: list[tuple[int, int, bool]], batch: list | None = None) -> float:
        """A step's seconds; `batch` (llama.cpp with a KV stream per slot: roofline.calc.llamacpp.Entry, in the
        server's order) prices it ubatch by ubatch."""
        if self.engine_step is not None:
            return self._engine_seconds(d, chunks, batch)
        flops, nbytes, tokens = self.work(d, chunks)
        return max(flops / self.F, nbytes / self.W) + self.comm(tokens) + self.fixed(d.n + len(chunks))

    def _engine_seconds(self, d: Decodes, chunks: list[tuple[int, int, bool]], batch: list | None = None) -> float:
        """A step priced by the engine's own measured cost (llama.cpp): its rows, logit rows, matmul and attention
        FLOPs and the KV bytes it reads, apart."""
        tokens, logits, matmuls, attention, kv = self.parts(d, chunks)
        decode = Decode(d.n, d.keys, self.key_decode * d.keys)
        return self.engine_step(tokens, logits, matmuls, attention, self.kv_scale * kv, decode=decode, batch=batch)

    def fixed(self, sequences: int) -> float:
        """The step's fixed cost with `sequences` in it: the preset's, or the measured engine's at that batch."""
        return self.overhead + (self.measured(max(sequences, 1)) if self.measured is not None else 0.0)

    def comm(self, tokens: int) -> float:
        return self.shape.comm_seconds(tokens, self.link, self.latency, self.ep_link)

    def decode_run(
        self, n: int, keys: float, kv_read: float, keys_slope: float, kv_slope: float, batch: list | None = None
    ) -> Callable[[int], tuple[float, float, float]]:
        """m -> (total seconds, first step, last step) of m decode-only steps of n sequences whose Σ keys and Σ KV
        read grow by `keys_slope` and `kv_slope` a step: both roofs are linear in the step, so the sum is exact.
        The step's constants are priced once, for a search over m. `batch`: as seconds'."""
        if self.engine_step is not None:  # linear in Σ keys and Σ KV read between its breaks: arithmetic series

            def at(j: int) -> float:
                return self.seconds(Decodes(n, keys + j * keys_slope, kv_read + j * kv_slope), [], batch)

            first = at(0)

            def engine_run(m: int) -> tuple[float, float, float]:
                total = series(at, m, self.engine_step.breaks(n, keys, keys_slope, m, batch))
                return total, first, at(m - 1)

            return engine_run
        s = self.shape
        c = self.comm(n) + self.fixed(n)
        a0 = (s.matmul_flops(n, 1) + self.key_decode * keys) / self.F
        a1 = self.key_decode * keys_slope / self.F
        b0 = (s.streamed(n) + self.kv_scale * (kv_read + n * self.kv_token)) / self.W
        b1 = self.kv_scale * kv_slope / self.W
        mean = f.mean_of_max_linear

        def run(m: int) -> tuple[float, float, float]:
            last = m - 1
            return m * (mean(a0, a1, b0, b1, m) + c), max(a0, b0) + c, max(a0 + a1 * last, b0 + b1 * last) + c

        return run

    def keys_of(self, c: int) -> float:
        """Keys one decode token attends over with c cached tokens, summed over layers (attention.keys)."""
        return self.shape.keys(c)
