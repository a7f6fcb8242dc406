"""Serving features on top of the roofline step: speculative decoding, prefix caching, chunked prefill.

Each is a named formula with its assumption, applied by roofline.calc.estimate when its knob is set:
- Speculative decoding (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
  eq. 1): with k drafted tokens each accepted with i.i.d. probability a, a target verification yields
  E = (1 - a^(k+1)) / (1 - a) tokens. One iteration = k draft decode steps + one target step verifying k + 1
  tokens per sequence (weights read once; compute and KV traffic for k + 1 positions). TPOT = iteration / E.
  Multi-token prediction (DeepSeek-V3 sec. 2.2) drafts with its MTP module: priced as one target layer and the
  lm_head; DeepSeek reports 85-90% second-token acceptance, so --mtp defaults to a = 0.85.
- Prefix caching: a prompt whose first N tokens are cached computes only P - N tokens, attending over all P
  (causal pairs P(P+1)/2 - N(N+1)/2); it reads the N cached tokens' KV and writes the rest. A prefix shared by
  the batch is held once in memory (reads stay per sequence: no cross-sequence kernel is assumed).
- Chunked prefill (as vLLM's scheduler; servcalc's vLLM mode is the anchor): each engine step carries the B
  running decodes plus up to C - B prompt tokens. A prompt takes ceil(P / (C - B)) mixed steps (TTFT). In steady
  state requests finish at B / O per step and each brings P prompt tokens, so a share
  f = min(1, P B / (O (C - B))) of steps carry a chunk; TPOT = f x mixed step + (1 - f) x decode step.
  With speculative decoding each target step verifies k + 1 tokens per sequence and yields E tokens: the chunk
  gets C - B (k + 1) tokens, requests finish at B E / O per iteration, an iteration = k draft steps + the target
  step (mixed or not), TPOT = iteration / E, and TTFT = ceil(P / (C - B (k + 1))) x (k draft steps + mixed step).
- Pipeline parallelism (GPipe, Huang et al. 2019; steady-state decode as in Megatron / vLLM's PP): L layers in p
  stages, the batch in m micro-batches. A stage's work is 1/p of the model's at micro-batch size; a slot = stage
  time + the point-to-point send of the activations. Prefill fills and drains the pipe: TTFT = (m + p - 1) slots
  (bubble (p - 1) / (m + p - 1)). Decode never drains: a micro-batch returns to stage 1 every max(m, p) slots, so
  TPOT = max(m, p) x decode slot, idle share max(0, p - m) / p. Memory per device: weights and KV over p.
- Disaggregated prefill/decode (DistServe, Zhong et al. 2024; Splitwise, Patel et al. 2024): x prefill and y
  decode instances. TTFT = prefill + the KV transfer of the batch's prompts (each device sends its share);
  prefill pool rate = x B / prefill time, decode pool rate = y B / ((O - 1) TPOT); the fleet serves the minimum.
"""

import math
import re
from typing import NamedTuple

from roofline.errors import UsageError


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


def speculative(drafter: str, k: int, a: float, draft_step_s: float, verify_s: float) -> Speculative:
    draft = k * draft_step_s
    e = expected_tokens(k, a)
    return Speculative(drafter, k, a, e, draft, verify_s, (draft + verify_s) / e)


class Chunked(NamedTuple):
    chunk_tokens: int
    steps_to_first_token: int
    mixed_step_s: float  # B decode (or verified) tokens + the prompt chunk
    decode_step_s: float  # the target step without a chunk (a verification when speculative)
    mixed_share: float  # of steps in steady state
    ttft_s: float
    tpot_s: float


def chunked(chunk: int, batch: int, prompt: int, output: int, mixed_step_s: float, decode_step_s: float,
            per_sequence: int = 1, expected: float = 1.0, draft_s: float = 0.0) -> Chunked:
    """`per_sequence` tokens each sequence puts in a target step (k + 1 when speculative), `expected` the tokens
    an iteration yields, `draft_s` the draft steps that precede each target step (0 without speculation)."""
    room = chunk - batch * per_sequence
    steps = math.ceil(prompt / room)
    share = min(1.0, prompt * batch * expected / (max(output, 1) * room))
    iteration = draft_s + share * mixed_step_s + (1 - share) * decode_step_s
    return Chunked(chunk, steps, mixed_step_s, decode_step_s, share, steps * (draft_s + mixed_step_s), iteration / expected)


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


def pipeline(stages: int, micro_batches: int, prefill_s: float, decode_s: float, hop_prefill_s: float, hop_decode_s: float,
             bytes_per_cycle: float, flops_per_cycle: float) -> Pipeline:
    """`prefill_s`, `decode_s`: the whole model's step at micro-batch size (a stage does 1/stages of it)."""
    p, m = stages, micro_batches
    stage_prefill, stage_decode = prefill_s / p, decode_s / p
    cycle = max(m, p)
    return Pipeline(p, m, stage_prefill, stage_decode, hop_prefill_s, hop_decode_s, (p - 1) / (m + p - 1), (cycle - m) / cycle, cycle,
                    (m + p - 1) * (stage_prefill + hop_prefill_s), cycle * (stage_decode + hop_decode_s), bytes_per_cycle, flops_per_cycle)


class Disagg(NamedTuple):
    prefill_instances: int
    decode_instances: int
    prefill_devices: int
    decode_devices: int
    kv_transfer_s: float  # the batch's prompt KV, prefill pool -> decode pool
    prefill_requests_per_s: float  # what the prefill pool can serve
    decode_requests_per_s: float
    requests_per_s: float  # the fleet: the slower pool
    bottleneck: str  # "prefill" or "decode"
    ttft_s: float  # prefill + transfer


def disagg(prefill_instances: int, decode_instances: int, devices_per_instance: int, batch: int, prefill_s: float,
           transfer_s: float, decode_s: float) -> Disagg:
    """`decode_s`: a batch's decode time, (O - 1) x TPOT (0: no decode step, the decode pool never limits)."""
    x, y = prefill_instances, decode_instances
    prefill_rate = x * batch / prefill_s
    decode_rate = y * batch / decode_s if decode_s > 0 else math.inf
    rate = min(prefill_rate, decode_rate)
    return Disagg(x, y, x * devices_per_instance, y * devices_per_instance, transfer_s, prefill_rate, decode_rate, rate,
                  "prefill" if prefill_rate <= decode_rate else "decode", prefill_s + transfer_s)


def parse_disagg(text: str) -> tuple[int, int]:
    """'1P:3D' -> (1, 3): prefill and decode instances."""
    match = re.fullmatch(r"\s*(\d{1,6})\s*[pP]\s*:\s*(\d{1,6})\s*[dD]\s*", text) if isinstance(text, str) else None
    if not match or not int(match[1]) or not int(match[2]):
        raise UsageError(f"expected prefill:decode instances like 1P:3D, got {text!r}", "disagg")
    return int(match[1]), int(match[2])
