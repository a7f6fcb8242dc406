"""Sweep, goodput, compare and plots. Expected numbers are worked by hand in the comments."""

import csv
import io
import json
import sys

import pytest
from typer.testing import CliRunner

from roofline import load_hardware, load_model
from roofline.calc.sweep import Row, compare, default_batches, parse_counts, sweep
from roofline.cli import app
from roofline.errors import UsageError
from roofline.render.plot import roof_line, roofline_data, sweep_data

runner = CliRunner()

TOY_MODEL = "name: toy\nsource: test\ndtype: bf16\nparams: 1e9\nkv_bytes_per_token: 1e5\n"
TOY_DEVICE = (
    "name: toy device\nsource: test\nmemory_capacity: 100 GB\nmemory_bandwidth: 1 TB/s\npeak_flops:\n"
    "  bf16: 100 TFLOP/s\n"
)


@pytest.fixture
def toy(write_yaml):
    return load_model(write_yaml("toy.yaml", TOY_MODEL)), load_hardware(write_yaml("dev.yaml", TOY_DEVICE))


# The toy at prompt 100, output 11 (10 decode steps, mean cached + 1 = 105.5 tokens):
#   TPOT(B) = max(B x 2e9 / 1e14, (2e9 + B x 1e5 x 105.5) / 1e12) = 2 ms + B x 10.55 us while B < 212;
#   TTFT(B) = B x 2 x 1e9 x 100 / 1e14 = B x 2 ms (compute-bound).
def tpot(batch):
    return 2e-3 + batch * 1.055e-5


def test_goodput_picks_the_batch_where_tpot_crosses_the_slo(toy):
    # TPOT <= 3 ms  <=>  B <= 1e-3 / 1.055e-5 = 94.8: of 1, 2, 4, ... 256 the last to meet it is 64.
    s = sweep(
        *toy, batches=parse_counts("1:256", "--batch"), prompts=[100], outputs=[11], tpot_slo=3e-3, goodput_of="decode"
    )
    by_batch = {r.batch: r for r in s.rows}
    assert by_batch[64].meets_slo and not by_batch[128].meets_slo
    assert by_batch[64].tpot_s == pytest.approx(tpot(64))  # 2.6752 ms
    assert by_batch[128].goodput_tokens_per_s == 0.0
    assert s.summary.best_batch == 64
    assert s.summary.best_goodput_tokens_per_s == pytest.approx(64 / tpot(64))  # 23,923 tokens/s
    # By default goodput counts end-to-end output tokens: B x O / (TTFT + (O - 1) x TPOT), for the same best batch.
    end_to_end = sweep(*toy, batches=parse_counts("1:256", "--batch"), prompts=[100], outputs=[11], tpot_slo=3e-3)
    best = next(r for r in end_to_end.rows if r.batch == 64)
    assert end_to_end.summary.best_batch == 64 and end_to_end.inputs["goodput_of"] == "output"
    assert best.goodput_tokens_per_s == pytest.approx(64 * 11 / (best.ttft_s + 10 * best.tpot_s))
    # Around the crossing: 94 meets it (2.9917 ms), 95 does not (3.00225 ms).
    s = sweep(*toy, batches=[90, 94, 95, 100], prompts=[100], outputs=[11], tpot_slo=3e-3)
    assert s.summary.best_batch == 94


def test_both_slos(toy):
    # TTFT <= 100 ms <=> B <= 50; with TPOT <= 3 ms (B <= 94) the best of 10, 50, 51, 94 is 50.
    s = sweep(*toy, batches=[10, 50, 51, 94], prompts=[100], outputs=[11], tpot_slo=3e-3, ttft_slo=0.1)
    assert [r.meets_slo for r in s.rows] == [True, True, False, False]
    assert s.summary.best_batch == 50


def test_a_tie_in_goodput_goes_to_the_smaller_batch(toy):
    # Compute-bound decode from B >= 2e-3 / (2e-5 - 1.055e-5) = 211.6: TPOT = B x 2e9 / 1e14 = B x 20 us, so B / TPOT
    # = 50,000 tokens/s at 256, 512 and 1024 alike, while latency doubles each time: the smallest is the best.
    s = sweep(*toy, batches=[256, 512, 1024], prompts=[100], outputs=[11], tpot_slo=1.0, goodput_of="decode")
    assert [r.goodput_tokens_per_s for r in s.rows] == pytest.approx([50_000] * 3)
    assert s.summary.best_batch == 256


