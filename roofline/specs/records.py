"""The spec records: a device (Hardware) and a model (Model), and the dtypes they are stored in. SI units."""

from typing import Any, NamedTuple

from roofline.specs.params import Architecture, ParamCounts

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
    internode_bandwidth: float | None = None  # bytes/s per device between nodes (400 Gb/s InfiniBand: 50 GB/s)
    internode_latency: float | None = None  # seconds per all-reduce of a small message across nodes
    devices_per_node: int | None = None  # devices that share the intra-node interconnect
    engines: dict[str, Any] | None = None  # engine fixed costs measured by `roofline measure` (--engine NAME)
    power: float | None = None  # board power (TDP) [W], from the datasheet
    price_per_hour: float | None = None  # [USD] per device-hour; never bundled (prices change weekly): the user's

    @property
    def origin(self) -> str:
        """'measured' when the figures come from `roofline measure` (its torch kernels, or llama.cpp's probes when
        the profile holds nothing else), else 'datasheet'."""
        llama_only = self.engines and "llamacpp" in self.engines and self.source.startswith("roofline measure")
        return "measured" if self.measured or llama_only else "datasheet"


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
    weights_file: Any = None  # roofline.specs.checkpoint.WeightBytes when read from a GGUF or safetensors file
    source_kind: str = "yaml"  # "yaml", "config", "gguf", "safetensors" or "hub"
    quant: str | None = (
        None  # the published checkpoint's weight format (roofline.calc.storage.QUANTS), when not plain dtype
    )

    @property
    def params(self) -> float:
        """Stored parameters: derived from the architecture, or as given."""
        return float(self.counts.total) if self.counts else float(self.params_given or 0)
