"""Serving features priced on top of a step (formulas in roofline.calc.serving): prefix caching, speculative
decoding, chunked prefill (alone or with speculation), pipeline stages and disaggregated pools.
"""

from roofline.calc import formulas as f
from roofline.calc import serving
from roofline.calc.knobs import Knobs
from roofline.calc.setup import DEFAULT_ACCEPTANCE, DEFAULT_DRAFT_TOKENS, MAX_COUNT, MTP_ACCEPTANCE, Setup
from roofline.calc.shape import Shape
from roofline.calc.step import decode_step, phase
from roofline.errors import UsageError
from roofline.units import si


def cached_tokens(k: Knobs, prompt: int) -> int:
    """Prompt tokens served from a prefix cache: given, or the hit rate's share of the prompt."""
    if k.cached_tokens is not None and k.prefix_hit_rate is not None:
        raise UsageError("give cached tokens or a prefix hit rate, not both", "cached_tokens")
    if k.prefix_hit_rate is not None:
        if not 0 <= k.prefix_hit_rate < 1:
            raise UsageError(f"expected a share from 0 to below 1, got {k.prefix_hit_rate!r}", "prefix_hit_rate")
        return int(k.prefix_hit_rate * prompt)
    cached = k.cached_tokens or 0
    if not 0 <= cached < prompt:
        raise UsageError(
            f"expected 0 to {prompt - 1} cached tokens (one prompt token at least is computed), got {cached}",
            "cached_tokens",
        )
    if not 0 <= k.shared_prefix <= MAX_COUNT:
        raise UsageError(f"expected a token count from 0, got {k.shared_prefix}", "shared_prefix")
    return cached


def draft_memory(draft: Shape, context: float, shared: int) -> tuple[float, float]:
    """Device memory the drafter takes: (held once: its weights and the shared prefix's KV, per sequence: its own
    KV at `context` tokens) [B]; each sequence brings the target's KV and the drafter's."""
    return draft.weights + draft.kv_cached(shared) * draft.kv_share, draft.kv_own(context, shared) * draft.kv_share


def step_work(flops: float, nbytes: float, comm_s: float, F: float, W: float) -> serving.Work:
    """A step's roofline time (plus its communication) with the bytes and FLOPs it moves per device."""
    return serving.Work(max(flops / F, nbytes / W) + comm_s, nbytes, flops)


def spec_steps(s: Setup, B: int, context: float, tokens: int) -> tuple[serving.Work, serving.Work]:
    """One draft decode step and the target's verification of tokens + 1 tokens per sequence, at `context`."""
    draft, shape, F, W, link, latency = s.draft, s.shape, s.F, s.W, s.link, s.latency
    draft_step = step_work(
        draft.decode_flops(B, context), draft.decode_bytes(B, context), draft.comm_seconds(B, link, latency), F, W
    )
    verify = step_work(
        shape.verify_flops(B, context, tokens + 1),
        shape.verify_bytes(B, context, tokens + 1),
        shape.comm_seconds(B * (tokens + 1), link, latency, s.ep_link),
        F,
        W,
    )
    return draft_step, verify


def speculative(s: Setup, B: int, P: int, cached: int, context: float, notes: list[str]):
    """Speculative decoding at batch B; the drafter prefills the batch's prompts (one prompt when chunked: the
    new request's, as its chunks ride on the running batch's steps)."""
    draft, k = s.draft, s.knobs
    if draft is None:
        return None
    tokens = k.draft_tokens if k.draft_tokens is not None else (k.mtp if k.mtp else DEFAULT_DRAFT_TOKENS)
    a = k.acceptance if k.acceptance is not None else (MTP_ACCEPTANCE if k.mtp else DEFAULT_ACCEPTANCE)
    prompts = 1 if k.chunk_tokens is not None else B
    prefill = phase(
        draft.prefill_flops(prompts, P, cached),
        draft.prefill_bytes(prompts, P, cached),
        s.F,
        s.W,
        comm_s=draft.comm_seconds(prompts * (P - cached), s.link, s.latency),
    )
    result = serving.speculative(
        "mtp" if k.mtp else k.draft.id, tokens, a, *spec_steps(s, B, context, tokens), prefill.time_s
    )
    notes.append(
        f"speculative decoding: {tokens} drafted, acceptance {a:g} (i.i.d.), {result.expected_tokens_per_step:.3g} tokens per "
        "target step (Leviathan et al. 2023); priced at the mean context; TTFT includes the drafter's prefill"
    )
    return result


