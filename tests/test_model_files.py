"""Model files as inputs: GGUF (written by the gguf package), safetensors checkpoints (by the safetensors package),
Hugging Face Hub ids from a cache laid out by hand, and named quantization formats. Byte counts are by hand."""

import json
from pathlib import Path

import gguf_fixture as g  # noqa: E402 (tests/ is on the path: conftest)
import pytest
from typer.testing import CliRunner

from roofline import estimate, load_hardware, load_model
from roofline.calc.storage import QUANTS
from roofline.cli import app
from roofline.errors import RooflineError, UsageError
from roofline.specs import gguf as reader
from roofline.specs import hub

runner = CliRunner()
# The fixture's parameters: embedding and lm_head 1024 x 256 each; per layer q, o 256 x 256, k, v 128 x 256,
# gate, up 512 x 256, down 256 x 512, two norms of 256; a final norm: 2 x 262,144 + 2 x 590,336 + 256 = 1,705,216.
PARAMS, NORMS = 1_705_216, 2 * 2 * 256 + 256


@pytest.mark.parametrize(
    "qtype, block, size",
    [("Q4_0", 32, 18), ("Q8_0", 32, 34), ("Q4_K", 256, 144), ("Q6_K", 256, 210), ("MXFP4", 32, 17), ("BF16", 1, 2)],
)
def test_gguf_bytes_per_type(tmp_path, qtype, block, size):
    pytest.importorskip("gguf")
    path = g.write(tmp_path / f"tiny-{qtype}.gguf", qtype)
    m = load_model(str(path))
    assert m.params == PARAMS and m.source_kind == "gguf"
    # Matrices: (params - norms) elements in blocks of `block` at `size` bytes; norms in F32 (4 B).
    expected = (PARAMS - NORMS) // block * size + NORMS * 4
    assert m.weights_file.total_bytes == expected
    assert m.weights_file.bits_per_weight == pytest.approx(8 * expected / PARAMS)
    # Untied: the embedding (1024 x 256) is a lookup, not streamed.
    assert m.weights_file.streamed_bytes == expected - 1024 * 256 // block * size
    e = estimate(m, load_hardware("h100-sxm"), output_tokens=2)
    assert e.weight_bytes == expected and e.inputs.bits_per_weight == pytest.approx(8 * expected / PARAMS)


def test_gguf_tied_vocab_from_the_embedding_and_header_skip(tmp_path):
    pytest.importorskip("gguf")
    path = g.write(tmp_path / "tied.gguf", "Q8_0", tied=True, vocab_in_metadata=False)
    header = reader.read(path)
    assert header.metadata["tokenizer.ggml.tokens"] == ("array", 1024)  # skipped, its length kept
    m = load_model(str(path))
    assert m.arch.vocab_size == 1024 and m.arch.tied_embeddings
    assert m.weights_file.streamed_bytes == m.weights_file.total_bytes  # the embedding is the lm_head: streamed


def test_gguf_unknown_type_and_bad_files(tmp_path):
    pytest.importorskip("gguf")
    path = g.write(tmp_path / "t.gguf", "Q4_0")
    data = bytearray(path.read_bytes())
    # Corrupt the first tensor's type id (after its name, n_dims and dims) to 99: find "token_embd.weight".
    at = data.index(b"token_embd.weight") + len("token_embd.weight")
    at += 4 + 8 * 2  # n_dims u32, two u64 dims
    data[at : at + 4] = (99).to_bytes(4, "little")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(RooflineError, match="unknown ggml type id 99"):
        load_model(str(bad))
    (tmp_path / "text.gguf").write_text("not a gguf")
    with pytest.raises(RooflineError, match="not a GGUF file"):
        load_model(str(tmp_path / "text.gguf"))
    (tmp_path / "cut.gguf").write_bytes(path.read_bytes()[:200])  # cut inside a metadata string
    with pytest.raises(RooflineError, match="runs past the end of the file"):
        load_model(str(tmp_path / "cut.gguf"))
    (tmp_path / "short.gguf").write_bytes(path.read_bytes()[:10])  # cut inside the counts
    with pytest.raises(RooflineError, match="ends early"):
        load_model(str(tmp_path / "short.gguf"))


