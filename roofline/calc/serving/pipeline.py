"""Pipeline parallelism (GPipe, Huang et al. 2019; steady-state decode as in Megatron / vLLM's PP): L layers in p
stages, the batch in m micro-batches. A stage's work is 1/p of the model's at micro-batch size; a slot = stage time
+ the point-to-point send of the activations. Prefill fills and drains the pipe: TTFT = (m + p - 1) slots (bubble
(p - 1) / (m + p - 1)). Decode never drains: a micro-batch returns to stage 1 every max(m, p) slots, so TPOT =
max(m, p) x decode slot, idle share max(0, p - m) / p. Memory per device: weights and KV over p.
"""

from typing import Any, NamedTuple

from roofline.calc.checks import count
from roofline.calc.knobs import Knobs
from roofline.calc.step import decode_step, phase
from roofline.errors import UsageError


class Pipeline(NamedTuple):
    stages: int
    micro_batches: int
    stage_prefill_s: float  # one stage on one micro-batch
    stage_decode_s: float
    hop_prefill_s: float  # point-to-point send of a micro-batch's activations
    hop_decode_s: float
    bubble_prefill: float  # idle share of a stage during prefill
    bubble_decode: float
    cycle_stages: int  # slots between a micro-batch's decode steps: max(m, p)
    ttft_s: float
    tpot_s: float
    device_bytes_per_token: float  # one device's bytes per decode cycle (every sequence one token)
    device_flops_per_token: float


def check(k: Knobs) -> None:
    """The pipeline knobs' own ranges and the combinations not modelled, once per setup."""
    count(k.pp, "pp")
    if k.micro_batches is not None:
        count(k.micro_batches, "micro_batches")
        if k.pp == 1:
            raise UsageError("micro-batches need a pipeline (pp > 1)", "micro_batches")
    if k.pp > 1 and (k.draft is not None or k.mtp or k.chunk_tokens is not None):
        raise UsageError("a pipeline with speculative decoding or chunked prefill is not modelled: choose one", "pp")


def combine(
    stages: int,
    micro_batches: int,
    prefill_s: float,
    decode_s: float,
    hop_prefill_s: float,
    hop_decode_s: float,
    bytes_per_cycle: float,
    flops_per_cycle: float,
) -> Pipeline:
    """`prefill_s`, `decode_s`: the whole model's step at micro-batch size (a stage does 1/stages of it)."""
    p, m = stages, micro_batches
    stage_prefill, stage_decode = prefill_s / p, decode_s / p
    cycle = max(m, p)
    return Pipeline(
        p,
        m,
        stage_prefill,
        stage_decode,
        hop_prefill_s,
        hop_decode_s,
        (p - 1) / (m + p - 1),
        (cycle - m) / cycle,
        cycle,
        (m + p - 1) * (stage_prefill + hop_prefill_s),
        cycle * (stage_decode + hop_decode_s),
        bytes_per_cycle,
        flops_per_cycle,
    )


def price(p: Any, B: int, P: int, cached: int, steps: int, notes: list[str]) -> Pipeline | None:
    """Pipeline parallelism over pp stages of the layers."""
    k, shape = p.knobs, p.shape
    if k.pp == 1:
        return None
    pp = k.pp
    m = min(k.micro_batches or pp, B)
    b = -(-B // m)  # sequences per micro-batch (the last may be smaller; priced at the largest)
    link, latency = p.pp_link
    prefill_b = phase(
        shape.prefill_flops(b, P, cached),
        shape.prefill_bytes(b, P, cached),
        p.F,
        p.W,
        comm_s=shape.comm_seconds(b * (P - cached), p.link, p.latency, p.ep_link),
    )
    decode_b = decode_step(shape, b, P, steps, p.F, p.W, p.link, p.latency, p.ep_link)
    message = shape.hidden * shape.activation_bytes / k.tp  # one token's activations, each tp rank sends its slice
    result = combine(
        pp,
        m,
        prefill_b.time_s,
        decode_b.time_s,
        b * (P - cached) * message / link + latency,
        b * message / link + latency,
        decode_b.bytes * m / pp,
        decode_b.flops * m / pp,
    )
    notes.append(
        f"pp {pp}: {shape.layers / pp:g} layers a stage, {m} micro-batch(es) of up to {b}; prefill bubble "
        f"{result.bubble_prefill:.0%}, decode bubble {result.bubble_decode:.0%} (a stage idles while fewer "
        "micro-batches than stages circulate); stages assumed balanced (the lm_head's stage is heavier)"
    )
    return result
