"""`sweep` and `compare`: many estimates at once, with goodput under latency objectives (SLOs).

Goodput counts a configuration's tokens/s only when it fits in memory and meets every SLO given
(TPOT <= tpot_slo and TTFT <= ttft_slo); the best batch is the smallest with the most goodput (once compute-bound,
throughput stays flat while latency grows with the batch: a tie goes to the lower latency).
"""

import numbers
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from roofline.calc.checks import MAX_COUNT
from roofline.calc.estimate import Estimate, estimate, estimate_at, plain, prepare
from roofline.calc.knobs import BATCH, OUTPUT_TOKENS, PROMPT_TOKENS
from roofline.calc.prepare import spec_of
from roofline.errors import UsageError
from roofline.specs.records import Hardware, Model

SCHEMA_VERSION = 1
MAX_VALUES = 10_000  # per list or range: more is a typo, not a sweep
MAX_POINTS = 100_000  # per grid: ~5 s of estimates (benchmarks/sweep_speed.py: 10,000 in ~0.5 s)


class Row(NamedTuple):
    batch: int
    prompt_tokens: int
    output_tokens: int
    tpot_s: float
    ttft_s: float
    request_latency_s: float
    tokens_per_s: float  # the decode step's: B / TPOT
    tokens_per_s_per_sequence: float
    mbu: float
    mfu: float
    kv_bytes: float  # KV cache of the whole batch at prompt + output tokens
    fits: bool
    bound: str  # of the decode step
    meets_slo: bool
    goodput_tokens_per_s: float
    output_tokens_per_s: float = 0.0  # end to end: B x O / request latency
    requests_per_s: float = 0.0
    speculative_speedup: float | None = None  # plain decode step / speculative TPOT (> 1: drafting helps)


class Group(NamedTuple):
    """The summary of one (prompt, output) combination."""

    prompt_tokens: int
    output_tokens: int
    critical_batch: int | None
    max_batch: int | None
    best_batch: int | None  # None when no batch fits and meets the SLOs
    best_goodput_tokens_per_s: float
    best_tpot_s: float | None
    best_ttft_s: float | None


class Sweep(NamedTuple):
    inputs: dict[str, Any]
    rows: list[Row]
    groups: list[Group]
    schema_version: int = SCHEMA_VERSION

    @property
    def summary(self) -> Group:
        """The group holding the best goodput (the only group when lengths are single values)."""
        return smallest_best(self.groups, lambda g: g.best_goodput_tokens_per_s, lambda g: g.best_batch or 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "inputs": self.inputs,
            "rows": [r._asdict() for r in self.rows],  # flat records: no recursion needed
            "summary": plain(self.summary),
            "groups": plain(self.groups),
        }

    def csv_rows(self) -> list[Row]:
        return self.rows


GOODPUT_OF = ("output", "decode")  # what goodput counts: end-to-end output tokens/s, or the decode step's


def row(e: Estimate, tpot_slo: float | None, ttft_slo: float | None, goodput_of: str = "output") -> Row:
    """One sweep row from an estimate; goodput counts `goodput_of` throughput when it fits and meets the SLOs."""
    meets = (tpot_slo is None or e.tpot_s <= tpot_slo) and (ttft_slo is None or e.ttft_s <= ttft_slo)
    rate = e.output_tokens_per_s if goodput_of == "output" else e.decode.tokens_per_s
    return Row(
        batch=e.inputs.batch,
        prompt_tokens=e.inputs.prompt_tokens,
        output_tokens=e.inputs.output_tokens,
        tpot_s=e.tpot_s,
        ttft_s=e.ttft_s,
        request_latency_s=e.request_latency_s,
        tokens_per_s=e.decode.tokens_per_s,
        tokens_per_s_per_sequence=e.decode.tokens_per_s_per_sequence,
        mbu=e.decode.mbu,
        mfu=e.decode.mfu,
        kv_bytes=e.inputs.batch * e.kv_bytes_per_sequence,
        fits=e.fits,
        bound=e.decode.bound,
        meets_slo=meets,
        goodput_tokens_per_s=rate if meets and e.fits else 0.0,
        output_tokens_per_s=e.output_tokens_per_s,
        requests_per_s=e.requests_per_s,
        speculative_speedup=e.decode.time_s / e.speculative.tpot_s if e.speculative else None,
    )


def default_batches(max_batch: int | None, limit: int = 1024) -> list[int]:
    """Powers of two up to the memory-limited max batch, and the max batch itself ([1] if nothing fits)."""
    top = limit if max_batch is None else max(max_batch, 1)
    batches = [1 << i for i in range(top.bit_length()) if 1 << i <= top]
    return batches if batches[-1] == top else [*batches, top]


