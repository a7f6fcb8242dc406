"""An independent simulator of one vLLM V1 replica, kept as an oracle for roofline's (tests/test_simulate.py).

Written on 2026-12-08 by an outside auditor (a helper shown vLLM 0.14.0's and 0.19's scheduler source and roofline's
docs, not its code or its output), trimmed here to what the tests use; it runs every step one by one and counts KV in
whole blocks, where roofline sums decode-only steps in closed form and counts tokens with a block of slack a request.

Step model (the roofline bound): time = max(FLOPs / F, bytes / W), FLOPs = 2 M T + 2 V h (logits) + 4 L H d (keys),
bytes = the weights but the input embedding + each piece's earlier tokens' KV read + its own tokens' KV written.
Scheduler (vllm/v1/core/sched/scheduler.py): running requests first, in admission order, each min(tokens left,
budget); blocks of 16 for computed + new tokens; when they do not fit, preempt running.pop() (recomputed later,
its outputs kept) and admit no one that step; else admit from the head of waiting while fewer than max_num_seqs run,
if the chunk's blocks fit (and with full_isl, vLLM 0.19's default, the whole known sequence's). Blocks: floor((0.9 x
capacity - weights) / (16 x KV bytes a token)) less vLLM's null block.
"""

import re
from collections import deque

import yaml

PREFIX = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def quantity(text) -> float:
    """'3.35 TB/s', '80 GiB', '989.4 TFLOP/s' in SI units."""
    found = re.match(r"^([0-9.eE+-]+)([KMGTP]i?)?(B|FLOP)?(/s)?$", str(text).replace(" ", ""))
    return float(found[1]) * PREFIX[found[2] or ""]


class Model:
    def __init__(self, path):
        y = yaml.safe_load(open(path))
        h, self.L, heads, kv_heads = y["hidden_size"], y["layers"], y["num_heads"], y["num_kv_heads"]
        d, inter, vocab = h // heads, y["intermediate_size"], y["vocab_size"]
        self.M = self.L * (h * heads * d + 2 * h * kv_heads * d + heads * d * h + 3 * h * inter)  # no lm_head
        self.lm = vocab * h  # untied (Llama-3.1-8B)
        params = self.M + self.L * 2 * h + h + 2 * vocab * h  # + norms, lm_head and embedding
        self.w_resident, self.w_stream = 2 * params, 2 * (params - vocab * h)  # bf16; the embedding is a lookup
        self.kvb = 2 * self.L * kv_heads * d * 2
        self.attn_per_key = 4 * self.L * heads * d


class Device:
    def __init__(self, path):
        y = yaml.safe_load(open(path))
        self.mem, self.W = quantity(y["memory_capacity"]), quantity(y["memory_bandwidth"])
        self.F = quantity(y["peak_flops"]["bf16"])


class Req:
    def __init__(self, arr, P, O):
        self.arr, self.P, self.O = arr, P, O
        self.ntok, self.comp, self.gen, self.blocks = P, 0, 0, 0
        self.first = self.fin = None


def run(m, dev, arrivals, P, O, full_isl=False, bs=16):
    """Each request's (arrival, first token, finish) for arrivals of P + O tokens, and the preemptions."""
    big = dev.mem >= 70 * 2**30
    mbt, mns = (8192, 1024) if big else (2048, 256)
    free = int((0.9 * dev.mem - m.w_resident) // (bs * m.kvb)) - 1
    reqs = [Req(a, P, O) for a in arrivals]
    pending, waiting, running = deque(reqs), deque(), []
    t, done, preemptions = 0.0, 0, 0
    while done < len(reqs):
        while pending and pending[0].arr <= t:
            waiting.append(pending.popleft())
        if not running and not waiting:
            t = pending[0].arr
            continue
        budget, sched, preempted, i = mbt, [], False, 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = min(r.ntok - r.comp, budget)
            need = -(-(r.comp + n) // bs) - r.blocks
            self_preempted = False
            while need > free:
                v = running.pop()
                free += v.blocks
                v.blocks = v.comp = 0
                preemptions += 1
                preempted = True
                waiting.appendleft(v)
                if v is r:
                    self_preempted = True
                    break
            if self_preempted:
                break
            free -= need
            r.blocks += need
            sched.append((r, n))
            budget -= n
            i += 1
        while not preempted and waiting and budget > 0 and len(running) < mns:
            r = waiting[0]
            n = min(r.ntok, budget)
            need = -(-n // bs)
            if (full_isl and -(-r.ntok // bs) > free) or need > free:
                break
            waiting.popleft()
            running.append(r)
            free -= need
            r.blocks = need
            sched.append((r, n))
            budget -= n
        T = keys = earlier = logits = 0
        for r, n in sched:
            s, e = r.comp, r.comp + n
            T, earlier, keys = T + n, earlier + s, keys + (e * (e + 1) - s * (s + 1)) // 2
            logits += e == r.ntok
        flops = 2.0 * m.M * T + 2.0 * m.lm * logits + m.attn_per_key * keys
        t += max(flops / dev.F, (m.w_stream + m.kvb * (earlier + T)) / dev.W)
        for r, n in sched:
            r.comp += n
            if r.comp == r.ntok:
                r.gen += 1
                r.ntok += 1
                if r.first is None:
                    r.first = t
                if r.gen == r.O:
                    r.fin, free, r.blocks = t, free + r.blocks, 0
                    done += 1
        running = [r for r in running if r.fin is None]
    return [(r.arr, r.first, r.fin) for r in reqs], preemptions
