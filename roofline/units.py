"""Parse and format physical quantities. The only module that knows unit prefixes.

Everything inside roofline is an SI float: bytes, FLOP, seconds, bytes/s, FLOP/s, watts.
Decimal prefixes (k, M, G, T, P, E) are powers of 1000; binary ones (Ki, Mi, Gi, Ti, Pi)
are powers of 1024 and are accepted for bytes only, so "GB" and "GiB" never mix.
"""

from __future__ import annotations

import math
import re

from roofline.errors import shown

DECIMAL = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}
KiB, MiB, GiB = 2**10, 2**20, 2**30  # binary sizes, for buffers and caches
DURATION = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}

# kind -> (regex for the unit after the prefix, accepts binary prefixes, example)
KINDS = {
    "bytes": (r"B", True, "80 GiB"),
    "bytes/s": (r"B/s|Bps", True, "3.35 TB/s"),
    "flop/s": (r"(?i:FLOP/s|FLOPS)", False, "989 TFLOP/s"),
    "seconds": (None, False, "50ms"),
    "watts": (r"(?i:W)", False, "700 W"),
}

_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_QUANTITY = re.compile(rf"^\s*({_NUMBER})\s*([^\s\d].*?)?\s*$")


def parse(value: object, kind: str) -> float:
    """Return the SI value of `value` ("3.35 TB/s", "80 GiB", 3.35e12, "50ms") for a kind in KINDS.

    Plain numbers are taken as SI already. Raises ValueError with what was expected.
    """
    unit_re, binary_ok, example = KINDS[kind]
    expected = f"a {kind} quantity such as '{example}' or a plain SI number"
    if isinstance(value, bool):
        raise ValueError(f"expected {expected}, got {shown(value)}")
    if isinstance(value, (int, float)):
        if isinstance(value, int) and abs(value) > 1e300:
            raise ValueError(f"expected {expected}, got an integer of {len(str(abs(value)))} digits")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected {expected}, got {shown(value)}")
    match = _QUANTITY.match(value)
    if not match:
        raise ValueError(f"expected {expected}, got {shown(value)}")
    number, unit = float(match.group(1)), (match.group(2) or "")
    if not unit:
        return number
    if kind == "seconds":
        if unit in DURATION:
            return number * DURATION[unit]
        raise ValueError(f"unknown duration unit {unit!r} in {shown(value)} (use h, min, s, ms, us or ns)")
    prefixes = {**DECIMAL, **(BINARY if binary_ok else {})}
    for prefix, scale in sorted(prefixes.items(), key=lambda p: -len(p[0])):
        if unit.startswith(prefix) and re.fullmatch(unit_re, unit[len(prefix) :]):
            return number * scale
    raise ValueError(f"cannot read the unit {unit!r} in {shown(value)}: expected {expected}")


_PREFIXES = [(1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]
_SMALL = [(1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n")]
_LONG = [(60.0, "min"), (3_600.0, "h"), (86_400.0, "days")]  # durations from 1,000 s


def si(value: float | None, unit: str = "", digits: int = 3) -> str:
    """Format `value` with an SI prefix and `digits` significant figures: si(3.35e12, 'B/s') == '3.35 TB/s'."""
    if value is None:
        return "-"
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}".strip()
    magnitude = abs(value)
    if unit == "s" and magnitude >= 999.5:  # "1.17 Ms" reads as milliseconds: long times in min, h, days
        # up a unit while the value, rounded to `digits` figures, reaches it (3597.5 s is 1.00 h, not 60.0 min)
        k = 0
        while k + 1 < len(_LONG) and float(_sig(magnitude / _LONG[k][0], digits)) >= _LONG[k + 1][0] / _LONG[k][0]:
            k += 1
        scale, name = _LONG[k]
        return f"{_sig(value / scale, digits)} {name}"
    table = _PREFIXES if magnitude >= 1 or unit not in ("s",) else _SMALL
    for scale, prefix in table:
        if magnitude >= scale * (1 - 0.5 * 10**-digits) or scale == table[-1][0]:
            return f"{_sig(value / scale, digits)} {prefix}{unit}".rstrip()
    raise AssertionError("unreachable")


def binary(value: float | None, unit: str = "B", digits: int = 3) -> str:
    """Format a truly binary quantity (memory capacity) with Ki/Mi/Gi/Ti prefixes: binary(80 * 2**30) == '80.0 GiB'."""
    if value is None:
        return "-"
    for prefix, scale in (("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10)):
        if abs(value) >= scale:
            return f"{_sig(value / scale, digits)} {prefix}{unit}"
    return f"{_sig(value, digits)} {unit}"


def _sig(x: float, digits: int) -> str:
    """`x` to `digits` significant figures, keeping trailing zeros (15.0) but no exponent below 1e6."""
    text = f"{x:#.{digits}g}"
    if "e" in text:
        text = f"{x:.0f}" if 1 <= abs(x) < 1e6 else f"{x:.{digits}g}"  # below 1e-4: 2.19e-05, never "0"
    return text.rstrip(".")


def number(value: float | None, digits: int = 3) -> str:
    """Format a dimensionless number with `digits` significant figures, without exponent below 1e6."""
    if value is None:
        return "-"
    return _sig(value, digits)


def percentile_name(q: float) -> str:
    """A quantile (0..1) as a percentile's name: 0.99 -> 'p99', 0.999 -> 'p99.9', 0.5 -> 'p50'."""
    return f"p{q * 100:.10g}"  # 0.99999 -> p99.999: as many digits as given (.4g read it p100)
