"""`roofline bench`: run a workload against an OpenAI-compatible streaming endpoint (POST URL/v1/completions) and
time it the way `roofline simulate` reports it, so a server's figures and a prediction line up key for key.

A request is sent at its arrival time (open loop) or when its client's last request finishes (closed loop, N
clients), with `stream: true`, `max_tokens` its output length and `ignore_eos`, and a prompt of token ids (random
ids in [0, vocab), fresh each run so no server's prefix cache holds them; servers accept token-id prompts and their
tokenizer need not know the words) or of text (one word per token, approximately). From the stream: TTFT = first
token - arrival (a closed loop: - send), every inter-token gap (an event's text counts one token; a server's final
`usage.completion_tokens` wins for TPOT), TPOT = (last token - first token) / (tokens - 1), E2E = last token -
arrival. Connection and HTTP errors, malformed events and streams without a token are counted per kind, never
raised. Needs httpx (`pip install 'roofline[bench]'`).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from typing import Any, NamedTuple

from roofline.calc.estimate import plain
from roofline.calc.simulate import SCHEMA_VERSION, summary, weighted_summary
from roofline.calc.workload import Request
from roofline.errors import UsageError


class Timed(NamedTuple):
    """One request's times (seconds from the run's start) and tokens, or the error that ended it."""

    arrival: float
    sent: float
    first: float | None
    finish: float | None
    tokens: int
    gaps: list[float]
    error: str | None
    reason: str | None = None  # what the server said with an HTTP error (its body's message, shortened)


class Bench(NamedTuple):
    """The result of `bench`; `to_dict()` has simulate's JSON keys (what a server does not expose is null)."""

    inputs: dict[str, Any]
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    itl_s: dict[str, float]
    e2e_s: dict[str, float]
    queue_s: dict[str, float]
    output_tokens_per_s: float
    requests_per_s: float
    goodput_requests_per_s: float | None
    slo_attainment: float | None
    requests: int  # measured and completed
    errors: dict[str, int]  # kind -> requests it ended
    wall_s: float
    per_request: list[dict[str, Any]]
    said: str | None = None  # the first HTTP error with the server's message ("HTTP 400: ..."), for the warning
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        out = plain(self._asdict())
        out.pop("per_request"), out.pop("said")
        for key in ("saturated", "max_stable_rate_per_s", "preemptions", "batch", "kv_utilization", "steps"):
            out[key] = None  # simulate's keys a server does not expose
        return out

    def csv_rows(self) -> list[dict[str, Any]]:
        return [self.to_dict()]


def bench(
    url: str,
    requests: list[Request],
    *,
    concurrency: int | None = None,
    warmup: int = 0,
    model: str | None = None,
    text: bool = False,
    vocab: int = 1000,
    seed: int = 0,
    time_limit_s: float = 600.0,
    request_timeout_s: float = 300.0,
    ttft_slo: float | None = None,
    tpot_slo: float | None = None,
    inputs: dict | None = None,
    progress=None,
) -> Bench:
    """Send `requests` to `url` (open loop by their arrival times, or `concurrency` clients) and time them."""
    try:
        import httpx  # noqa: F401
    except ImportError:
        raise UsageError("roofline bench needs httpx: pip install 'roofline[bench]'") from None
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"expected an http:// or https:// URL, got {url!r}", "url")
    # The lengths and arrivals are the seed's; the token ids are fresh each run, so a server's prefix cache cannot
    # serve a rerun's prompts from the last run's (llama-server keeps finished prompts and would skip their prefill).
    rng = random.Random()
    prompts = [_prompt(r.prompt_tokens, text, vocab, rng) for r in requests]
    started = time.perf_counter()
    timed = asyncio.run(
        _run(url.rstrip("/"), model, requests, prompts, concurrency, time_limit_s, request_timeout_s, progress)
    )
    return _result(
        timed, requests, warmup, concurrency, ttft_slo, tpot_slo, inputs or {}, time.perf_counter() - started
    )


