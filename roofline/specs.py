"""Hardware and model specs: YAML files loaded with yaml.safe_load and validated strictly.

A spec is referred to by id (the file name in the bundled hardware/ or models/ folder) or by path.
Every mistake is a RooflineError naming the file, the key, the value and what was expected.
"""


from pathlib import Path
from typing import Any, Callable, NamedTuple

from roofline import units
from roofline.errors import RooflineError, UsageError
from roofline.params import Architecture, ParamCounts, count_params

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


ARCH_KEYS = [
    "layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "intermediate_size", "vocab_size",
    "mlp", "tied_embeddings", "position_embeddings", "norm", "bias", "norms_per_layer",
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "num_experts", "experts_per_token", "num_shared_experts", "expert_intermediate_size",
    "shared_expert_intermediate_size", "first_dense_layers", "sliding_window", "sliding_layers",
]
MODEL_KEYS = [
    "name", "source", "dtype", "kv_dtype", "params", "kv_bytes_per_token", "max_context", "published_params",
    "published_active_params", *ARCH_KEYS,
]


def load_model(ref: str) -> Model:
    """Load a model spec by bundled id, YAML path, or Hugging Face config.json (file or model folder)."""
    if ref.endswith(".json") or Path(ref).expanduser().is_dir():
        from roofline import hf

        config = hf.config_path(ref)
        if config is None:
            raise UsageError(f"{ref}: no such config.json (expected a Hugging Face config.json or a folder holding one)")
        spec_id = config.parent.name if config.stem == "config" else config.stem
        return model_from_mapping(hf.to_model_keys(hf.read_config(config), str(config)), str(config), spec_id)
    path = resolve(ref, "models")
    return model_from_mapping(read_yaml(path), str(path), path.stem)


def model_from_mapping(data: dict[str, Any], where: str, spec_id: str) -> Model:
    """Validate model keys (from a YAML file or a converted config.json) into a Model."""
    f = Fields(data, where)
    name = f.take("name", text, "a non-empty string")
    source = f.take("source", text, "the config.json location or paper the figures come from")
    dtype = f.take("dtype", choice(*DTYPE_BYTES), f"a weight dtype: {one_of(*DTYPE_BYTES)}")
    max_context = f.take("max_context", positive_int, "a positive integer (tokens)", None)
    published = f.take("published_params", count, "a positive parameter count such as 8.03e9", None)
    published_active = f.take("published_active_params", count, "a positive parameter count such as 12.9e9", None)
    kv_dtype = f.take("kv_dtype", choice(*DTYPE_BYTES), f"a KV cache dtype: {one_of(*DTYPE_BYTES)}", dtype)
    common = dict(
        id=spec_id, name=name, source=source, dtype=dtype, kv_dtype=kv_dtype, max_context=max_context,
        published_params=published, published_active_params=published_active,
    )
    if "params" in f.data:
        for key in ARCH_KEYS:
            if key in f.data:
                raise RooflineError(f"{where}: key '{key}': a params-only model (with 'params') takes no architecture keys")
        params = f.take("params", count, "a positive parameter count such as 7e9")
        kv = f.take("kv_bytes_per_token", _non_negative, "a number of bytes per token (>= 0)", None)
        f.done(MODEL_KEYS)
        return Model(**common, params_given=params, kv_bytes_per_token_given=kv)
    if "kv_bytes_per_token" in f.data:
        raise RooflineError(f"{where}: key 'kv_bytes_per_token': only a params-only model (with 'params') takes it")
    arch = _architecture(f, max_context)
    f.done(MODEL_KEYS)
    return Model(**common, arch=arch, counts=count_params(arch))


def _non_negative(value: Any) -> float:
    number = units.parse(value, "bytes")
    if number < 0:
        raise TypeError
    return number