def test_no_batch_meets_the_slo(toy):
    s = sweep(*toy, batches=[1, 2], prompts=[100], outputs=[11], tpot_slo=1e-3)  # TPOT >= 2 ms always
    assert s.summary.best_batch is None and s.to_dict()["summary"]["best_batch"] is None


def test_default_batches_are_powers_of_two_up_to_the_max_batch(toy):
    # Max batch at 111 tokens: floor((0.9 x 1e11 - 2e9) / (1e5 x 111)) = 7927.
    s = sweep(*toy, prompts=[100], outputs=[11])
    assert [r.batch for r in s.rows] == [1 << i for i in range(13)] + [7927]
    assert s.summary.max_batch == 7927 and s.summary.critical_batch == 212
    assert (
        default_batches(0) == [1] and default_batches(8) == [1, 2, 4, 8] and default_batches(None, limit=4) == [1, 2, 4]
    )


def test_grid_of_lengths(toy):
    s = sweep(*toy, batches=[1, 4], prompts=[100, 200], outputs=[11, 21])
    assert len(s.rows) == 8 and len(s.groups) == 4
    assert {(r.prompt_tokens, r.output_tokens) for r in s.rows} == {(100, 11), (100, 21), (200, 11), (200, 21)}


def test_rows_are_monotonic_in_batch():
    s = sweep(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), batches=parse_counts("1:512", "--batch"))
    rows = [r for r in s.rows if r.bound == "memory"]
    assert all(b.tokens_per_s >= a.tokens_per_s for a, b in zip(rows, rows[1:]))
    assert all(b.tpot_s >= a.tpot_s for a, b in zip(s.rows, s.rows[1:]))
    assert all(r.kv_bytes == r.batch * 131_072 * 1280 for r in s.rows)  # KV of the whole batch at P + O


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,8,64", [1, 8, 64]),
        ("1:512", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]),
        ("1:100", [1, 2, 4, 8, 16, 32, 64, 100]),
        ("128:512:128", [128, 256, 384, 512]),
        ("4, 4, 2", [4, 2]),
    ],
)
def test_parse_counts(text, expected):
    assert parse_counts(text, "--batch") == expected


@pytest.mark.parametrize("text", ["", "0", "a,b", "8:1", "1:8:0", "1:2:3:4", "0:8"])
def test_parse_counts_rejects(text):
    with pytest.raises(UsageError, match="--batch"):
        parse_counts(text, "--batch")


def test_sweep_json_shape():
    r = runner.invoke(app, ["sweep", "-q", "--json", "--batch", "1,8", "--tpot-slo", "50ms", "--ttft-slo", "2s"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) >= {"schema_version", "inputs", "rows", "summary"}
    row_keys = {
        "batch",
        "tpot_s",
        "ttft_s",
        "tokens_per_s",
        "tokens_per_s_per_sequence",
        "mbu",
        "mfu",
        "kv_bytes",
        "fits",
        "bound",
        "meets_slo",
        "goodput_tokens_per_s",
        "prompt_tokens",
        "output_tokens",
    }
    assert all(row_keys <= set(row) for row in data["rows"]) and len(data["rows"]) == 2
    assert {"critical_batch", "max_batch", "best_batch"} <= set(data["summary"])
    assert data["inputs"]["tpot_slo_s"] == 0.05 and data["inputs"]["ttft_slo_s"] == 2.0


def test_sweep_csv_shape():
    r = runner.invoke(app, ["sweep", "-q", "--csv", "--batch", "1,2,4", "--prompt", "512,1024"])
    assert r.exit_code == 0, r.stderr
    table = list(csv.reader(io.StringIO(r.stdout)))
    assert table[0] == list(Row._fields) and len(table) == 1 + 6
    assert "tpot_s" in table[0] and "kv_bytes" in table[0]  # units in the column names
    assert float(table[1][table[0].index("tpot_s")]) > 0


def test_sweep_table():
    r = runner.invoke(app, ["sweep", "-q", "--tpot-slo", "10ms"])
    assert r.exit_code == 0
    assert "best batch 64" in r.stdout and "max batch 365" in r.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["sweep", "--batch", ""], "--batch: expected integers"),
        (["sweep", "--batch", "0,8"], "--batch: expected up to 10000 integers from 1 to 1e+09"),
        (["sweep", "--tpot-slo", "fast"], "--tpot-slo: expected a seconds quantity"),
        (["sweep", "--tpot-slo", "0ms"], "--tpot-slo: expected a positive, finite duration"),
        (["sweep", "--json", "--csv"], "choose one output format"),
        (["plot", "-o", "/no/such/folder/r.png"], "--out: no such folder"),
        (["plot", "-o", "roofline.pdf"], "--out: expected a .png or .svg"),
        (["compare", "-m", "gpt2", "-H", "h100-sxm", "--sort", "speed"], "--sort: unknown column 'speed'"),
    ],
)
def test_bad_input_is_one_line(args, words):
    r = runner.invoke(app, [*args, "-q"] if args[0] != "compare" else args)
    assert r.exit_code == 2, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("roofline: error: ") and words in lines[0]


