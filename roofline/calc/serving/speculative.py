"""Speculative decoding (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
eq. 1): with k drafted tokens each accepted with i.i.d. probability a, a target verification yields
E = (1 - a^(k+1)) / (1 - a) tokens. One iteration = k draft decode steps + one target step verifying k + 1
tokens per sequence (weights read once; compute and KV traffic for k + 1 positions); TPOT = iteration / E.
The drafter prefills the prompt too, after the target: its prefill adds to TTFT. Memory: both models' weights are
held once and every sequence brings the target's KV and the drafter's.
Multi-token prediction (DeepSeek-V3 sec. 2.2) drafts with its MTP module: one transformer block of the target's
kind (MoE for DeepSeek-V3) and a 2h x h projection, sharing the target's embedding and output head (read every
draft step, held once); DeepSeek reports 85-90% second-token acceptance, so --mtp defaults to a = 0.85.
"""

from typing import Any, NamedTuple

from roofline.calc.checks import count, fraction
from roofline.calc.knobs import Knobs
from roofline.calc.shape import Shape
from roofline.calc.step import Work, phase, step_work
from roofline.calc.storage import Storage
from roofline.errors import UsageError
from roofline.specs.records import DTYPE_BYTES, Model

DEFAULT_DRAFT_TOKENS, DEFAULT_ACCEPTANCE, MTP_ACCEPTANCE = 4, 0.7, 0.85


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


def check(k: Knobs) -> None:
    """The speculative knobs' own ranges, once per setup."""
    if k.draft is None and not k.mtp and (k.draft_tokens is not None or k.acceptance is not None):
        name = "draft_tokens" if k.draft_tokens is not None else "acceptance"
        raise UsageError("draft tokens and acceptance need a draft model or --mtp", name)
    if k.mtp and k.draft is not None:
        raise UsageError("a draft model or multi-token prediction, not both", "mtp")
    if k.mtp is not None:
        count(k.mtp, "mtp", 1, 64, "a number of drafted tokens")
    if k.draft_tokens is not None:
        count(k.draft_tokens, "draft_tokens", 1, 64, "a number of drafted tokens")
    if k.acceptance is not None:
        fraction(k.acceptance, "acceptance", 0.0, 1.0, "an acceptance")


def expected_tokens(k: int, a: float) -> float:
    """Tokens one target verification yields = (1 - a^(k+1)) / (1 - a) (k + 1 when every draft is accepted)."""
    return k + 1.0 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)


def drafter(
    model: Model, k: Knobs, weight_dtype: str, kv_dtype: str, compute_dtype: str, tp: int, storage: Storage
) -> Shape | None:
    """The drafter's per-step work: a draft model at its own dtype (else the target's), or the model's MTP module."""
    if k.mtp:
        return mtp_module(model, kv_dtype, compute_dtype, tp, storage)
    if k.draft is None:
        return None
    if model.arch is not None and k.draft.arch is not None and model.arch.vocab_size != k.draft.arch.vocab_size:
        raise UsageError(
            f"draft {k.draft.id} has a vocabulary of {k.draft.arch.vocab_size:,} tokens, {model.id} "
            f"{model.arch.vocab_size:,}: speculative decoding needs the target's tokenizer (vLLM refuses unequal "
            "sizes)",
            "draft",
        )
    bits = 8 * DTYPE_BYTES[k.draft.dtype if k.draft.dtype in DTYPE_BYTES else weight_dtype]
    return Shape(k.draft, bits, k.draft.kv_dtype, compute_dtype, tp)


