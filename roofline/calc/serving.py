"""Serving features on top of the roofline step: speculative decoding, prefix caching, chunked prefill.

Each is a named formula with its assumption, applied by roofline.calc.estimate when its knob is set:
- Speculative decoding (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
  eq. 1): with k drafted tokens each accepted with i.i.d. probability a, a target verification yields
  E = (1 - a^(k+1)) / (1 - a) tokens. One iteration = k draft decode steps + one target step verifying k + 1
  tokens per sequence (weights read once; compute and KV traffic for k + 1 positions). TPOT = iteration / E.
  The drafter prefills the prompt too, after the target: its prefill adds to TTFT.
  Multi-token prediction (DeepSeek-V3 sec. 2.2) drafts with its MTP module: one transformer block of the target's
  kind (MoE for DeepSeek-V3) and a 2h x h projection, sharing the target's embedding and output head (read every
  draft step, held once); DeepSeek reports 85-90% second-token acceptance, so --mtp defaults to a = 0.85.
- Prefix caching: a prompt whose first N tokens are cached computes only P - N tokens, attending over all P
  (causal pairs P(P+1)/2 - N(N+1)/2); it reads the N cached tokens' KV and writes the rest. A prefix shared by
  the batch is held once in memory (reads stay per sequence: no cross-sequence kernel is assumed).
- Chunked prefill (as vLLM's scheduler; servcalc's vLLM mode is the anchor): each engine step carries the B
  running decodes plus up to C - B prompt tokens. A prompt takes n = ceil(P / (C - B)) mixed steps; chunk i holds
  prompt tokens i (C - B) + 1 .. min((i + 1)(C - B), P), attends over every earlier token of its prompt and reads
  their KV (Sarathi-Serve, Agrawal et al. 2024, sec. 4), and the last, partial chunk is priced at its own size:
  TTFT = the sum of the n mixed steps. In steady state requests finish at B / O per step and each needs its n
  mixed steps, so a share f = min(1, n B / O) of steps carry a chunk (no packing of two prompts into one step);
  TPOT = f x (mean mixed step) + (1 - f) x decode step. With speculative decoding each target step verifies k + 1
  tokens per sequence and yields E tokens: the chunk gets C - B (k + 1) tokens, requests finish at B E / O per
  iteration, an iteration = k draft steps + the target step (mixed or not), TPOT = iteration / E, and TTFT =
  n x k draft steps + the n mixed steps. Utilization (MBU, MFU) = one iteration's bytes (FLOPs) / its time.
- Pipeline parallelism (GPipe, Huang et al. 2019; steady-state decode as in Megatron / vLLM's PP): L layers in p
  stages, the batch in m micro-batches. A stage's work is 1/p of the model's at micro-batch size; a slot = stage
  time + the point-to-point send of the activations. Prefill fills and drains the pipe: TTFT = (m + p - 1) slots
  (bubble (p - 1) / (m + p - 1)). Decode never drains: a micro-batch returns to stage 1 every max(m, p) slots, so
  TPOT = max(m, p) x decode slot, idle share max(0, p - m) / p. Memory per device: weights and KV over p.
- Disaggregated prefill/decode (DistServe, Zhong et al. 2024; Splitwise, Patel et al. 2024): x prefill and y
  decode instances. TTFT = prefill + the KV transfer of the batch's prompts (each device sends its share);
  prefill pool rate = x B / prefill time, decode pool rate = y B / ((O - 1) TPOT); the fleet serves the minimum.
"""

import re
from typing import NamedTuple

from roofline.errors import UsageError


class Work(NamedTuple):
    """One step's (or a run of steps') time and the bytes and FLOPs it moves per device [s, B, FLOP]."""

    seconds: float
    bytes: float
    flops: float

    def __add__(self, other: "Work") -> "Work":
        return Work(self.seconds + other.seconds, self.bytes + other.bytes, self.flops + other.flops)

    def __mul__(self, x: float) -> "Work":
        return Work(self.seconds * x, self.bytes * x, self.flops * x)


NO_WORK = Work(0.0, 0.0, 0.0)


def expected_tokens(k: int, a: float) -> float:
    """Tokens one target verification yields = (1 - a^(k+1)) / (1 - a) (k + 1 when every draft is accepted)."""
    return k + 1.0 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


class Speculative(NamedTuple):
    drafter: str  # the draft model's id, or "mtp"
    draft_tokens: int
    acceptance: float
    expected_tokens_per_step: float
    draft_s: float  # k draft decode steps
    verify_s: float  # one target step over k + 1 tokens per sequence
    tpot_s: float  # (draft + verify) / expected tokens
    draft_prefill_s: float  # the drafter's own prefill of the prompts, before its first draft (in TTFT)
    device_bytes_per_token: float  # one iteration's bytes per device (k drafts + the verification) / expected tokens
    device_flops_per_token: float


def speculative(drafter: str, k: int, a: float, draft_step: Work, verify: Work, draft_prefill_s: float) -> Speculative:
    """One iteration = k draft steps + one verification, yielding E = expected_tokens(k, a) tokens per sequence."""
    e = expected_tokens(k, a)
    iteration = draft_step * k + verify
    return Speculative(
        drafter,
        k,
        a,
        e,
        draft_step.seconds * k,
        verify.seconds,
        iteration.seconds / e,
        draft_prefill_s,
        iteration.bytes / e,
        iteration.flops / e,
    )


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


def chunked(
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


def pipeline(
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


class Disagg(NamedTuple):
    prefill_instances: int
    decode_instances: int
    prefill_devices: int
    decode_devices: int
    kv_transfer_s: float  # the batch's prompt KV, prefill pool -> decode pool
    prefill_requests_per_s: float  # what the prefill pool can serve
    decode_requests_per_s: float | None  # None: no decode step (output 1), the decode pool never limits
    requests_per_s: float  # the fleet: the slower pool
    bottleneck: str  # "prefill" or "decode"
    ttft_s: float  # prefill + transfer


def disagg(
    prefill_instances: int,
    decode_instances: int,
    devices_per_instance: int,
    batch: int,
    prefill_s: float,
    transfer_s: float,
    decode_s: float,
) -> Disagg:
    """`decode_s`: a batch's decode time, (O - 1) x TPOT (0: no decode step, the decode pool never limits)."""
    x, y = prefill_instances, decode_instances
    prefill_rate = x * batch / prefill_s
    decode_rate = y * batch / decode_s if decode_s > 0 else None
    rate = prefill_rate if decode_rate is None else min(prefill_rate, decode_rate)
    return Disagg(
        x,
        y,
        x * devices_per_instance,
        y * devices_per_instance,
        transfer_s,
        prefill_rate,
        decode_rate,
        rate,
        "prefill" if rate == prefill_rate else "decode",
        prefill_s + transfer_s,
    )


def parse_disagg(text: str) -> tuple[int, int]:
    """'1P:3D' -> (1, 3): prefill and decode instances."""
    match = re.fullmatch(r"\s*(\d{1,6})\s*[pP]\s*:\s*(\d{1,6})\s*[dD]\s*", text) if isinstance(text, str) else None
    if not match or not int(match[1]) or not int(match[2]):
        raise UsageError(f"expected prefill:decode instances like 1P:3D, got {text!r}", "disagg")
    return int(match[1]), int(match[2])