def test_compare_rows_and_sort():
    models = [load_model("llama-3.1-8b"), load_model("qwen2.5-7b")]
    devices = [load_hardware("h100-sxm"), load_hardware("l40s")]
    rows = compare(models, devices, batch=8, sort="-tokens_per_s", tpot_slo=0.05).rows
    assert len(rows) == 4
    assert [r.tokens_per_s for r in rows] == sorted((r.tokens_per_s for r in rows), reverse=True)
    assert rows[0].hardware == "h100-sxm"  # 3.35 TB/s beats 864 GB/s in memory-bound decode
    assert all(r.best_batch is not None for r in rows)
    r = runner.invoke(
        app, ["compare", "-m", "llama-3.1-8b", "-H", "h100-sxm", "-H", "h200", "--json", "--sort", "tpot_s"]
    )
    data = json.loads(r.stdout)
    assert [row["hardware"] for row in data["rows"]] == ["h200", "h100-sxm"]  # 4.8 TB/s: the shorter TPOT
    assert runner.invoke(app, ["compare", "-m", "gpt2", "-H", "a10", "--csv"]).stdout.startswith("model,hardware,")


def test_roofline_plot_data():
    h100 = load_hardware("h100-sxm")
    e = __import__("roofline").estimate(load_model("llama-3.1-8b"), h100, batch=8)
    data = roofline_data(h100, [e])
    (roof,) = data["roofs"]
    assert roof["style"] == "datasheet" and roof["bandwidth_bytes_per_s"] == 3.35e12
    shared = next(c for c in roof["ceilings"] if "bf16" in c["dtypes"])
    assert shared["dtypes"] == ["bf16", "fp16"]  # one line for equal peaks
    assert shared["ridge_flop_per_byte"] == pytest.approx(989.4 / 3.35)
    decode = next(p for p in data["points"] if p["phase"] == "decode")
    assert decode["intensity_flop_per_byte"] == e.decode.intensity_flop_per_byte
    assert decode["flop_per_s"] == pytest.approx(e.decode.flops / e.tpot_s)
    # The roof: y = W x below the ridge, the peak above it (x = 10: 33.5 TFLOP/s; x = 1000: 989.4 TFLOP/s).
    line = roof_line(3.35e12, 989.4e12, [0.1, 1e4], samples=6)  # decades 0.1 .. 1e4
    xs = [x for x, _ in line]
    assert xs == pytest.approx(sorted([0.1, 1.0, 10.0, 100.0, 989.4 / 3.35, 1000.0, 1e4]))  # the ridge is a point too
    y = dict(zip((round(x, 6) for x in xs), (y for _, y in line)))
    assert (
        y[10.0] == pytest.approx(33.5e12)
        and y[1000.0] == 989.4e12
        and y[round(989.4 / 3.35, 6)] == pytest.approx(989.4e12)
    )


def test_measured_profile_draws_dashed_beside_the_datasheet():
    h = load_hardware("h100-sxm")._replace(
        measured={"datasheet": {"peak_flop_per_s": {"bf16": 989.4e12}, "memory_bandwidth_bytes_per_s": 3.35e12}}
    )
    data = roofline_data(h, [])
    assert [r["style"] for r in data["roofs"]] == ["datasheet", "measured"]


def test_sweep_plot_data(toy):
    s = sweep(*toy, batches=[1, 64, 128], prompts=[100], outputs=[11], tpot_slo=3e-3)
    (series,) = sweep_data(s)["series"]
    assert series["batch"] == [1, 64, 128] and series["best_batch"] == 64 and series["critical_batch"] == 212
    assert series["tpot_s"][1] == pytest.approx(tpot(64))


@pytest.mark.parametrize("name, magic", [("r.png", b"\x89PNG\r\n\x1a\n"), ("r.svg", b"<svg")])
@pytest.mark.parametrize("extra", [[], ["--sweep", "--tpot-slo", "10ms"]])
def test_plot_files_are_written(tmp_path, name, magic, extra):
    pytest.importorskip("matplotlib")
    path = tmp_path / name
    r = runner.invoke(app, ["plot", "-q", "-o", str(path), *extra])
    assert r.exit_code == 0, r.stderr
    head = path.read_bytes()[:2048]
    assert head.startswith(magic) if name.endswith(".png") else magic in head
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temp file left behind