def sweep(
    model: Model,
    hardware: Hardware,
    *,
    batches: list[int] | None = None,
    prompts: list[int] = (PROMPT_TOKENS,),
    outputs: list[int] = (OUTPUT_TOKENS,),
    tpot_slo: float | None = None,
    ttft_slo: float | None = None,
    goodput_of: str = "output",
    **options: Any,
) -> Sweep:
    """Estimates over the grid batches x prompts x outputs; `options` are `estimate`'s keyword arguments
    (`knobs=` or its fields). Goodput counts end-to-end output tokens/s (`goodput_of="output"`: B x O /
    request latency, prefill included) or the decode step's B / TPOT (`"decode"`)."""
    model, hardware = spec_of(model, Model, "model"), spec_of(hardware, Hardware, "hardware")
    if goodput_of not in GOODPUT_OF:
        raise UsageError(f"expected one of {', '.join(GOODPUT_OF)}, got {goodput_of!r}", "goodput_of")
    batches, prompts, outputs = _counts(batches, "batches"), _counts(prompts, "prompts"), _counts(outputs, "outputs")
    points = len(batches or [1]) * len(prompts) * len(outputs)
    if points > MAX_POINTS:
        raise UsageError(
            f"the grid --batch x --prompt x --output has {points:,} points, more than {MAX_POINTS:,} (narrow a range "
            "or raise its step)"
        )
    for name, slo in (("tpot_slo", tpot_slo), ("ttft_slo", ttft_slo)):
        if slo is not None and (isinstance(slo, bool) or not isinstance(slo, numbers.Real)):
            raise UsageError(f"expected seconds as a number (0.05 for 50 ms), got {slo!r}", name)
        if slo is not None and not 0 < slo < float("inf"):
            raise UsageError(f"expected a positive, finite duration, got {slo!r}", name)
    rows, groups = [], []
    setup = prepare(model, hardware, **options)  # the knobs are checked and the model's shape is built once
    cache: dict = {}  # the critical batch per context, shared by every batch
    for prompt in prompts:
        for output in outputs:
            first = estimate_at(setup, 1, prompt, output, cache)
            group = []
            for batch in batches or default_batches(first.max_batch):
                e = first if batch == 1 else estimate_at(setup, batch, prompt, output, cache)
                group.append(row(e, tpot_slo, ttft_slo, goodput_of))
            rows += group
            groups.append(_summarize(group, first))
    inputs = {
        **plain(first.inputs),
        "batches": sorted({r.batch for r in rows}),
        "prompts": list(prompts),
        "outputs": list(outputs),
    }
    inputs.update(
        model=model.id,
        hardware=hardware.id,
        figures=hardware.origin,
        tpot_slo_s=tpot_slo,
        ttft_slo_s=ttft_slo,
        goodput_of=goodput_of,
    )
    for key in ("batch", "prompt_tokens", "output_tokens"):
        inputs.pop(key)
    return Sweep(inputs, rows, groups)


def smallest_best(items: list, goodput: Callable, batch: Callable):
    """Of `items`, the one with the smallest batch among those with the most goodput (a tie within 1e-9 goes to
    the lower latency: once compute-bound, throughput stays flat while latency grows with the batch)."""
    top = max(goodput(x) for x in items)
    return min((x for x in items if goodput(x) >= top * (1 - 1e-9)), key=batch)


def _summarize(rows: list[Row], first: Estimate) -> Group:
    good = [r for r in rows if r.goodput_tokens_per_s > 0]
    best = smallest_best(good, lambda r: r.goodput_tokens_per_s, lambda r: r.batch) if good else None
    return Group(
        prompt_tokens=first.inputs.prompt_tokens,
        output_tokens=first.inputs.output_tokens,
        critical_batch=first.critical_batch,
        max_batch=first.max_batch,
        best_batch=best.batch if best else None,
        best_goodput_tokens_per_s=best.goodput_tokens_per_s if best else 0.0,
        best_tpot_s=best.tpot_s if best else None,
        best_ttft_s=best.ttft_s if best else None,
    )


def parse_counts(text: str, flag: str, low: int = 1) -> list[int]:
    """'1,8,64' -> [1, 8, 64]; '1:512' -> powers of two from 1 to 512 (and 512); '128:1024:128' -> a linear range."""
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            numbers = [int(x) for x in part.split(":")] if len(part) <= 40 else [int("too long")]
        except ValueError:
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise UsageError(
                f"{flag}: expected integers like 1,8,64 or a range like 1:512 (doubling) or 128:1024:128, got {shown!r}"
            ) from None
        if len(numbers) == 1:
            values += numbers
        elif len(numbers) in (2, 3) and numbers[0] <= numbers[1] and (len(numbers) == 2 or numbers[2] > 0):
            start, stop = numbers[0], numbers[1]
            if stop > MAX_COUNT:
                raise UsageError(f"{flag}: expected values up to {MAX_COUNT:.0e}, got {part!r}")
            if len(numbers) == 3:
                if (stop - start) // numbers[2] + 1 + len(values) > MAX_VALUES:
                    raise UsageError(f"{flag}: {part!r} gives more than {MAX_VALUES} values (raise the step)")
                values += list(range(start, stop + 1, numbers[2]))
            else:
                if start < 1:
                    raise UsageError(f"{flag}: a doubling range starts at 1 or more, got {part!r}")
                while start <= stop:
                    values.append(start)
                    start *= 2
                if values[-1] != stop:
                    values.append(stop)
        else:
            raise UsageError(
                f"{flag}: expected start:stop or start:stop:step with start <= stop and step > 0, got {part!r}"
            )
    if not values or min(values) < low or max(values) > MAX_COUNT or len(values) > MAX_VALUES:
        shown = text if len(text) <= 40 else text[:37] + "..."
        raise UsageError(f"{flag}: expected up to {MAX_VALUES} integers from {low} to {MAX_COUNT:.0e}, got {shown!r}")
    return list(dict.fromkeys(values))


