"""Spec files: every bundled one loads and agrees with its published figures; bad ones fail with a clear message."""

import pytest

from roofline.errors import RooflineError, UsageError
from roofline.specs.catalog import catalog, load_model
from roofline.specs.hardware import load_hardware

REQUIRED_HARDWARE = {
    "h100-sxm",
    "h100-pcie",
    "h200",
    "b200",
    "a100-80gb-sxm",
    "a100-40gb",
    "l40s",
    "l4",
    "a10",
    "rtx-4090",
    "rtx-3090",
    "mi300x",
    "mi325x",
    "tpu-v5e",
    "tpu-v5p",
    "apple-m1",
    "apple-m2-max",
    "apple-m3-max",
    "apple-m4-max",
    "epyc-9755",
    "rtx-5090",
    "apple-m1-ultra",
}
REQUIRED_MODELS = {
    "gpt2",
    "gpt2-xl",
    "llama-2-7b",
    "llama-2-70b",
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "phi-3-mini",
    "7b",
}


def test_catalog_has_the_required_specs():
    assert REQUIRED_HARDWARE <= set(catalog("hardware"))
    assert REQUIRED_MODELS <= set(catalog("models"))


@pytest.mark.parametrize("hardware_id", catalog("hardware"))
def test_bundled_hardware_loads_with_a_source(hardware_id):
    h = load_hardware(hardware_id)
    assert h.source.startswith("https://")
    assert h.peak_flops and h.memory_bandwidth > 0 and h.memory_capacity > 0


@pytest.mark.parametrize("model_id", catalog("models"))
def test_bundled_model_params_match_published_within_1_percent(model_id):
    m = load_model(model_id)
    assert m.source
    if m.published_params:
        assert m.params == pytest.approx(m.published_params, rel=0.01)


def test_dense_not_sparse_figures():
    # NVIDIA prints H100 SXM bf16 as 1,979 TFLOPS "with sparsity"; the dense figure is half: 989.4.
    assert load_hardware("h100-sxm").peak_flops["bf16"] == 989.4e12
    # RTX 4090 with FP32 accumulate (PyTorch's default): 165.2 dense, not 330.4 (FP16 accumulate / sparse).
    assert load_hardware("rtx-4090").peak_flops["bf16"] == 165.2e12
    # Bandwidth is decimal: 3.35 TB/s = 3.35e12 B/s, not 3.35 x 2^40.
    assert load_hardware("h100-sxm").memory_bandwidth == 3.35e12


DEVICE = """\
name: test device
source: test
memory_capacity: 80 GiB
memory_bandwidth: 3.35 TB/s
peak_flops:
  bf16: 989 TFLOP/s
"""
MODEL = """\
name: test model
source: test
dtype: bf16
layers: 2
hidden_size: 64
num_heads: 4
intermediate_size: 128
vocab_size: 100
"""


@pytest.mark.parametrize(
    "body, words",
    [
        (DEVICE + "bandwith_typo: 1 TB/s\n", ["unknown key 'bandwith_typo'"]),
        (DEVICE.replace("memory_bandwidth: 3.35 TB/s\n", ""), ["missing key 'memory_bandwidth'"]),
        (DEVICE.replace("3.35 TB/s", "3.35 TB"), ["memory_bandwidth", "3.35 TB"]),
        (DEVICE.replace("3.35 TB/s", "-1 TB/s"), ["memory_bandwidth", "positive"]),
        # a bare number is SI base units: 3.35 B/s, a forgotten unit (it priced TTFT at 4.52 Gs)
        (DEVICE.replace("3.35 TB/s", "3.35"), ["memory_bandwidth", "got 3.35 (a plain number is in bytes/s"]),
        (DEVICE.replace("989 TFLOP/s", "lots"), ["peak_flops", "bf16", "lots"]),
        (DEVICE.replace("bf16:", "bf17:"), ["unknown key 'bf17'"]),
        (DEVICE.replace("name: test device", "name: [1, 2"), ["YAML syntax error"]),
        ("- just\n- a list\n", ["expected a mapping"]),
    ],
)
def test_bad_hardware_files_name_file_and_key(write_yaml, body, words):
    assert_one_line_error(load_hardware, write_yaml("bad.yaml", body), words)


