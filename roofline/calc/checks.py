"""The range checks every input of the calculator passes, written once: integer counts and fractions."""

from typing import Any

from roofline.errors import UsageError

MAX_COUNT = 10**9  # batch, tokens, devices: beyond this the float arithmetic, not the model, would answer
MIN_FRACTION = 1e-6  # memory fraction and efficiencies: smaller ones are typos that would reach 1e300-second times


def count(value: Any, name: str, low: int = 1, high: int = MAX_COUNT, what: str = "an integer") -> int:
    """`value` when it is an integer (not a bool) from `low` to `high`, else a UsageError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageError(
            f"expected {what} from {low} to {high:.0e}, got {value!r}"
            if high == MAX_COUNT
            else f"expected {what} from {low} to {high}, got {value!r}",
            name,
        )
    return value


def fraction(value: Any, name: str, low: float = MIN_FRACTION, high: float = 1.0, what: str = "a fraction") -> float:
    """`value` when it is a real number (not a bool) from `low` to `high`, else a UsageError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise UsageError(f"expected {what} from {low:g} to {high:g}, got {value!r}", name)
    return float(value)
