"""The inputs every calculation shares, and their defaults: defined here once; the CLI's --help shows them."""

from typing import Any, NamedTuple

MODEL, HARDWARE = "llama-3.1-8b", "h100-sxm"  # what `roofline estimate` runs with no options
BATCH, PROMPT_TOKENS, OUTPUT_TOKENS = 1, 1024, 256
# What `roofline validate` (roofline.measure.validate.run) runs with no options: a model a CPU decodes in seconds.
VALIDATE_MODEL, VALIDATE_BATCHES, VALIDATE_PROMPT, VALIDATE_OUTPUT = "gpt2", (1, 4, 16), 128, 32
VALIDATE_ROUNDS, VALIDATE_TOLERANCE = 3, 0.15  # interleaved rounds; the +- tolerance of the verdict


class Knobs(NamedTuple):
    """How a model is served, beyond batch and lengths (None: resolved from the model and the device)."""

    weight_dtype: str | None = None  # the model's dtype
    kv_dtype: str | None = None  # the model's KV dtype
    compute_dtype: str | None = None  # the weight dtype if the device has a peak for it, else bf16, fp16, fp32
    bits_per_weight: float | None = None  # raw override of the weight storage (e.g. 4.85 for GGUF Q4_K_M)
    memory_fraction: float = 0.9  # share of memory for weights + KV (vLLM's gpu_memory_utilization)
    compute_efficiency: float = 1.0  # achievable share of peak FLOP/s; 1.0 = the roofline bound
    bandwidth_efficiency: float = 1.0  # achievable share of peak bandwidth; 1.0 = the roofline bound
    tp: int = 1  # tensor-parallel devices
    ep: int = 1  # expert-parallel devices (MoE): whole experts spread over them
    quant: str | None = None  # a named weight format: q4_0, q4_k_m, q5_k_m, q6_k, q8_0, awq, gptq, fp8, nvfp4, mxfp4
    draft: Any = None  # a draft Model for speculative decoding
    draft_tokens: int | None = None  # k tokens drafted per iteration (default 4 with a draft or MTP)
    acceptance: float | None = None  # i.i.d. acceptance of a drafted token (default 0.7; MTP 0.85)
    mtp: int | None = None  # multi-token prediction: tokens its module drafts (DeepSeek-V3: 1)
    cached_tokens: int | None = None  # prompt tokens whose KV is cached (prefix caching)
    prefix_hit_rate: float | None = None  # or the cached share of the prompt
    shared_prefix: int = 0  # prompt tokens the batch shares, held once in memory
    chunk_tokens: int | None = None  # chunked prefill: tokens per engine step
    pp: int = 1  # pipeline stages
    micro_batches: int | None = None  # pipeline micro-batches (default: min(batch, pp))
    disagg: str | None = None  # disaggregated pools, "xP:yD" instances of tp x pp devices
    engine: str | None = None  # whose calibrated prediction a measured profile gives (None: roofline's own "eager")


DEFAULT = Knobs()


def knobs_of(knobs: "Knobs | None", overrides: dict) -> Knobs:
    """`knobs` (or the defaults) with keyword overrides; an unknown keyword is a TypeError, as in any call."""
    unknown = sorted(set(overrides) - set(Knobs._fields))
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r} (knobs: {', '.join(Knobs._fields)})")
    if knobs is not None and not isinstance(knobs, Knobs):
        from roofline.errors import UsageError

        raise UsageError(f"expected roofline.Knobs(...) or keyword knobs, got {type(knobs).__name__}", "knobs")
    return (knobs or DEFAULT)._replace(**overrides)
