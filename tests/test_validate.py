"""`roofline validate` on a tiny model: the engine's shapes equal the calculator's, and the JSON contract."""

import json
import statistics
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from roofline import estimate, load_hardware, load_model
from roofline.calc.calibrate import curve_index, linear_rate, ops_per_layer
from roofline.cli import app
from roofline.errors import UsageError
from roofline.measure.validate import memory_needed, sliced
from roofline.specs.params import count_params

runner = CliRunner()
TINY = """\
name: tiny
source: test
dtype: fp32
layers: 2
hidden_size: 64
num_heads: 4
num_kv_heads: 2
intermediate_size: 128
vocab_size: 100
max_context: 64
"""


@pytest.fixture
def tiny(write_yaml):
    return load_model(write_yaml("tiny.yaml", TINY))


@pytest.mark.parametrize("model_id", ["gpt2", "gemma-2-9b", "qwen2.5-7b", "phi-3-mini"])
def test_engine_parameters_equal_the_calculator(model_id):
    torch = pytest.importorskip("torch")
    from roofline.measure.decoder import Decoder

    model = sliced(load_model(model_id), 1)  # one full-width layer and a small vocabulary keep the test small
    arch = model.arch._replace(vocab_size=1000)
    model = model._replace(arch=arch, counts=count_params(arch))
    engine = Decoder(model.arch, "bf16", "cpu", batch=2, max_tokens=8)
    assert engine.parameters() == model.counts.total
    # The preallocated cache holds batch x the calculator's KV bytes per sequence at prompt + output tokens.
    e = estimate(model, load_hardware("h100-sxm"), batch=2, prompt_tokens=6, output_tokens=2, kv_dtype="bf16")
    assert engine.cache_bytes() == 2 * e.kv_bytes_per_sequence
    del torch


def test_tiny_model_runs_prefill_and_decode(tiny):
    torch = pytest.importorskip("torch")
    from roofline.measure.decoder import Decoder

    engine = Decoder(tiny.arch, "fp32", "cpu", batch=3, max_tokens=12)
    with torch.inference_mode():
        token = engine.prefill(torch.randint(0, 100, (3, 8)))
        for j in range(3):
            token = engine.decode(token, 8 + j)
    assert token.shape == (3,) and int(token.max()) < 100
    assert engine.parameters() == tiny.counts.total


