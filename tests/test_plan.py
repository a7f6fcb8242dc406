"""`plan`: fleets sized by Little's law, its refusals, pools, and its JSON contract. Figures by hand."""

import json
import math

import pytest
from typer.testing import CliRunner

from roofline import estimate, load_hardware, load_model
from roofline.calc.plan import plan
from roofline.cli import app
from roofline.errors import UsageError

runner = CliRunner()
M = load_model("llama-3.1-8b")


def test_end_to_end_throughput_counts_the_prefill():
    # output tokens/s = B x O / (TTFT + (O - 1) x TPOT), below the decode step's B / TPOT.
    e = estimate(
        load_model("llama-3.1-8b"),
        load_hardware("h100-sxm"),
        batch=64,
        prompt_tokens=128,
        output_tokens=128,
        weight_dtype="fp8",
    )
    assert e.output_tokens_per_s == pytest.approx(64 * 128 / (e.ttft_s + 127 * e.tpot_s))
    assert e.requests_per_s == pytest.approx(64 / e.request_latency_s)
    assert e.output_tokens_per_s < e.decode.tokens_per_s


def test_plan_littles_law_by_hand(write_yaml):

    h = toy_device(write_yaml, power=500, price=2.0)
    m = load_model("llama-3.1-8b")
    p = plan(m, [h], prompt_tokens=128, output_tokens=64, rate=10.0, tpot_slo=0.05, tps=(1,), queueing=False)
    best = p.best
    e = estimate(m, h, batch=best.batch, prompt_tokens=128, output_tokens=64)
    # Little's law: in flight = 10 requests/s x the request latency; replicas = ceil(in flight / batch).
    assert best.replicas == max(1, -(-10.0 * e.request_latency_s // best.batch))
    assert best.devices == best.replicas and best.output_tokens_per_s == 10.0 * 64  # served: rate x output tokens
    # Cost: $2 x devices per hour over 640 tokens/s x 3,600 s, per million; energy: 500 W x devices / 640 tokens/s
    # x 1e6.
    assert best.cost_per_million_tokens == pytest.approx(2.0 * best.devices / (640 * 3600) * 1e6)
    assert best.energy_j_per_million_tokens == pytest.approx(500 * best.devices / 640 * 1e6)
    assert p.inputs["ranked_by"] == "cost"


def test_plan_concurrency_and_refusals(write_yaml):

    h = toy_device(write_yaml)
    m = load_model("llama-3.1-8b")
    # 100 requests in flight, no SLO: the largest batch up to 100 that fits (64, powers of two) -> ceil(100 / 64) = 2.
    p = plan(m, [h], prompt_tokens=128, output_tokens=64, concurrency=100, tps=(1,))
    assert (
        p.best.batch == 64
        and p.best.replicas == 2
        and p.best.cost_per_hour is None
        and p.inputs["ranked_by"] == "devices"
    )
    # A TPOT under the weights' read time (16 GB / 1 TB/s = 16 ms) cannot be met; tp 2 needs an interconnect.
    p = plan(m, [h], prompt_tokens=128, output_tokens=64, concurrency=1, tpot_slo=0.010, tps=(1, 2))
    assert p.best is None and {o.reason.split(" (")[0] for o in p.options} == {
        "no batch meets the SLOs",
        "no interconnect_bandwidth for tp, pp or disaggregation",
    }


def test_plan_cli_json_contract():
    r = runner.invoke(
        app,
        [
            "plan",
            "-m",
            "llama-3.1-8b",
            "-H",
            "h100-sxm",
            "-H",
            "l40s",
            "--concurrency",
            "64",
            "--tpot-slo",
            "30ms",
            "--price",
            "h100-sxm=2.5",
            "--price",
            "l40s=0.9",
            "--json",
            "-q",
        ],
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    keys = {
        "hardware",
        "tp",
        "replicas",
        "batch",
        "devices",
        "ttft_s",
        "tpot_s",
        "meets_slo",
        "output_tokens_per_s",
        "goodput_per_device",
        "cost_per_hour",
        "cost_per_million_tokens",
        "energy_j_per_million_tokens",
    }
    assert {"schema_version", "inputs", "options", "best"} <= set(data) and all(keys <= set(o) for o in data["options"])
    assert data["inputs"]["ranked_by"] == "cost" and data["best"] == data["options"][0]
    bad = runner.invoke(app, ["plan", "-m", "llama-3.1-8b", "--concurrency", "4", "--price", "nope=1"])
    assert bad.exit_code == 2 and "--price" in bad.stderr


@pytest.mark.parametrize(
    "args, words",
    [  # each was silently ignored or last-one-wins before
        (["--concurrency", "8", "--slo-percentile", "p95"], "--slo-percentile: how a --rate is served"),
        (["--concurrency", "8", "--no-queueing"], "--queueing/--no-queueing: how a --rate is served"),
        (["--rate", "5/s", "--no-queueing", "--slo-percentile", "p95"], "not with --no-queueing"),
        (["--concurrency", "8", "-H", "h100-sxm", "-H", "h100-sxm"], "--hardware: h100-sxm is given twice"),
        (["--concurrency", "8", "-H", "h100-sxm", "--price", "h100-sxm=1", "--price", "h100-sxm=2"], "given twice"),
    ],
)
def test_plan_flags_that_would_be_ignored_are_refused(args, words):
    r = runner.invoke(app, ["plan", "-q", "-m", "llama-3.1-8b", *args])
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr


def test_plan_sizes_disaggregated_pools_by_littles_law(write_yaml):

    h = load_hardware(
        write_yaml(
            "toy.yaml",
            "name: toy\nsource: test\nmemory_capacity: 80 GiB\nmemory_bandwidth: 1 TB/s\n"
            "peak_flops:\n  bf16: 100 TFLOP/s\ninterconnect_bandwidth: 100 GB/s\n",
        )
    )
    # queueing=False: the pools are sized by Little's law either way; simulating the colocated replica is not tested
    common = dict(prompt_tokens=1024, output_tokens=64, rate=20.0, tpot_slo=0.05, tps=(1,), disagg="auto")
    p = plan(M, [h], queueing=False, **common)
    split = next(o for o in p.options if o.disagg and o.meets_slo)
    e = estimate(M, h, batch=split.batch, prompt_tokens=1024, output_tokens=64, disagg="1P:1D")
    # x = ceil(20 requests/s / one prefill instance's rate), y = ceil(20 / one decode instance's rate).
    x = -(-20.0 // e.disagg.prefill_requests_per_s)
    y = -(-20.0 // e.disagg.decode_requests_per_s)
    assert split.disagg == f"{int(x)}P:{int(y)}D" and split.devices == x + y and split.ttft_s == e.ttft_s
    assert {o.disagg for o in p.options} >= {None}  # the colocated options stay


def toy_device(write_yaml, power=None, price=None):
    # 1 TB/s, 100 TFLOP/s bf16, 80 GiB: a napkin device for plan's arithmetic.
    extra = (f"power: {power}\n" if power else "") + (f"price_per_hour: {price}\n" if price else "")
    return load_hardware(
        write_yaml(
            "toy.yaml",
            "name: toy\nsource: test\nmemory_capacity: 80 GiB\nmemory_bandwidth: 1 TB/s\n"
            "peak_flops:\n  bf16: 100 TFLOP/s\n" + extra,
        )
    )


def test_plan_with_queueing_sizes_replicas_by_their_simulated_percentiles():
    # The case: Qwen2.5-72B at 5 requests/s, 2048 / 512, TTFT <= 2 s and TPOT <= 50 ms at p99 on MI300X.
    # Static batches prefilled at once (Little's law) need 8 devices; a replica that chunks its prefills and is
    # simulated under Poisson arrivals needs 4 (tp 4, one replica, or tp 1 x 4).
    m, h = load_model("qwen2.5-72b"), load_hardware("mi300x")
    common = dict(prompt_tokens=2048, output_tokens=512, rate=5.0, ttft_slo=2.0, tpot_slo=0.05)
    assert plan(m, [h], queueing=False, **common).best.devices == 8
    queued = plan(m, [h], tps=(1, 4), **common)  # the two shapes of 4 devices (tp 2 x 2 and tp 8 add seconds)
    best = queued.best
    assert best.devices == 4 and best.method == "simulated" and queued.inputs["method"] == "simulated"
    for o in queued.options:
        if o.meets_slo:
            assert 0 < o.utilization < 1 and o.ttft_p99_s <= 2.0 and o.tpot_p99_s <= 0.05
            assert o.replicas * o.tp == o.devices and o.output_tokens_per_s == 5.0 * 512


def test_plan_credits_a_replica_with_the_rate_it_holds_and_leaves_the_preempting_edge():
    # An outside audit (2026-12-07): Llama-3.1-8B on one H100, 1024/256 tokens, at 40 requests/s with TTFT <= 2 s and
    # TPOT <= 50 ms: simulated alone at 40/s over 10,000 requests the replica met both at p99 (TTFT 137 ms, TPOT
    # 26.5 ms) without a preemption, so one device; the plan said two (its saturation rate was priced 36.5/s, the
    # rate of 365 clients stuck in step). At 42/s with lax SLOs 1,500 requests run clean, but 20,000 preempt (a
    # burst fills its KV cache; within 30,000 the queue ran away at 38/s served), so a plan does not credit a
    # replica with 42/s: two.
    m, h = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    common = dict(prompt_tokens=1024, output_tokens=256, tps=(1,))
    held = plan(m, [h], rate=40.0, ttft_slo=2.0, tpot_slo=0.05, **common).best
    assert held.replicas == 1 and held.ttft_p99_s <= 2.0 and held.tpot_p99_s <= 0.05
    edge = plan(m, [h], rate=42.0, ttft_slo=10.0, tpot_slo=0.1, **common).best
    assert edge.replicas == 2


def test_plan_says_its_progress_option_by_option():
    # Four devices at tp 1 (the process pool's path on 2 cores or more), each refused within a fraction of a second
    # (8B at 5/s and TPOT <= 50 ms: none has the memory, bandwidth or dtype): the callback hears the total first, then
    # each simulated option done, in order; the disaggregated pools (Little's law) are not simulated and are put back
    # beside the simulated options by their index.
    heard = []
    devices = [load_hardware(h) for h in ("apple-m1", "tpu-v5e", "l4", "dgx-spark")]
    common = dict(prompt_tokens=1024, output_tokens=256, rate=5.0, tpot_slo=0.05, tps=(1,), disagg="auto")
    p = plan(load_model("llama-3.1-8b"), devices, progress=lambda done, total: heard.append((done, total)), **common)
    assert heard == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    assert len(p.options) == 8
    assert {(o.hardware, o.method) for o in p.options if o.disagg} == {(d.id, "little") for d in devices}
    assert {(o.hardware, o.method) for o in p.options if not o.disagg} == {(d.id, "simulated") for d in devices}


def test_plan_draws_its_bar_on_stderr_and_keeps_stdout_for_the_result():
    # A terminal (FORCE_COLOR: rich draws as on one): the bar counts 4 of 4 on stderr, stdout parses as JSON; -q
    # draws none. The devices are refused at a glance (as in the test above).
    args = ["plan", "-m", "llama-3.1-8b", "--rate", "5/s", "--tpot-slo", "50ms", "--tp", "1", "--json"]
    for h in ("apple-m1", "tpu-v5e", "l4", "dgx-spark"):
        args += ["-H", h]
    shown = runner.invoke(app, args, env={"FORCE_COLOR": "1"})
    assert shown.exit_code == 0 and "simulating options" in shown.stderr and "4/4" in shown.stderr
    assert json.loads(shown.stdout)["inputs"]["method"] == "simulated"
    quiet = runner.invoke(app, [*args, "-q"], env={"FORCE_COLOR": "1"})
    assert quiet.exit_code == 0 and "simulating" not in quiet.stderr
    piped = runner.invoke(app, args)  # stderr no terminal: no bar, and not the blank line a stopped bar leaves
    assert piped.exit_code == 0 and "simulating" not in piped.stderr and not piped.stderr.strip(" ").startswith("\n")


def test_plan_with_an_engine_sizes_by_its_prediction_and_says_which():
    # A new user (2026-12-07): `plan --engine vllm` read as without it: no engine in the header or the JSON, "vLLM V1
    # scheduler" under trtllm too, and --no-queueing sized by the bound. Now Little's law sizes by the preset's
    # prediction: the chosen batch's TPOT is estimate's engine figure at that batch.
    m, h = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    common = dict(prompt_tokens=1024, output_tokens=256, rate=20.0, tpot_slo=0.03, tps=(1,), queueing=False)
    bound, vllm = plan(m, [h], **common).best, plan(m, [h], engine="vllm", **common).best
    e = estimate(m, h, batch=vllm.batch, prompt_tokens=1024, output_tokens=256, engine="vllm")
    assert vllm.tpot_s == pytest.approx(e.engine.tpot_s) and vllm.ttft_s == pytest.approx(e.engine.ttft_s)
    # Little's law at the preset's latency: 20/s x (TTFT + 255 TPOT) in flight, over the batch
    assert vllm.replicas == math.ceil(20.0 * (e.engine.ttft_s + 255 * e.engine.tpot_s) / vllm.batch - 1e-9)
    assert vllm.tpot_s > bound.tpot_s  # the preset is slower than the bound
    args = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--tp", "1", "--rate", "20/s", "--tpot-slo", "30ms", "-q"]
    table = runner.invoke(app, [*args, "--engine", "trtllm"], env={"COLUMNS": "400"})
    assert "the trtllm preset, TensorRT-LLM's no-evict scheduler" in table.stdout and "vLLM" not in table.stdout
    little = runner.invoke(app, [*args, "--engine", "vllm", "--no-queueing", "--json"])
    assert json.loads(little.stdout)["inputs"]["engine"] == "vllm"
    assert json.loads(little.stdout)["inputs"]["scheduler"] is None  # Little's law schedules nothing
    # the preset's own memory fraction and efficiencies size it: a flag setting them would be ignored, so it is refused
    refused = runner.invoke(app, [*args, "--engine", "vllm", "--memory-fraction", "0.5"])
    assert refused.exit_code == 2 and "--memory-fraction" in refused.stderr and not refused.stdout


def test_a_plans_scheduler_is_the_one_its_presets_file_names(monkeypatch):
    # The header's words come from the preset's `scheduler:` key, as the simulation's policy does, not from its name.
    from types import SimpleNamespace

    from roofline.calc.simulate import scheduler_words
    from roofline.specs import presets

    vllm = {"policy": "vllm", "description": "vLLM V1's scheduler", "reserve_full_isl": True}  # vLLM 0.19's default
    assert scheduler_words(None) == scheduler_words("vllm") == vllm
    assert scheduler_words("vllm-0.10") == {**vllm, "reserve_full_isl": False}  # builds before 0.19: the first chunk
    assert scheduler_words("llamacpp-cuda") == {"policy": "vllm", "description": "llama-server's slots"}
    monkeypatch.setattr(presets, "names", lambda: ["my-trtllm-build"])
    monkeypatch.setattr(presets, "load", lambda name: SimpleNamespace(scheduler="trtllm"))
    assert scheduler_words("my-trtllm-build") == {
        "policy": "trtllm",
        "description": "TensorRT-LLM's no-evict scheduler",
    }


def test_plan_refuses_no_output_and_takes_prices_in_any_case():
    # A new user (2026-12-07): --output 0 ended in a ZeroDivisionError (the plan serves output tokens: their rate
    # and their price per million), and --price H100-SXM=2 was "not among the devices" that -H H100-SXM had given.
    args = ["plan", "-m", "llama-3.1-8b", "-H", "H100-SXM", "--tp", "1", "--concurrency", "8"]
    zero = runner.invoke(app, [*args, "--output", "0"])
    assert zero.exit_code == 2 and "--output" in zero.stderr and "Traceback" not in zero.stderr
    with pytest.raises(UsageError, match="output_tokens"):
        plan(load_model("llama-3.1-8b"), [load_hardware("h100-sxm")], prompt_tokens=8, output_tokens=0, concurrency=8)
    priced = runner.invoke(app, [*args, "--price", "H100-SXM=2", "--json"])
    assert json.loads(priced.stdout)["options"][0]["cost_per_hour"] == 2.0
    twice = runner.invoke(app, [*args, "--price", "H100-SXM=2", "--price", "h100-sxm=3"])
    assert twice.exit_code == 2 and "given twice" in twice.stderr


def test_plan_refuses_preset_flags_only_where_a_preset_prices():
    # eager on datasheet figures is no preset (sized by the bound, which takes the memory fraction); llama.cpp is a
    # preset on a GPU, where the flag would be ignored: that option is refused with the reason, not the plan.
    m, h = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    common = dict(prompt_tokens=1024, output_tokens=256, rate=5.0, tpot_slo=0.05, tps=(1,), queueing=False)
    assert plan(m, [h], engine="eager", memory_fraction=0.8, **common).best is not None
    llama = plan(m, [h], engine="llamacpp", memory_fraction=0.5, **common).options[0]
    assert not llama.meets_slo and "preset runs at its own" in llama.reason
    assert plan("llama-3.1-8b", "h100-sxm", **common).best.batch == plan(m, [h], **common).best.batch  # by id
