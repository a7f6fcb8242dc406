"""One engine replica under load (roofline.calc.simulate runs it): continuous batching, step by step, priced by
the same step model as estimate.

The scheduler is vLLM V1's (vllm/v1/core/sched/scheduler.py): each step first gives every running request its
tokens, in admission order (a decode 1 token, a prefill in progress its next chunk; the decodes' counted first),
then admits waiting requests first come first served while fewer than max_num_seqs run, each with a chunk of its
prompt into the KV the running requests leave (from vLLM 0.19, only when its whole prompt fits there:
reserve_full_isl; SGLang admits so too), all within a budget of max_num_batched_tokens tokens a step (chunked
prefill). The KV cache is paged in blocks of block_size tokens out of the KV budget (the memory fraction x capacity
less the weights); when a step's tokens do not fit, the most recently admitted request is preempted and later
recomputed from its first token (vLLM V1's recompute), and that step admits no one (`if not preempted_reqs`).
Defaults are V1's for an OpenAI server (EngineArgs.get_batch_defaults): max_num_batched_tokens 8192 and max_num_seqs
1024 on devices with 70 GiB or more (not A100), else 2048 and 256; block_size 16. The `static` policy admits a new
batch only when the last one has finished, and prefills it in one step: what continuous batching buys. The `trtllm`
policy is TensorRT-LLM's default capacity scheduler (GUARANTEED_NO_EVICT, batch_manager/capacityScheduler.cpp): a
request is admitted only when the blocks of its whole prompt + output fit beside those every running request will
reach, so nothing is ever preempted; its prompt is prefilled whole within the step's budget (chunked only when it
alone outgrows the budget, as enable_chunked_prefill does). Its limits, where not given, are TensorRT-LLM's own
(engine_limits: 2048 sequences, 8192 tokens a step, 32-token blocks).

Steps with only decodes repeat the same batch with contexts one token longer each: between events (an arrival, a
finish, a window filling, the KV cache filling) they are summed in closed form (stepmodel.decode_run), so a run
costs per request, not per token. A request's KV is counted at whole blocks (each running request at most one block
part-filled). A sliding-window layer keeps only its window's tokens (vLLM V1's hybrid KV manager frees the blocks
that fall out of it), so a request with c tokens holds f x c + (1 - f) x min(c, window) tokens' worth of the budget,
f the full-attention layers' share of a token's KV bytes (Gemma-3-27B: 10 of 62 layers attend fully, 10 of 70 under
vLLM's hybrid allocator, which pads the 52 windowed layers to groups of 10: padded_layers; TensorRT-LLM's
reservations still count whole tokens); a prompt chunk's tokens are held in every layer during its step (vLLM
allocates them there and frees what left a window the next step), so a chunk needs all its tokens free. ITL is the
length of the steps that made each token (a jump's first and last step, half the tokens each); a preempted request's
wait shows in its TTFT, TPOT and E2E. Prefix caching: a request's cached prompt tokens are not computed but held
(per request: the sharing of a prefix's blocks is not modelled). With llama.cpp's measured step and a KV stream per
slot (llama-server given --parallel N), each request holds the least recently used free slot and a step's batch is
passed in the server's order, which the step cuts into ubatches (roofline.calc.llamacpp.equal_split); with one
shared stream (llama-server's default, -np auto) a step is ceil(tokens / 512) ubatches. Not modelled: speculative
decoding, pipelines and pools inside the replica (estimate prices those), tokenizer and HTTP."""

import heapq
import math
from collections import deque
from typing import NamedTuple

from roofline.calc.llamacpp import Entry
from roofline.calc.stepmodel import Decodes, StepModel
from roofline.calc.workload import Request
from roofline.errors import UsageError

POLICIES = ("vllm", "static", "trtllm")


def full_share(model) -> float:
    """f: the full-attention layers' share of a token's KV bytes in the budget (1 without sliding-window layers; with
    vLLM's padded groups where simulate.replica_setup set `budget_full_share`)."""
    full, sliding = getattr(model, "kv_full", 0.0), getattr(model, "kv_slide", 0.0)  # a stand-in may have none
    if not (getattr(model, "window", None) and sliding):
        return 1.0
    return getattr(model, "budget_full_share", None) or full / (full + sliding)