class CompareRow(NamedTuple):
    model: str
    hardware: str
    figures: str
    fits: bool
    weight_bytes: float
    max_batch: int | None
    ridge_point_flop_per_byte: float
    batch: int
    ttft_s: float
    tpot_s: float
    tokens_per_s: float
    decode_bound: str
    best_batch: int | None
    best_goodput_tokens_per_s: float | None
    output_tokens_per_s: float = 0.0  # end to end at `batch`: B x O / request latency
    requests_per_s: float = 0.0


COMPARE_COLUMNS = CompareRow._fields


class Comparison(NamedTuple):
    """The result of `compare`: one row per (model, hardware), and the inputs every row shares."""

    rows: list[CompareRow]
    inputs: dict[str, Any]
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, "inputs": self.inputs, "rows": plain(self.rows)}

    def csv_rows(self) -> list[CompareRow]:
        return self.rows


def compare(
    models: list[Model],
    devices: list[Hardware],
    *,
    batch: int = BATCH,
    prompt_tokens: int = PROMPT_TOKENS,
    output_tokens: int = OUTPUT_TOKENS,
    tpot_slo: float | None = None,
    ttft_slo: float | None = None,
    sort: str | None = None,
    goodput_of: str = "output",
    **options: Any,
) -> Comparison:
    """One row per (model, hardware): the key figures at `batch`, and the best goodput batch when SLOs are given."""
    from roofline.calc.knobs import knobs_of

    knobs = knobs_of(options.pop("knobs", None), options)
    if knobs.draft is not None:  # a drafter by id, loaded once for every pair
        knobs = knobs._replace(draft=spec_of(knobs.draft, Model, "draft"))
    options = {"knobs": knobs}
    one = lambda v: [v] if isinstance(v, (str, os.PathLike, Model, Hardware)) else list(v)  # noqa: E731  (or a list)
    models = [spec_of(m, Model, "models") for m in one(models)]
    devices = [spec_of(h, Hardware, "devices") for h in one(devices)]
    rows = []
    for m in models:
        for h in devices:
            e = estimate(m, h, batch=batch, prompt_tokens=prompt_tokens, output_tokens=output_tokens, **options)
            best = None
            if tpot_slo is not None or ttft_slo is not None:
                best = sweep(
                    m,
                    h,
                    prompts=[prompt_tokens],
                    outputs=[output_tokens],
                    tpot_slo=tpot_slo,
                    ttft_slo=ttft_slo,
                    goodput_of=goodput_of,
                    **options,
                ).summary
            rows.append(
                CompareRow(
                    m.id,
                    h.id,
                    h.origin,
                    e.fits,
                    e.weight_bytes,
                    e.max_batch,
                    e.ridge_point_flop_per_byte,
                    batch,
                    e.ttft_s,
                    e.tpot_s,
                    e.decode.tokens_per_s,
                    e.decode.bound,
                    best.best_batch if best else None,
                    best.best_goodput_tokens_per_s if best else None,
                    e.output_tokens_per_s,
                    e.requests_per_s,
                )
            )
    shared = {k: v for k, v in knobs._asdict().items() if k != "draft"}
    inputs = {
        "models": [m.id for m in models],
        "hardware": [h.id for h in devices],
        "batch": batch,
        "prompt_tokens": prompt_tokens,
        "output_tokens": output_tokens,
        "tpot_slo_s": tpot_slo,
        "ttft_slo_s": ttft_slo,
        "goodput_of": goodput_of,
        "draft": knobs.draft.id if knobs.draft is not None else None,
        **shared,
    }
    return Comparison(sort_rows(rows, sort) if sort is not None else rows, inputs)


def sort_rows(rows: list[CompareRow], column: str) -> list[CompareRow]:
    """Sort by `column` ascending, or descending with a leading '-'; missing values last."""
    name = column[1:] if column.startswith("-") else column
    if name not in COMPARE_COLUMNS:
        raise UsageError(f"--sort: unknown column {name!r} (expected one of: {', '.join(COMPARE_COLUMNS)})")
    present = [r for r in rows if getattr(r, name) is not None]
    missing = [r for r in rows if getattr(r, name) is None]
    return sorted(present, key=lambda r: getattr(r, name), reverse=column.startswith("-")) + missing


def _counts(values: Any, name: str) -> list[int] | None:
    """A list of counts as given (a list, tuple, range or array; numpy's integers as ints), None as None; a lone
    number or a string refused."""
    if values is None:
        return None
    if isinstance(values, (str, bytes, numbers.Number)) or not hasattr(values, "__iter__"):
        raise UsageError(f"expected a list of counts such as [1, 8, 64], got {type(values).__name__}", name)
    return [int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else v for v in values]
