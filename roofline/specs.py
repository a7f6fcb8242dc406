"""Hardware and model specs: YAML files loaded with yaml.safe_load and validated strictly.

A spec is referred to by id (the file name in the bundled hardware/ or models/ folder) or by path.
Every mistake is a RooflineError naming the file, the key, the value and what was expected.
"""


from pathlib import Path
from typing import Any, Callable, NamedTuple

from roofline import units
from roofline.errors import RooflineError, UsageError
from roofline.params import Architecture, ParamCounts

# Bytes per stored element. tf32 is a compute mode of fp32 tensors, not a storage type.
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "fp4": 0.5}
COMPUTE_DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4", "fp4")


class Hardware(NamedTuple):
    """One device: memory, bandwidth, dense peak FLOP/s per compute dtype (SI units)."""

    id: str
    name: str
    source: str
    memory_capacity: float  # bytes
    memory_bandwidth: float  # bytes/s
    peak_flops: dict[str, float]  # compute dtype -> FLOP/s, dense (no 2:4 sparsity)
    interconnect_bandwidth: float | None = None  # bytes/s, one direction per device
    measured: dict[str, Any] | None = None  # raw figures when written by `roofline measure`
    aliases: tuple[str, ...] = ()  # device names as drivers report them, to match a measured device
    interconnect_latency: float | None = None  # seconds per all-reduce of a small message

    @property
    def origin(self) -> str:
        """'measured' when the figures come from `roofline measure`, else 'datasheet'."""
        return "measured" if self.measured else "datasheet"


class Model(NamedTuple):
    """A model: an architecture, or a params-only napkin model (`arch` is None)."""

    id: str
    name: str
    source: str
    dtype: str  # default weight dtype
    kv_dtype: str  # default KV cache dtype (the weight dtype unless the YAML says otherwise)
    arch: Architecture | None = None
    params_given: float | None = None  # params-only models
    kv_bytes_per_token_given: float | None = None  # params-only models, taken literally
    max_context: int | None = None
    published_params: float | None = None
    published_active_params: float | None = None
    counts: ParamCounts | None = None  # derived from arch

    @property
    def params(self) -> float:
        """Stored parameters: derived from the architecture, or as given."""
        return float(self.counts.total) if self.counts else float(self.params_given or 0)


# ---------------------------------------------------------------- locating specs


def data_dir() -> Path:
    """Folder holding hardware/ and models/: inside the wheel, or the repository root."""
    here = Path(__file__).resolve().parent
    bundled = here / "_data"
    return bundled if bundled.is_dir() else here.parent


def catalog(kind: str) -> list[str]:
    """Ids of the bundled specs of `kind` ('hardware' or 'models'), sorted."""
    return sorted(p.stem for p in (data_dir() / kind).glob("*.yaml"))


def resolve(ref: str, kind: str) -> Path:
    """Path of the spec `ref`: an existing file path, or a bundled id (case-insensitive)."""
    path = Path(ref).expanduser()
    if path.suffix in (".yaml", ".yml") or path.is_file() or "/" in ref:
        if not path.is_file():
            raise UsageError(f"{ref}: no such file (expected a {kind} YAML file or a bundled id)")
        return path
    bundled = data_dir() / kind / f"{ref.lower()}.yaml"
    if bundled.is_file():
        return bundled
    import difflib

    ids = catalog(kind)
    close = difflib.get_close_matches(ref.lower(), ids, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    noun = {"models": "model"}.get(kind, kind)
    raise UsageError(f"unknown {noun} id '{ref}' ({hint}see `roofline {kind} list`)")


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


# ---------------------------------------------------------------- validation


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


# ---------------------------------------------------------------- loaders

HARDWARE_KEYS = [
    "name", "source", "memory_capacity", "memory_bandwidth", "peak_flops", "interconnect_bandwidth", "interconnect_latency",
    "measured", "aliases",
]


def load_hardware(ref: str) -> Hardware:
    """Load a hardware spec by bundled id or YAML path."""
    path = resolve(ref, "hardware")
    return hardware_from_mapping(read_yaml(path), str(path), path.stem)


def hardware_from_mapping(data: dict[str, Any], where: str, spec_id: str) -> Hardware:
    """Validate hardware keys (from a YAML file or a fresh measurement) into a Hardware."""
    f = Fields(data, where)
    name = f.take("name", text, "a non-empty string")
    source = f.take("source", text, "a datasheet URL or a description of the measurement")
    capacity = f.take("memory_capacity", positive("bytes"), "a size such as '80 GiB'")
    bandwidth = f.take("memory_bandwidth", positive("bytes/s"), "a rate such as '3.35 TB/s'")
    peaks = f.take("peak_flops", _peak_table(where), "a mapping of dtype to FLOP/s")
    link = f.take("interconnect_bandwidth", positive("bytes/s"), "a rate such as '450 GB/s'", None)
    measured = f.take("measured", _mapping, "a mapping of raw measured figures", None)
    aliases = f.take("aliases", _strings, "a list of device names", ())
    latency = f.take("interconnect_latency", positive("seconds"), "a duration such as '10us'", None)
    f.done(HARDWARE_KEYS)
    return Hardware(spec_id, name, source, capacity, bandwidth, peaks, link, measured, aliases, latency)


def _strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise TypeError
    return tuple(value)


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError
    return value


def _peak_table(where: str) -> Callable[[Any], dict[str, float]]:
    def check(value: Any) -> dict[str, float]:
        if not isinstance(value, dict) or not value:
            raise TypeError
        peaks = Fields(value, f"{where}: peak_flops")
        table = {d: peaks.take(d, positive("flop/s"), "a rate such as '989 TFLOP/s'") for d in COMPUTE_DTYPES if d in value}
        peaks.done(list(COMPUTE_DTYPES))
        return table

    return check


def load_model(ref: str) -> Model:
    """Load a model spec by bundled id, YAML path, or Hugging Face config.json (file or model folder)."""
    if ref.endswith(".json") or Path(ref).expanduser().is_dir():
        from roofline import hf

        config = hf.config_path(ref)
        if config is None:
            raise UsageError(f"{ref}: no such config.json (expected a Hugging Face config.json or a folder holding one)")
        spec_id = config.parent.name if config.stem == "config" else config.stem
        from roofline.model_keys import model_from_mapping

        return model_from_mapping(hf.to_model_keys(hf.read_config(config), str(config)), str(config), spec_id)
    from roofline.model_keys import model_from_mapping

    path = resolve(ref, "models")
    return model_from_mapping(read_yaml(path), str(path), path.stem)
