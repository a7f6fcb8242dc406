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
"""

import math
from typing import NamedTuple


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
    mixed_step_s: float  # B decode tokens + C - B prompt tokens
    decode_step_s: float
    mixed_share: float  # of steps in steady state
    ttft_s: float
    tpot_s: float


def chunked(chunk: int, batch: int, prompt: int, output: int, mixed_step_s: float, decode_step_s: float) -> Chunked:
    room = chunk - batch
    steps = math.ceil(prompt / room)
    share = min(1.0, prompt * batch / (max(output, 1) * room))
    return Chunked(chunk, steps, mixed_step_s, decode_step_s, share, steps * mixed_step_s, share * mixed_step_s + (1 - share) * decode_step_s)
