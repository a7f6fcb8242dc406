"""An engine's fixed costs: what a decode step costs beyond streaming its weights and KV, measured on the engine.

A decode step of a small model runs dozens of small kernels per layer (norms, rotary, cache writes, the
attention call, residual adds, the linears' own dispatch): on a CPU they cost far more than one tiny op's
overhead suggests (an eager RMSNorm over 576 values takes ~60 us). So the engine is timed on tiny-width
models (hidden 64: every weight under 64 KiB, so streaming costs nothing) of two depths at each batch;
the difference gives the fixed cost per layer, the intercept the fixed cost per step:
    step(L) = per_step + L x per_layer    (fitted through depths 2 and 8).
Two archetypes are measured, since their layers run different kernels: "rope" (Llama: RoPE, RMSNorm, gated
MLP) and "learned" (GPT-2: learned positions, LayerNorm, plain MLP, biases). Nothing of the model being
predicted is used: only its archetype and depth (roofline.calc.calibrate.engine_cost prices a step).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

DEPTHS = (2, 8)
BATCHES = (1, 4, 16)
WIDTH, HEADS, VOCAB, PROMPT = 64, 4, 256, 32


def archetypes() -> dict[str, Any]:
    """The two tiny architectures, by archetype name."""
    from roofline.specs.params import Architecture

    common = dict(
        layers=DEPTHS[0],
        hidden_size=WIDTH,
        num_heads=HEADS,
        head_dim=WIDTH // HEADS,
        intermediate_size=2 * WIDTH,
        vocab_size=VOCAB,
        max_positions=256,
    )
    return {
        "rope": Architecture(
            **common,
            num_kv_heads=HEADS // 2,
            mlp="gated",
            tied_embeddings=False,
            position_embeddings="rope",
            norm="rmsnorm",
            bias="none",
        ),
        "learned": Architecture(
            **common,
            num_kv_heads=HEADS,
            mlp="plain",
            tied_embeddings=True,
            position_embeddings="learned",
            norm="layernorm",
            bias="all",
        ),
    }


def fit(step_seconds: dict[int, float]) -> tuple[float, float]:
    """(per_step, per_layer) [s] from step times at two depths: the line through them (clamped at >= 0)."""
    (d0, t0), (d1, t1) = sorted(step_seconds.items())[:2]
    per_layer = max((t1 - t0) / (d1 - d0), 0.0)
    return max(t0 - d0 * per_layer, 0.0), per_layer


def measure(
    step_times: Callable[[Any, int], dict[int, float]],
    deadline: float = float("inf"),
    batches: tuple[int, ...] = BATCHES,
) -> dict[str, Any]:
    """Fixed costs per archetype and batch; `step_times(arch, batch)` times one engine's decode step at each of
    DEPTHS ({depth: seconds}).
    The smallest and largest batches are always measured (the batch scaling needs both); the others only
    before `deadline`."""
    out: dict[str, Any] = {"width": WIDTH, "depths": list(DEPTHS), "archetypes": {}}
    for name, arch in archetypes().items():
        per_step, per_layer = {}, {}
        ends = (min(batches), max(batches))
        for batch in sorted(batches, key=lambda b: b not in ends):
            if batch not in ends and time.perf_counter() > deadline:
                break
            per_step[str(batch)], per_layer[str(batch)] = fit(step_times(arch, batch))
        order = lambda table: {b: table[b] for b in sorted(table, key=int)}  # noqa: E731
        out["archetypes"][name] = {"per_step_s": order(per_step), "per_layer_s": order(per_layer)}
    return out


def of(engine: str, kind: str, dtype: str, quick: bool = False, deadline: float = float("inf")) -> dict[str, Any]:
    """Measure `engine`'s fixed costs on this device (torch imported here): the profile's engines[engine]."""
    from roofline.measure.timing import torch_module

    torch = torch_module("measure --engine")
    if engine == "transformers":
        from roofline.measure.hf_decoder import TransformersDecoder as build
    else:
        from roofline.measure.decoder import Decoder as build
    timed = step_times(
        torch,
        kind,
        lambda arch, batch, tokens: build(arch, dtype, kind, batch, tokens),
        steps=8 if quick else 12,
        mode=lambda: grad_mode(torch, engine),
    )
    out = {**measure(timed, deadline, (1, 16) if quick else BATCHES), "dtype": dtype}
    if engine == "transformers":
        out["conv1d_slowdown"] = conv1d_slowdown(torch, kind, dtype)
    return out


CONV1D_ROWS = (1, 4, 16, 128)  # decode batches and a prompt's rows
# (in, out) of the weights timed: GPT-2-medium's MLP down-projection, attention output and MLP up-projection. The
# ratio follows the weight's aspect (out / in): fp32 on a 2-core Zen 4 VM at one row, 1.19 for 4096 x 1024 and
# 3072 x 768, 0.91 for 1024 x 1024, 0.72-0.74 for 1024 x 3072 and 1024 x 4096, 0.63-0.67 for 768 x 2304 and
# 768 x 3072 (median of 5 rounds); bf16 1.24-1.26 tall, 1.07 square, 1.01-1.20 wide.
CONV1D_SHAPES = ((4096, 1024), (1024, 1024), (1024, 4096))
CONV1D_ROUNDS = 3


def conv1d_slowdown(torch, kind: str, dtype: str, cold_bytes: float = 128 * 2**20) -> dict[str, dict[str, float]]:
    """A weight's "KxN" (in x out) -> rows -> time of transformers' Conv1D linear (addmm of x by a weight stored in
    x out, GPT-2's layout) over F.linear's (the weight out x in, the layout the profile's curve times), on the same
    cold weights: the median of CONV1D_ROUNDS interleaved rounds, at each of CONV1D_SHAPES. In bf16 on a 2-core
    Zen 5 VM Conv1D 1024 x 4096 took 1.7x at 1 and 4 rows, 1.4x at 16, 1.07x at 128 (best of 30 calls), and
    transformers' GPT-2 shapes decoded 0.58-0.74x as fast as priced. One shape is not enough: timed at the wide
    shape alone, fp32's 0.69 at one row priced GPT-2's batch-1 decodes 0.78-0.85x of measured on a Zen 4 VM, its
    tall down-projections taking 1.19x."""
    return {f"{k}x{n}": _conv1d_shape(torch, kind, dtype, k, n, cold_bytes) for k, n in CONV1D_SHAPES}


def _conv1d_shape(torch, kind: str, dtype: str, k: int, n: int, cold_bytes: float) -> dict[str, float]:
    """rows -> Conv1D's time over F.linear's for a k x n weight (conv1d_slowdown)."""
    import torch.nn.functional as F

    from roofline.measure.timing import STORAGE, synchronizer

    sync = synchronizer(torch, kind)
    device = "cuda" if kind == "cuda" else "cpu"
    store = getattr(torch, STORAGE[dtype])
    count = max(2, int(cold_bytes // (k * n * torch.finfo(store).bits // 8)))
    linear = [torch.randn(n, k, device=device).to(store) for _ in range(count)]
    conv = [w.t().contiguous() for w in linear]
    bias = torch.zeros(n, device=device).to(store)

    def seconds(fn) -> float:
        fn()  # warm
        sync()
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start

    out = {}
    with torch.inference_mode():
        for m in CONV1D_ROWS:
            x = torch.randn(m, k, device=device).to(store)
            ratios = []
            for _ in range(CONV1D_ROUNDS):
                plain = seconds(lambda: [F.linear(x, w, bias) for w in linear])
                ratios.append(seconds(lambda: [torch.addmm(bias, x, w) for w in conv]) / plain)
            out[str(m)] = statistics.median(ratios)
    return out


def grad_mode(torch, engine: str):
    """The autograd mode an engine runs under: transformers' generate() runs under no_grad (under inference_mode a
    model built there runs its prefill's lm_head on the last position as a batched matmul that copies the whole
    head per sequence: 2.2x and 8.3x slower prefills of GPT-2-medium and Qwen3-0.6B shapes at batch 4, measured with
    transformers 5.24), roofline's decoder under
    inference_mode."""
    return torch.no_grad() if engine == "transformers" else torch.inference_mode()


def step_times(
    torch, kind: str, build: Callable[[Any, int, int], Any], steps: int = 12, mode: Callable[[], Any] | None = None
) -> Callable[[Any, int], dict[int, float]]:
    """step_times(arch, batch) for `measure`: at each of DEPTHS, the median of `steps` decode steps of the engine
    that `build(arch, batch, max_tokens)` makes (any object with prefill, decode and device), after two warm-up
    steps, built and run under `mode()` (inference_mode by default). The depths' engines are built side by side
    and their steps timed alternately, so a slow moment of a shared machine lands on both depths alike: timed one
    depth after the other (8 steps each, a quick run), the rope archetype's bf16 cost per layer came out 286-551 us
    in six runs on a 2-core AMX Xeon VM, and one quick profile's 660 us priced SmolLM2-135M's decode 1.3x slow."""
    from roofline.measure.timing import synchronizer

    sync = synchronizer(torch, kind)

    def timed(arch, batch: int) -> dict[int, float]:
        with (mode or torch.inference_mode)():
            engines = {d: build(arch._replace(layers=d), batch, PROMPT + steps + 4) for d in DEPTHS}
            tokens = {
                d: e.prefill(torch.randint(0, arch.vocab_size, (batch, PROMPT)).to(e.device))
                for d, e in engines.items()
            }
            for j in range(2):
                tokens = {d: e.decode(tokens[d], PROMPT + j) for d, e in engines.items()}
            sync()
            times: dict[int, list[float]] = {d: [] for d in DEPTHS}
            for j in range(steps):
                for d in DEPTHS if j % 2 == 0 else DEPTHS[::-1]:
                    start = time.perf_counter()
                    tokens[d] = engines[d].decode(tokens[d], PROMPT + 2 + j)
                    sync()
                    times[d].append(time.perf_counter() - start)
        return {d: statistics.median(t) for d, t in times.items()}

    return timed
