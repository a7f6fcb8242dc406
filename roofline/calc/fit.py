"""`fit`: the inverse questions of memory. The largest context per sequence that fits at a batch, the largest
batch at a context, and the smallest tensor-parallel degree at which the weights and one sequence fit.

All three use the estimate's memory model (roofline.calc.estimate): the KV budget per device = memory fraction x
capacity - resident weights per device, and a sequence's KV cache at C tokens as the attention seam sizes it
(sliding-window layers stop growing at the window, MLA caches its latent, quantized KV formats carry their
scales), split over the devices as far as the KV heads allow. Exact: a search over integers, not a formula.
"""

from typing import Any, NamedTuple

from roofline.calc.checks import MAX_COUNT
from roofline.calc.estimate import estimate
from roofline.calc.inputs import storage_for
from roofline.calc.knobs import Knobs, knobs_of
from roofline.calc.shape import Shape
from roofline.errors import UsageError
from roofline.specs.records import Hardware, Model

SCHEMA_VERSION = 1
TP_DEGREES = (1, 2, 4, 8, 16, 32, 64, 128)


class Fit(NamedTuple):
    """The answers of `fit` (None where the answer does not exist, with the reason)."""

    model: dict[str, Any]
    hardware: dict[str, Any]
    inputs: dict[str, Any]
    max_context_tokens: int | None  # at `batch`, at most the model's max_context; None when even 1 token does not fit
    max_context_reason: str
    memory_context_tokens: int | None  # what the KV budget alone holds at `batch` (None: unbounded, or not one token)
    max_batch: int | None  # at `context`
    max_batch_reason: str
    min_tp: int | None  # weights + one sequence at `context` fit per device
    min_tp_reason: str
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return dict(self._asdict())

    def csv_rows(self) -> list[dict[str, Any]]:
        return [self.to_dict()]


def fits(shape: Shape, budget: float, batch: int, context: int) -> bool:
    """Weights already taken off `budget`: do `batch` sequences of `context` tokens fit in it (per device)?"""
    return batch * shape.kv_cached(context) * shape.kv_share <= budget


def fit(
    model: Model,
    hardware: Hardware,
    *,
    batch: int = 1,
    context: int | None = None,
    knobs: Knobs | None = None,
    **overrides: Any,
) -> Fit:
    """Largest context at `batch`, largest batch at `context` (default: the model's max_context) and smallest
    tp at which weights + one sequence of `context` fit; `knobs` as for estimate (tp sets the first two)."""
    k = knobs_of(knobs, overrides)
    context = context if context is not None else model.max_context
    if context is None:
        raise UsageError(f"{model.id} has no max_context: give the context", "context")
    for name, value in (("batch", batch), ("context", context)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
            raise UsageError(f"expected an integer from 1 to {MAX_COUNT:.0e}, got {value!r}", name)
    base = estimate(model, hardware, batch=batch, prompt_tokens=min(context, MAX_COUNT), output_tokens=0, knobs=k)
    i = base.inputs
    shape = Shape(
        model,
        storage_for(model, k.quant, k.bits_per_weight, k.weight_dtype, i.weight_dtype),
        i.kv_dtype,
        i.compute_dtype,
        i.tp,
    )
    budget = (
        base.kv_budget_bytes
        if base.fits or base.weight_bytes_per_device <= i.memory_fraction * hardware.memory_capacity
        else -1.0
    )
    max_context, memory_context, context_reason = _max_context(shape, budget, batch, model.max_context)
    max_batch = base.max_batch
    batch_reason = (
        "weights alone exceed the memory fraction"
        if budget < 0
        else "no KV cache"
        if max_batch is None
        else f"{max_batch} sequences of {context} tokens fill the KV budget"
    )
    min_tp, tp_reason = _min_tp(model, k, i, hardware, context)
    return Fit(
        model={"id": model.id, "name": model.name, "params": model.params},
        hardware={"id": hardware.id, "name": hardware.name, "memory_capacity_bytes": hardware.memory_capacity},
        inputs={
            "batch": batch,
            "context_tokens": context,
            **{
                n: getattr(i, n)
                for n in ("weight_dtype", "kv_dtype", "bits_per_weight", "memory_fraction", "tp", "quant")
            },
        },
        max_context_tokens=max_context,
        max_context_reason=context_reason,
        memory_context_tokens=memory_context,
        max_batch=max_batch if budget >= 0 else 0,
        max_batch_reason=batch_reason,
        min_tp=min_tp,
        min_tp_reason=tp_reason,
    )


def _max_context(shape: Shape, budget: float, batch: int, limit: int | None) -> tuple[int | None, int | None, str]:
    """(the answer: the largest context within the KV budget and the model's own max_context `limit`, what memory
    alone holds (None: unbounded), why). KV(C) never decreases, so a binary search is exact."""
    if budget < 0 or not fits(shape, budget, batch, 1):
        why = (
            "not even one token per sequence fits: the weights fill the memory fraction"
            if budget < 0
            else "not even one token fits"
        )
        return None, None, why
    if shape.kv_cached(MAX_COUNT) == shape.kv_cached(MAX_COUNT // 2) and fits(shape, budget, batch, MAX_COUNT):
        # every layer windowed (or no KV): the cache stops growing, so memory sets no limit
        why = (
            "no KV cache is priced"
            if shape.kv_cached(1) == 0
            else "every layer's KV cache stops growing at its sliding window"
        )
        if limit is None:
            return None, None, f"unbounded: {why} (and the model gives no max_context)"
        return limit, None, f"the model's max_context: memory is not the limit ({why})"
    low, high = 1, MAX_COUNT
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(shape, budget, batch, mid) else (low, mid - 1)
    memory = None if low == MAX_COUNT else low
    if limit is not None and low >= limit:
        return limit, memory, f"the model's max_context: memory would hold {batch} sequence(s) of {low:,} tokens"
    if memory is None:
        return None, None, f"unbounded up to {MAX_COUNT:.0e} tokens"
    return low, low, f"{batch} sequence(s) of {low:,} tokens fill the KV budget"


def _min_tp(model: Model, k: Knobs, inputs, hardware: Hardware, context: int) -> tuple[int | None, str]:
    """The smallest degree in TP_DEGREES with weights / tp + one sequence's KV share within the memory fraction."""
    usable = inputs.memory_fraction * hardware.memory_capacity
    storage = storage_for(model, k.quant, k.bits_per_weight, k.weight_dtype, inputs.weight_dtype)
    weights_alone = None  # the smallest degree whose weights fit without any KV (a shorter context's bound)
    for tp in TP_DEGREES:
        shape = Shape(model, storage, inputs.kv_dtype, inputs.compute_dtype, tp)
        if weights_alone is None and shape.weights <= usable:
            weights_alone = tp
        if shape.weights + shape.kv_cached(context) * shape.kv_share <= usable:
            if tp > 1 and hardware.interconnect_bandwidth is None:  # estimate refuses tp > 1 without it
                return None, (
                    f"{tp} devices would hold it, but {hardware.id} lists no interconnect_bandwidth for tensor "
                    "parallelism"
                )
            alone = f" (the weights alone fit at tp {weights_alone})" if weights_alone not in (None, tp) else ""
            return (
                tp,
                f"weights / {tp} + one sequence of {context} tokens fit in {inputs.memory_fraction:g} x memory per "
                f"device{alone}",
            )
    return None, f"does not fit even at tp {TP_DEGREES[-1]}"