def test_validate_json_contract(tiny, tmp_path):
    pytest.importorskip("torch")
    r = runner.invoke(
        app,
        [
            "validate",
            "-m",
            str(tmp_path / "tiny.yaml"),
            "--batch",
            "1,2",
            "--prompt",
            "8",
            "--output",
            "4",
            "-H",
            "h100-sxm",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert {"schema_version", "model", "device", "hardware", "rows"} <= set(data)
    assert data["hardware"]["id"] == "h100-sxm" and data["model"]["params"] == tiny.counts.total
    keys = {
        "batch",
        "measured_ttft_s",
        "predicted_ttft_s",
        "measured_tpot_s",
        "predicted_tpot_s",
        "tpot_ratio",
        "ttft_ratio",
        "achieved_flop_per_s",
        "achieved_bytes_per_s",
        "roofline_tpot_s",
        "prediction",
    }
    assert [row["batch"] for row in data["rows"]] == [1, 2] and all(keys <= set(row) for row in data["rows"])
    row = data["rows"][0]
    assert row["tpot_ratio"] == pytest.approx(row["predicted_tpot_s"] / row["measured_tpot_s"])
    assert row["prediction"] == "roofline"  # a datasheet carries no measured curve


def test_layers_slice_is_predicted_as_a_slice():
    m = sliced(load_model("llama-3.1-8b"), 2)
    # Embedding + untied head 2 x 525,336,576, 2 layers x 218,112,000, final norm 4,096.
    assert m.params == 2 * 525_336_576 + 2 * 218_112_000 + 4096
    with pytest.raises(UsageError, match="--layers: expected 1 to 32"):
        sliced(load_model("llama-3.1-8b"), 33)


def test_refuses_what_would_not_fit(tiny):
    from roofline.measure.validate import run

    with pytest.raises(UsageError, match="needs about"):
        run(tiny, load_hardware("h100-sxm"), "cpu", [1], 8, 4, "fp32", available_bytes=1000)
    # Weights 17,280 params x 4 B plus KV and activations, by the same formula the check uses.
    assert memory_needed(tiny, "fp32", 1, 12) > tiny.params * 4


def test_unsupported_models_are_refused():
    r = runner.invoke(app, ["validate", "-m", "mixtral-8x7b", "-H", "h100-sxm"])
    assert r.exit_code == 2 and "uses mixture of experts" in r.stderr
    r = runner.invoke(app, ["validate", "-m", "7b", "-H", "h100-sxm"])
    assert r.exit_code == 2 and "params-only" in r.stderr


def test_calibrated_linear_rate_interpolates_by_hand():
    # Two row lengths, two M: rates 10 and 40 at (M 1, 4) for k=1024, 20 and 80 for k=4096 (FLOP/s).
    curve = [
        {"m": 1, "k": 1024, "flop_per_s": 10.0},
        {"m": 4, "k": 1024, "flop_per_s": 40.0},
        {"m": 1, "k": 4096, "flop_per_s": 20.0},
        {"m": 4, "k": 4096, "flop_per_s": 80.0},
    ]
    index = curve_index(curve)
    assert linear_rate(index, 2, 1024) == pytest.approx(20.0)  # log-log midway between 10 and 40
    assert linear_rate(index, 1, 2048) == pytest.approx(10 * 2**0.5)  # geometric midway in k
    assert linear_rate(index, 1, 512) == pytest.approx(10.0) and linear_rate(index, 64, 4096) == pytest.approx(
        80.0
    )  # held
    # Beyond M = 4 toward the scan's anchors: 320 at M 16, 640 at M 64; one slower than the curve's last point is
    # ignored.
    rising = curve_index(curve, [(16, 320.0), (64, 640.0), (256, 50.0)])
    assert linear_rate(rising, 16, 4096) == pytest.approx(320.0)
    assert linear_rate(rising, 8, 4096) == pytest.approx(160.0)  # log-log midway between (4, 80) and (16, 320)
    assert linear_rate(rising, 32, 4096) == pytest.approx(320 * 2**0.5)  # midway between (16, 320) and (64, 640)
    assert linear_rate(rising, 1024, 4096) == pytest.approx(640.0)  # held beyond the last anchor, not 50
    # The best square (1536, 900) only where no anchor lies beyond the curve: a full CPU curve ends at M = 256,
    # where the scan's only LLM shape may sit. With one beyond, the square is not used.
    assert linear_rate(curve_index(curve, [(4, 90.0)], (1536, 900.0)), 1536, 4096) == pytest.approx(900.0)
    assert linear_rate(curve_index(curve, [(16, 320.0)], (1536, 900.0)), 1536, 4096) == pytest.approx(320.0)


def test_a_series_cut_short_rises_as_its_nearest_full_series_does():
    # k = 512 reached M = 16 (4, 8, 32 FLOP/s at M 1, 4, 16), k = 1024 too (5, 20, 40); the budget cut k = 4096 to
    # M = 1 (6). It takes the rise of k = 1024 (nearest in log k: 2 doublings against 3): 6 x 20 / 5 = 24 at M = 4 and
    # 6 x 40 / 5 = 48 at M = 16; then toward a 128-row anchor of 1000. A straight line from (1, 6) to (128, 1000)
    # would price M = 4 at 6 x 4^(ln(1000/6)/ln 128) = 25.9 and M = 16 at 112.
    curve = [{"m": m, "k": k, "flop_per_s": r} for k, rates in ((512, (4, 8, 32)), (1024, (5, 20, 40))) for m, r in
             zip((1, 4, 16), rates)] + [{"m": 1, "k": 4096, "flop_per_s": 6.0}]  # fmt: skip
    index = curve_index(curve, [(128, 1000.0)])
    assert linear_rate(index, 1, 4096) == pytest.approx(6.0)
    assert linear_rate(index, 4, 4096) == pytest.approx(24.0)
    assert linear_rate(index, 16, 4096) == pytest.approx(48.0)
    assert linear_rate(index, 128, 4096) == pytest.approx(1000.0)
    assert linear_rate(index, 4, 1024) == pytest.approx(20.0)  # the full series are as measured


def test_scan_anchors_are_the_llm_shaped_matmuls():
    from roofline.calc.calibrate import scan_anchors

    # A square's M is no prompt's: the LLM-shaped results, the fastest at each M, sorted by M.
    shapes = [
        {"shape": [1536, 1536, 1536], "best_flop_per_s": 9.0},
        {"shape": [256, 4096, 4096], "best_flop_per_s": 7.0},
        {"shape": [128, 1024, 4096], "best_flop_per_s": 5.0},
        {"shape": [256, 4096, 14336], "best_flop_per_s": 8.0},
    ]
    matmul = {"best_shape": [1536, 1536, 1536], "best_flop_per_s": 9.0, "shapes": shapes}
    assert scan_anchors(matmul) == [(128.0, 5.0), (256.0, 8.0)]
    squares = {**matmul, "shapes": shapes[:1]}
    assert scan_anchors(squares) == [(1536.0, 9.0)]  # none LLM-shaped: the best square
    # The rounds saw the square faster than the scan did (12 against 9): every scanned shape is raised by 12 / 9,
    # its rate relative to the square of the same moment kept.
    faster = {**matmul, "best_flop_per_s": 12.0}
    assert scan_anchors(faster) == [(128.0, pytest.approx(5.0 * 12 / 9)), (256.0, pytest.approx(8.0 * 12 / 9))]
    # A shape the rounds timed again keeps its own rate, not the square's level.
    again = {**shapes[2], "best_flop_per_s": 6.0, "rounds": 3, "median_over": "scan and rounds"}
    timed = [*shapes[:2], again, shapes[3]]
    assert scan_anchors({**faster, "shapes": timed}) == [(128.0, 6.0), (256.0, pytest.approx(8.0 * 12 / 9))]


def test_scan_anchors_price_the_typical_call_not_the_fastest():
    from roofline.calc.calibrate import scan_anchors

    # A machine that runs at two speeds (the AMX VM: 1536^3 best 2017 GFLOP/s, median 748): every rate is the
    # median of its calls. The scan's square median 3, the rounds' median 2.4: level 2.4 / 3 = 0.8, so the
    # 256-row shape (median 4) anchors at 3.2; the rounds-timed 128-row shape keeps its own median, 2.
    shapes = [
        {"shape": [1536, 1536, 1536], "best_flop_per_s": 9.0, "median_flop_per_s": 3.0},
        {
            "shape": [128, 1024, 4096],
            "best_flop_per_s": 5.0,
            "median_flop_per_s": 2.0,
            "rounds": 3,
            "median_over": "scan and rounds",
        },
        {"shape": [256, 4096, 14336], "best_flop_per_s": 8.0, "median_flop_per_s": 4.0},
    ]
    matmul = {"best_shape": [1536, 1536, 1536], "best_flop_per_s": 9.0, "median_flop_per_s": 2.4, "shapes": shapes}
    assert scan_anchors(matmul) == [(128.0, 2.0), (256.0, pytest.approx(3.2))]
    assert scan_anchors({**matmul, "shapes": shapes[:1]}) == [(1536.0, 2.4)]  # no LLM shape: the square's median


def test_prefill_attention_rate_by_prompt_length():
    from roofline.calc.calibrate import prefill_attention_rate

    kernel = {"prefill": [{"prompt": 512, "flop_per_s": 90.0}, {"prompt": 128, "flop_per_s": 60.0}]}
    assert prefill_attention_rate(kernel, 256, 1.0) == pytest.approx((60 * 90) ** 0.5)  # log-log midway
    assert prefill_attention_rate(kernel, 32, 1.0) == 60.0 and prefill_attention_rate(kernel, 8192, 1.0) == 90.0
    assert prefill_attention_rate({}, 256, 1.0) == 1.0  # a profile measured before them: the fallback


def test_tall_weights_scale_toward_the_tall_series():
    # Layer-sized series at k=1024 (n = 1000 rows per weight): 10 FLOP/s at M 1; the tall one (n = 100,000): 5.
    curve = [{"m": 1, "k": 1024, "n": 1000, "flop_per_s": 10.0}, {"m": 1, "k": 1024, "n": 100_000, "flop_per_s": 5.0}]
    index = curve_index(curve)
    assert linear_rate(index, 1, 1024, 1000) == pytest.approx(10.0)  # layer-sized: no scaling
    assert linear_rate(index, 1, 1024, 100_000) == pytest.approx(5.0)  # as tall as the tall series: its ratio 0.5
    assert linear_rate(index, 1, 1024, 10_000) == pytest.approx(10 * 0.5**0.5)  # halfway in log n: sqrt(0.5)
    assert linear_rate(index, 1, 1024, 10**7) == pytest.approx(5.0)  # held beyond


def test_ops_per_layer():
    # GPT-2: 2 norms, 2 cache writes, attention, head merge, 2 adds, gelu = 9; Llama adds silu+mul and rotary 10.
    assert ops_per_layer(load_model("gpt2").arch) == 9
    assert ops_per_layer(load_model("llama-3.1-8b").arch) == 20


def test_validate_without_torch_names_validate(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    r = runner.invoke(app, ["validate", "-m", "gpt2", "-H", "h100-sxm"])
    assert r.exit_code == 1
    assert r.stderr.strip() == "roofline: error: roofline validate needs torch: pip install 'roofline[measure]'"


def test_engine_fixed_costs_fit_and_price_by_hand():
    from roofline.calc.calibrate import engine_cost
    from roofline.measure.engine_costs import fit

    # Steps of 1.0 ms at depth 2 and 2.2 ms at depth 8: 0.2 ms per layer, 0.6 ms per step.
    per_step, per_layer = fit({2: 1.0e-3, 8: 2.2e-3})
    assert per_layer == pytest.approx(0.2e-3) and per_step == pytest.approx(0.6e-3)
    engine = {
        "archetypes": {
            "rope": {"per_step_s": {"1": 1e-4, "16": 4e-4}, "per_layer_s": {"1": 2e-4, "16": 8e-4}},
            "learned": {"per_step_s": {"1": 0.0, "16": 0.0}, "per_layer_s": {"1": 1e-4, "16": 1e-4}},
        }
    }
    llama = load_model("llama-3.2-1b").arch  # 16 layers, rope
    # Batch 4 is halfway between 1 and 16 in log: per step sqrt(1e-4 x 4e-4) = 2e-4, per layer sqrt(2e-4 x 8e-4) = 4e-4.
    assert engine_cost(engine, llama, 4) == pytest.approx(2e-4 + 16 * 4e-4)
    assert engine_cost(engine, load_model("gpt2").arch, 4) == pytest.approx(
        12 * 1e-4
    )  # learned: zero intercept, linear


def test_engine_depths_are_timed_alternately_so_a_slow_moment_hits_both(monkeypatch):
    # A machine at two speeds: a decode step of L layers costs (100 + 10 L) us, doubled for the first 8 decode calls
    # (the 4 warm-ups and the first 4 timed steps). Alternating d2 d8 / d8 d2 over 4 steps, each depth gets 2 slow
    # and 2 fast steps: medians 1.5 x 120 = 180 us and 1.5 x 180 = 270 us, so 15 us a layer and 150 us a step (the
    # true 10 and 100, both scaled alike). Timed one depth after the other, depth 2 had been all slow (240) and
    # depth 8 all fast (180): a negative slope, clamped to 0 a layer.
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from roofline.measure import engine_costs

    clock = {"now": 0.0, "calls": 0}

    class Engine:
        device = "cpu"

        def __init__(self, layers):
            self.layers = layers

        def prefill(self, tokens):
            return tokens[:, -1:]

        def decode(self, token, position):
            clock["calls"] += 1
            clock["now"] += (100 + 10 * self.layers) * 1e-6 * (2 if clock["calls"] <= 8 else 1)
            return token

    monkeypatch.setattr(engine_costs, "time", SimpleNamespace(perf_counter=lambda: clock["now"]))
    timed = engine_costs.step_times(torch, "cpu", lambda arch, batch, tokens: Engine(arch.layers), steps=4)
    per_step, per_layer = engine_costs.fit(timed(engine_costs.archetypes()["rope"], 1))
    assert per_layer == pytest.approx(15e-6) and per_step == pytest.approx(150e-6)


def test_a_profile_with_engine_costs_prices_the_fixed_cost_with_them(tmp_path):
    engine = {
        "archetypes": {
            "rope": {"per_step_s": {"1": 1e-3}, "per_layer_s": {"1": 1e-3}},
            "learned": {"per_step_s": {"1": 2e-3}, "per_layer_s": {"1": 5e-4}},
        }
    }
    hw = load_hardware("h100-sxm")._replace(id="p", measured=MEASURED, engines={"eager": engine})
    e = estimate(load_model("gpt2"), hw, batch=1, prompt_tokens=16, output_tokens=4, engine="eager")
    # GPT-2: learned archetype, 12 layers: 2 ms + 12 x 0.5 ms = 8 ms of fixed cost per step.
    assert e.calibrated.decode_overhead_s == pytest.approx(8e-3) and e.calibrated.engine == "eager"
    with pytest.raises(UsageError, match="no measured 'transformers' engine"):
        estimate(load_model("gpt2"), hw, engine="transformers")
    # Costs timed in one dtype priced a run in another without a word (transformers: fp32's 8.4 ms a step for a bf16
    # run whose steps cost 12.7 ms); now a note names the command that measures them in the run's dtype.
    both = {k: {**v, "bf16": v["fp32"]} if isinstance(v, dict) and "fp32" in v else v for k, v in MEASURED.items()}
    timed = hw._replace(measured=both, engines={"eager": {**engine, "dtype": "fp32"}})
    common = dict(batch=1, prompt_tokens=16, output_tokens=4, engine="eager")
    same = estimate(load_model("gpt2"), timed, weight_dtype="fp32", **common)
    assert same.calibrated is not None and not any("fixed costs were measured in" in n for n in same.notes)
    other = estimate(load_model("gpt2"), timed, weight_dtype="bf16", **common)
    assert other.calibrated is not None and any("measured in fp32 and this runs in bf16" in n for n in other.notes)
    # Costs timed in both (`measure --engine eager --dtype bf16 --save` beside fp32's: eager@bf16) price each run
    # with its own: bf16's learned archetype 4 ms + 12 x 1 ms = 16 ms a step, fp32's still 8 ms; no note.
    slow = {"archetypes": {k: {n: {"1": 2 * t["1"]} for n, t in v.items()} for k, v in engine["archetypes"].items()}}
    two = timed._replace(engines={"eager": {**engine, "dtype": "fp32"}, "eager@bf16": {**slow, "dtype": "bf16"}})
    own = estimate(load_model("gpt2"), two, weight_dtype="bf16", **common)
    assert own.calibrated.decode_overhead_s == pytest.approx(16e-3) and not any("measured in" in n for n in own.notes)
    assert estimate(load_model("gpt2"), two, weight_dtype="fp32", **common).calibrated.decode_overhead_s == (
        pytest.approx(8e-3)
    )
    # simulate prices every step with those costs, and says so where they were timed in another dtype, as estimate
    from roofline.calc.knobs import Knobs
    from roofline.calc.simulate import simulate

    run = dict(concurrency=1, requests=2, prompt_tokens=16, output_tokens=4)
    said = lambda h, d: simulate(load_model("gpt2"), h, knobs=Knobs(weight_dtype=d), **run).notes  # noqa: E731
    assert any("measured in fp32 and this runs in bf16" in n for n in said(timed, "bf16"))
    assert not any("fixed costs were measured in" in n for n in said(two, "bf16") + said(timed, "fp32"))


DTYPES = ("fp32", "bf16", "fp16")


def test_engine_costs_timed_in_a_second_dtype_are_saved_beside_the_first(tmp_path):
    # measure --engine NAME --dtype D --save PROFILE: the first costs of an engine go under engines[NAME]; another
    # dtype's join them as NAME@D (not over them); the same dtype again replaces its own. The engine is listed once.
    from roofline.calc.inputs import engine_costs_for, measured_engines
    from roofline.measure import profile

    path = tmp_path / "p.yaml"
    base = load_hardware("h100-sxm")._replace(id="p", measured=MEASURED)
    costs = {"archetypes": {"rope": {"per_step_s": {"1": 1e-3}, "per_layer_s": {"1": 1e-4}}}}
    for dtype, step in (("fp32", 1e-3), ("bf16", 2e-3), ("fp32", 3e-3)):
        timed = {"archetypes": {"rope": {**costs["archetypes"]["rope"], "per_step_s": {"1": step}}}}
        profile.save_engine({"engine": "transformers", "device": "cpu", **timed, "dtype": dtype}, str(path), base)
        base = load_hardware(str(path))
    assert sorted(base.engines) == ["transformers", "transformers@bf16"] and measured_engines(base) == ["transformers"]
    pick = {d: engine_costs_for(base, "transformers", d)["archetypes"]["rope"]["per_step_s"]["1"] for d in DTYPES}
    assert pick == {"fp32": 3e-3, "bf16": 2e-3, "fp16": 3e-3}  # fp16: none timed, the first's (estimate notes it)
    # A full measure keeps eager's own costs in its raw measurement (measured.engines), and costs saved before the
    # dtype was recorded have none (fp32, measure --engine's default): bf16's join either, neither is overwritten.
    fp32 = {**costs, "dtype": "fp32"}
    for measured, engines in (({**MEASURED, "engines": {"eager": fp32}}, None), (MEASURED, {"eager": costs})):
        older = load_hardware("h100-sxm")._replace(id="q", measured=measured, engines=engines)
        bf16 = {"archetypes": {"rope": {**costs["archetypes"]["rope"], "per_step_s": {"1": 9e-3}}}, "dtype": "bf16"}
        profile.save_engine({"engine": "eager", "device": "cpu", **bf16}, str(path), older)
        saved = load_hardware(str(path))
        assert "eager@bf16" in saved.engines, engines
        pick = {d: engine_costs_for(saved, "eager", d)["archetypes"]["rope"]["per_step_s"]["1"] for d in DTYPES}
        assert pick == {"fp32": 1e-3, "bf16": 9e-3, "fp16": 1e-3}, engines
    # Costs under the bare name in one dtype (a hand-saved profile) do not hide a full measure's own in another.
    bf16 = {**costs, "archetypes": {"rope": {**costs["archetypes"]["rope"], "per_step_s": {"1": 9e-3}}}}
    both = older._replace(
        measured={**MEASURED, "engines": {"eager": fp32}}, engines={"eager": {**bf16, "dtype": "bf16"}}
    )
    pick = {d: engine_costs_for(both, "eager", d)["archetypes"]["rope"]["per_step_s"]["1"] for d in DTYPES}
    assert pick == {"fp32": 1e-3, "bf16": 9e-3, "fp16": 9e-3}  # fp16: none timed, the profile's own engines: first


def test_transformers_gpt2_linears_are_priced_at_the_measured_conv1d_slowdown():
    from roofline.calc.calibrate import conv1d_factor, curve_index

    engine = {
        "archetypes": {
            "rope": {"per_step_s": {"1": 1e-3}, "per_layer_s": {"1": 1e-3}},
            "learned": {"per_step_s": {"1": 2e-3}, "per_layer_s": {"1": 5e-4}},
        },
        "conv1d_slowdown": {"1024x4096": {"1": 1.7, "16": 1.4, "128": 1.0}},
    }
    flat = curve_index([{"m": 1, "k": 768, "n": 768, "flop_per_s": 1e10}])  # every linear at 10 GFLOP/s
    gpt2, llama = load_model("gpt2").arch, load_model("llama-3.2-1b").arch
    # One shape: log-log in rows, at 4 halfway between 1 and 16, sqrt(1.7 x 1.4) = 1.542725; held beyond the ends.
    assert conv1d_factor(engine, "transformers", gpt2, 4, flat) == pytest.approx(1.542725, rel=1e-6)
    assert conv1d_factor(engine, "transformers", gpt2, 2048, flat) == pytest.approx(1.0)
    assert conv1d_factor(engine, "transformers", gpt2, 1, flat) == pytest.approx(1.7)
    # Profiles that timed one shape wrote rows -> ratio, unkeyed: the same prices.
    old = {**engine, "conv1d_slowdown": {"1": 1.7, "16": 1.4, "128": 1.0}}
    assert conv1d_factor(old, "transformers", gpt2, 4, flat) == pytest.approx(1.542725, rel=1e-6)
    # Only transformers' GPT-2 layout: eager's linears and Llama shapes are F.linear; older profiles carry none.
    assert conv1d_factor(engine, "eager", gpt2, 1, flat) == 1.0
    assert conv1d_factor(engine, "transformers", llama, 1, flat) == 1.0
    assert conv1d_factor({"archetypes": engine["archetypes"]}, "transformers", gpt2, 1, flat) == 1.0
    # Through the estimate: a batch-1 decode step's layer linears take 1.7x, the lm_head and the rest do not.
    hw = load_hardware("h100-sxm")._replace(id="p", measured=MEASURED, engines={"transformers": engine})
    plain = {**engine, "conv1d_slowdown": {"1": 1.0}}
    args = dict(batch=1, prompt_tokens=16, output_tokens=4, engine="transformers")
    slow = estimate(load_model("gpt2"), hw, **args).calibrated
    base = estimate(load_model("gpt2"), hw._replace(engines={"transformers": plain}), **args).calibrated
    assert slow.decode_overhead_s == base.decode_overhead_s and slow.decode_attention_s == base.decode_attention_s
    assert 1.0 < slow.decode_linear_s / base.decode_linear_s < 1.7  # the lm_head (38.6M of 124M weights) unscaled


def test_conv1d_slowdown_follows_each_weights_aspect():
    from roofline.calc.calibrate import conv1d_factor, conv1d_slowdown, conv1d_tables, curve_index

    # Tall (aspect out / in 1/4) 1.2, square 0.9, wide (4) 0.75 at one row; 2.0 everywhere at 16 rows.
    measured = {
        "archetypes": {"learned": {"per_step_s": {"1": 0.0}, "per_layer_s": {"1": 0.0}}},
        "conv1d_slowdown": {
            "4096x1024": {"1": 1.2, "16": 2.0},
            "1024x1024": {"1": 0.9, "16": 2.0},
            "1024x4096": {"1": 0.75, "16": 2.0},
        },
    }
    tables = conv1d_tables(measured["conv1d_slowdown"])
    # Log-log in aspect: 1024 x 2048 halfway between square and wide, sqrt(0.9 x 0.75) = 0.821584; held beyond.
    assert conv1d_slowdown(tables, 1024, 2048, 1) == pytest.approx(0.821584, rel=1e-6)
    assert conv1d_slowdown(tables, 768, 6144, 1) == pytest.approx(0.75)
    assert conv1d_slowdown(tables, 8192, 1024, 1) == pytest.approx(1.2)
    assert conv1d_slowdown(tables, 1024, 2048, 16) == pytest.approx(2.0)
    # GPT-2 (hidden 768, MLP 3072) as transformers builds it: c_attn 768 x 2304 (aspect 3: 0.9 x (0.75 / 0.9)^(log 3
    # / log 4) = 0.778920), attn c_proj 768 x 768 (0.9), c_fc 768 x 3072 (0.75), mlp c_proj 3072 x 768 (1.2). At one
    # rate for every linear each weighs its values: (1,769,472 x 0.778920 + 589,824 x 0.9 + 2,359,296 x 0.75 +
    # 2,359,296 x 1.2) / 7,077,888 = 0.919730 (the wide shape alone said 0.75).
    flat = curve_index([{"m": 1, "k": 768, "n": 768, "flop_per_s": 1e10}])
    gpt2 = load_model("gpt2").arch
    assert conv1d_factor(measured, "transformers", gpt2, 1, flat) == pytest.approx(0.919730, rel=1e-5)
    # Weighted by time, not values: with row length 3072 read at 4x the rate of 768 (log-log in k: a curve at 768
    # and 3072), the down-projection's 2,359,296 values weigh a quarter: (1,769,472 x 0.778920 + 589,824 x 0.9 +
    # 2,359,296 x 0.75 + 589,824 x 1.2) / 5,308,416 = 0.826307.
    by_k = curve_index(
        [{"m": 1, "k": 768, "n": 768, "flop_per_s": 1e10}, {"m": 1, "k": 3072, "n": 768, "flop_per_s": 4e10}]
    )
    assert conv1d_factor(measured, "transformers", gpt2, 1, by_k) == pytest.approx(0.826307, rel=1e-5)


def test_transformers_decode_copies_its_kv_cache_each_step_at_the_copy_bandwidth():
    from roofline.calc.calibrate import cache_copy_seconds

    engine = {
        "archetypes": {
            "rope": {"per_step_s": {"1": 1e-3}, "per_layer_s": {"1": 1e-3}},
            "learned": {"per_step_s": {"1": 2e-3}, "per_layer_s": {"1": 5e-4}},
        }
    }
    copy = {"bandwidth": {"copy": {"best_bytes_per_s": 1e10}}}
    # GPT-2 (12 layers, 12 x 64 = 768 wide) in fp32: K and V add 2 x 12 x 768 x 4 = 73,728 B a token. Prompt 100,
    # output 10: decode steps at contexts 100..108 (mean 104), each reading 105 positions; batch 4: 4 x 105 x 73,728
    # = 30,965,760 B of cache, read and written again by torch.cat: 2 x 30,965,760 / 1e10 = 6.193152 ms a step.
    assert cache_copy_seconds(copy, "transformers", 30_965_760) == pytest.approx(6.193152e-3)
    assert cache_copy_seconds(copy, "eager", 30_965_760) == 0.0  # a preallocated cache, written in place
    assert cache_copy_seconds({}, "transformers", 30_965_760) == 0.0  # no copy figure: not priced
    hw = load_hardware("h100-sxm")._replace(id="p", engines={"transformers": engine})
    args = dict(batch=4, prompt_tokens=100, output_tokens=10, engine="transformers")
    plain = estimate(load_model("gpt2"), hw._replace(measured=MEASURED), **args).calibrated
    copied = estimate(load_model("gpt2"), hw._replace(measured={**MEASURED, **copy}), **args).calibrated
    assert copied.decode_attention_s - plain.decode_attention_s == pytest.approx(6.193152e-3)
    assert copied.tpot_s - plain.tpot_s == pytest.approx(6.193152e-3)
    # The prefill's cat onto an empty cache copies the prompt's KV: 4 x 100 x 73,728 = 29,491,200 B, 5.89824 ms.
    assert copied.ttft_s - plain.ttft_s == pytest.approx(5.89824e-3)
    # A copy figure timed over 128 MiB that the ladder reads at 2x its 512 MiB plateau is half memory's speed.
    ladder = {"points": [{"bytes": 2**27, "bytes_per_s": 8e10}, {"bytes": 2**29, "bytes_per_s": 4e10}]}
    copied_over = {"best_bytes_per_s": 1e10, "buffer_bytes": 2**27}
    cached = {"bandwidth": {"copy": copied_over, "read": {"by_working_set": ladder}}}
    assert cache_copy_seconds(cached, "transformers", 30_965_760) == pytest.approx(2 * 6.193152e-3)


def test_prefill_elementwise_bytes_by_hand():
    from roofline.calc.elementwise import prefill_bytes
    from roofline.specs.params import Architecture

    # Derived kernel by kernel from roofline/measure/decoder.py by a helper that did not see roofline/calc/
    # elementwise.py (every kernel reads its inputs once and writes once; broadcast tables at their own size).
    # A: rope, gated, 2 RMSNorms, L 2, h 8, q 8, kv 4, d 4, I 16, B 1, T 3, 2 bytes: a layer moves norm 96, silu 96,
    # binary 888 elements (rotary of q 312 and k 192, K/V copies 48, head merge 48, residuals 144, silu x up 144);
    # the embedding 48.
    common = dict(vocab_size=32, max_positions=64, tied_embeddings=False)
    a = Architecture(
        layers=2,
        hidden_size=8,
        num_heads=2,
        head_dim=4,
        num_kv_heads=1,
        intermediate_size=16,
        mlp="gated",
        position_embeddings="rope",
        norm="rmsnorm",
        bias="none",
        **common,
    )
    assert prefill_bytes(a, 1, 3, 2) == {"binary": 3648, "rms_norm": 384, "silu": 384}
    # B: learned positions, plain tanh-GELU MLP, 2 LayerNorms, L 3, h 6, q 6, kv 6, I 24, B 2, T 5, 4 bytes: a layer
    # moves norm 240, gelu 480, binary 720; before the layers the embedding (120), the position rows gathered (60)
    # and added (150).
    b = a._replace(
        layers=3,
        hidden_size=6,
        head_dim=3,
        num_kv_heads=2,
        intermediate_size=24,
        mlp="plain",
        position_embeddings="learned",
        norm="layernorm",
        bias="all",
    )
    assert prefill_bytes(b, 2, 5, 4) == {"binary": 9960, "layer_norm": 2880, "gelu_tanh": 5760}
    # transformers runs GPT-2's GELU as 8 kernels (transformers.activations.NewGELUActivation.forward:
    # 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))):
    # pow 2, x 0.044715 2, input + 3, x sqrt(2/pi) 2, tanh 2, 1.0 + 2, 0.5 x input 2, their product 3 tensors of
    # n x I: tanh 2, the others 16.
    hf = prefill_bytes(b, 2, 5, 4, "transformers")
    assert hf["tanh"] == 3 * 2 * 10 * 24 * 4 and hf["binary"] == 9960 + 3 * 16 * 10 * 24 * 4 and "gelu_tanh" not in hf


def test_a_prefill_pays_the_engine_fixed_cost_and_its_elementwise_kernels():
    engine = {
        "archetypes": {
            "rope": {"per_step_s": {"1": 1e-3}, "per_layer_s": {"1": 1e-3}},
            "learned": {"per_step_s": {"1": 2e-3}, "per_layer_s": {"1": 5e-4}},
        }
    }
    rates = {"binary": 1e10, "layer_norm": 1e9, "gelu_tanh": 5e8, "rms_norm": 1.0, "silu": 1.0, "tanh": 1.0}
    measured = {**MEASURED, "elementwise": {"fp32": {"shape": [1024, 1024], "bytes_per_s": rates}}}
    plain = load_hardware("h100-sxm")._replace(id="p", measured=MEASURED)
    full = plain._replace(measured=measured, engines={"eager": engine})
    gpt2 = load_model("gpt2")
    args = dict(batch=1, prompt_tokens=16, output_tokens=4)
    before = estimate(gpt2, plain, **args).calibrated.ttft_s
    after = estimate(gpt2, full, engine="eager", **args).calibrated.ttft_s
    # GPT-2 (L 12, h 768, I 3072), 16 fp32 tokens, by the helper's general formulas (the test above): LayerNorms
    # 4 L n h = 589,824 values, GELU 2 L n I = 1,179,648, binary 4 n h + 3 T h + L (4 n kv + 2 n q + 6 n h) =
    # 1,855,488; x 4 bytes at 1e9, 5e8 and 1e10 B/s:
    # 2.359296 + 9.437184 + 0.7421952 ms. The fixed cost: the engine's 2 ms + 12 x 0.5 ms in place of 12 x 9 + 5
    # tiny ops at 5 us.
    elementwise = 2.359296e-3 + 9.437184e-3 + 0.7421952e-3
    assert after - before == pytest.approx(elementwise + 8e-3 - (12 * 9 + 5) * 5e-6)


# A minimal measured profile for gpt2 in fp32: a flat curve, an attention kernel and a per-op cost.
MEASURED = {
    "decode_matmul": {
        "fp32": [{"m": 1, "k": 768, "n": 3072, "flop_per_s": 1e10}, {"m": 16, "k": 768, "n": 3072, "flop_per_s": 1e11}]
    },
    "decode_attention": {"fp32": {"flop_per_s": 1e10, "bytes_per_s": 1e10}},
    "op_overhead_s": 5e-6,
    "matmul": {"fp32": {"best_flop_per_s": 2e11, "best_shape": [512, 512, 512]}},
}


def test_the_tall_ratio_is_held_beyond_the_tall_series():
    # A quick run may time the tall weight at M = 1 only (rate 5 against the layer series' 10: ratio 0.5).
    # At M = 16 the layer series runs at 160; the tall weight is priced at 0.5 x 160, not held at 5.
    curve = [
        {"m": 1, "k": 1024, "n": 1000, "flop_per_s": 10.0},
        {"m": 16, "k": 1024, "n": 1000, "flop_per_s": 160.0},
        {"m": 1, "k": 1024, "n": 100_000, "flop_per_s": 5.0},
    ]
    assert linear_rate(curve_index(curve), 16, 1024, 100_000) == pytest.approx(80.0)


def test_a_small_weight_pays_the_small_series_call_cost_plus_its_values_at_the_layer_pace():
    # Layer series: k 512, 2048 rows (E_l = 2^20 values), M = 1 at 10 FLOP/s: t_l = 2 x 2^20 / 10 = 209715.2 s.
    # Small series: 128 rows (E_s = 2^16), 2.5 FLOP/s: t_s = 2 x 2^16 / 2.5 = 52428.8 s. A call's own cost:
    # t_s - E_s (t_l - t_s) / (E_l - E_s) = 52428.8 - 65536 x 157286.4 / 983040 = 52428.8 - 10485.76 = 41943.04 s.
    # 512 x 512 (2^18 values): 41943.04 + (209715.2 - 41943.04) / 4 = 83886.08 s for 2 x 2^18 FLOPs: 6.25 FLOP/s.
    # The small size itself comes back at 2.5; 512 x 64 (2^15): 41943.04 + 167772.16 / 32 = 47185.92 s: 65536 /
    # 47185.92 = 1.38889 (a call's cost over fewer values); the layer size at 10. At M = 16 (layer 160 FLOP/s, the
    # call cost held at the small series' only M): 41943.04 + (2^20 x 32 / 160 - 41943.04) / 4 = 83886.08 s for
    # 2 x 16 x 2^18 FLOPs: 100. Row length 4096 (rows held at 2048, E_l = 2^23, 10 FLOP/s: 1677721.6 s): 4096 x 64
    # takes 41943.04 + 1635778.56 / 32 = 93061.12 s: 524288 / 93061.12 = 5.63380 FLOP/s.
    from roofline.calc.calibrate import call_seconds

    curve = [
        {"m": 1, "k": 512, "n": 2048, "flop_per_s": 10.0},
        {"m": 16, "k": 512, "n": 2048, "flop_per_s": 160.0},
        {"m": 1, "k": 512, "n": 128, "flop_per_s": 2.5, "series": "small"},
    ]
    index = curve_index(curve)
    assert call_seconds(index, 1) == pytest.approx(41943.04) and call_seconds(index, 16) == pytest.approx(41943.04)
    assert linear_rate(index, 1, 512, 512) == pytest.approx(6.25)
    assert linear_rate(index, 1, 512, 128) == pytest.approx(2.5)
    assert linear_rate(index, 1, 512, 64) == pytest.approx(65536 / 47185.92)
    assert linear_rate(index, 1, 512, 2048) == pytest.approx(10.0)
    assert linear_rate(index, 16, 512, 512) == pytest.approx(100.0)
    assert linear_rate(index, 1, 4096, 64) == pytest.approx(524288 / 93061.12)


def test_a_small_series_faster_than_the_layer_pace_costs_no_call():
    # Noise can time the small weights faster per value than the layer ones: 2^16 values at 20 FLOP/s take 6553.6 s,
    # less than their share of the layer's 209715.2 s (13107.2): the call cost floors at 0 and a small weight
    # runs at the layer pace, 10 FLOP/s.
    from roofline.calc.calibrate import call_seconds

    curve = [
        {"m": 1, "k": 512, "n": 2048, "flop_per_s": 10.0},
        {"m": 1, "k": 512, "n": 128, "flop_per_s": 20.0, "series": "small"},
    ]
    index = curve_index(curve)
    assert call_seconds(index, 1) == 0.0 and linear_rate(index, 1, 512, 256) == pytest.approx(10.0)


def test_validate_rounds_interval_and_verdict_in_the_json(tiny, tmp_path):
    pytest.importorskip("torch")
    r = runner.invoke(
        app,
        [
            "validate",
            "-m",
            str(tmp_path / "tiny.yaml"),
            "--batch",
            "1,2",
            "--prompt",
            "8",
            "--output",
            "4",
            "-H",
            "h100-sxm",
            "--repeat",
            "2",
            "--tolerance",
            "0.2",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["engine"] == "eager" and data["rounds"] == 2 and data["tolerance"] == 0.2
    for row in data["rows"]:
        assert row["tpot_ratio_low"] <= row["tpot_ratio"] <= row["tpot_ratio_high"]
        assert row["measured_tpot_p10_s"] <= row["measured_tpot_s"] <= row["measured_tpot_p90_s"]
        assert row["verdict"] in ("within", "outside", "inconclusive")


def test_the_reference_point_is_m_1_of_the_longest_layer_series():
    from roofline.measure.drift import reference_point

    curve = [
        {"m": 1, "k": 512, "n": 2048, "flop_per_s": 1.0},
        {"m": 1, "k": 4096, "n": 4096, "flop_per_s": 2.0},
        {"m": 4, "k": 4096, "n": 4096, "flop_per_s": 3.0},
        {"m": 1, "k": 512, "n": 65536, "flop_per_s": 4.0},  # the tall weight
        {"m": 1, "k": 512, "n": 128, "flop_per_s": 5.0, "series": "small"},
    ]
    assert reference_point({"decode_matmul": {"fp32": curve}}, "fp32")["flop_per_s"] == 2.0
    assert reference_point({"decode_matmul": {"fp32": curve}}, "bf16") is None and reference_point(None, "fp32") is None


def test_a_batch_is_timed_at_the_curve_m_nearest_it_on_every_layer_k():
    from roofline.measure.drift import batch_points

    curve = [
        {"m": m, "k": k, "n": n, "flop_per_s": float(m * k)}
        for m in (1, 4, 16)
        for k, n in ((512, 2048), (512, 65536), (4096, 4096))  # 512 x 65536: the tall weight, more rows than a layer's
    ] + [{"m": 16, "k": 512, "n": 128, "flop_per_s": 1.0, "series": "small"}]
    measured = {"decode_matmul": {"fp32": curve}}
    m_of = lambda batch: {p["m"] for p in batch_points(measured, "fp32", batch)}  # noqa: E731
    # Nearest in log2: 3 is 0.42 from 4 and 1.58 from 1; 2 lies 1 from both 1 and 4, 8 from both 4 and 16 (the
    # smaller M taken); M = 1 is the reference point's, so batches 1 and 2 get none here.
    assert [m_of(b) for b in (1, 2, 3, 8, 12, 64)] == [set(), set(), {4}, {4}, {16}, {16}]
    # One point per k, the layer-sized one (smallest n): not the tall weight, not the small series.
    assert [(p["k"], p["n"]) for p in batch_points(measured, "fp32", 16)] == [(512, 2048), (4096, 4096)]
    assert batch_points(None, "fp32", 16) == [] and batch_points(measured, "bf16", 16) == []


def test_a_batch_reference_runs_its_points_as_one_call_at_their_combined_rate():
    torch = pytest.importorskip("torch")
    from roofline.measure.drift import decode_references, prompt_reference

    # Two M = 4 points of unequal FLOPs. k = 64, n = 128, buffer 65536 B = 2 fp32 weights of 64 x 128:
    # 2 x 4 x 64 x 256 = 131072 FLOPs, at 1e10 FLOP/s 13.1072 us. k = 32, n = 512, buffer 262144 B = 4 weights of
    # 32 x 512: 2 x 4 x 32 x 2048 = 524288 FLOPs, at 2e10 26.2144 us. Together 655360 FLOPs in 39.3216 us:
    # 1.6667e10 FLOP/s (FLOP-weighted; the plain harmonic mean of 1e10 and 2e10 would be 1.333e10).
    points = [
        {"m": 4, "k": 64, "n": 128, "flop_per_s": 1e10, "buffer_bytes": 65536},
        {"m": 4, "k": 32, "n": 512, "flop_per_s": 2e10, "buffer_bytes": 262144},
    ]
    both, alone = decode_references(torch, "cpu", "fp32", [points, points[:1]], 0)
    assert both.flops == 655360 and both.rate == pytest.approx(655360 / 39.3216e-6)
    assert alone.flops == 131072 and alone.rate == pytest.approx(1e10)
    assert [tuple(y.shape) for y in both.call()] == [(4, 128)] * 2 + [(4, 512)] * 4
    # The prompt reference: 16 x 64 by 64 x 128 is 2 x 16 x 64 x 128 = 262144 FLOPs, at the entry's typical
    # (median) rate, the one that priced prefills; an entry without a median at its best.
    prompt = prompt_reference(torch, "cpu", "fp32", {"shape": [16, 64, 128], "best_flop_per_s": 3e10})
    assert prompt.flops == 262144 and prompt.rate == 3e10
    entry = {"shape": [16, 64, 128], "best_flop_per_s": 3e10, "median_flop_per_s": 2e10}
    assert prompt_reference(torch, "cpu", "fp32", entry).rate == 2e10


def test_the_prompt_reference_is_the_scan_shape_the_rounds_timed_again():
    from roofline.measure.drift import prompt_point

    shapes = [
        {"shape": [1000, 1000, 1000], "best_flop_per_s": 2.0},
        {"shape": [128, 1024, 4096], "best_flop_per_s": 1.6, "rounds": 3},
        {"shape": [512, 4096, 1792], "best_flop_per_s": 2.0},
    ]
    measured = {"matmul": {"fp32": {"shapes": shapes}}}
    assert prompt_point(measured, "fp32")["shape"] == [128, 1024, 4096]
    assert prompt_point(measured, "bf16") is None and prompt_point(None, "fp32") is None
    assert prompt_point({"matmul": {"fp32": {"shapes": shapes[::2]}}}, "fp32") is None  # profiles before rounds


def test_a_curve_point_leaves_its_stalled_passes_out():
    from roofline.measure.kernels import pass_rate

    # Passes whose best rates are 29.1, 17.8 and 17.5 GFLOP/s: 17.8 x 1.25 = 22.25 < 29.1, so both slow passes
    # stalled and the point runs at 29.1 (the median of all three would say 17.8).
    assert pass_rate([29.1e9, 17.8e9, 17.5e9]) == pytest.approx(29.1e9)
    # 30, 29 and 31: none 1.25x under 31, the median of the three, 30.
    assert pass_rate([30e9, 29e9, 31e9]) == pytest.approx(30e9)
    # 30, 24.1 and 20: 24.1 x 1.25 = 30.125 >= 30 stays, 20 x 1.25 = 25 < 30 goes: the median of 30 and 24.1.
    assert pass_rate([30e9, 24.1e9, 20e9]) == pytest.approx(27.05e9)
    assert pass_rate([5e9]) == 5e9


def test_a_reference_point_from_passes_that_disagree_is_noted():
    from roofline.measure.drift import caught_slow

    # The Zen 5 VM's slow quick profile: best call 29.1, passes' median 17.8 GFLOP/s (29.1 / 17.8 = 1.63 > 1.25).
    slow = caught_slow({"m": 1, "k": 4096, "n": 8192, "flop_per_s": 17.8e9, "best_flop_per_s": 29.1e9})
    assert "17.8 GFLOP/s against a best call of 29.1" in slow and "k = 4096" in slow
    # The next profile's: 30.5 against 31.2 (1.02), and one at the edge (1.25 exactly), are not noted.
    assert caught_slow({"m": 1, "k": 4096, "n": 8192, "flop_per_s": 30.5e9, "best_flop_per_s": 31.2e9}) is None
    assert caught_slow({"m": 1, "k": 4096, "n": 8192, "flop_per_s": 20e9, "best_flop_per_s": 25e9}) is None
    assert caught_slow({"m": 1, "k": 4096, "n": 8192, "flop_per_s": 20e9}) is None  # profiles before best was kept


def test_a_batchs_drift_is_the_median_of_the_timings_around_its_runs():
    from roofline.measure import stats
    from roofline.measure.drift import Reference

    # Batches 1, 4, 16 over 3 rounds run 1 4 16 | 4 16 1 | 16 1 4 (each round rotated by one), between 10 timings.
    order = [b for _, b in stats.schedule([1, 4, 16], 3)]
    assert order == [1, 4, 16, 4, 16, 1, 16, 1, 4]
    reference = Reference.__new__(Reference)  # its timings set by hand, no torch
    reference.rate, reference.now = 30.0, [30.0, 20.0, 25.0, 15.0, 10.0, 12.0, 30.0, 24.0, 40.0, 60.0]
    # Batch 1 ran at positions 0, 5 and 7: timings 0, 1, 5, 6, 7, 8 = 30 20 12 30 24 40, median 27, drift 30 / 27.
    assert reference.around([0, 5, 7]) == pytest.approx(30.0 / 27.0)
    # Batch 16 at 2, 4, 6: timings 2, 3, 4, 5, 6, 7 = 25 15 10 12 30 24; sorted 10 12 15 24 25 30, median 19.5.
    assert reference.around([2, 4, 6]) == pytest.approx(30.0 / 19.5)
    assert reference.drift() == pytest.approx(30.0 / 24.5)  # all 10: median of 24 and 25


def _validate_on(tmp_path, measured: dict) -> list[str]:
    """validate's arguments for the tiny model on a profile of these measured figures."""
    import yaml

    spec = {"name": "p", "source": "test", "memory_capacity": 1e10, "memory_bandwidth": 2e10}
    spec |= {"peak_flops": {"fp32": 2e11}, "measured": measured}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(spec))
    return ["validate", "-m", str(tmp_path / "tiny.yaml"), "-H", str(tmp_path / "p.yaml"), "--dtype", "fp32"]


def test_validate_notes_a_profile_whose_reference_passes_disagreed(tiny, tmp_path):
    pytest.importorskip("torch")
    curve = [{**p, "best_flop_per_s": 2 * p["flop_per_s"]} for p in MEASURED["decode_matmul"]["fp32"]]
    args = _validate_on(tmp_path, {**MEASURED, "decode_matmul": {"fp32": curve}})  # best call 2x: over 1.25
    r = runner.invoke(app, [*args, "--batch", "1", "--prompt", "8", "--output", "4", "--repeat", "1", "--json"])
    assert r.exit_code == 0, r.stderr
    assert any("caught a slow moment" in note for note in json.loads(r.stdout)["notes"])


def test_validate_reports_the_drift_since_the_profile(tiny, tmp_path):
    # drift = the profile's rate at its reference point / the median rate now; each TPOT ratio x drift.
    pytest.importorskip("torch")
    args = _validate_on(tmp_path, MEASURED)
    r = runner.invoke(app, [*args, "--batch", "1,2", "--prompt", "8", "--output", "4", "--repeat", "2", "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert not any("slow moment" in note for note in data.get("notes", []))  # no best call kept: no note
    now = data["drift"]["now_flop_per_s"]
    # Timed before each of the 4 runs (batches 1, 2, then 2, 1: each round's order rotated) and after the last.
    assert len(now) == 5 and data["drift"]["reference"] == {"m": 1, "k": 768, "n": 3072}
    assert data["drift"]["ratio"] == pytest.approx(1e10 / statistics.median(now))
    around = {1: [now[0], now[1], now[3], now[4]], 2: [now[1], now[2], now[2], now[3]]}
    for row in data["rows"]:
        assert row["drift"] == pytest.approx(1e10 / statistics.median(around[row["batch"]]))
        assert row["drift_corrected_tpot_ratio"] == pytest.approx(row["tpot_ratio"] * row["drift"])
    table = runner.invoke(app, [*args, "--batch", "1", "--prompt", "8", "--output", "4", "--repeat", "1"])
    assert table.exit_code == 0, table.stderr
    said = " ".join(table.stdout.split())  # the table wraps its notes at the terminal's width
    assert "TPOT ratios x drift: batch 1 TPOT" in said and "its runs' drift" in said
    assert "prompt drift" not in said and "prompt_ratio" not in data["drift"]  # no rounds-timed shape


def test_validate_times_a_batchs_drift_at_its_own_curve_m(tiny, tmp_path):
    # Batch 4 is timed at the curve's M = 4 point (4e10 in the profile), batch 1 at the M = 1 reference (1e10).
    pytest.importorskip("torch")
    curve = [*MEASURED["decode_matmul"]["fp32"], {"m": 4, "k": 768, "n": 3072, "flop_per_s": 4e10}]
    args = _validate_on(tmp_path, {**MEASURED, "decode_matmul": {"fp32": curve}})
    r = runner.invoke(app, [*args, "--batch", "1,4", "--prompt", "8", "--output", "4", "--repeat", "2", "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    [at_4] = data["drift"]["at_m"]
    now, now_4 = data["drift"]["now_flop_per_s"], at_4["now_flop_per_s"]
    assert at_4["m"] == 4 and len(now_4) == 5 and at_4["ratio"] == pytest.approx(4e10 / statistics.median(now_4))
    rows = {row["batch"]: row for row in data["rows"]}  # runs 1, 4, then 4, 1: batch 4 between timings 1-2 and 2-3
    around_4 = [now_4[1], now_4[2], now_4[2], now_4[3]]
    assert rows[4]["drift_m"] == 4 and rows[4]["drift"] == pytest.approx(4e10 / statistics.median(around_4))
    assert rows[1]["drift_m"] == 1 and rows[1]["drift"] == pytest.approx(1e10 / statistics.median(now[:2] + now[3:]))
    table = runner.invoke(app, [*args, "--batch", "4", "--prompt", "8", "--output", "4", "--repeat", "1"])
    assert table.exit_code == 0, table.stderr
    assert "at M = 4)" in " ".join(table.stdout.split())


def test_validate_reports_the_prompt_drift_at_the_rounds_timed_shape(tiny, tmp_path):
    # prompt drift = the profile's best at the scan's rounds-timed LLM shape / the median rate now; TTFT ratio x it.
    pytest.importorskip("torch")
    scan = {"best_flop_per_s": 2e11, "best_shape": [512, 512, 512]}
    scan["shapes"] = [{"shape": [16, 64, 128], "best_flop_per_s": 1e11, "rounds": 3}]
    args = _validate_on(tmp_path, {**MEASURED, "matmul": {"fp32": scan}})
    r = runner.invoke(app, [*args, "--batch", "1,2", "--prompt", "8", "--output", "4", "--repeat", "2", "--json"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    now = data["drift"]["prompt_now_flop_per_s"]
    assert len(now) == 5 and data["drift"]["prompt_reference"] == {"m": 16, "k": 64, "n": 128}
    assert data["drift"]["prompt_ratio"] == pytest.approx(1e11 / statistics.median(now))
    around = {1: [now[0], now[1], now[3], now[4]], 2: [now[1], now[2], now[2], now[3]]}  # as the decode drift's
    for row in data["rows"]:
        assert row["prompt_drift"] == pytest.approx(1e11 / statistics.median(around[row["batch"]]))
        assert row["drift_corrected_ttft_ratio"] == pytest.approx(row["ttft_ratio"] * row["prompt_drift"])
    table = runner.invoke(app, [*args, "--batch", "1", "--prompt", "8", "--output", "4", "--repeat", "1"])
    assert table.exit_code == 0, table.stderr
    assert "TTFT ratios x prompt drift: batch 1 TTFT" in " ".join(table.stdout.split())


def test_transformers_engine_on_a_two_layer_model(tiny, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from roofline.measure.hf_decoder import TransformersDecoder

    decoder = TransformersDecoder(tiny.arch, "fp32", "cpu", batch=2, max_tokens=16)
    assert decoder.parameters() == tiny.counts.total  # the same shapes: Llama classes, untied head
    r = runner.invoke(
        app,
        [
            "validate",
            "-m",
            str(tmp_path / "tiny.yaml"),
            "--engine",
            "transformers",
            "--batch",
            "1,2",
            "--prompt",
            "8",
            "--output",
            "4",
            "-H",
            "h100-sxm",
            "--repeat",
            "2",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["engine"] == "transformers" and [row["batch"] for row in data["rows"]] == [1, 2]


def test_engine_profile_structure_from_measure_engine(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from roofline.measure import engine_costs

    result = engine_costs.of("transformers", "cpu", "fp32", quick=True)
    assert set(result["archetypes"]) == {"rope", "learned"} and result["dtype"] == "fp32"
    for costs in result["archetypes"].values():
        assert set(costs["per_layer_s"]) == {"1", "16"} and all(s >= 0 for s in costs["per_layer_s"].values())
    # Conv1D against F.linear at a tall, a square and a wide weight, each at every row count.
    assert list(result["conv1d_slowdown"]) == ["4096x1024", "1024x1024", "1024x4096"]
    assert all(list(t) == ["1", "4", "16", "128"] for t in result["conv1d_slowdown"].values())
    # Saved into a profile, the estimate then prices the transformers engine's fixed costs.
    path = tmp_path / "p.yaml"
    path.write_text((Path(__file__).parent.parent / "hardware" / "h100-sxm.yaml").read_text())
    r = runner.invoke(
        app, ["measure", "--engine", "transformers", "--quick", "--device", "cpu", "--save", str(path), "--json"]
    )
    assert r.exit_code == 0, r.stderr
    assert "transformers" in load_hardware(str(path)).engines


def test_transformers_runs_under_no_grad_as_generate_does():
    from roofline.measure import engine_costs

    # transformers' generate() is decorated with @torch.no_grad(); a model built under inference_mode ran its prefill's
    # last-position lm_head as a batched matmul copying the whole head per sequence (Qwen3-0.6B shape, batch 4:
    # 3.0 s against 0.36 s), so validate and the engine costs time transformers under no_grad.
    torch = pytest.importorskip("torch")
    with engine_costs.grad_mode(torch, "transformers"):
        assert not torch.is_inference_mode_enabled() and not torch.is_grad_enabled()
    with engine_costs.grad_mode(torch, "eager"):
        assert torch.is_inference_mode_enabled()


def test_a_dtype_under_a_tenth_of_the_fastest_is_slow():
    from roofline.measure.bench import slow_dtypes

    # A 2-core AVX2 Zen 3 VM's measure: bf16 1.39 and fp16 1.33 GFLOP/s against fp32's 154 (no native 16-bit units);
    # 9.9 is just under a tenth of 100, 10 is not.
    assert slow_dtypes({"fp32": 154e9, "bf16": 1.39e9, "fp16": 1.33e9}) == {"bf16", "fp16"}
    assert slow_dtypes({"fp32": 100.0, "bf16": 9.9, "fp16": 10.0}) == {"bf16"}
    assert slow_dtypes({"fp32": 170e9, "bf16": 850e9}) == set()  # AVX-512 BF16 / AMX: 5x fp32, both native
    assert slow_dtypes({}) == set()


def test_validate_runs_fp32_where_16_bit_matmuls_are_not_native(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from roofline.measure import bench

    bf16 = tmp_path / "bf16.yaml"
    bf16.write_text(TINY.replace("dtype: fp32", "dtype: bf16"))
    rates = {"bf16": 1.3e9, "fp32": 137e9}  # the Zen 3 VM's probes
    monkeypatch.setattr(bench, "matmul_probe", lambda torch, kind, tensor, dtypes: {d: rates[d] for d in dtypes})
    args = ["validate", "-m", str(bf16), "--batch", "1", "--prompt", "8", "--output", "3", "-H", "h100-sxm", "--json"]
    data = json.loads(runner.invoke(app, args).stdout)
    assert data["model"]["dtype"] == "fp32"
    assert "bf16 matmuls run at 1.3 GFLOP/s here against fp32's 137" in data["notes"][0]
    rates["bf16"] = 850e9  # a CPU with AVX-512 BF16 or AMX: the model's own dtype
    data = json.loads(runner.invoke(app, args).stdout)
    assert data["model"]["dtype"] == "bf16" and "notes" not in data
    rates["bf16"] = 1.3e9  # an explicit --dtype is run as asked
    data = json.loads(runner.invoke(app, [*args, "--dtype", "bf16"]).stdout)
    assert data["model"]["dtype"] == "bf16"


def test_a_profile_without_the_weight_dtypes_curves_says_the_figures_are_the_bound():
    # MEASURED holds fp32 curves only: gpt2 in fp32 gets the calibrated prediction and no note; in bf16 (a dtype a
    # torch profile can measure) no calibrated prediction and a note naming the missing curve and the measure that
    # adds it; in int8 (no torch curve ever) a note that the profile covers fp32, bf16 and fp16 weights. Before,
    # both printed the bound under the profile's name with no word.
    profiled = load_hardware("h100-sxm")._replace(id="p", measured=MEASURED)
    gpt2 = load_model("gpt2")
    fp32 = estimate(gpt2, profiled, weight_dtype="fp32")
    assert fp32.calibrated is not None and not any("calibrated prediction" in n for n in fp32.notes)
    bf16 = estimate(gpt2, profiled, weight_dtype="bf16")
    assert bf16.calibrated is None
    assert any("no decode-shaped bf16 matmul curve" in n and "--dtype bf16" in n for n in bf16.notes)
    int8 = estimate(gpt2, profiled, weight_dtype="int8")
    assert int8.calibrated is None and any("fp32, bf16, fp16 weights (torch's), not int8" in n for n in int8.notes)
    # A measured block without torch curves (`measure --collectives --save` on a datasheet) is no torch profile: no
    # such note.
    collectives = load_hardware("h100-sxm")._replace(id="c", measured={"collectives": {"all_reduce": {}}})
    assert not any("calibrated prediction" in n for n in estimate(gpt2, collectives, weight_dtype="bf16").notes)


def test_the_torch_weight_dtypes_are_those_measure_times():
    # calibrate.TORCH_DTYPES (which weight dtypes the note says a torch profile covers) is measure's matmul dtypes
    # less tf32 (a compute mode of fp32 storage, never a weight dtype); calc does not import measure.
    from roofline.calc.calibrate import TORCH_DTYPES
    from roofline.measure.timing import MATMUL_DTYPES

    assert set(TORCH_DTYPES) == set(MATMUL_DTYPES) - {"tf32"}


def test_a_quick_profile_from_another_moment_is_measured_again(monkeypatch):
    # validate's own quick profile is measured again when its reference kernels, timed right after, run more than
    # SPLIT (1.25x) apart from it (drift.offset, a log ratio); of the profiles, the nearest is kept.
    import math

    from roofline.measure import bench, drift, timing, validate

    monkeypatch.setattr(timing, "torch_module", lambda command: None)  # the bare test pass has no torch

    def scripted(offsets):
        made, offs = [], iter(offsets)
        monkeypatch.setattr(bench, "run", lambda *a, **k: made.append({"n": len(made)}) or made[-1])
        monkeypatch.setattr(drift, "offset", lambda *a: next(offs))
        notes: list[str] = []
        kept = validate.quick_measured("cpu", "fp32", lambda s: None, notes)
        return kept["n"], len(made), notes

    assert scripted([math.log(1.1)]) == (0, 1, [])  # within 1.25x: kept, not measured again
    assert scripted([None]) == (0, 1, [])  # no reference kernels to check: kept
    kept, made, notes = scripted([math.log(1.35), math.log(1.05)])  # fp32's slow profile on the Zen 4 VM: 1/0.74
    assert (kept, made) == (1, 2) and len(notes) == 1 and "1.35x" in notes[0] and "measured again" in notes[0]
    kept, made, notes = scripted([math.log(1.3), math.log(1.5)])  # both off: the nearer one, the first
    assert (kept, made) == (0, 2) and "kept profile 1, the nearest" in notes[1]
    kept, made, notes = scripted([math.log(1.5), math.log(1.3)])
    assert (kept, made) == (1, 2) and "kept profile 2" in notes[1]
    kept, made, notes = scripted([math.log(1.5), None])  # a retake with nothing to check it by is kept, and said so
    assert (kept, made) == (1, 2) and "no reference kernels to check it by" in notes[1]


def test_a_profile_offset_times_its_reference_kernels_again():
    # A profile whose decode reference saw 1e15 FLOP/s (far beyond a CPU's GEMV) is e^(big) from now; a profile
    # with no curve or rounds-timed shape has no offset.
    torch = pytest.importorskip("torch")
    import math

    from roofline.measure.drift import offset

    point = {"m": 1, "k": 64, "n": 128, "flop_per_s": 1e15, "buffer_bytes": 65536}
    measured = {"decode_matmul": {"fp32": [point]}, "plan": {"buffer_bytes": 65536}}
    assert offset(torch, "cpu", "fp32", measured) > math.log(1e3)
    assert offset(torch, "cpu", "fp32", {}) is None


@pytest.mark.parametrize(
    ("slowdown", "ok"),
    [
        ({"1024x4096": {"1": 1.2}, "4096x1024": {"1": 1.3, "16": 1.1}}, True),
        ({"1": 1.2, "16": 1.1}, True),  # profiles that timed one shape
        ({"1024*4096": {"1": 1.2}}, False),
        ({"1024x4096": {"1": 0}}, False),
        ({"1024x4096": {"one": 1.2}}, False),
        ({"1024x4096": {}}, False),
    ],
)
def test_a_profiles_conv1d_slowdown_is_checked_on_load(tmp_path, slowdown, ok):
    engine = {"archetypes": {"learned": {"per_step_s": {"1": 1e-3}, "per_layer_s": {"1": 1e-4}}}}
    spec = yaml.safe_load((Path(__file__).parent.parent / "hardware" / "h100-sxm.yaml").read_text())
    spec["engines"] = {"transformers": {**engine, "conv1d_slowdown": slowdown}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(spec))
    r = runner.invoke(app, ["estimate", "-q", "-H", str(path)])
    if ok:
        assert r.exit_code == 0, r.stderr
    else:
        assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1
        assert "conv1d_slowdown as a weight's 'KxN' -> rows -> a ratio above 0" in r.stderr
