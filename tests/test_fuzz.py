"""A seeded fuzzer over every input a user gives: spec YAML files, config.json files and flag values.

Each generated input runs through the CLI in-process; what must hold for every one of them:
no traceback (only SystemExit leaves a command), a known exit code, at most one stderr line on failure,
no hang (an alarm fails the run after 20 s), JSON output without NaN, inf or negative numbers,
no partial or temporary file left where a failed command was asked to write, and a blank value never
silently replaced by a default. derandomize=True makes each CI run the same (about 1,100 inputs).
"""

import json
import math
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from roofline.cli import run

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


# The README's test command runs a fifth of each count (~5 s); CI's full run (ROOFLINE_TEST_ALL=1) runs them all
# (~18 s).
FULL = bool(os.environ.get("ROOFLINE_TEST_ALL"))


def fuzz(examples: int):
    return settings(
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        max_examples=examples if FULL else examples // 5,
    )


# Values a mistaken or hostile file or flag might hold.
WILD = [
    None,
    "",
    " ",
    "\t",
    0,
    -1,
    -0.5,
    1e-320,
    1e-300,
    1e30,
    1e308,
    10**400,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    False,
    "abc",
    "1e999 TB/s",
    "-3 GB",
    "nan",
    ".nan",
    "1 ZiB",
    "5 furlongs",
    [1, 2],
    {"a": 1},
    [],
    {},
    "x" * 300,
    "\x00",
    "\u2603",
    "0x10",
]
TEXT_WILD = [
    "",
    " ",
    "0",
    "-1",
    "1e30",
    "nan",
    "inf",
    "-inf",
    "1e-320",
    "x" * 300,
    "1:100000000:1",
    "1:1000000:1",
    "0:8",
    "8:1",
    "1:8:0",
    ",",
    "1,,2",
    "\u2603",
    "1.5",
    "10" * 30,
    "~nosuchuser/x",
    "/dev/zero",
    "/",
    ".",
    "50ms",
    "0ms",
    "1e999s",
    "-5s",
    "2s",
    "bf16",
    "fp8",
    "int4",
    "h100-sxm",
    "gpt2",
    "-tokens_per_s",
    "tpot_s",
]