def chunked(s: Setup, B: int, P: int, O: int, context: float, decode: serving.Work, spec, notes: list[str]):
    """Chunked prefill; with speculative decoding the chunk rides on the target's verification step."""
    k, shape, F, W = s.knobs, s.shape, s.F, s.W
    if k.chunk_tokens is None:
        return None
    C = k.chunk_tokens
    per_sequence = spec.draft_tokens + 1 if spec else 1  # tokens each running sequence puts in a target step
    if isinstance(C, bool) or not isinstance(C, int) or not B * per_sequence < C <= MAX_COUNT:
        what = f"the batch x verified tokens ({B} x {per_sequence})" if spec else f"the batch ({B})"
        raise UsageError(f"expected more tokens per step than {what}, got {C!r}", "chunk_tokens")
    room, running = C - B * per_sequence, B * per_sequence
    n = -(-P // room)
    base_flops, base_bytes = shape.verify_flops(B, context, per_sequence), shape.verify_bytes(B, context, per_sequence)
    base_bytes -= shape.streamed(running)  # the step's weight reads are those of all its tokens, below

    def mixed(i: int) -> tuple[float, float, float]:
        """(FLOPs, bytes, comm s) of the step carrying chunk i: the running tokens at the mean context and prompt
        tokens i x room + 1 .. min((i + 1) room, P), attending over the prompt's earlier tokens and reading their KV."""
        start, end = i * room, min((i + 1) * room, P)
        flops = base_flops + shape.prefill_flops(1, end, start, logits=end == P)
        nbytes = base_bytes + shape.streamed(running + end - start) + shape.kv_cached(end) * shape.kv_share
        return flops, nbytes, shape.comm_seconds(running + end - start, s.link, s.latency, s.ep_link)

    last = step_work(*mixed(n - 1), F, W)
    total = last
    if n > 1:  # the n - 1 full chunks, in closed form: their work is linear in i between the window's breakpoints
        window = [shape.window / room - 1, shape.window / room] if shape.window else []
        mean_s, mean_compute, mean_memory = f.mean_of_max_piecewise(
            lambda i: mixed(i)[0] / F, lambda i: mixed(i)[1] / W, n - 1, window
        )
        comm = mixed(0)[2]
        total += serving.Work(mean_s + comm, mean_memory * W, mean_compute * F) * (n - 1)
    draft, target = serving.NO_WORK, decode
    if spec:
        draft_step, target = spec_steps(s, B, context, spec.draft_tokens)
        draft = draft_step * spec.draft_tokens
    result = serving.chunked(
        C, B, O, n, total, target, per_sequence, spec.expected_tokens_per_step if spec else 1.0, draft
    )
    with_spec = " (each step a speculative verification: drafts precede it)" if spec else ""
    notes.append(
        f"chunked prefill: {C} tokens a step{with_spec}, {n} chunk(s) a prompt, each attending over the prompt's earlier "
        f"chunks; {result.mixed_share:.0%} of steps carry a chunk in steady state (requests finish at B / O per token)"
    )
    return result


def pipeline(s: Setup, B: int, P: int, cached: int, steps: int, notes: list[str]):
    """Pipeline parallelism over k.pp stages of the layers (see roofline.calc.serving.pipeline)."""
    k, shape = s.knobs, s.shape
    pp = k.pp
    m = min(k.micro_batches or pp, B)
    b = -(-B // m)  # sequences per micro-batch (the last may be smaller; priced at the largest)
    link, latency = s.pp_link
    prefill_b = phase(
        shape.prefill_flops(b, P, cached),
        shape.prefill_bytes(b, P, cached),
        s.F,
        s.W,
        comm_s=shape.comm_seconds(b * (P - cached), s.link, s.latency, s.ep_link),
    )
    decode_b = decode_step(shape, b, P, steps, s.F, s.W, s.link, s.latency, s.ep_link)
    message = shape.hidden * shape.activation_bytes / k.tp  # one token's activations, each tp rank sends its slice
    result = serving.pipeline(
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
        f"{result.bubble_prefill:.0%}, decode bubble {result.bubble_decode:.0%} (a stage idles while fewer micro-batches "
        "than stages circulate); stages assumed balanced (the lm_head's stage is heavier)"
    )
    return result


def disagg(s: Setup, B: int, P: int, colocated_ttft: float, latency_s: float, notes: list[str]):
    """Disaggregated prefill and decode pools (see roofline.calc.serving.disagg)."""
    k, shape = s.knobs, s.shape
    x, y, (link, latency) = s.pools
    group = k.tp * k.pp
    transfer = B * shape.kv_cached(P) * shape.kv_share / k.pp / link + latency  # every device sends its share at once
    decode_time = latency_s - colocated_ttft  # (O - 1) x TPOT: the decode pool's time per batch
    result = serving.disagg(x, y, group, B, colocated_ttft, transfer, decode_time)
    notes.append(
        f"disagg {x}P:{y}D: {x * group} prefill + {y * group} decode devices; each request's KV "
        f"({si(shape.kv_cached(P), 'B')}) moves once to the decode pool; fleet rate = the slower pool's "
        f"({result.bottleneck}); the decode pool runs no prefill"
    )
    return result
