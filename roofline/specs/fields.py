"""Reading spec files strictly: YAML into a mapping, and `Fields`, which takes validated values out of it.

Every mistake is a RooflineError naming the file, the key, the value and what was expected.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from roofline import units
from roofline.errors import RooflineError, UsageError, shown

MAX_SPEC_BYTES = 16 << 20  # a spec is a page of text, comments and all; the cap only stops memory bombs (/dev/zero)
MAX_INT = 2**53  # integers beyond this are not exact as floats, and no model dimension comes near


def user_path(ref: str) -> Path:
    """`ref` as a path, with ~ expanded; an unknown ~user is a one-line error, not a RuntimeError."""
    try:
        return Path(ref).expanduser()
    except RuntimeError:
        raise UsageError(f"{shown(ref)}: cannot expand ~ (no such user)") from None


def is_file(path: Path) -> bool:
    """Path.is_file, False also for names the OS refuses (too long) or cannot look at."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _loader():
    """yaml's safe loader (the C one when present) that refuses duplicate keys instead of keeping the last."""
    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    def mapping(loader, node):
        keys = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            try:
                duplicate = key in keys
            except TypeError:  # an unhashable key (a list): Fields refuses it with the key's text
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {shown(key)}", key_node.start_mark)
            keys.add(key)
        return loader.construct_mapping(node, deep=True)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return Loader


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping at the top of YAML file `path`."""
    import yaml

    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
        if len(raw) > MAX_SPEC_BYTES:
            raise RooflineError(
                f"{path}: larger than {MAX_SPEC_BYTES >> 20} MiB (expected a spec file; the cap guards against runaway "
                "files)"
            )
        data = yaml.load(raw.decode("utf-8"), Loader=_loader())
    except OSError as e:
        raise RooflineError(f"{path}: cannot read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise RooflineError(f"{path}: not UTF-8 text (expected a YAML spec file)") from None
    except RecursionError:
        raise RooflineError(f"{path}: YAML nested too deeply") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise RooflineError(f"{path}:{where} YAML syntax error: {problem}") from None
    except (ValueError, TypeError) as e:  # an integer of 4,300+ digits; an unhashable key in a mapping
        raise RooflineError(f"{path}: YAML value the loader cannot take ({' '.join(str(e).split())[:80]})") from None
    if not isinstance(data, dict):
        raise RooflineError(f"{path}: expected a mapping of keys to values at the top level")
    return data


class Fields:
    """Takes validated values out of a spec mapping; `done()` rejects what is left (unknown keys)."""

    def __init__(self, data: dict[str, Any], where: str):
        bad = [k for k in data if not isinstance(k, str)]
        if bad:
            bad = bad[0]
            raise RooflineError(
                f"{where}: key {shown(bad)}: expected keys to be names (text), got a {type(bad).__name__}"
            )
        self.data = dict(data)
        self.where = where

    def fail(self, key: str, expected: str, value: Any) -> RooflineError:
        return RooflineError(f"{self.where}: key '{key}': expected {expected}, got {shown(value)}")

    def take(self, key: str, check: Callable[[Any], Any], expected: str, default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise RooflineError(f"{self.where}: missing key '{key}' ({expected})")
            return default
        value = self.data.pop(key)
        try:
            return check(value)
        except TypeError:
            raise self.fail(key, expected, value) from None
        except ValueError as e:  # the check's own message says what was expected
            raise RooflineError(f"{self.where}: key '{key}': {e}") from None

    def done(self, allowed: list[str]) -> None:
        if self.data:
            import difflib

            key = sorted(self.data)[0]
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise RooflineError(f"{self.where}: unknown key {shown(key)} ({hint}allowed: {', '.join(sorted(allowed))})")


def text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError
    return value.strip()


def positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INT:
        raise TypeError
    return value


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError
    return value


# Plausible ranges of spec quantities (SI). Outside them a value is a typo, and would reach 1e300-second
# times or NaN: a 1 MB/s bandwidth or a 1e30 FLOP/s peak describe no device (a bare `memory_bandwidth: 3.35` is
# 3.35 B/s: the unit was forgotten).
RANGES = {"bytes": (1e6, 1e21), "bytes/s": (1e6, 1e21), "flop/s": (1e6, 1e24), "seconds": (1e-12, 1e3)}


def positive(kind: str) -> Callable[[Any], float]:
    low, high = RANGES[kind]

    def check(value: Any) -> float:
        number = units.parse(value, kind)
        if not low <= number <= high:
            bare = not isinstance(value, str) or value.strip().replace(".", "", 1).isdigit()
            hint = f" (a plain number is in {kind}: give its unit)" if bare else ""
            raise ValueError(
                f"expected a positive {kind} quantity from {low:g} to {high:g} (SI), got {shown(value)}{hint}"
            )
        return number

    return check


def choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise TypeError
        return value

    return check


def one_of(*options: str) -> str:
    return " or ".join(f"'{o}'" for o in options)


def number_between(low: float, high: float) -> Callable[[Any], float]:
    """A plain number from `low` to `high` (watts, dollars: no unit string)."""

    def check(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ValueError(f"expected a number from {low:g} to {high:g}, got {shown(value)}")
        return float(value)

    return check