@contextmanager
def deadline(seconds: int):
    def fail(*_):
        raise AssertionError(f"hang: no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from numbers(v)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield value


class Result(NamedTuple):
    exit_code: int
    stdout: str
    stderr: str


def invoke(args: list[str]) -> Result:
    """The console script's own path (usage errors included: roofline.cli.run), with captured streams."""
    with runner.isolation() as (stdout, stderr, _), deadline(20):
        try:
            code = run(args)
        except SystemExit as e:
            code = e.code
        except Exception as e:
            raise AssertionError(f"traceback for {args!r}") from e
        sys.stdout.flush()
        sys.stderr.flush()
        return Result(code, stdout.getvalue().decode(errors="replace"), stderr.getvalue().decode(errors="replace"))


def check(args: list[str], outputs: list[Path] = ()):
    """Run the CLI as the console script does and check every property in the module docstring."""
    r = invoke(args)
    assert r.exit_code in (0, 1, 2, 130), (args, r.exit_code)
    lines = r.stderr.strip().splitlines()
    if r.exit_code:
        assert len(lines) == 1 and lines[0].startswith("roofline: error: "), (args, r.stderr[:500])
        assert len(lines[0]) <= 600, (args, len(lines[0]))
        for path in outputs:
            assert not path.exists(), (args, path)
            assert not list(path.parent.glob(f".{path.name[:20]}*.tmp")), (args, "temporary file left")
    elif "--json" in args:
        bad = [x for x in numbers(json.loads(r.stdout)) if not math.isfinite(x) or x < 0]
        assert bad == [], (args, bad[:3])
    return r


def spec_text(base: dict, data) -> bytes:
    """A mutated spec: drop, replace or add keys; or raw bytes, aliases, tags, deep nesting, duplicates."""
    kind = data.draw(
        st.sampled_from(["replace", "drop", "add", "nested", "raw", "dup", "alias", "tag", "deep", "nonstr"])
    )
    spec = dict(base)
    key = data.draw(st.sampled_from(sorted(spec)))
    if kind == "replace":
        spec[key] = data.draw(st.sampled_from(WILD))
    elif kind == "drop":
        del spec[key]
    elif kind == "add":
        spec[data.draw(st.sampled_from(["layer", "extra", "x" * 200, "peak_flop"]))] = 1
    elif kind == "nested" and isinstance(spec.get("peak_flops"), dict):
        spec["peak_flops"] = {
            **spec["peak_flops"],
            data.draw(st.sampled_from(["bf16", "fp64", "x"])): data.draw(st.sampled_from(WILD)),
        }
    elif kind == "raw":
        return data.draw(
            st.sampled_from(
                [b"\xff\xfe\x00bad", bytes(range(256)), b"", b"- a\n- b\n", b"just text", b"\x00" * 64, b"a: [\n"]
            )
        )
    elif kind == "dup":
        text = yaml.safe_dump(spec, sort_keys=False)
        return (text + f"{key}: {json.dumps(spec[key]) if not isinstance(spec[key], dict) else '{}'}\n").encode()
    elif kind == "alias":
        return (
            b'a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c '
            b"[*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\nname: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
        )
    elif kind == "tag":
        return yaml.safe_dump(spec).encode() + b"extra: !!python/object:os.system ['true']\n"
    elif kind == "deep":
        return b"name: " + b"[" * 3000 + b"]" * 3000 + b"\n"
    elif kind == "nonstr":
        return yaml.safe_dump(spec).encode() + data.draw(
            st.sampled_from([b"1: 1\n", b"[1, 2]: 3\n", b"null: 1\n", b"true: 2\n"])
        )
    try:
        return yaml.safe_dump(spec, sort_keys=False, allow_unicode=True).encode()
    except (yaml.YAMLError, OverflowError, ValueError):
        return json.dumps(spec, default=str).encode()


HARDWARE = yaml.safe_load((ROOT / "hardware" / "h100-sxm.yaml").read_text())
MODEL = yaml.safe_load((ROOT / "models" / "mistral-7b.yaml").read_text())
CONFIG = {
    "model_type": "gpt_oss",
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 4096,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "attention_bias": True,
}


@fuzz(350)
@given(data=st.data())
def test_fuzz_hardware_specs(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("h") / "dev.yaml"
    path.write_bytes(spec_text(HARDWARE, data))
    check(["estimate", "-q", "--json", "-H", str(path), "-m", "gpt2"])


@fuzz(350)
@given(data=st.data())
def test_fuzz_model_specs(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("m") / "model.yaml"
    path.write_bytes(spec_text(MODEL, data))
    command = data.draw(
        st.sampled_from(
            [["estimate", "-q", "--json"], ["models", "show", "--json"], ["sweep", "-q", "--json", "-b", "1,8"]]
        )
    )
    check([*command, *(["-m"] if command[0] != "models" else []), str(path)])


@fuzz(300)
@given(data=st.data())
def test_fuzz_config_json(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("c")
    config = dict(CONFIG)
    kind = data.draw(st.sampled_from(["replace", "replace", "drop", "type", "raw", "deep"]))
    key = data.draw(st.sampled_from(sorted(config)))
    if kind == "replace":
        config[key] = data.draw(st.sampled_from(WILD))
    elif kind == "drop":
        del config[key]
    elif kind == "type":
        config[key] = data.draw(st.sampled_from([[config[key]], str(config[key]), {"v": config[key]}, "false", 5]))
    if kind == "raw":
        body = data.draw(
            st.sampled_from([b"\xff\xfe{}", b"{", b"[]", b"null", b'{"model_type": ' + b"9" * 5000 + b"}"])
        )
    elif kind == "deep":
        body = b"[" * 5000 + b"]" * 5000
    else:
        body = json.dumps(config, default=str).encode().replace(b"Infinity", b"1e999")
    (folder / "config.json").write_bytes(body)
    out = folder / "out.yaml"
    command = data.draw(
        st.sampled_from(
            [["estimate", "-q", "--json", "-m"], ["models", "show", "--json"], ["models", "import", "-o", str(out)]]
        )
    )
    check([*command, str(folder)], outputs=[out] if "import" in command else [])


FLAGS = {
    "estimate": [
        "--model",
        "--hardware",
        "--batch",
        "--prompt",
        "--output",
        "--weight-dtype",
        "--kv-dtype",
        "--compute-dtype",
        "--draft",
        "--quant",
        "--ep",
        "--draft-tokens",
        "--acceptance",
        "--mtp",
        "--cached-tokens",
        "--prefix-hit-rate",
        "--shared-prefix",
        "--chunk-tokens",
        "--bits-per-weight",
        "--memory-fraction",
        "--compute-efficiency",
        "--bandwidth-efficiency",
        "--tp",
        "--pp",
        "--micro-batches",
        "--disagg",
    ],
    "sweep": [
        "--model",
        "--hardware",
        "--batch",
        "--prompt",
        "--output",
        "--tpot-slo",
        "--ttft-slo",
        "--weight-dtype",
        "--tp",
        "--pp",
        "--disagg",
        "--memory-fraction",
        "--bits-per-weight",
    ],
    "compare": [
        "--batch",
        "--prompt",
        "--output",
        "--tpot-slo",
        "--ttft-slo",
        "--sort",
        "--kv-dtype",
        "--compute-efficiency",
    ],
    "plot": ["--model", "--hardware", "--batch", "--prompt", "--output", "--out", "--tpot-slo"],
    "models show": [],
    "hardware show": [],
    "models import": ["--name", "--out"],
    "fit": ["--model", "--hardware", "--batch", "--context", "--quant", "--kv-dtype", "--tp", "--memory-fraction"],
    "plan": [
        "--model",
        "--hardware",
        "--concurrency",
        "--rate",
        "--tpot-slo",
        "--ttft-slo",
        "--tp",
        "--price",
        "--prompt",
        "--plot",
        "--pp",
        "--disagg",
    ],
    "measure": ["--device", "--dtype", "--threads", "--weight-dtype", "--save", "--hardware", "--devices", "--budget"],
    "validate": [
        "--model",
        "--device",
        "--batch",
        "--prompt",
        "--output",
        "--dtype",
        "--layers",
        "--hardware",
        "--repeat",
        "--tolerance",
        "--engine",
    ],
}
BLANKS = ["", " "]


@pytest.fixture
def no_torch(monkeypatch):
    """measure and validate stop with one line where they would start timing: the fuzz is of their inputs."""
    from roofline.errors import RooflineError
    from roofline.measure import bench, timing

    def stub(command: str = "measure"):
        raise RooflineError(f"roofline {command}: stopped before timing (fuzz)")

    monkeypatch.setattr(timing, "torch_module", stub)
    monkeypatch.setattr(bench, "torch_module", stub)


@pytest.fixture
def quick_plots(monkeypatch):
    """plot writes a stand-in image through the same atomic writer (matplotlib's drawing is not what is fuzzed)."""
    from roofline.files import atomic_write
    from roofline.render import plot

    def write(data, path):
        with atomic_write(path, "--out", binary=True) as f:
            f.write(b"stand-in")

    monkeypatch.setattr(plot, "draw_roofline", write)
    monkeypatch.setattr(plot, "draw_sweep", write)
    monkeypatch.setattr(
        plot, "draw_plan", lambda data, path: write(data, path) if data["points"] else plot.draw_plan(data, path)
    )


@fuzz(400)
@given(data=st.data())
def test_fuzz_flags(tmp_path_factory, no_torch, quick_plots, data):
    folder = tmp_path_factory.mktemp("f")
    command = data.draw(st.sampled_from(sorted(FLAGS)))
    args = command.split()
    if command == "compare":
        args += ["-m", "gpt2", "-H", "a10"]
    if command in ("models show", "hardware show", "models import"):
        args.append(
            data.draw(st.sampled_from([*TEXT_WILD, "gpt2" if "models" in command else "h100-sxm", str(folder)]))
        )
    outputs = []
    for _ in range(data.draw(st.integers(1, 3)) if FLAGS[command] else 0):
        flag = data.draw(st.sampled_from(FLAGS[command]))
        value = data.draw(st.sampled_from([*TEXT_WILD, str(folder), str(folder / "missing" / "x.png")]))
        if flag in ("--out", "--save", "--plot"):
            value = data.draw(
                st.sampled_from(
                    [
                        str(folder / "r.png"),
                        str(folder / "r.svg"),
                        str(folder / "p.yaml"),
                        str(folder),
                        str(folder / "no" / "r.png"),
                        "/proc/r.png",
                        str(folder / ("y" * 300 + ".png")),
                        "",
                    ]
                )
            )
            outputs.append(Path(value))
        args += [flag, value]
    if command in (
        "estimate",
        "sweep",
        "compare",
        "models show",
        "hardware show",
        "measure",
        "validate",
        "fit",
        "plan",
    ):
        args += data.draw(st.sampled_from([[], ["--json"], ["--csv"]]))
    if command in ("estimate", "sweep") and data.draw(st.booleans()):  # a model far bigger than the device
        args += ["-m", "llama-3.1-405b", "-H", "l4"]
    r = check(
        args, outputs=[p for p in outputs if p.suffix and len(p.name) < 255 and p.parent.is_dir() and not p.exists()]
    )
    last = dict(zip(args, args[1:]))  # a repeated flag: its last value is the one that counts
    for flag, value in last.items():
        if value in BLANKS and flag.startswith("--") and flag not in ("--out", "--save", "--plot"):
            assert r.exit_code != 0, f"blank {flag} was replaced by a default: {args!r}"


@fuzz(150)
@given(data=st.data())
def test_fuzz_gguf_files(tmp_path_factory, data):
    """Truncated, bit-flipped and count-inflated GGUF files: one line, never a traceback."""
    pytest.importorskip("gguf")
    import gguf_fixture

    folder = tmp_path_factory.mktemp("g")
    valid = bytearray(
        gguf_fixture.write(folder / "valid.gguf", data.draw(st.sampled_from(["Q4_0", "Q8_0", "Q4_K"]))).read_bytes()
    )
    kind = data.draw(st.sampled_from(["cut", "flip", "counts", "magic"]))
    if kind == "cut":
        valid = valid[: data.draw(st.integers(0, len(valid)))]
    elif kind == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            valid[data.draw(st.integers(0, len(valid) - 1))] = data.draw(st.integers(0, 255))
    elif kind == "counts":
        at = data.draw(st.sampled_from([8, 16]))  # the tensor count or the metadata count
        valid[at : at + 8] = data.draw(st.sampled_from([2**63, 2**40, 10**6, 0])).to_bytes(8, "little")
    else:
        valid[:4] = b"GGUX"
    path = folder / "model.gguf"
    path.write_bytes(bytes(valid))
    check(["estimate", "-q", "--json", "-m", str(path)])