def padded_layers(full: int, sliding: int) -> tuple[int, int]:
    """The full-attention and sliding-window layers vLLM's hybrid KV cache allocates for, padded: each attention
    type's layers are split into groups of the smaller type's count (the larger's when under 1.5x it) and the last
    group padded, every group taking a block of one pool per 16 tokens (vllm/v1/core/kv_cache_utils.py
    _get_kv_cache_groups_uniform_page_size, 0.20). Gemma-3-27B's 10 full and 52 sliding layers: 10 and 60."""
    if not full or not sliding:
        return full, sliding
    group = min(full, sliding) if max(full, sliding) >= 1.5 * min(full, sliding) else max(full, sliding)
    return -(-full // group) * group, -(-sliding // group) * group


def held_tokens(model, c: float, f: float | None = None) -> float:
    """The KV budget's tokens a request with c tokens of KV holds [tokens of a whole token's KV, padded groups
    included under vLLM's cache]: all of them, or
    with sliding-window layers f x c + (1 - f) x min(c, window) (vLLM V1's hybrid KV manager frees what leaves a
    window: vllm/v1/core/single_type_kv_cache_manager.py, SlidingWindowManager)."""
    f = full_share(model) if f is None else f
    return c if f == 1.0 else f * c + (1.0 - f) * min(c, model.window)


class Scheduler(NamedTuple):
    policy: str | None  # "vllm" (V1, continuous), "static", "trtllm" (GUARANTEED_NO_EVICT); None: the engine's
    max_num_seqs: int | None = None  # None (each limit): the policy's engine default on the device (engine_limits)
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    # llama.cpp: one KV stream for every slot (llama-server -kvu, or its slot count left to it); False: a stream per
    # slot (--parallel N); None: not llama.cpp, or the engine's default (simulate.engine_scheduler)
    kv_unified: bool | None = None
    # vllm policy: a waiting request is admitted only when its whole known sequence fits, every layer's blocks of it
    # (vLLM 0.19's default scheduler_reserve_full_isl; False: its first chunk, as builds before 0.19); None: not
    # vLLM's scheduler, or the engine's default (simulate.engine_scheduler)
    reserve_full_isl: bool | None = None


def vllm_defaults(hardware) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) of vLLM V1's OpenAI server on `hardware`
    (EngineArgs.get_batch_defaults)."""
    large = hardware.memory_capacity >= 70 * 2**30 and "a100" not in hardware.name.lower()
    return (1024, 8192) if large else (256, 2048)


# TensorRT-LLM's LLM API and trtllm-serve when told nothing: BaseLlmArgs max_batch_size 2048 and max_num_tokens 8192,
# KvCacheConfig tokens_per_block 32 (tensorrt_llm/llmapi/llm_args.py; serve.py's options default to the same).
TRTLLM_LIMITS = (2048, 8192, 32)


def engine_limits(policy: str, hardware) -> tuple[int, int, int]:
    """(max_num_seqs, max_num_batched_tokens, block_size) the engine whose scheduler `policy` names uses when not
    told: TensorRT-LLM's for trtllm, vLLM V1's on `hardware` (16-token blocks) for the others."""
    return TRTLLM_LIMITS if policy == "trtllm" else (*vllm_defaults(hardware), 16)


class Run(NamedTuple):
    """Per-request times of one simulated run and its time-weighted occupancy."""

    arrival: list[float]
    admitted: list[float]
    first: list[float]
    finish: list[float]
    itl: list[tuple[float, float]]  # (gap seconds, tokens made with it)
    steps: int
    preemptions: int
    end_s: float
    spans: list[tuple[float, float, int, float, float]]  # (start, seconds, running, KV share at start, at end) a step


class Replica:
    """One engine replica serving a list of requests (open loop: their arrival times; closed loop: N clients)."""

    def __init__(
        self,
        model: StepModel,
        requests: list[Request],
        sched: Scheduler,
        kv_tokens: int,
        concurrency: int | None,
        cached=None,
    ):
        """`cached(prompt)`: the prompt tokens a prefix cache serves (prefix caching: they are not computed, but
        attended over and their KV read), default none."""
        self.model, self.sched, self.cap, self.concurrency = model, sched, kv_tokens, concurrency
        self.full_share = full_share(model)
        n = self.n = len(requests)
        self.P = [r.prompt_tokens for r in requests]
        self.O = [r.output_tokens for r in requests]
        if concurrency is None:
            self.arrival = [r.arrival_s for r in requests]
            self.pending = deque(sorted(range(n), key=lambda i: self.arrival[i]))
        else:  # each client's first request at its start: its arrival_s where given (bench's clients), else 0
            self.arrival = [(requests[i].arrival_s or 0.0) if i < concurrency else math.inf for i in range(n)]
            self.pending = deque(sorted(range(min(concurrency, n)), key=lambda i: self.arrival[i]))
        self.next_client = min(concurrency or 0, n)
        self.admitted, self.first, self.finish = [math.nan] * n, [math.nan] * n, [math.nan] * n
        self.hit = [cached(p) if cached else 0 for p in self.P]  # prompt tokens a prefix cache serves
        self.gen, self.computed = [0] * n, list(self.hit)
        self.itl: list[tuple[float, float]] = []
        # decodes: c_i = cbase_i + G and gen_i = gbase_i + G, G counting decode steps
        self.cbase: dict[int, int] = {}
        self.gbase: dict[int, int] = {}
        self.finishes: list[tuple[int, int]] = []  # (G of the last token, request)
        # Windowed layers: a decode's keys (min(c + 1, window)) grow while c + 1 < window (`below`), its KV read and
        # held (min(c, window)) while c < window (`below_kv`), one step longer; each count has its crossings, (G at
        # which the decode reaches that bound, request, the decode's epoch: an entry from before a preemption is stale)
        self.crossings: list[tuple[int, int, int]] = []
        self.kv_crossings: list[tuple[int, int, int]] = []
        self.epoch = [0] * n
        self.G = self.S = self.A = self.K = self.below = self.below_kv = self.used = 0
        self.no_evict = sched.policy == "trtllm"  # reservations hold every running request's KV to its last token
        self.reserved = 0  # no_evict: the KV tokens (whole blocks) the running requests will reach
        self.order: list[int] = []  # running, in admission order (the last is preempted first)
        self.prefilling: dict[int, None] = {}  # running requests whose prompt (or recompute) is in progress
        self.waiting: deque[int] = deque()
        self.now = 0.0
        self.done = self.steps = self.preemptions = 0
        self.spans: list[tuple[float, float, int, float, float]] = []
        # llama-server's slots, where each has its own KV stream (model.engine_step.streams): request -> slot, and
        # each slot's last use (-1: never), from which a request takes the least recently used free one
        self.streams = bool(getattr(model.engine_step, "streams", False))
        self.slot: dict[int, int] = {}
        self.last_used = [-1.0] * (sched.max_num_seqs if self.streams else 0)

    # ---- bookkeeping

    def slack(self) -> int:
        return len(self.order) * (self.sched.block_size - 1)

    def fits(self, tokens: float) -> bool:
        return self.used + self.slack() + tokens <= self.cap

    def held(self, c: int) -> float:
        return held_tokens(self.model, c, self.full_share)

    def growth(self) -> float:
        """The budget's tokens a decode step adds: one a decode, (f a decode past its window)."""
        n = len(self.cbase)
        return n if self.full_share == 1.0 else self.full_share * n + (1.0 - self.full_share) * self.below_kv

    def add_decode(self, i: int) -> None:
        c, w = self.computed[i], self.model.window
        self.cbase[i], self.gbase[i] = c - self.G, self.gen[i] - self.G
        self.S += c
        heapq.heappush(self.finishes, (self.G + self.O[i] - self.gen[i], i))
        if w:
            self.epoch[i] += 1
            self.A += min(c + 1, w)
            self.K += min(c, w)
            if c + 1 < w:
                self.below += 1
                heapq.heappush(self.crossings, (self.G + w - 1 - c, i, self.epoch[i]))
            if c < w:
                self.below_kv += 1
                heapq.heappush(self.kv_crossings, (self.G + w - c, i, self.epoch[i]))

    def drop_decode(self, i: int) -> None:
        c, w = self.cbase.pop(i) + self.G, self.model.window
        self.computed[i], self.gen[i] = c, self.gbase.pop(i) + self.G
        self.S -= c
        if w:
            self.A -= min(c + 1, w)
            self.K -= min(c, w)
            self.below -= c + 1 < w
            self.below_kv -= c < w

    def advance(self, m: int) -> None:
        """m decode steps: every decode's context and count grow by m (no crossing falls inside: see jump)."""
        n = len(self.cbase)
        self.G += m
        self.S += n * m
        self.used += self.growth() * m
        self.A += self.below * m
        self.K += self.below_kv * m
        self.below -= self._crossed(self.crossings)
        self.below_kv -= self._crossed(self.kv_crossings)
        while self.finishes and self.finishes[0][0] <= self.G:
            entry = heapq.heappop(self.finishes)
            if self._live(entry):
                self.drop_decode(entry[1])
                self.complete(entry[1])

    def _crossed(self, heap: list[tuple[int, int, int]]) -> int:
        """The decodes whose crossing in `heap` the clock has reached, popped (stale entries dropped uncounted)."""
        crossed = 0
        while heap and heap[0][0] <= self.G:
            _, i, epoch = heapq.heappop(heap)
            crossed += i in self.cbase and self.epoch[i] == epoch
        return crossed

    def _live(self, entry: tuple[int, int]) -> bool:
        g, i = entry
        return i in self.gbase and self.gbase[i] + g == self.O[i]

    def whole(self, i: int) -> int:
        """The KV tokens request i reaches by its last token, at whole blocks (what GUARANTEED_NO_EVICT reserves)."""
        b = self.sched.block_size
        return -(-(self.P[i] + self.O[i]) // b) * b

    def take_slot(self, i: int) -> None:
        """llama-server's slot for request i: the least recently used free one (server_context get_available_slot,
        for a prompt like none before, as bench sends): of slots never used, the last (`slot.t_last_used <=
        t_last`); of slots freed in the same step, the first, which the server released first (in slot order)."""
        busy = set(self.slot.values())
        free = [k for k in range(len(self.last_used)) if k not in busy]
        self.slot[i] = min(free, key=lambda k: (self.last_used[k], k if self.last_used[k] >= 0 else -k))

    def free_slot(self, i: int) -> None:
        """Request i's slot, if it holds one, is free from now."""
        if i in self.slot:
            self.last_used[self.slot.pop(i)] = self.now

    def batch(self, chunks: list[tuple[int, int, int]] | None = None) -> list | None:
        """A step's batch as llama-server builds it (decode tokens by slot, then prompt chunks by slot), where
        slots have their own KV streams; else None."""
        if not self.streams:
            return None
        decodes = sorted(Entry(self.slot[i], 1, True) for i in self.cbase)
        prompts = sorted(Entry(self.slot[i], e - b, False, e == self.P[i] + self.gen[i]) for i, b, e in chunks or [])
        return decodes + prompts

    def complete(self, i: int) -> None:
        self.finish[i] = self.now
        self.done += 1
        self.free_slot(i)
        self.used -= self.held(self.computed[i])
        if self.no_evict:
            self.reserved -= self.whole(i)
        self.order.remove(i)
        if self.concurrency is not None and self.next_client < self.n:  # the client sends its next request
            j = self.next_client
            self.arrival[j] = self.now
            self.waiting.append(j)
            self.next_client += 1

    def preempt(self) -> bool:
        """Free the most recently admitted request, to be recomputed from its first token (False: only one runs)."""
        if len(self.order) <= 1:
            return False
        i = self.order.pop()
        self.free_slot(i)
        if i in self.cbase:
            self.drop_decode(i)
        self.prefilling.pop(i, None)
        self.used -= self.held(self.computed[i])
        self.computed[i] = self.hit[i]
        self.waiting.appendleft(i)
        self.preemptions += 1
        return True

    def too_large(self, i: int) -> None:
        raise UsageError(
            f"a request of {self.P[i]} prompt + {self.O[i]} output tokens does not fit the whole KV "
            f"budget ({self.cap:,} tokens): shorten its prompt or output, or give more memory"
        )

    def whole_prompt(self, n: int) -> float:
        """The budget's tokens vLLM's admission on the whole prompt charges a sequence of n tokens (reserve_full_isl):
        all n in a full-attention layer; in a windowed one at most the window less one, a step's tokens and a block
        (vllm/v1/kv_cache_interface.py max_admission_blocks_per_request, vLLM 0.20: what its chunks hold at most, as
        the layer frees what left the window before each chunk; 0.19 charged all n, and a long prompt on a windowed
        model could wait forever: vLLM issue #39734)."""
        f, sched = self.full_share, self.sched
        if f == 1.0:
            return n
        return f * n + (1.0 - f) * min(n, self.model.window - 1 + sched.max_num_batched_tokens + sched.block_size)

    def decodes(self) -> Decodes:
        n, m = len(self.cbase), self.model
        return Decodes(n, m.full * (self.S + n) + m.sliding * self.A, m.kv_full * self.S + m.kv_slide * self.K)

    def account(self, dt: float) -> None:
        self.steps += 1
        share = min((self.used + self.slack()) / self.cap, 1.0)  # slack: at most b - 1 a request (trtllm: reserved)
        self.spans.append((self.now, dt, len(self.order), share, share))

    # ---- the loop

    def run(self) -> Run:
        while self.done < self.n:
            while self.pending and self.arrival[self.pending[0]] <= self.now:
                self.waiting.append(self.pending.popleft())
            if not self.order and not self.waiting:
                if not self.pending:
                    raise AssertionError("no request left to run")  # every request finishes or is refused
                self.now = max(self.now, self.arrival[self.pending[0]])
                continue
            self.schedule()
        return Run(
            self.arrival,
            self.admitted,
            self.first,
            self.finish,
            self.itl,
            self.steps,
            self.preemptions,
            self.now,
            self.spans,
        )

    def schedule(self) -> None:
        """One step as V1 builds it, or a run of decode-only steps summed in closed form."""
        sched, P = self.sched, self.P
        no_evict = self.no_evict
        preempted = self.preemptions  # a step that preempts admits no one (scheduler.py: `if not preempted_reqs`)
        while not no_evict and self.cbase and not self.fits(self.growth()) and self.preempt():
            pass
        if not no_evict and self.cbase and not self.fits(self.growth()):
            self.too_large(next(iter(self.cbase)))
        static = sched.policy == "static"
        budget = (10**12 if static else sched.max_num_batched_tokens) - len(self.cbase)
        chunks: list[tuple[int, int, int]] = []  # (request, start, end)
        for i in list(self.prefilling):
            t = min(P[i] + self.gen[i] - self.computed[i], budget)
            # the step's decodes hold their next tokens first (what the step adds after it: advance); the loop stops
            # once i itself is preempted (the ones before it keep their chunks) or only one request runs
            while not no_evict and t > 0 and not self.fits(t + self.growth()) and i in self.prefilling:
                if not self.preempt():
                    break
            if i not in self.prefilling or t <= 0:
                continue
            if not no_evict and not self.fits(t + self.growth()):  # nothing left to preempt: it alone outgrows it
                self.too_large(i)
            chunks.append((i, self.computed[i], self.computed[i] + t))
            budget -= t
            self.used += t  # every layer holds the chunk's tokens in its step (windows freed after: see below)
        admit = (not static or not self.order) and self.preemptions == preempted
        while admit and self.waiting and budget > 0 and len(self.order) < sched.max_num_seqs:
            i = self.waiting[0]
            t = min(P[i] + self.gen[i] - self.computed[i], budget)
            if no_evict:
                if self.reserved + self.whole(i) > self.cap:
                    if not self.order:
                        self.too_large(i)
                    break
                if t < P[i] + self.gen[i] - self.computed[i] and budget < sched.max_num_batched_tokens - len(
                    self.cbase
                ):
                    break  # its prompt waits for a step with room for all of it
                self.reserved += self.whole(i)
            elif not self.fits(self.held(self.computed[i]) + t + sched.block_size + self.growth()) or (
                sched.reserve_full_isl
                and not self.fits(self.whole_prompt(P[i] + self.gen[i]) + sched.block_size + self.growth())
            ):
                if not self.order:
                    self.too_large(i)
                break
            self.waiting.popleft()
            if math.isnan(self.admitted[i]):
                self.admitted[i] = self.now
            self.used += self.held(self.computed[i])  # a prefix cache's tokens are held from admission
            self.order.append(i)
            if self.streams:
                self.take_slot(i)
            self.prefilling[i] = None
            chunks.append((i, self.computed[i], self.computed[i] + t))
            budget -= t
            self.used += t
        if not chunks:
            self.jump()
            return
        dec = self.decodes()
        dt = self.model.seconds(dec, [(b, e, e == P[i] + self.gen[i]) for i, b, e in chunks], self.batch(chunks))
        self.account(dt)
        self.now += dt
        if dec.n:
            self.itl.append((dt, dec.n))
            self.advance(1)
        for i, b, e in chunks:
            self.computed[i] = e
            self.used -= (e - b) - (self.held(e) - self.held(b))  # what a window lets go of after the step
            if e == P[i] + self.gen[i]:
                del self.prefilling[i]
                self.gen[i] += 1
                if self.gen[i] == 1:
                    self.first[i] = self.now
                if self.gen[i] >= self.O[i]:
                    self.complete(i)
                else:
                    self.add_decode(i)

    def jump(self) -> None:
        """Decode-only steps until the next event: a finish, a window filling, the KV cache filling, or (when one
        could be admitted) an arrival."""
        n, model = len(self.cbase), self.model
        while not self._live(self.finishes[0]):  # entries of requests preempted since
            heapq.heappop(self.finishes)
        m = max(1, self.finishes[0][0] - self.G)
        for heap in (self.crossings, self.kv_crossings):
            if heap:
                m = min(m, max(1, heap[0][0] - self.G))
        grows = self.growth()  # 0 when every layer is windowed and every decode is past its window (Mistral-7B)
        if not self.no_evict and grows > 0:  # under reservations the cache cannot fill up before a finish
            m = min(m, max(1, int((self.cap - self.used - self.slack()) // grows)))
        keys_slope = model.full * n + model.sliding * self.below
        kv_slope = model.kv_full * n + model.kv_slide * self.below_kv
        run = model.decode_run(n, *self.decodes()[1:], keys_slope, kv_slope, self.batch())
        if self.pending and len(self.order) < self.sched.max_num_seqs and not self.waiting:
            gap = self.arrival[self.pending[0]] - self.now
            low, high = 1, m  # the smallest count of steps that reaches the next arrival
            if run(high)[0] >= gap:
                while low < high:
                    mid = (low + high) // 2
                    if run(mid)[0] >= gap:
                        high = mid
                    else:
                        low = mid + 1
                m = low
        total, first, last = run(m)
        self.account_run(total, m)
        self.itl += [(first, n * m / 2), (last, n * m / 2)] if m > 1 else [(first, n)]
        self.now += total
        self.advance(m)

    def account_run(self, total: float, m: int) -> None:
        self.steps += m
        share0 = min((self.used + self.slack()) / self.cap, 1.0)
        share1 = min((self.used + self.slack() + self.growth() * m) / self.cap, 1.0)
        self.spans.append((self.now, total, len(self.order), share0, share1))