def mtp_module(model: Model, kv_dtype: str, compute_dtype: str, tp: int, storage: Storage) -> Shape:
    """DeepSeek-V3's MTP module (sec. 2.2): one transformer block of the model's kind (an MoE layer when the model
    has experts), two RMSNorms and a 2h x h projection, sharing the embedding and the output head: the head is
    read every draft step but held once, the embedding neither. Stored at the model's bits per weight."""
    from roofline.specs.params import count_params

    a = model.arch
    if a is None or not a.mtp_layers:
        raise UsageError(
            f"{model.id} has no multi-token-prediction module (num_nextn_predict_layers: 0): use a draft model "
            "(--draft) instead",
            "mtp",
        )
    one = a._replace(layers=1, sliding_layers=(), first_dense_layers=0)
    c = count_params(one)
    h = a.hidden_size
    norms = 2 * h * (2 if a.norm == "layernorm" else 1)
    c = c._replace(embedding=0, attention=c.attention + 2 * h * h, norms=c.norms + norms)
    b = storage.bits_per_weight / 8
    held = c.total - (0 if c.tied else c.head)  # the shared head is the model's, already resident
    module = Storage(held * b, c.streamed(0) * b, (c.expert + c.expert_biases) * b, storage.bits_per_weight)
    return Shape(model._replace(arch=one, counts=c, weights_file=None), module, kv_dtype, compute_dtype, tp)


def memory(draft: Shape, context: float, shared: int) -> tuple[float, float]:
    """Device memory the drafter takes: (held once: its weights and the shared prefix's KV, per sequence: its own
    KV at `context` tokens) [B]."""
    return draft.weights + draft.kv_cached(shared) * draft.kv_share, draft.kv_own(context, shared) * draft.kv_share


def settings(k: Knobs) -> tuple[int, float]:
    """(drafted tokens k, acceptance a), the defaults filled in."""
    tokens = k.draft_tokens if k.draft_tokens is not None else (k.mtp if k.mtp else DEFAULT_DRAFT_TOKENS)
    a = k.acceptance if k.acceptance is not None else (MTP_ACCEPTANCE if k.mtp else DEFAULT_ACCEPTANCE)
    return tokens, a


def steps(p: Any, B: int, context: float, tokens: int) -> tuple[Work, Work]:
    """One draft decode step and the target's verification of tokens + 1 tokens per sequence, at `context`."""
    draft, shape, F, W = p.draft, p.shape, p.F, p.W
    draft_step = step_work(
        draft.decode_flops(B, context), draft.decode_bytes(B, context), draft.comm_seconds(B, p.link, p.latency), F, W
    )
    verify = step_work(
        shape.verify_flops(B, context, tokens + 1),
        shape.verify_bytes(B, context, tokens + 1),
        shape.comm_seconds(B * (tokens + 1), p.link, p.latency, p.ep_link),
        F,
        W,
    )
    return draft_step, verify


def price(p: Any, B: int, P: int, cached: int, context: float, notes: list[str]) -> Speculative | None:
    """Speculative decoding at batch B priced at the mean context; the drafter prefills the batch's prompts (one
    prompt when chunked: the new request's, as its chunks ride on the running batch's steps)."""
    if p.draft is None:
        return None
    k = p.knobs
    tokens, a = settings(k)
    prompts = 1 if k.chunk_tokens is not None else B
    draft = p.draft
    prefill = phase(
        draft.prefill_flops(prompts, P, cached),
        draft.prefill_bytes(prompts, P, cached),
        p.F,
        p.W,
        comm_s=draft.comm_seconds(prompts * (P - cached), p.link, p.latency),
    )
    draft_step, verify = steps(p, B, context, tokens)
    e = expected_tokens(tokens, a)
    iteration = draft_step * tokens + verify
    notes.append(
        f"speculative decoding: {tokens} drafted, acceptance {a:g} (i.i.d.), {e:.3g} tokens per target step "
        "(Leviathan et al. 2023); priced at the mean context; TTFT includes the drafter's prefill"
    )
    return Speculative(
        "mtp" if k.mtp else k.draft.id,
        tokens,
        a,
        e,
        draft_step.seconds * tokens,
        verify.seconds,
        iteration.seconds / e,
        prefill.time_s,
        iteration.bytes / e,
        iteration.flops / e,
    )
