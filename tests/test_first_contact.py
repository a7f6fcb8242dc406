"""What a new user trips on (issue "First contact"): every table at 80 and 120 columns keeps its numbers whole,
unit-less durations and rates are refused, a misfit is said first and on stderr, per-device and whole-model
figures are labelled, validate judges TTFT and TPOT, help shows defaults, and a repeated flag is an error."""

import json
import re

import pytest
from typer.testing import CliRunner

from roofline import estimate, load_hardware, load_model
from roofline.cli import app, run

runner = CliRunner()


def console_script(args: list[str]):
    """The console script's own path (roofline.cli.run: usage errors, repeated flags), with captured streams."""
    import sys

    with runner.isolation() as (stdout, stderr, _):
        code = run(args)
        sys.stdout.flush()
        sys.stderr.flush()
        return code, stdout.getvalue().decode(), stderr.getvalue().decode()


WIDE_COMMANDS = [
    ["sweep", "-m", "llama-3.1-8b", "-H", "h100-sxm"],
    ["sweep", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--tp", "2", "--prompt", "512,2048", "--tpot-slo", "50ms"],
    [
        "compare",
        "-m",
        "llama-3.1-8b",
        "-m",
        "qwen2.5-7b",
        "-m",
        "mixtral-8x7b",
        "-H",
        "h100-sxm",
        "-H",
        "l40s",
        "--tpot-slo",
        "30ms",
    ],
    [
        "plan",
        "-m",
        "llama-3.1-8b",
        "--rate",
        "5/s",
        "--tpot-slo",
        "50ms",
        "--price",
        "h100-sxm=2.5",
        "--price",
        "mi300x=2.2",
        "--all",
        # two unpriced (a note over 80 columns), one without power (energy "-"), one of many replicas; each of
        # these four plans in seconds at most (an A10's or an M4 Max's preempting edge takes a few more)
        *("-H", "h100-sxm", "-H", "mi300x", "-H", "mi350x", "-H", "apple-m3-max"),
        *("--tp", "1"),  # every column, in a fraction of the default search's time
    ],
    ["fit", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--context", "32768"],
    ["estimate", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--tp", "2", "-b", "16", "--prompt", "2048"],
    ["models", "list"],
    ["hardware", "list"],
]


def numbers_in(text: str) -> set[str]:
    """The numbers a table shows, its "(not shown at N columns: ...)" footnote aside."""
    shown = re.sub(r"\(not shown at .*?has\s+them\)", "", text, flags=re.S)
    return set(re.findall(r"\d[\d,.]*", shown))


def searched_once(search):
    """The plan search, run once for the three widths that render it (the table, not the search, is under test)."""
    results = {}

    def once(*args, **kwargs):
        key = repr((args, sorted((k, v) for k, v in kwargs.items() if k != "progress")))  # -q drops the bar
        if key not in results:
            results[key] = search(*args, **kwargs)
        return results[key]

    return once


@pytest.mark.parametrize("args", WIDE_COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_no_number_or_id_is_cut_at_80_or_120_columns(args, monkeypatch):
    from roofline.calc import plan

    monkeypatch.setattr(plan, "plan", searched_once(plan.plan))
    wide = runner.invoke(app, [*args, "-q"] if args[0] not in ("models", "hardware") else args, env={"COLUMNS": "400"})
    assert wide.exit_code == 0, wide.stderr
    for width in (80, 120):
        r = runner.invoke(
            app, [*args, "-q"] if args[0] not in ("models", "hardware") else args, env={"COLUMNS": str(width)}
        )
        assert r.exit_code == 0, r.stderr
        assert "…" not in r.stdout  # rich's ellipsis: a cell cut short
        assert max(len(line) for line in r.stdout.splitlines()) <= width
        # Every number shown at this width is one the full-width table shows too (none cut to a prefix like 124).
        assert numbers_in(r.stdout) <= numbers_in(wide.stdout) | numbers_in(str(width))


def test_a_narrow_sweep_says_which_columns_it_dropped():
    r = runner.invoke(app, ["sweep", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-q"], env={"COLUMNS": "80"})
    assert "12488" in r.stdout  # the batch-128 decode tokens/s that the audit saw cut to "124..."
    assert re.search(r"not shown at 80 columns: .*per seq", r.stdout)


@pytest.mark.parametrize(
    "args, message",
    [
        (["sweep", "--tpot-slo", "50"], "--tpot-slo: a duration needs its unit: did you mean 50ms?"),
        (["sweep", "--ttft-slo", "2"], "--ttft-slo: a duration needs its unit: did you mean 2s?"),
        (["compare", "-m", "gpt2", "-H", "a10", "--tpot-slo", "30"], "did you mean 30ms?"),
        (["plan", "-m", "llama-3.1-8b", "--rate", "20"], "--rate: a rate needs its unit: did you mean 20/s?"),
        (["plan", "-m", "llama-3.1-8b", "--rate", "fast"], "--rate: expected requests per unit of time"),
    ],
)
def test_a_duration_or_rate_without_a_unit_is_refused(args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and r.stdout == "" and message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_rates_take_their_units():
    # 1,200 requests a minute is 20 a second: the same plan.
    plan = ["plan", "-m", "llama-3.1-8b", "-H", "h100-sxm", "--tp", "1", "--no-queueing", "--json", "--rate"]
    per_second = runner.invoke(app, [*plan, "20/s"])
    per_minute = runner.invoke(app, [*plan, "1200/min"])
    assert (
        json.loads(per_second.stdout)["inputs"]["rate_per_s"]
        == json.loads(per_minute.stdout)["inputs"]["rate_per_s"]
        == 20
    )


def test_a_misfit_is_said_first_and_on_stderr():
    # Llama-3.1-70B bf16: 141 GB of weights over 0.9 x 141 GiB = 136 GB of an H200.
    r = runner.invoke(app, ["estimate", "-m", "llama-3.1-70b", "-H", "h200", "-b", "16"])
    assert r.exit_code == 0
    assert r.stdout.splitlines()[0].startswith("does NOT fit: weights (141 GB) exceed 0.9 x memory (136 GB)")
    assert "roofline: warning: does not fit" in r.stderr


def test_an_engine_prediction_applies_the_engines_memory_rule():
    # Llama-3.1-70B bf16 at tp 2 on H100s (85,899,345,920 B each): 70,553,706,496 B of weights and 163,840 B of KV a
    # token per device; a sequence of 2048 + 256 tokens holds 377,487,360 B. The bound's rule (0.9 x memory - weights)
    # leaves 6.76 GB: 17 sequences. TensorRT-LLM's (0.95 of what the weights leave) leaves 14.58 GB: 38 sequences.
    m, h = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    lengths = dict(tp=2, prompt_tokens=2048, output_tokens=256, engine="trtllm")
    e = estimate(m, h, batch=26, **lengths)
    assert not e.fits and e.engine is not None  # the engine holds what the bound's 0.9 does not
    e = estimate(m, h, batch=40, **lengths)
    assert e.engine is None and any("exceeds the max batch 38" in n and "weights leave" in n for n in e.notes)
    # Weights over memory (Llama-3.1-405B fp8 at tp 2: 203 GB a device on 85.9 GB) leave nothing under either rule.
    e = estimate(load_model("llama-3.1-405b"), h, tp=2, weight_dtype="fp8", engine="trtllm")
    assert not e.fits and e.engine is None and any("no prediction" in n for n in e.notes)


def test_memory_figures_say_per_device_or_whole_model():
    # A terminal wide enough for no line to wrap: the lines are then found whole, at any width pytest runs at.
    args = ["estimate", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--tp", "2", "-b", "16", "--prompt", "2048", "-q"]
    lines = runner.invoke(app, args, env={"COLUMNS": "200"}).stdout.splitlines()
    kv = next(line for line in lines if line.startswith("KV cache"))
    budget = next(line for line in lines if line.startswith("KV budget"))
    weights = next(line for line in lines if line.startswith("weights") and "resident" in line)
    assert (
        "/sequence (whole model)" in kv
        and "per device =" in budget
        and "(whole model)" in weights
        and "per device" in weights
    )
    sweep = runner.invoke(app, ["sweep", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--tp", "2", "-q"])
    assert "tp 2 = 2 devices" in sweep.stdout.splitlines()[0]
    compare = runner.invoke(app, ["compare", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--tp", "2", "--json"])
    inputs = json.loads(compare.stdout)["inputs"]
    assert inputs["tp"] == 2 and inputs["batch"] == 1 and inputs["models"] == ["llama-3.1-70b"]
    table = runner.invoke(app, ["compare", "-m", "llama-3.1-70b", "-H", "h100-sxm", "--tp", "2", "-q"])
    assert "tp 2 = 2 devices" in table.stdout and "weights (total)" in table.stdout


def test_validate_judges_ttft_and_tpot():
    from roofline.measure.validate import _row

    # The prediction (the roofline bound) against made-up measurements: TPOT matches it; TTFT is 1/0.65 of it in
    # all three rounds, so the TTFT ratio is 0.65 and the row is outside, whatever TPOT says.
    e = estimate(load_model("gpt2"), load_hardware("h100-sxm"), batch=1, prompt_tokens=128, output_tokens=32)
    runs = [{"ttft_s": e.ttft_s / 0.65, "steps_s": [e.tpot_s] * 31} for _ in range(3)]
    row = _row(1, runs, e, load_hardware("h100-sxm"), 0.15)
    assert row["tpot_verdict"] == "within" and row["ttft_verdict"] == "outside" and row["verdict"] == "outside"
    assert row["ttft_ratio"] == pytest.approx(0.65) and row["ttft_ratio_low"] == pytest.approx(0.65)


def test_validate_table_at_80_columns_keeps_both_verdicts():
    from rich.console import Console

    from roofline.render.measure import validate_table

    row = {
        "batch": 16,
        "measured_ttft_s": 0.0123,
        "predicted_ttft_s": 0.0111,
        "ttft_ratio": 0.9,
        "ttft_ratio_low": 0.85,
        "ttft_ratio_high": 0.95,
        "ttft_verdict": "inconclusive",
        "measured_tpot_s": 0.0456,
        "measured_tpot_p10_s": 0.044,
        "measured_tpot_p90_s": 0.047,
        "predicted_tpot_s": 0.0444,
        "tpot_ratio": 0.97,
        "tpot_ratio_low": 0.95,
        "tpot_ratio_high": 0.99,
        "tpot_verdict": "within",
        "verdict": "inconclusive",
        "roofline_tpot_s": 0.02,
        "roofline_tpot_ratio": 0.44,
        "roofline_ttft_s": 0.005,
        "achieved_bytes_per_s": 2.3e10,
        "mbu": 0.5,
        "expected_bound": "memory",
        "prediction": "calibrated",
    }
    result = {
        "model": {"name": "GPT-2", "layers": 12, "dtype": "fp32"},
        "device": {"name": "cpu", "kind": "cpu", "threads": 2},
        "hardware": {"name": "here", "figures": "measured"},
        "rows": [row],
    }
    for width in (80, 120):
        console = Console(width=width, record=True)
        console.print(validate_table(result))
        text = console.export_text()
        ttft = next(line for line in text.splitlines() if "TTFT " in line and "[" in line)
        tpot = next(line for line in text.splitlines() if "TPOT " in line and "[" in line)
        assert (
            "0.90 [0.85, 0.95]" in ttft and "inconclusive" in ttft and "0.97 [0.95, 0.99]" in tpot and "within" in tpot
        )
        assert "…" not in text and "batch 16 inconclusive" in " ".join(text.split())


def test_help_shows_defaults_and_escapes_brackets():
    estimate_help = runner.invoke(app, ["estimate", "--help"]).stdout
    options = estimate_help[estimate_help.index("Options:") :]
    for flag, default in (
        ("--batch", "1"),
        ("--prompt", "1024"),
        ("--output", "256"),
        ("--draft-tokens", "4"),
        ("--acceptance", "0.7"),
    ):
        block = options[options.index(flag + " ") :][:300]
        assert f"[default: {default}" in " ".join(block.split()), flag
    assert "pip install 'roofline[engines]'" in " ".join(runner.invoke(app, ["validate", "--help"]).stdout.split())


def test_usage_errors_point_at_the_commands_help():
    code, _, stderr = console_script(["compare", "-m", "gpt2", "-H", "a10", "--bogus"])
    assert code == 2 and stderr.strip() == "roofline: error: No such option: --bogus (see `roofline compare --help`)"
    assert runner.invoke(app, ["compare", "-q", "-m", "gpt2", "-H", "a10"]).exit_code == 0  # -q, as every command takes


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "-m", "llama-3.1-8b", "-m", "qwen2.5-7b"],
        ["sweep", "--batch", "1,2", "--batch=4"],
        ["fit", "-H", "h100-sxm", "--hardware", "l40s"],
    ],
)
def test_a_repeated_single_value_flag_is_refused(args):
    code, stdout, stderr = console_script(args)
    assert code == 2 and "given 2 times" in stderr and stdout == ""


def test_plot_overlays_models_and_devices():
    from roofline.calc.sweep import sweep
    from roofline.render.plot import roofline_data, sweep_data

    h100, l40s = load_hardware("h100-sxm"), load_hardware("l40s")
    models = [load_model("llama-3.1-8b"), load_model("qwen2.5-7b")]
    estimates = [estimate(m, h, batch=8) for m in models for h in (h100, l40s)]
    data = roofline_data([h100, l40s], estimates)
    assert [r["device"] for r in data["roofs"]] == ["h100-sxm", "l40s"]
    assert data["series"] == [
        "llama-3.1-8b on h100-sxm",
        "llama-3.1-8b on l40s",
        "qwen2.5-7b on h100-sxm",
        "qwen2.5-7b on l40s",
    ]
    assert data["title"].startswith("Llama-3.1-8B, Qwen2.5-7B on ")
    series = sweep_data([sweep(m, h100, batches=[1, 8]) for m in models])["series"]
    assert [s["label"].split(",")[0] for s in series] == ["llama-3.1-8b on h100-sxm", "qwen2.5-7b on h100-sxm"]


def test_plan_with_partial_prices_ranks_by_cost_and_names_the_unpriced(monkeypatch):
    from roofline.calc import plan

    monkeypatch.setattr(plan, "plan", searched_once(plan.plan))  # one search, rendered as JSON and as a table
    r = runner.invoke(
        app,
        [
            "plan",
            "-m",
            "llama-3.1-8b",
            "-H",
            "h100-sxm",
            "-H",
            "mi300x",
            "-H",
            "mi350x",
            "--rate",
            "5/s",
            "--price",
            "h100-sxm=2.5",
            "--price",
            "mi300x=2.2",
            *("--tp", "1,2"),  # six options to rank, in half the default search's time
            "--json",
        ],
    )
    p = json.loads(r.stdout)
    assert p["inputs"]["ranked_by"] == "cost" and p["inputs"]["unpriced"] == ["mi350x"]
    costs = [o["cost_per_million_tokens"] for o in p["options"] if o["meets_slo"]]
    priced = [c for c in costs if c is not None]
    assert priced == sorted(priced) and costs[: len(priced)] == priced  # the priced first, cheapest first
    assert None in costs  # and the unpriced device is among the options that meet the SLOs, after them
    table = runner.invoke(
        app,
        [
            "plan",
            "-m",
            "llama-3.1-8b",
            "-H",
            "h100-sxm",
            "-H",
            "mi300x",
            "-H",
            "mi350x",
            "--rate",
            "5/s",
            "--price",
            "h100-sxm=2.5",
            "--price",
            "mi300x=2.2",
            *("--tp", "1,2"),  # six options to rank, in half the default search's time
            "-q",
        ],
        env={"COLUMNS": "200"},
    )
    assert "no price for mi350x" in table.stdout
    assert not re.search(r"\$\d+\.\d(?!\d)", table.stdout)  # $3.80, never $3.8


def test_gpt_oss_is_bundled_as_its_published_checkpoint():
    # gpt-oss's model card: MXFP4 routed experts (4.25 bits: 4 + an 8-bit scale per 32), everything else bf16.
    # Experts: 24 layers x 32 x (3 x 2880 x 2880 weights x 4.25 / 8 B + (2 x 2880 + 2880) biases x 2 B)
    #          = 768 x (13,219,200 + 17,280) = 10,165,616,640 B
    # The rest: (20,914,755,648 - 768 x 24,891,840) params x 2 B = 3,595,645,056 B -> 13,761,261,696 B = 12.8 GiB.
    e = estimate(load_model("gpt-oss-20b"), load_hardware("rtx-4090"))
    assert e.weight_bytes == 13_761_261_696 and e.fits and e.inputs.quant == "mxfp4-moe"
    assert any("published checkpoint format" in n for n in e.notes)
    assert (
        estimate(load_model("gpt-oss-20b"), load_hardware("rtx-4090"), weight_dtype="bf16").weight_bytes
        == 20_914_755_648 * 2
    )