def test_plot_without_matplotlib(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = runner.invoke(app, ["plot", "-q", "-o", str(tmp_path / "r.png")])
    assert (
        r.exit_code == 1
        and r.stderr.strip() == "roofline: error: roofline plot needs matplotlib: pip install 'roofline[plot]'"
    )


def test_plan_frontier_by_hand():
    # Four priced options at (TPOT ms, $/M): a (2, 1.0), b (4, 0.5), c (5, 0.8), d (8, 0.3). Walking up in TPOT,
    # an option is on the frontier when it is cheaper than every faster one: a, b (0.5 < 1.0), not c (0.8 > 0.5), d.
    from roofline.calc.plan import Option, Plan
    from roofline.render.plot import plan_data

    def option(name, tpot_ms, cost):
        return Option(
            name, 1, 1, None, 1, 8, 1, 0.1, tpot_ms / 1e3, True, 100.0, 100.0, 1.0, cost, None, "meets the SLOs"
        )

    refused = Option(
        "e", 1, 1, None, None, None, None, None, None, False, None, None, None, None, None, "no batch meets the SLOs"
    )
    inputs = {"model": "m", "prompt_tokens": 1, "output_tokens": 1, "tpot_slo_s": 0.01, "ranked_by": "cost"}
    data = plan_data(
        Plan(inputs, [option("d", 8, 0.3), option("b", 4, 0.5), option("c", 5, 0.8), option("a", 2, 1.0), refused])
    )
    assert data["frontier"] == ["a tp1", "b tp1", "d tp1"] and len(data["points"]) == 4
    assert data["y_label"] == "$ per million output tokens"
    data = plan_data(Plan({**inputs, "ranked_by": "devices"}, [option("a", 2, 1.0)._replace(pp=2, disagg="1P:1D")]))
    assert (
        data["y_label"] == "devices" and data["points"][0]["y"] == 1 and data["points"][0]["label"] == "a tp1 pp2 1P:1D"
    )


def test_plan_plot(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "plan.svg"
    args = [
        "plan",
        "-q",
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
        "--plot",
        str(path),
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.stderr
    assert path.read_bytes().lstrip().startswith(b"<?xml") and "h100-sxm" in r.stdout
    none = runner.invoke(
        app,
        [
            "plan",
            "-q",
            "-m",
            "llama-3.1-8b",
            "-H",
            "l4",
            "--concurrency",
            "1",
            "--tpot-slo",
            "1ms",
            "--tp",
            "1",
            "--plot",
            str(tmp_path / "none.png"),
        ],
    )
    assert (
        none.exit_code == 1
        and none.stderr.strip() == "roofline: error: --plot: no option meets the SLOs, so there is nothing to draw"
    )
    assert not (tmp_path / "none.png").exists()
    bad = runner.invoke(
        app, ["plan", "-q", "-m", "llama-3.1-8b", "--concurrency", "4", "--plot", str(tmp_path / "p.pdf")]
    )
    assert bad.exit_code == 2 and "--plot: expected a .png or .svg" in bad.stderr


def test_plan_plot_without_matplotlib(monkeypatch, tmp_path):
    # Checked before the search, so the table is not printed and then refused.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = runner.invoke(
        app, ["plan", "-q", "-m", "llama-3.1-8b", "-H", "l4", "--concurrency", "4", "--plot", str(tmp_path / "p.png")]
    )
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.strip() == "roofline: error: roofline plan --plot needs matplotlib: pip install 'roofline[plot]'"


def test_json_is_indented_two_levels_and_compact_below():
    from roofline.render import to_json

    data = {
        "inputs": {"batches": [1, 2], "tp": 1},
        "rows": [{"batch": 1, "x": 0.5}, {"batch": 2, "x": None}],
        "empty": {},
    }
    text = to_json(data)
    assert json.loads(text) == data
    assert text.splitlines() == [
        "{",
        '  "inputs": {',
        '    "batches": [1, 2],',
        '    "tp": 1',
        "  },",
        '  "rows": [',
        '    {"batch": 1, "x": 0.5},',
        '    {"batch": 2, "x": null}',
        "  ],",
        '  "empty": {}',
        "}",
    ]
    with pytest.raises(ValueError):
        to_json({"rows": [{"x": float("nan")}]})  # NaN is a bug, never printed