def assert_one_line_error(load, path: str, words: list[str]) -> None:
    """Loading `path` fails with one line that starts with the file and names every word."""
    with pytest.raises(RooflineError) as info:
        load(path)
    message = str(info.value)
    assert message.startswith(path) and "\n" not in message
    for word in words:
        assert word in message


@pytest.mark.parametrize(
    "body, words",
    [
        (MODEL.replace("layers: 2", "layers: -2"), ["'layers'", "positive integer", "-2"]),
        (MODEL.replace("layers: 2", "layers: two"), ["'layers'", "'two'"]),
        (MODEL + "mlp: swiglu\n", ["'mlp'", "'gated' or 'plain'"]),
        (MODEL + "num_kv_heads: 3\n", ["'num_kv_heads'", "divisor"]),
        (MODEL + "position_embeddings: learned\n", ["'max_context' is needed"]),
        (MODEL.replace("hidden_size: 64", "hidden_size: 66"), ["'head_dim' is needed"]),
        (MODEL + "params: 7e9\n", ["params-only"]),
        (MODEL.replace("dtype: bf16", "dtype: bf15"), ["'dtype'", "bf15"]),
        (MODEL.replace("vocab_size: 100\n", ""), ["missing key 'vocab_size'"]),
        (MODEL + "tied_embeddings: yes please\n", ["'tied_embeddings'", "true or false"]),
    ],
)
def test_bad_model_files_name_file_and_key(write_yaml, body, words):
    assert_one_line_error(load_model, write_yaml("bad.yaml", body), words)


def test_params_only_model_with_yaml_exponent(write_yaml):
    # YAML 1.1 reads 7e9 (no dot) as a string; we accept it as the number it means.
    m = load_model(write_yaml("napkin.yaml", "name: n\nsource: s\ndtype: bf16\nparams: 7e9\n"))
    assert m.params == 7e9 and m.arch is None


def test_unknown_id_suggests_close_ones():
    with pytest.raises(UsageError, match="did you mean llama-3.1-8b"):
        load_model("llama-3.1-8")
    with pytest.raises(UsageError, match="no such file"):
        load_hardware("missing/device.yaml")


def test_a_params_only_model_without_kv_says_its_cache_is_zero(write_yaml):
    # params alone price the weights; without kv_bytes_per_token the cache is 0 B/token, which is said, not silent,
    # and fit names the cause (not a sliding window: this model has none). An explicit 0 is taken as meant.
    from roofline import estimate
    from roofline.calc.fit import fit

    m = load_model(write_yaml("napkin.yaml", "name: n\nsource: s\ndtype: bf16\nparams: 7e9\n"))
    e = estimate(m, load_hardware("h100-sxm"))
    assert e.kv_bytes_per_token == 0 and any("no kv_bytes_per_token" in w for w in e.warnings)
    assert "no KV cache is priced" in fit(m, load_hardware("h100-sxm"), context=4096).max_context_reason
    zero = load_model(write_yaml("zero.yaml", "name: z\nsource: s\ndtype: bf16\nparams: 7e9\nkv_bytes_per_token: 0\n"))
    assert not estimate(zero, load_hardware("h100-sxm")).warnings


def test_power_takes_its_unit_or_a_plain_number(write_yaml):
    # Other keys take units ('3.35 TB/s'); power was refused as '700 W' and read only as 700.
    for text, watts in (("700", 700.0), ("'700 W'", 700.0), ("'1 kW'", 1000.0)):
        assert load_hardware(write_yaml("p.yaml", DEVICE + f"power: {text}\n")).power == watts
    assert_one_line_error(load_hardware, write_yaml("v.yaml", DEVICE + "power: 700 V\n"), ["power", "700 V"])