def test_gguf_split_files_are_read_together(tmp_path):
    pytest.importorskip("gguf")
    one = g.write(tmp_path / "m-00001-of-00002.gguf", "Q8_0")
    (tmp_path / "m-00002-of-00002.gguf").write_bytes(g.write(tmp_path / "other.gguf", "Q8_0").read_bytes())
    assert len(reader.read(one).tensors) == 2 * len(g.tensors(False))
    (tmp_path / "m-00002-of-00002.gguf").unlink()
    with pytest.raises(UsageError, match="split file m-00002-of-00002.gguf is missing"):
        reader.read(one)


def write_raw_safetensors(path: Path, tensors: dict[str, tuple[str, tuple[int, ...], int]]) -> None:
    """A safetensors file by the format's definition (8-byte little-endian header length, JSON, data), for dtypes
    numpy cannot write (F8_E4M3): {name: (dtype, shape, bytes)}, zero data."""
    header, offset = {}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + bytes(offset))


def write_checkpoint(folder: Path, sharded: bool = True) -> None:
    """A Llama-shaped 2-layer checkpoint in two shards and an index: shard 1 (the safetensors package) holds the
    bf16 embedding and norms and layer 0 in AWQ form (int32 qweight, fp16 scales, int32 qzeros, group 128);
    shard 2 holds layer 1 in FP8 (F8_E4M3, one fp32 scale per tensor) and the bf16 lm_head."""
    np = pytest.importorskip("numpy")
    st = pytest.importorskip("safetensors.numpy")
    h, kv, ffn, vocab = 256, 128, 512, 1024
    config = {
        "model_type": "llama",
        "hidden_size": h,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": ffn,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 2048,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    shapes = {
        "q_proj": (h, h),
        "k_proj": (kv, h),
        "v_proj": (kv, h),
        "o_proj": (h, h),
        "gate_proj": (ffn, h),
        "up_proj": (ffn, h),
        "down_proj": (h, ffn),
    }
    first = {
        "model.embed_tokens.weight": np.zeros((vocab, h), np.float16),
        "model.norm.weight": np.zeros(h, np.float16),
    }
    second = {"lm_head.weight": ("BF16", (vocab, h), vocab * h * 2)}
    for i in (0, 1):
        for norm in ("input_layernorm", "post_attention_layernorm"):
            if i == 0:
                first[f"model.layers.0.{norm}.weight"] = np.zeros(h, np.float16)
            else:
                second[f"model.layers.1.{norm}.weight"] = ("BF16", (h,), 2 * h)
        for name, (out, inp) in shapes.items():
            base = f"model.layers.{i}.{'self_attn' if name[0] in 'qkvo' else 'mlp'}.{name}"
            if i == 0:
                first[f"{base}.qweight"] = np.zeros((inp, out // 8), np.int32)
                first[f"{base}.scales"] = np.zeros((inp // 128, out), np.float16)
                first[f"{base}.qzeros"] = np.zeros((inp // 128, out // 8), np.int32)
            else:
                second[f"{base}.weight"] = ("F8_E4M3", (out, inp), out * inp)
                second[f"{base}.weight_scale"] = ("F32", (1,), 4)
    st.save_file(first, str(folder / "model-00001-of-00002.safetensors"))
    write_raw_safetensors(folder / "model-00002-of-00002.safetensors", second)
    index = {
        **{t: "model-00001-of-00002.safetensors" for t in first},
        **{t: "model-00002-of-00002.safetensors" for t in second},
    }
    if sharded:
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": 1}, "weight_map": index})
        )


LAYER = 2 * 256 * 256 + 2 * 128 * 256 + 3 * 512 * 256  # 589,824 weights in one layer's linears


def test_safetensors_checkpoint_bytes_by_hand(tmp_path):
    write_checkpoint(tmp_path / "ckpt")
    m = load_model(str(tmp_path / "ckpt"))
    assert m.source_kind == "safetensors"
    qweight, scales, qzeros = (
        LAYER // 2,
        LAYER // 128 * 2,
        LAYER // 128 // 8 * 4,
    )  # int4 x 8 per int32; fp16 and int4 per 128
    fp8, fp8_scales = LAYER, 7 * 4
    sixteen = (2 * 1024 * 256 + 5 * 256) * 2  # embedding, lm_head, 5 norms
    w = m.weights_file
    assert (
        w.total_bytes == qweight + scales + qzeros + fp8 + fp8_scales + sixteen
    )  # data_offsets, not the index's total_size (1)
    assert w.by_dtype == {
        "F16": 1024 * 256 * 2 + 3 * 256 * 2 + scales,
        "I32": qweight + qzeros,
        "F8_E4M3": fp8,
        "F32": fp8_scales,
        "BF16": 1024 * 256 * 2 + 2 * 256 * 2,
    }
    assert w.by_role["scales"] == scales + qzeros + fp8_scales
    assert w.elements == 2 * LAYER + 2 * 1024 * 256 + 5 * 256  # a qweight int32 holds 8 weights
    assert w.streamed_bytes == w.total_bytes - 1024 * 256 * 2  # all but the embedding lookup
    shown = json.loads(runner.invoke(app, ["models", "show", str(tmp_path / "ckpt"), "--json"]).stdout)
    assert shown["weight_bytes_by_dtype"] == w.by_dtype and shown["bits_per_weight"] == pytest.approx(w.bits_per_weight)
    assert shown["weight_bytes_by_role"]["scales"] == w.by_role["scales"]
    r = runner.invoke(
        app, ["estimate", "-q", "-m", str(tmp_path / "ckpt"), "-H", "h100-sxm", "--output", "2", "--json"]
    )
    data = json.loads(r.stdout)
    assert data["weight_bytes"] == w.total_bytes and data["model"]["source_kind"] == "safetensors"


def test_hub_cache_laid_out_by_hand(tmp_path, monkeypatch):
    base = tmp_path / "hub" / "models--acme--tiny"
    write_checkpoint(base / "snapshots" / "abc123", sharded=False)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text("abc123\n")
    env = {"HF_HOME": str(tmp_path)}
    assert hub.cache_dir(env) == tmp_path / "hub"
    assert hub.cached_snapshot("acme/tiny", env) == base / "snapshots" / "abc123"
    assert hub.cached_snapshot("acme/tiny@abc123", env) == base / "snapshots" / "abc123"  # a commit as the revision
    assert hub.cached_snapshot("acme/other", env) is None
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    m = load_model("acme/tiny")
    assert m.source_kind == "hub" and m.weights_file.total_bytes > 0
    # Order of the variables, as huggingface_hub resolves them.
    assert hub.cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/huggingface/hub")
    assert hub.cache_dir({"HUGGINGFACE_HUB_CACHE": "/h", "HF_HOME": "/y"}) == Path("/h")


def test_hub_miss_without_huggingface_hub_says_what_to_do(tmp_path, monkeypatch):
    import sys

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    r = runner.invoke(app, ["estimate", "-q", "-m", "acme/missing"])
    assert (
        r.exit_code == 2
        and "pip install 'roofline[hub]'" in r.stderr
        and "hf download acme/missing config.json" in r.stderr
    )


def test_named_quant_formats_by_hand():
    m, h = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    c = m.counts
    # AWQ: linears at 4 + 16/128 + 4/128 = 4.15625 bits; embedding, lm_head, norms in 16 bits.
    linear = c.attention + c.dense_mlp
    expected = linear * 4.15625 / 8 + (c.embedding + c.head + c.norms) * 2
    e = estimate(m, h, quant="awq", output_tokens=2)
    assert e.weight_bytes == pytest.approx(expected) and e.inputs.quant == "awq" and e.inputs.weight_dtype == "int4"
    # NVFP4: 4 bits + an fp8 scale per 16 = 4.5; MXFP4: + an 8-bit scale per 32 = 4.25; Q8_0: 34 B / 32 = 8.5.
    assert QUANTS["nvfp4"].linear_bits == 4 + 8 / 16 and QUANTS["mxfp4"].linear_bits == 4 + 8 / 32
    assert QUANTS["q8_0"].linear_bits == 8 * 34 / 32 and QUANTS["q4_0"].linear_bits == 8 * 18 / 32
    with pytest.raises(UsageError, match="unknown format 'q3'"):
        estimate(m, h, quant="q3")


def test_kv_cache_formats_with_scales():
    # Llama-3.1-8B: 2 x 32 x 8 x 128 = 65,536 elements per token; q8_0 34/32 B each, q4_0 18/32.
    m, h = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    assert estimate(m, h, kv_dtype="q8_0", output_tokens=2).kv_bytes_per_token == 65_536 * 34 / 32
    assert estimate(m, h, kv_dtype="q4_0", output_tokens=2).kv_bytes_per_token == 65_536 * 18 / 32


def test_exact_bytes_from_the_hub_by_range_reads(tmp_path, monkeypatch):
    # A stand-in for huggingface_hub: config.json into a folder, and get_safetensors_metadata's answer (what its
    # range requests read): one shard with an F16 embedding (1024 x 256) and an FP8 weight (256 x 256) + F32 scale.
    import sys
    import types

    config = tmp_path / "remote" / "config.json"
    config.parent.mkdir()
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 256,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 512,
                "vocab_size": 1024,
                "torch_dtype": "bfloat16",
            }
        )
    )
    info = lambda dtype, shape, start, end: types.SimpleNamespace(dtype=dtype, shape=shape, data_offsets=(start, end))  # noqa: E731
    tensors = {
        "model.embed_tokens.weight": info("F16", [1024, 256], 0, 524_288),
        "model.layers.0.self_attn.q_proj.weight": info("F8_E4M3", [256, 256], 524_288, 589_824),
        "model.layers.0.self_attn.q_proj.weight_scale": info("F32", [1], 589_824, 589_828),
    }
    fake = types.SimpleNamespace(
        logging=types.SimpleNamespace(set_verbosity_error=lambda: None),
        hf_hub_download=lambda repo, name, revision=None: str(config),
        get_safetensors_metadata=lambda repo, revision=None: types.SimpleNamespace(
            files_metadata={"model.safetensors": types.SimpleNamespace(tensors=tensors)}
        ),
    )
    monkeypatch.setitem(sys.modules, "huggingface_hub", fake)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(hub, "reachable", lambda endpoint: True)
    assert load_model("acme/remote").weights_file is None  # config.json only, unless asked
    w = load_model("acme/remote", exact_bytes=True).weights_file
    assert w.total_bytes == 524_288 + 65_536 + 4 and w.by_role["scales"] == 4 and w.by_dtype["F8_E4M3"] == 65_536
    r = runner.invoke(app, ["models", "show", "acme/remote", "--exact-bytes", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["weight_bytes"] == 589_828


def test_an_unreachable_hub_is_one_line_at_once(tmp_path, monkeypatch):
    # Without a network huggingface_hub retries five times over ~24 s, printing each retry; roofline asks the host
    # first and answers one line without calling it.
    import sys
    import types

    def download(*args, **kwargs):
        raise AssertionError("the Hub must not be asked when its host does not answer")

    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(hf_hub_download=download))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens, refused at once
    import urllib.request

    monkeypatch.setattr(urllib.request, "getproxies", dict)  # no proxy in the way, whatever the machine sets
    r = runner.invoke(app, ["estimate", "-m", "typo/folder"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "typo/folder: offline and not in the cache" in r.stderr
    assert not hub.reachable("http://127.0.0.1:9") and not hub.reachable("not a url")
    assert not hub.reachable("http://host:abc") and not hub.reachable("http://host:99999")  # a bad port: no traceback
    # Behind a proxy huggingface_hub connects through it: the direct check would wrongly say offline, so it is left
    # to huggingface_hub.
    monkeypatch.setattr(urllib.request, "getproxies", lambda: {"https": "http://proxy.example:3128"})
    monkeypatch.setattr(urllib.request, "proxy_bypass", lambda host: False)
    assert hub.reachable("https://huggingface.co")


@pytest.mark.parametrize(
    "torch_dtype, outcome",
    [
        ("float16", ("fp16", "fp16")),
        ("torch.float32", ("fp32", "fp32")),
        ("float8_e4m3fn", ("fp8", "bf16")),  # fp8 weights, 16-bit activations and KV cache
        ("garbage", "key 'torch_dtype': expected one of"),  # was read as bf16, silently
    ],
)
def test_a_configs_dtype_is_read_or_refused(tmp_path, torch_dtype, outcome):
    config = {
        "model_type": "llama",
        "hidden_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "torch_dtype": torch_dtype,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    if isinstance(outcome, str):
        with pytest.raises(RooflineError, match=outcome):
            load_model(str(path))
    else:
        m = load_model(str(path))
        assert (m.dtype, m.kv_dtype) == outcome


def test_a_null_config_key_is_named_as_config_json_names_it(tmp_path):
    config = {"model_type": "llama", "hidden_size": 256, "num_hidden_layers": None, "num_attention_heads": 4}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(RooflineError, match="missing key 'num_hidden_layers' for model_type 'llama'"):
        load_model(str(path))
