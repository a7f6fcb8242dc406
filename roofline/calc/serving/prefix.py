"""Prefix caching: a prompt whose first N tokens are cached computes only P - N tokens, attending over all P
(causal pairs P(P+1)/2 - N(N+1)/2); it reads the N cached tokens' KV and writes the rest. A prefix shared by
the batch is held once in memory (reads stay per sequence: no cross-sequence kernel is assumed); on a
sliding-window layer the shared copy holds at most `window` tokens and each sequence holds its own tokens up to
the window (vLLM's prefix caching shares the prefix's KV blocks between the requests that hit them).
"""

from roofline.calc.checks import count
from roofline.calc.knobs import Knobs
from roofline.calc.shape import Shape
from roofline.errors import UsageError


def check(k: Knobs) -> None:
    """The prefix knobs' own ranges, once per setup (the cached tokens also against each prompt: `cached_tokens`)."""
    if k.cached_tokens is not None and k.prefix_hit_rate is not None:
        raise UsageError("give cached tokens or a prefix hit rate, not both", "cached_tokens")
    rate = k.prefix_hit_rate
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1):
        raise UsageError(f"expected a share from 0 to below 1, got {rate!r}", "prefix_hit_rate")
    if k.cached_tokens is not None:
        count(k.cached_tokens, "cached_tokens", 0, what="a token count")
    count(k.shared_prefix, "shared_prefix", 0, what="a token count")


def cached_tokens(k: Knobs, prompt: int) -> int:
    """Prompt tokens served from a prefix cache: given, or the hit rate's share of the prompt."""
    if k.prefix_hit_rate is not None:
        return int(k.prefix_hit_rate * prompt)
    cached = k.cached_tokens or 0
    if not cached < prompt:
        raise UsageError(
            f"expected 0 to {prompt - 1} cached tokens (one prompt token at least is computed), got {cached}",
            "cached_tokens",
        )
    return cached


def held(shape: Shape, context: float, shared: int) -> tuple[float, float]:
    """(KV bytes held once for the batch, KV bytes each sequence holds) per device at `context` tokens when the
    first `shared` are a prefix the batch shares."""
    return shape.kv_cached(shared) * shape.kv_share, shape.kv_own(context, shared) * shape.kv_share
