"""The roofline formulas, one small function per named quantity. Pure, SI units, no I/O.

References used below:
  [Roofline]   Williams, Waterman, Patterson, "Roofline: an insightful visual performance model", CACM 2009.
  [Kaplan]     Kaplan et al., "Scaling Laws for Neural Language Models", 2020, sec. 2.1 (forward = 2N FLOP/token).
  [Chinchilla] Hoffmann et al., "Training Compute-Optimal Large Language Models", 2022, appendix F.
  [Pope]       Pope et al., "Efficiently Scaling Transformer Inference", 2022, sec. 2-3 (KV cache, batching).
  [vLLM]       vLLM engine arguments: gpu_memory_utilization (memory fraction for weights + KV cache).
"""

from __future__ import annotations

import math


def ridge_point(peak_flop_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """Ridge point = F / W [FLOP/byte]: below it a step is memory-bound, above compute-bound. [Roofline]"""
    return peak_flop_per_s / bandwidth_bytes_per_s


def matmul_flops(matmul_params: float, tokens: float) -> float:
    """Dense matmul FLOPs = 2 x parameters x tokens [FLOP] (one multiply-add per weight per token). [Kaplan]"""
    return 2.0 * matmul_params * tokens


def attention_flops(layers: int, heads: int, head_dim: int, keys: float) -> float:
    """Attention FLOPs of one query token over `keys` keys = 4 x layers x heads x head_dim x keys [FLOP].

    QK^T and softmax(.)V are each 2 x heads x head_dim x keys per layer. [Chinchilla]
    """
    return 4.0 * layers * heads * head_dim * keys


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, kv_dtype_bytes: float) -> float:
    """KV cache per token = 2 x layers x kv_heads x head_dim x bytes [B/token] (one K and one V). [Pope]"""
    return 2.0 * layers * kv_heads * head_dim * kv_dtype_bytes


def kv_budget(memory_fraction: float, capacity_bytes: float, weight_bytes: float) -> float:
    """KV budget = memory fraction x capacity - resident weights [B]; no other hidden reserve. [vLLM]"""
    return memory_fraction * capacity_bytes - weight_bytes


def max_batch(budget_bytes: float, kv_bytes_per_sequence: float) -> int:
    """Largest batch whose KV caches fit = floor(budget / KV bytes per sequence) [sequences]."""
    if budget_bytes <= 0:
        return 0
    return math.floor(budget_bytes / kv_bytes_per_sequence * (1 + 1e-12))


def critical_batch(
    weight_bytes: float, flops_per_sequence: float, kv_bytes_per_sequence: float, peak: float, bandwidth: float
) -> int | None:
    """Smallest B with decode compute time >= memory time, KV traffic included [sequences]. [Pope]

    B f / F >= (w + B k) / W  <=>  B >= (w / W) / (f / F - k / W) with w the weight bytes; None when f / F <= k / W,
    i.e. when a sequence's own KV traffic keeps its intensity f / k under the ridge at any batch.
    """
    margin = flops_per_sequence / peak - kv_bytes_per_sequence / bandwidth
    if margin <= 0:
        return None
    return max(1, math.ceil(weight_bytes / bandwidth / margin * (1 - 1e-12)))


def mean_of_max_linear(a0: float, a1: float, b0: float, b1: float, n: int) -> float:
    """Mean over j = 0..n-1 of max(a0 + a1 j, b0 + b1 j), in closed form (n >= 1).

    Decode step j has compute and memory times linear in j (the context grows by one token per step),
    so the mean step time is exact without iterating over the steps.
    """
    d0, d1 = a0 - b0, a1 - b1
    total = n * b0 + b1 * n * (n - 1) / 2  # sum of b
    # Steps where a > b: j > r for d1 > 0, j < r for d1 < 0, with r = -d0 / d1 clamped to [-1, n].
    r = -d0 / d1 if d1 else (-math.inf if d0 > 0 else math.inf)
    r = min(max(r, -1.0), float(n))
    if d1 >= 0:
        lo, hi = math.floor(r) + 1, n - 1
    else:
        lo, hi = 0, math.ceil(r) - 1
    lo, hi = max(lo, 0), min(hi, n - 1)
    k = hi - lo + 1
    if k > 0:
        total += k * d0 + d1 * (lo + hi) * k / 2  # plus the positive part of a - b
    return total / n


def mean_of_max_piecewise(a, b, n: int, breakpoints: list[float]) -> tuple[float, float, float]:
    """(mean of max(a, b), mean of a, mean of b) over steps j = 0..n-1, for a(j), b(j) linear between
    `breakpoints` (where a sliding window fills). Each linear piece uses mean_of_max_linear."""
    cuts = sorted({0, n, *(math.ceil(x) for x in breakpoints if 0 < x < n)})
    total_max = total_a = total_b = 0.0
    for start, end in zip(cuts, cuts[1:]):
        m = end - start
        a0, b0 = a(start), b(start)
        a1, b1 = (a(start + 1) - a0, b(start + 1) - b0) if m > 1 else (0.0, 0.0)
        total_max += m * mean_of_max_linear(a0, a1, b0, b1, m)
        total_a += m * (a0 + a1 * (m - 1) / 2)
        total_b += m * (b0 + b1 * (m - 1) / 2)
    return total_max / n, total_a / n, total_b / n


def ring_allreduce_seconds(message_bytes: float, devices: int, link_bytes_per_s: float, latency_s: float) -> float:
    """Ring all-reduce time = 2 (N - 1) / N x message / link bandwidth + latency [s].

    Each device sends and receives 2 (N - 1) chunks of message / N (reduce-scatter, then all-gather);
    the bus-bandwidth convention of nccl-tests (busbw = algbw x 2 (N - 1) / N) measures the link term.
    """
    return 2.0 * (devices - 1) / devices * message_bytes / link_bytes_per_s + latency_s


def smallest_batch_where(condition, limit: int = 1 << 24) -> int | None:
    """Smallest B in 1..limit with condition(B) true, for a condition that stays true once true; else None."""
    if not condition(limit):
        return None
    high = 1
    while not condition(high):
        high *= 2
    low = high // 2 + 1 if high > 1 else 1
    while low < high:
        mid = (low + high) // 2
        if condition(mid):
            high = mid
        else:
            low = mid + 1
    return low


def output_tokens_per_s(batch: int, output_tokens: int, request_latency_s: float) -> float:
    """End-to-end output throughput = B x O / request latency [tokens/s]: a batch served together, its prefill
    included, as engine benchmarks count it (TensorRT-LLM's and vLLM's throughput benchmarks)."""
    return batch * output_tokens / request_latency_s


def percentile(values: list[float], q: float) -> float:
    """The q-th quantile (0..1) with linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (position - low) * (ordered[high] - ordered[low])


def weighted_percentiles(pairs: list[tuple[float, float]], qs: list[float]) -> list[float]:
    """The qs-th quantiles (0..1) of values carrying weights, (value, weight) pairs: for each q the smallest value
    whose cumulative weight reaches q of the total (a run of equal gaps counts once per gap). One sort and one pass
    for all of them."""
    ordered = sorted(pairs)
    total = sum(w for _, w in ordered)
    wanted = sorted(range(len(qs)), key=lambda k: qs[k])  # the qs in ascending order, by position
    found = [ordered[-1][0] if ordered else math.nan] * len(qs)
    reached, n = 0.0, 0
    for value, weight in ordered:
        reached += weight
        while n < len(wanted) and reached >= qs[wanted[n]] * total * (1 - 1e-12):
            found[wanted[n]] = value
            n += 1
        if n == len(wanted):
            break
    return found
