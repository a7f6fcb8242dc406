"""The command line through typer's CliRunner (and the console entry point for one-line usage errors)."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from roofline import __version__
from roofline.cli import app

runner = CliRunner()

PHASE_KEYS = {"flops", "bytes", "intensity_flop_per_byte", "compute_s", "memory_s", "time_s", "bound"}
TOP_KEYS = {
    "schema_version",
    "model",
    "hardware",
    "inputs",
    "weight_bytes",
    "weight_bytes_streamed",
    "kv_bytes_per_token",
    "kv_bytes_per_sequence",
    "kv_budget_bytes",
    "max_batch",
    "fits",
    "critical_batch",
    "ridge_point_flop_per_byte",
    "prefill",
    "decode",
    "ttft_s",
    "tpot_s",
    "request_latency_s",
}
INPUT_KEYS = {
    "batch",
    "prompt_tokens",
    "output_tokens",
    "weight_dtype",
    "kv_dtype",
    "compute_dtype",
    "memory_fraction",
    "compute_efficiency",
    "bandwidth_efficiency",
}


def run(*args: str):
    return runner.invoke(app, list(args))


def test_estimate_defaults_prints_a_table_and_names_the_defaults():
    r = run("estimate")
    assert r.exit_code == 0, r.stderr
    assert "Llama-3.1-8B" in r.stdout and "H100" in r.stdout
    assert "decode is memory-bound" in r.stdout
    assert "using defaults: --model llama-3.1-8b --hardware h100-sxm" in r.stderr


def test_simulate_names_the_default_lengths_it_used():
    r = run("simulate", "--rate", "2/s", "--requests", "10", "--prompt", "100")
    assert "using defaults: --model llama-3.1-8b --hardware h100-sxm --output 256" in r.stderr


def test_estimate_json_contract():
    r = run("estimate", "--json", "-m", "llama-3.1-70b", "-H", "h200", "-b", "8")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert TOP_KEYS <= set(data)
    assert INPUT_KEYS <= set(data["inputs"])
    assert {"name", "params"} <= set(data["model"]) and "name" in data["hardware"]
    assert PHASE_KEYS <= set(data["prefill"])
    assert PHASE_KEYS | {"tokens_per_s", "tokens_per_s_per_sequence", "mbu", "mfu"} <= set(data["decode"])
    assert data["schema_version"] == 1 and data["inputs"]["batch"] == 8
    assert data["decode"]["bound"] in ("compute", "memory")
    for key in ("weight_bytes", "ttft_s", "tpot_s", "kv_bytes_per_token"):
        assert isinstance(data[key], (int, float))  # plain SI numbers, no unit strings


def test_estimate_json_stdout_is_only_json():
    r = run("estimate", "--json")
    json.loads(r.stdout)  # the defaults note went to stderr


def test_max_context_warning_goes_to_stderr():
    r = run("estimate", "-m", "gpt2", "--prompt", "1000", "--output", "100", "--json")
    assert r.exit_code == 0
    assert "warning" in r.stderr and "max_context" in r.stderr
    json.loads(r.stdout)


@pytest.mark.parametrize(
    "args, code, words",
    [
        (["estimate", "-m", "llama-3-8b"], 2, "unknown model id 'llama-3-8b' (did you mean llama-3.1-8b"),
        (["estimate", "-H", "nope.yaml"], 2, "nope.yaml: no such file"),
        (["estimate", "--memory-fraction", "1.5"], 2, "--memory-fraction: expected a fraction from 1e-06 to 1"),
        (["estimate", "--weight-dtype", "fp12"], 2, "--weight-dtype: unknown dtype 'fp12'"),
        (["estimate", "-H", "tpu-v5e", "--compute-dtype", "fp8"], 2, "tpu-v5e has no peak for fp8"),
        (["hardware", "show", "h100"], 2, "did you mean"),
        # a named format fixes the weights' dtype and bits: another beside it is a contradiction, not a choice
        (["estimate", "--quant", "fp8", "--weight-dtype", "int4"], 2, "--weight-dtype: fp8 weights are fp8, not int4"),
        (["estimate", "--quant", "q4_k_m", "--bits-per-weight", "4"], 2, "--bits-per-weight: q4_k_m sets the bits"),
    ],
)
def test_errors_are_one_line_on_stderr(args, code, words):
    r = run(*args, "-q") if args[0] == "estimate" else run(*args)
    assert r.exit_code == code
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("roofline: error: ") and words in lines[0]
    assert "Traceback" not in r.stderr


def test_bad_spec_file_is_exit_1(tmp_path):
    path = tmp_path / "dev.yaml"
    path.write_text(
        "name: x\nsource: y\nmemory_capacity: 1 GB\nmemory_bandwidth: fast\npeak_flops: {bf16: 1 TFLOP/s}\n"
    )
    r = run("estimate", "-q", "-H", str(path))
    assert r.exit_code == 1
    assert (
        r.stderr.strip()
        == f"roofline: error: {path}: key 'memory_bandwidth': expected a bytes/s quantity such as '3.35 TB/s' or a "
        "plain SI number, got 'fast'"
    )


@pytest.mark.parametrize("args", [["estimate", "-b", "0"], ["estimate", "--batch", "many"], ["estimate", "--bogus"]])
def test_usage_errors_through_the_console_entry_point(args):
    r = subprocess.run([sys.executable, "-m", "roofline", *args], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("roofline: error: ")


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"roofline {__version__}"


def registered(group=None, prefix=()) -> list[list[str]]:
    """Every command the CLI registers, as its words: walked from the apps, never listed by hand."""
    from roofline.cli import app as root

    group = group or root
    out = [list(prefix)] if group is root or prefix else []
    for c in group.registered_commands:
        out.append([*prefix, c.name or c.callback.__name__.replace("_", "-")])
    for sub in group.registered_groups:  # a group added without a name merges its commands into this level
        out += registered(sub.typer_instance, (*prefix, sub.name) if sub.name else prefix)
    return out


@pytest.mark.parametrize("args", registered(), ids=lambda a: " ".join(a) or "roofline")
def test_every_command_has_help(args):
    r = run(*args, "--help")
    assert r.exit_code == 0 and r.stdout.startswith("Usage: ")
    text = r.stdout.split("\n\n", 1)[1]  # what follows the usage line: the command's own description
    assert text.strip() and not text.lstrip().startswith("Options:"), args


def test_the_walk_finds_every_command():
    names = {" ".join(a) for a in registered()}
    assert {
        "estimate",
        "sweep",
        "compare",
        "plot",
        "fit",
        "plan",
        "measure",
        "validate",
        "hardware list",
        "models import",
    } <= names


def test_hardware_list_and_show():
    r = run("hardware", "list")
    assert r.exit_code == 0 and "h100-sxm" in r.stdout and "tpu-v5p" in r.stdout
    data = json.loads(run("hardware", "show", "h100-sxm", "--json").stdout)
    assert data["peak_flop_per_s"]["bf16"] == 989.4e12
    assert data["ridge_point_flop_per_byte"]["bf16"] == pytest.approx(989.4 / 3.35)
    assert len(json.loads(run("hardware", "list", "--json").stdout)) >= 20


def test_models_list_and_show():
    r = run("models", "show", "llama-3.1-8b")
    assert r.exit_code == 0 and "8,030,261,248" in r.stdout
    data = json.loads(run("models", "show", "llama-3.1-8b", "--json").stdout)
    assert data["params"] == 8_030_261_248 and data["kv_bytes_per_token"] == 131_072
    assert "gpt2" in run("models", "list").stdout


def test_model_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nsource: me\ndtype: bf16\nparams: 1e9\n")
    data = json.loads(run("estimate", "-q", "--json", "-m", str(path)).stdout)
    assert data["model"]["params"] == 1e9 and data["kv_bytes_per_token"] == 0
    assert data["max_batch"] is None  # no KV cache: batch limited by nothing the roofline sees


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "-q"],
        ["sweep", "-q", "-b", "1,2"],
        ["compare", "-m", "gpt2", "-H", "a10"],
        ["hardware", "list"],
        ["hardware", "show", "h200"],
        ["models", "list"],
        ["models", "show", "gpt2"],
        ["fit", "-q"],
        ["plan", "-q", "--concurrency", "8", "-H", "a10"],
    ],
)
def test_every_row_printing_command_takes_json_and_csv(args):
    as_json = runner.invoke(app, [*args, "--json"])
    as_csv = runner.invoke(app, [*args, "--csv"])
    assert as_json.exit_code == 0 and as_csv.exit_code == 0, as_json.stderr + as_csv.stderr
    json.loads(as_json.stdout)
    header, *rows = as_csv.stdout.splitlines()
    assert rows and all(row.count(",") >= header.count(",") for row in rows)  # quoted commas may add more
    both = runner.invoke(app, [*args, "--json", "--csv"])
    assert both.exit_code == 2 and "choose one output format" in both.stderr


def test_estimate_csv_is_the_json_flattened():
    import csv
    import io

    data = json.loads(runner.invoke(app, ["estimate", "-q", "--json"]).stdout)
    (row,) = csv.DictReader(io.StringIO(runner.invoke(app, ["estimate", "-q", "--csv"]).stdout))
    assert float(row["tpot_s"]) == data["tpot_s"] and float(row["decode.mbu"]) == data["decode"]["mbu"]
    assert row["model.id"] == "llama-3.1-8b"


def test_help_shows_the_library_defaults():
    # The knob defaults live in roofline.calc.knobs; --help must show those very values.
    from roofline.calc.knobs import DEFAULT, PROMPT_TOKENS

    text = " ".join(runner.invoke(app, ["sweep", "--help"], env={"COLUMNS": "200"}).stdout.split())
    assert f"[default: {DEFAULT.memory_fraction}]" in text and f"[default: {PROMPT_TOKENS}]" in text


def test_library_errors_name_the_parameter_and_the_cli_its_flag():
    from roofline import UsageError, estimate, load_hardware, load_model

    with pytest.raises(UsageError) as caught:
        estimate(load_model("gpt2"), load_hardware("h100-sxm"), prompt_tokens=0)
    assert caught.value.param == "prompt_tokens" and str(caught.value).startswith("prompt_tokens: ")
    r = runner.invoke(app, ["estimate", "-q", "--bits-per-weight", "99"])
    assert r.exit_code == 2 and r.stderr.startswith("roofline: error: --bits-per-weight: expected a number of bits")


def test_a_missing_config_json_is_the_same_usage_error_everywhere(tmp_path):
    for args in (
        ["estimate", "-q", "-m", str(tmp_path)],
        ["models", "import", str(tmp_path)],
        ["models", "show", str(tmp_path)],
    ):
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and "no such config.json" in r.stderr, args


def test_an_unknown_command_points_at_a_help_that_exists(capsys):
    # The console entry point's message named `roofline foo --help`, which fails as well.
    from roofline.cli import run as entry

    assert entry(["foo"]) == 2 and "No such command 'foo'. (see `roofline --help`)" in capsys.readouterr().err
    assert entry(["hardware", "foo"]) == 2 and "(see `roofline hardware --help`)" in capsys.readouterr().err
    assert entry(["estimate", "--bogus"]) == 2 and "(see `roofline estimate --help`)" in capsys.readouterr().err


def test_error_messages_name_the_right_thing(tmp_path):
    # From an outside audit: each of these pointed somewhere wrong before (a help page that fails too, a flag not
    # given, "no such file" for a folder, "holds no request" for a line of bad JSON, shifted arrival times).
    cases = [
        (["estimate", "-q", "-H", str(tmp_path)], f"{tmp_path}: a folder (expected a hardware YAML file"),
        (["models", "show", "m/model.safetensors"], "a safetensors shard: give its model folder"),
        (["simulate", "-q", "--rate", "1/s", "--ttft-slo", "2y"], "(use h, min, s, ms, us or ns)"),
        (["sweep", "-q", "-b", "1:4096:1", "--prompt", "1:100:1"], "error: the grid --batch x --prompt x --output"),
    ]
    bad_json, late, dated = tmp_path / "t.jsonl", tmp_path / "late.jsonl", tmp_path / "dated.csv"
    dated.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50,10,2\n2023-11-16 18:15:46,10,2\n")
    bad_json.write_text("not json\n")
    late.write_text(
        '{"arrival_s": 5, "prompt_tokens": 1, "output_tokens": 2}\n'
        + '{"arrival_s": 1, "prompt_tokens": 1, "output_tokens": 2}\n'
    )
    cases += [
        (["simulate", "-q", "--trace", str(bad_json)], "line 1: not JSON"),
        (["simulate", "-q", "--trace", str(late)], "arrival 1 comes before the previous one (5)"),
        (["simulate", "-q", "--trace", str(dated)], "arrival 2023-11-16 18:15:46 comes before the previous one"),
    ]
    for args, words in cases:
        r = run(*args)
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and words in r.stderr, (args, r.stderr)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("a: [\n")
    r = run("estimate", "-q", "-H", str(bad_yaml))
    assert r.exit_code == 1 and f"{bad_yaml}: line 2: YAML syntax error" in r.stderr