def _prompt(tokens: int, text: bool, vocab: int, rng: random.Random) -> Any:
    return " ".join(["hello"] * tokens) if text else [rng.randrange(vocab) for _ in range(tokens)]


async def _run(url, model, requests, prompts, concurrency, time_limit_s, timeout_s, progress) -> list[Timed | None]:
    import httpx

    out: list[Timed | None] = [None] * len(requests)
    start = time.perf_counter()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), limits=limits) as client:

        async def send(i: int, arrival: float) -> None:
            out[i] = await _one(client, url, model, requests[i], prompts[i], start, arrival)
            if progress is not None:
                progress()

        if concurrency is None:

            async def at(i: int) -> None:
                await asyncio.sleep(max(0.0, requests[i].arrival_s - (time.perf_counter() - start)))
                await send(i, requests[i].arrival_s)

            work = [at(i) for i in range(len(requests))]
        else:
            queue = iter(range(len(requests)))

            async def client_loop() -> None:
                for i in queue:
                    await send(i, time.perf_counter() - start)

            work = [client_loop() for _ in range(min(concurrency, len(requests)))]
        try:
            await asyncio.wait_for(asyncio.gather(*work), time_limit_s)
        except asyncio.TimeoutError:  # noqa: UP041 (Python 3.10: not yet the builtin)
            pass  # the unfinished requests are counted as cut by the time limit
    return out


async def _one(client, url: str, model, r: Request, prompt, start: float, arrival: float) -> Timed:
    import httpx

    body = {"prompt": prompt, "max_tokens": r.output_tokens, "stream": True, "ignore_eos": True, "temperature": 0}
    if model:
        body["model"] = model
    sent = time.perf_counter() - start
    first = last = None
    tokens, usage, gaps = 0, None, []
    try:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
            if response.status_code != 200:
                said = await _reason(response)
                return Timed(arrival, sent, None, None, 0, [], f"HTTP {response.status_code}", said)
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    event = json.loads(data)
                    piece = event["choices"][0].get("text") if event.get("choices") else None
                    usage = (event.get("usage") or {}).get("completion_tokens", usage)
                except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                    return Timed(arrival, sent, first, last, tokens, gaps, "malformed stream")
                if piece:
                    now = time.perf_counter() - start
                    if first is None:
                        first = now
                    else:
                        gaps.append(now - last)
                    last, tokens = now, tokens + 1
    except httpx.HTTPError as e:
        return Timed(arrival, sent, first, last, tokens, gaps, type(e).__name__)
    if first is None:
        return Timed(arrival, sent, None, None, 0, [], "no tokens")
    counted = usage if isinstance(usage, int) and usage >= tokens else tokens
    return Timed(arrival, sent, first, last, counted, gaps, None)


async def _reason(response) -> str | None:
    """The server's message with an HTTP error (an OpenAI-style {"error": {"message": ...}} or its text), one line
    of at most 200 characters: llama-server's 400 says a prompt exceeds its context; a 404 names the path."""
    try:
        text = (await response.aread()).decode("utf-8", "replace")
    except Exception:  # noqa: BLE001 (a body that cannot be read leaves the status alone)
        return None
    try:
        body = json.loads(text)
        error = body.get("error") if isinstance(body, dict) else None
        text = str(error.get("message", error) if isinstance(error, dict) else error or text)
    except ValueError:
        pass
    said = " ".join(text.split())
    return (said[:197] + "...") if len(said) > 200 else said or None


