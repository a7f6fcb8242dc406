"""Chunked prefill (vLLM's scheduler; servcalc's vLLM mode is the anchor): each engine step carries the B running
decodes plus up to C - B prompt tokens, so a prompt takes n = ceil(P / (C - B)) mixed steps. Chunk i holds prompt
tokens i (C - B) + 1 .. min((i + 1)(C - B), P), attends over every earlier token of its prompt and reads their KV
(Sarathi-Serve, Agrawal et al. 2024, sec. 4), and the last, partial chunk is priced at its own size: TTFT = the sum
of the n mixed steps. In steady state requests finish at B / O per step and each needs its n mixed steps, so a
share f = min(1, n B / O) of steps carry a chunk (no packing of two prompts into one step); TPOT = f x (mean mixed
step) + (1 - f) x decode step. With speculative decoding each target step verifies k + 1 tokens per sequence and
yields E tokens: the chunk gets C - B (k + 1) tokens, requests finish at B E / O per iteration, an iteration = k
draft steps + the target step (mixed or not), TPOT = iteration / E, and TTFT = n x k draft steps + the n mixed
steps. Utilization (MBU, MFU) = one iteration's bytes (FLOPs) / its time.
"""

from typing import Any, NamedTuple

from roofline.calc import formulas as f
from roofline.calc.checks import MAX_COUNT
from roofline.calc.knobs import Knobs
from roofline.calc.serving import speculative
from roofline.calc.step import NO_WORK, Work, step_work
from roofline.errors import UsageError


class Chunked(NamedTuple):
    chunk_tokens: int
    steps_to_first_token: int  # ceil(P / (C - B x tokens per sequence)): the prompt's own chunks
    mixed_step_s: float  # B decode (or verified) tokens + one prompt chunk: the mean over the prompt's chunks
    decode_step_s: float  # the target step without a chunk (a verification when speculative)
    mixed_share: float  # of steps in steady state
    ttft_s: float
    tpot_s: float
    device_bytes_per_token: float  # one steady-state iteration's bytes per device / tokens it yields per sequence
    device_flops_per_token: float


def check(k: Knobs) -> None:
    """The chunk knob's own range (against the batch: `price`), once per setup."""
    if k.chunk_tokens is not None and (isinstance(k.chunk_tokens, bool) or not isinstance(k.chunk_tokens, int)):
        raise UsageError(f"expected a token count, got {k.chunk_tokens!r}", "chunk_tokens")


def combine(
    chunk: int,
    batch: int,
    output: int,
    steps: int,
    mixed: Work,
    target: Work,
    per_sequence: int = 1,
    expected: float = 1.0,
    draft: Work = NO_WORK,
) -> Chunked:
    """`mixed`: the prompt's `steps` mixed steps together, each chunk at its place in the prompt; `target`: a target
    step without a chunk; `draft`: the draft steps before each target step (none without speculation);
    `per_sequence` tokens each sequence puts in a target step (k + 1 when speculative), `expected` the tokens an
    iteration yields. Requests finish at B E / O per iteration and each needs `steps` mixed steps, so a share
    min(1, steps B E / O) of iterations carry a chunk."""
    share = min(1.0, steps * batch * expected / max(output, 1))
    mean_mixed = mixed * (1 / steps)
    iteration = draft + mean_mixed * share + target * (1 - share)
    ttft = draft.seconds * steps + mixed.seconds
    return Chunked(
        chunk,
        steps,
        mean_mixed.seconds,
        target.seconds,
        share,
        ttft,
        iteration.seconds / expected,
        iteration.bytes / expected,
        iteration.flops / expected,
    )


def price(p: Any, B: int, P: int, O: int, context: float, decode: Work, spec, notes: list[str]) -> Chunked | None:
    """Chunked prefill; with speculative decoding the chunk rides on the target's verification step."""
    k, shape, F, W = p.knobs, p.shape, p.F, p.W
    if k.chunk_tokens is None:
        return None
    C = k.chunk_tokens
    per_sequence = spec.draft_tokens + 1 if spec else 1  # tokens each running sequence puts in a target step
    if not B * per_sequence < C <= MAX_COUNT:
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
        return flops, nbytes, shape.comm_seconds(running + end - start, p.link, p.latency, p.ep_link)

    total = step_work(*mixed(n - 1), F, W)
    if n > 1:  # the n - 1 full chunks, in closed form: their work is linear in i between the window's breakpoints
        window = [shape.window / room - 1, shape.window / room] if shape.window else []
        mean_s, mean_compute, mean_memory = f.mean_of_max_piecewise(
            lambda i: mixed(i)[0] / F, lambda i: mixed(i)[1] / W, n - 1, window
        )
        total += Work(mean_s + mixed(0)[2], mean_memory * W, mean_compute * F) * (n - 1)
    draft, target = NO_WORK, decode
    if spec:
        draft_step, target = speculative.steps(p, B, context, spec.draft_tokens)
        draft = draft_step * spec.draft_tokens
    result = combine(C, B, O, n, total, target, per_sequence, spec.expected_tokens_per_step if spec else 1.0, draft)
    with_spec = " (each step a speculative verification: drafts precede it)" if spec else ""
    notes.append(
        f"chunked prefill: {C} tokens a step{with_spec}, {n} chunk(s) a prompt, each attending over the "
        f"prompt's earlier chunks; {result.mixed_share:.0%} of steps carry a chunk in steady state (requests "
        "finish at B / O per token)"
    )
    return result
