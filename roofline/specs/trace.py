"""Request traces for `simulate`: JSON Lines or CSV, one request a line with its prompt and output lengths and,
optionally, its arrival time. Column names accepted (the first present wins): prompt length prompt_tokens,
input_length, input_tokens, prompt_len, ContextTokens (the Azure LLM inference trace); output length
output_tokens, output_length, output_len, GeneratedTokens; arrival arrival_s, arrival_time, timestamp, TIMESTAMP (in
seconds, or a date and time such as Azure's '2023-11-16 18:15:46.6805900'), taken relative to the first request.
"""

import csv
import datetime
import json
from pathlib import Path
from typing import Any

from roofline.errors import UsageError

MAX_REQUESTS = 1_000_000  # a run past this is a typo: a million requests simulate in about ten seconds

PROMPT = ("prompt_tokens", "input_length", "input_tokens", "prompt_len", "ContextTokens")
OUTPUT = ("output_tokens", "output_length", "output_len", "GeneratedTokens")
ARRIVAL = ("arrival_s", "arrival_time", "timestamp", "TIMESTAMP")


def load_trace(path: str) -> list[tuple[float | None, int, int]]:
    """(arrival s or None, prompt tokens, output tokens) of each request of the trace at `path`, validated: each
    line's lengths positive integers, arrivals in order."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read the trace ({getattr(e, 'strerror', None) or e})", "trace") from None
    rows = _rows(text, path)
    if not rows:
        raise UsageError(f"{path}: the trace holds no request", "trace")
    if len(rows) > MAX_REQUESTS:
        raise UsageError(f"{path}: {len(rows):,} requests, more than {MAX_REQUESTS:,}", "trace")
    out, start, last, last_written = [], None, None, None
    for line, row in rows:
        prompt = _length(row, PROMPT, path, line, "prompt length")
        output = _length(row, OUTPUT, path, line, "output length")
        t = _arrival(row, path, line)
        if t is not None:
            written = next(str(row[k]).strip() for k in ARRIVAL if row.get(k) not in (None, ""))
            if last is not None and t < last:
                raise UsageError(
                    f"{path}: line {line}: arrival {written} comes before the previous one ({last_written}): "
                    "expected arrivals in order",
                    "trace",
                )
            start, last, last_written = t if start is None else start, t, written
            t -= start
        out.append((t, prompt, output))
    if len({r[0] is None for r in out}) > 1:
        raise UsageError(f"{path}: some lines give an arrival time and some do not", "trace")
    return out


def _rows(text: str, path: str) -> list[tuple[int, dict[str, Any]]]:
    lines = [(k, line) for k, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        return []
    if lines[0][1].lstrip().startswith("{") or Path(path).suffix.lower() in (".jsonl", ".ndjson", ".json"):
        rows = []
        for k, line in lines:
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise UsageError(f"{path}: line {k}: not JSON ({e.msg})", "trace") from None
            if not isinstance(row, dict):
                raise UsageError(f"{path}: line {k}: expected an object with the request's lengths", "trace")
            rows.append((k, row))
        return rows
    reader = csv.DictReader(line for _, line in lines)
    return [(k + 1, row) for k, row in enumerate(reader, 1)]


def _length(row: dict[str, Any], names: tuple[str, ...], path: str, line: int, what: str) -> int:
    key = next((n for n in names if n in row), None)
    if key is None:
        raise UsageError(
            f"{path}: line {line}: no {what} (expected a column named one of: {', '.join(names)})", "trace"
        )
    value = row[key]
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not (number >= 1 and number == int(number) and number <= 10**9):
        raise UsageError(f"{path}: line {line}: {key} {value!r}: expected a positive whole number of tokens", "trace")
    return int(number)


def _arrival(row: dict[str, Any], path: str, line: int) -> float | None:
    key = next((n for n in ARRIVAL if n in row and row[n] not in (None, "")), None)
    if key is None:
        return None
    value = row[key]
    try:
        number = float(value)
    except (TypeError, ValueError):
        try:
            return datetime.datetime.fromisoformat(str(value).strip()[:26]).timestamp()
        except ValueError:
            raise UsageError(
                f"{path}: line {line}: {key} {value!r}: expected seconds or a date and time", "trace"
            ) from None
    if not 0 <= number < float("inf"):
        raise UsageError(f"{path}: line {line}: {key} {value!r}: expected a time of 0 or more seconds", "trace")
    return number