def _result(timed, requests, warmup, concurrency, ttft_slo, tpot_slo, inputs, wall) -> Bench:
    errors: dict[str, int] = {}
    done = []
    for i, t in enumerate(timed):
        if t is None:
            errors["time limit"] = errors.get("time limit", 0) + 1
        elif t.error is not None:
            errors[t.error] = errors.get(t.error, 0) + 1
        elif i >= warmup:
            done.append(t)
    ttft = [t.first - t.arrival for t in done]
    tpot = [(t.finish - t.first) / (t.tokens - 1) for t in done if t.tokens > 1]
    e2e = [t.finish - t.arrival for t in done]
    gaps = [(g, 1.0) for t in done for g in t.gaps]
    if done:
        begin = min(t.arrival for t in done)
        end = max(t.finish for t in done)
        span = end - begin or 1e-300
        tokens_per_s, rate = sum(t.tokens for t in done) / span, len(done) / span
    else:
        tokens_per_s = rate = 0.0
    good = None
    if (ttft_slo is not None or tpot_slo is not None) and done:
        ok = [
            (ttft_slo is None or t.first - t.arrival <= ttft_slo)
            and (tpot_slo is None or t.tokens < 2 or (t.finish - t.first) / (t.tokens - 1) <= tpot_slo)
            for t in done
        ]
        good = sum(ok) / len(done)
    per_request = [
        {
            "request": i,
            "prompt_tokens": requests[i].prompt_tokens,
            "output_tokens": requests[i].output_tokens,
            "arrival_s": t.arrival if t else None,
            "sent_s": t.sent if t else None,
            "first_token_s": t.first if t else None,
            "finish_s": t.finish if t else None,
            "tokens": t.tokens if t else 0,
            "error": (f"{t.error}: {t.reason}" if t and t.reason else t.error if t else "time limit"),
        }
        for i, t in enumerate(timed)
    ]
    return Bench(
        inputs=inputs,
        ttft_s=summary(ttft),
        tpot_s=summary(tpot),
        itl_s=weighted_summary(gaps) if gaps else summary([]),
        e2e_s=summary(e2e),
        queue_s=summary([]),
        output_tokens_per_s=tokens_per_s,
        requests_per_s=rate,
        goodput_requests_per_s=None if good is None else rate * good,
        slo_attainment=good,
        requests=len(done),
        errors=errors,
        wall_s=wall,
        per_request=per_request,
        said=next((f"{t.error}: {t.reason}" for t in timed if t and t.reason), None),
    )


def client_starts(requests: list[Request], result: Bench, clients: int) -> list[Request]:
    """A closed loop's requests with each client's first one at the time bench sent it, from the first (the rest
    stay None: sent when the client's last finishes). Four clients started together reached llama-server tens of
    ms apart, so one prompt ran alone and three together; a simulation starting all four at one instant keeps them
    in step (docs/guides/llamacpp.md, Own shape). The time is stamped before the connection opens, so the request
    the server saw first need not be the one sent first: the split is followed, not which request is alone."""
    sent = [r["arrival_s"] for r in result.per_request[:clients]]
    if any(s is None for s in sent):
        return requests
    first = min(sent)
    return [r._replace(arrival_s=s - first) for r, s in zip(requests[:clients], sent)] + requests[clients:]


class BenchComparison(NamedTuple):
    """A bench run beside the simulation of the same requests: `ratio` is predicted / measured per statistic."""

    measured: Bench
    predicted: Any  # roofline.calc.simulate.Simulation

    def ratios(self) -> dict[str, dict[str, float | None]]:
        out = {}
        for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
            m, p = getattr(self.measured, key), getattr(self.predicted, key)
            out[key] = {s: (p[s] / m[s] if m[s] and p[s] is not None else None) for s in ("mean", "p50", "p99")}
        m, p = self.measured.output_tokens_per_s, self.predicted.output_tokens_per_s
        out["output_tokens_per_s"] = {"mean": p / m if m else None}
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"measured": self.measured.to_dict(), "predicted": self.predicted.to_dict(), "ratio": self.ratios()}

    def csv_rows(self) -> list[dict[str, Any]]:
        """One row per statistic: measured, predicted (SI units) and their ratio, as the table shows them."""

        def value(result: Any, key: str, stat: str) -> float | None:
            figure = getattr(result, key)
            return figure if key == "output_tokens_per_s" else figure[stat]

        return [
            {
                "metric": key,
                "statistic": stat,
                "measured": value(self.measured, key, stat),
                "predicted": value(self.predicted, key, stat),
                "ratio": ratio,
            }
            for key, stats in self.ratios().items()
            for stat, ratio in stats.items()
        ]