def count(value: Any) -> float:
    """A positive parameter count: 7e9, 7000000000 or '7e9' (YAML reads 7e9 without a dot as text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError
    try:
        number = float(value)
    except ValueError:
        raise TypeError from None
    if not 0 < number < float("inf"):
        raise TypeError
    return number


def _architecture(f: Fields, max_context: int | None) -> Architecture:
    layers = f.take("layers", positive_int, "a positive integer (or give 'params' for a napkin model)")
    hidden = f.take("hidden_size", positive_int, "a positive integer")
    heads = f.take("num_heads", positive_int, "a positive integer")
    kv_heads = f.take("num_kv_heads", positive_int, "a positive integer", heads)
    head_dim = f.take("head_dim", positive_int, "a positive integer", None)
    if head_dim is None:
        if hidden % heads:
            raise RooflineError(f"{f.where}: key 'head_dim' is needed: hidden_size {hidden} is not a multiple of num_heads {heads}")
        head_dim = hidden // heads
    if heads % kv_heads:
        raise RooflineError(f"{f.where}: key 'num_kv_heads': expected a divisor of num_heads ({heads}), got {kv_heads}")
    intermediate = f.take("intermediate_size", positive_int, "a positive integer (the dense MLP width)")
    position = f.take("position_embeddings", choice("rope", "learned"), one_of("rope", "learned"), "rope")
    if position == "learned" and max_context is None:
        raise RooflineError(f"{f.where}: key 'max_context' is needed: learned position embeddings have max_context rows")
    return Architecture(
        layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=f.take("vocab_size", positive_int, "a positive integer"),
        mlp=f.take("mlp", choice("gated", "plain"), one_of("gated", "plain"), "gated"),
        tied_embeddings=f.take("tied_embeddings", boolean, "true or false", False),
        position_embeddings=position,
        max_positions=max_context if position == "learned" else 0,
        norm=f.take("norm", choice("rmsnorm", "layernorm"), one_of("rmsnorm", "layernorm"), "rmsnorm"),
        bias=f.take("bias", choice("none", "qkv", "all"), one_of("none", "qkv", "all"), "none"),
        norms_per_layer=f.take("norms_per_layer", positive_int, "a positive integer (Gemma-2: 4)", 2),
        **_mla(f),
        **_moe(f, layers, intermediate),
        **_sliding(f, layers),
    )


def non_negative_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TypeError
    return value


def _mla(f: Fields) -> dict[str, int]:
    """Multi-head latent attention keys: all or none (q_lora_rank optional)."""
    if "kv_lora_rank" not in f.data:
        for key in ("q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if key in f.data:
                raise RooflineError(f"{f.where}: key '{key}' is for multi-head latent attention: give kv_lora_rank too")
        return {}
    return {
        "kv_lora_rank": f.take("kv_lora_rank", positive_int, "a positive integer"),
        "q_lora_rank": f.take("q_lora_rank", non_negative_int, "an integer >= 0 (0: no query compression)", 0),
        "qk_rope_head_dim": f.take("qk_rope_head_dim", positive_int, "a positive integer (needed with kv_lora_rank)"),
        "qk_nope_head_dim": f.take("qk_nope_head_dim", positive_int, "a positive integer (needed with kv_lora_rank)"),
        "v_head_dim": f.take("v_head_dim", positive_int, "a positive integer (needed with kv_lora_rank)"),
    }


def _moe(f: Fields, layers: int, intermediate: int) -> dict[str, int]:
    """Mixture-of-experts keys, with their defaults."""
    if "num_experts" not in f.data:
        for key in ("experts_per_token", "num_shared_experts", "expert_intermediate_size", "shared_expert_intermediate_size", "first_dense_layers"):
            if key in f.data:
                raise RooflineError(f"{f.where}: key '{key}' is for mixture-of-experts models: give num_experts too")
        return {}
    experts = f.take("num_experts", positive_int, "a positive integer (routed experts per MoE layer)")
    per_token = f.take("experts_per_token", positive_int, "a positive integer (needed with num_experts)")
    if per_token > experts:
        raise RooflineError(f"{f.where}: key 'experts_per_token': expected at most num_experts ({experts}), got {per_token}")
    dense = f.take("first_dense_layers", non_negative_int, "an integer >= 0", 0)
    if dense >= layers:
        raise RooflineError(f"{f.where}: key 'first_dense_layers': expected fewer than layers ({layers}), got {dense}")
    size = f.take("expert_intermediate_size", positive_int, "a positive integer (default: intermediate_size)", intermediate)
    return {
        "num_experts": experts,
        "experts_per_token": per_token,
        "num_shared_experts": f.take("num_shared_experts", non_negative_int, "an integer >= 0", 0),
        "expert_intermediate_size": size,
        "shared_expert_intermediate_size": f.take("shared_expert_intermediate_size", positive_int, "a positive integer (default: expert_intermediate_size)", size),
        "first_dense_layers": dense,
    }


def _sliding(f: Fields, layers: int) -> dict[str, Any]:
    """Sliding-window keys: the window and its layers ('all', 'even', 'odd' or a list of layer indices)."""
    if "sliding_window" not in f.data:
        if "sliding_layers" in f.data:
            raise RooflineError(f"{f.where}: key 'sliding_layers' needs sliding_window")
        return {}
    window = f.take("sliding_window", positive_int, "a positive integer (tokens)")
    which = f.take("sliding_layers", _layer_set(layers), "'all', 'even', 'odd' or a list of layer indices below layers", tuple(range(layers)))
    return {"sliding_window": window, "sliding_layers": which}


def _layer_set(layers: int) -> Callable[[Any], tuple[int, ...]]:
    def check(value: Any) -> tuple[int, ...]:
        named = {"all": range(layers), "even": range(0, layers, 2), "odd": range(1, layers, 2)}
        if isinstance(value, str) and value in named:
            return tuple(named[value])
        if isinstance(value, list) and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in value):
            return tuple(sorted(set(value)))
        raise TypeError

    return check
