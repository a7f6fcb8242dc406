"""Reading spec files strictly: YAML into a mapping, and `Fields`, which takes validated values out of it.

Every mistake is a RooflineError naming the file, the key, the value and what was expected.
"""


from pathlib import Path
from typing import Any, Callable

from roofline import units
from roofline.errors import RooflineError


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping at the top of YAML file `path`."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except OSError as e:
        raise RooflineError(f"{path}: cannot read ({e.strerror})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise RooflineError(f"{path}:{where}: YAML syntax error: {problem}") from None
    if not isinstance(data, dict):
        raise RooflineError(f"{path}: expected a mapping of keys to values at the top level")
    return data


class Fields:
    """Takes validated values out of a spec mapping; `done()` rejects what is left (unknown keys)."""

    def __init__(self, data: dict[str, Any], where: str):
        self.data = dict(data)
        self.where = where

    def fail(self, key: str, expected: str, value: Any) -> RooflineError:
        return RooflineError(f"{self.where}: key '{key}': expected {expected}, got {value!r}")

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
            raise RooflineError(f"{self.where}: unknown key '{key}' ({hint}allowed: {', '.join(sorted(allowed))})")


def text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError
    return value.strip()


def positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError
    return value


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError
    return value


def positive(kind: str) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        number = units.parse(value, kind)
        if not number > 0 or number == float("inf"):
            raise ValueError(f"expected a positive {kind} quantity, got {value!r}")
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
