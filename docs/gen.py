"""Helpers for the cog blocks of the docs: every console example is produced by running the command, and the
reference pages are generated from the code and the spec files. Regenerate: `cog -r -I docs README.md docs/*.md
docs/*/*.md`; CI runs the same with --check and fails when a page is stale.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import cog

ROOT = Path(__file__).resolve().parent.parent
WIDTH = "120"  # the console examples are drawn for a 120-column terminal


def _roofline(args: list[str], cwd: Path | None = None) -> str:
    """stdout of `roofline ARGS` run in-process, the console script's own path, at WIDTH columns."""
    from typer.testing import CliRunner

    from roofline.cli import run

    runner = CliRunner()
    old = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with runner.isolation(env={"COLUMNS": WIDTH, "NO_COLOR": "1"}) as (stdout, _stderr, _):
            code = run(args)
            sys.stdout.flush()
            text = stdout.getvalue().decode()
    finally:
        os.chdir(old)
    if code:
        raise SystemExit(f"docs example failed (exit {code}): roofline {shlex.join(args)}")
    return text


def output(command: str, cwd: Path | None = None) -> str:
    """What `command` prints: a roofline command line, optionally piped into `grep PATTERN` or `head -N`, or a
    `python benchmarks/...` script."""
    pipeline = [p.strip() for p in command.split(" | ")]
    words = shlex.split(pipeline[0])
    if words[0] == "roofline":
        text = _roofline(words[1:], cwd)
    elif words[0] == "python":
        text = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    else:
        raise SystemExit(f"docs example: cannot run {command!r}")
    for step in pipeline[1:]:
        tool, _, arg = step.partition(" ")
        lines = text.splitlines()
        if tool == "grep":
            pattern = [w for w in shlex.split(arg) if not w.startswith("-")][0]  # grep -E PATTERN
            lines = [line for line in lines if re.search(pattern, line)]
        elif tool == "head":
            lines = lines[: int(arg.lstrip("-n ").strip() or 10)]
        else:
            raise SystemExit(f"docs example: unknown pipe {step!r}")
        text = "\n".join(lines) + "\n"
    return text


def console(*commands: str, cwd: Path | None = None, shown: list[str] | None = None) -> None:
    """A console block: each command after `$ ` (or its `shown` form) with the output it prints."""
    parts = []
    for k, command in enumerate(commands):
        label = shown[k] if shown else command
        parts.append(f"$ {label}\n{output(command, cwd).rstrip()}\n")
    cog.out("```console\n" + "".join(parts) + "```\n")


@contextlib.contextmanager
def gguf_70b():
    """A folder holding Llama-3.1-70B-Q4_K_M.gguf: the 70B-shaped header of benchmarks/gguf_header.py with a
    sparse data section (no weights are written)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import gguf_header

    with tempfile.TemporaryDirectory() as folder:
        gguf_header.write(Path(folder) / "Llama-3.1-70B-Q4_K_M.gguf")
        yield Path(folder)


def commands() -> None:
    """Every registered command's --help, walked from the apps."""
    from roofline.cli import app

    def walk(group, prefix):
        found = [prefix] if prefix == [] or group is not app else []
        for c in group.registered_commands:
            found.append([*prefix, c.name or c.callback.__name__.replace("_", "-")])
        for sub in group.registered_groups:
            found += walk(sub.typer_instance, [*prefix, sub.name] if sub.name else prefix)
        return found

    for words in walk(app, []):
        if not words:
            continue
        cog.out(f"## roofline {' '.join(words)}\n\n```text\n{_roofline([*words, '--help']).rstrip()}\n```\n\n")


def _paths(value, prefix="") -> list[tuple[str, object]]:
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            out += _paths(v, f"{prefix}.{k}" if prefix else k)
        return out or [(prefix, value)]
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return _paths(value[0], f"{prefix}[]")
    return [(prefix, value)]


def json_keys(command: str) -> None:
    """Every key of `command --json` (a real run), with its JSON type and the value that run gave."""
    data = json.loads(_roofline([*shlex.split(command)[1:], "--json"]))
    rows = ["| key | type | example |", "| --- | --- | --- |"]
    for path, value in _paths(data):
        kind = {bool: "boolean", int: "number", float: "number", str: "string", list: "array", dict: "object"}.get(
            type(value), "null"
        )
        shown = json.dumps(value) if not path.endswith("wall_s") else '"(varies: wall time)"'
        shown = shown if len(shown) <= 48 else shown[:45] + "..."
        rows.append(f"| `{path}` | {kind} | `{shown}` |".replace("|`", "| `"))
    cog.out(f"`{command} --json`:\n\n" + "\n".join(rows) + "\n")


def hardware() -> None:
    """Every bundled device: its figures and its source."""
    from roofline.specs.catalog import catalog
    from roofline.specs.hardware import load_hardware
    from roofline.units import binary, si

    rows = ["| id | name | memory | bandwidth | 16-bit peak | source |", "| --- | --- | --- | --- | --- | --- |"]
    for i in catalog("hardware"):
        h = load_hardware(i)
        dtype = next((d for d in ("bf16", "fp16", "fp32") if d in h.peak_flops), None)
        peak = f"{si(h.peak_flops[dtype], 'FLOP/s')} {dtype}" if dtype else "-"
        rows.append(
            f"| `{i}` | {h.name} | {binary(h.memory_capacity)} | {si(h.memory_bandwidth, 'B/s')} | {peak} | "
            f"{_link(h.source)} |"
        )
    cog.out("\n".join(rows) + "\n")


def models() -> None:
    """Every bundled model: its counts, storage and source."""
    from roofline.calc.attention import kv_bytes_per_token
    from roofline.specs.catalog import catalog, load_model
    from roofline.units import si

    rows = [
        "| id | name | params | stored as | KV/token | max context | source |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i in catalog("models"):
        m = load_model(i)
        rows.append(
            f"| `{i}` | {m.name} | {si(m.params, '')} | {m.quant or m.dtype} | "
            f"{si(kv_bytes_per_token(m), 'B')} | {m.max_context or '-'} | {_link(m.source)} |"
        )
    cog.out("\n".join(rows) + "\n")


def _link(source: str) -> str:
    return f"[{source.split('//', 1)[-1].split('/', 1)[0]}]({source})" if source.startswith("http") else source


def docstrings(module: str, names: list[str] | None = None) -> None:
    """The module's docstring and each public function's, as they are in the code (the formulas and their sources)."""
    import importlib
    import inspect

    mod = importlib.import_module(module)
    cog.out(f"From `{module}`:\n\n```text\n{inspect.getdoc(mod)}\n```\n\n")
    for name, fn in inspect.getmembers(mod, inspect.isfunction):
        if fn.__module__ != module or name.startswith("_") or (names is not None and name not in names):
            continue
        cog.out(f"- `{name}{inspect.signature(fn)}`: {' '.join(inspect.getdoc(fn).split())}\n")
    cog.out("\n")


def card(run: dict) -> str:
    """A published run's device as its source names it, without the lab extraction's quote of its page."""
    return run["hardware"].split(" (page:")[0]


def serving_reality(engine: str) -> None:
    """A serving preset against its published runs: the fit, the held-out errors, the residual distribution and
    every case's predicted vs measured figure (engines/ENGINE.yaml; the runs as published in benchmarks/data/:
    serving-train.json and gpustack-candidates.json)."""
    import math
    import statistics

    from roofline.specs.presets import load

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import serving_cases

    p = load(engine)
    runs = serving_cases.published()
    engine_of_runs = runs[p.cases[0]]["engine"]  # vllm-legacy's runs are vllm's
    device_of = {c["id"]: c["hardware"] for c in serving_cases.cases(engine_of_runs) if c["id"] in p.cases}
    devices = sorted(set(device_of.values()))
    formats = ", ".join(f"{f} weights {v:.3g}" for f, v in p.format_bandwidth.items())
    out = [
        f"Fitted: {p.bandwidth_fraction:.3g} of peak bandwidth"
        + (f" ({formats})" if formats else "")
        + f", {p.compute_fraction:.3g} of peak FLOP/s, "
        f"{p.step_overhead_s * 1e3:.3g} ms a step + {p.layer_overhead_s * 1e6:.3g} µs a layer a step"
        + (f" (+{p.rocm_layer_overhead_s * 1e6:.3g} µs on ROCm)" if p.rocm_layer_overhead_s else "")
        + f", {p.request_overhead_s * 1e3:.3g} ms a request"
        + (f" (CV {p.request_overhead_cv:.2g})" if p.request_overhead_cv else "")
        + f"; KV pool {p.memory_fraction:g} x memory - weights - "
        f"{p.reserve_bytes / 1e9:.3g} GB per device. {len(p.cases)} runs on {', '.join(devices)}.",
        "",
        "Held-out median |predicted / measured - 1| (each run refitted without it; each setup's runs, one "
        "publisher's of one model on one device, refitted without them; each device's runs refitted without that "
        "device; n/a: no fold left a run that identifies the metric):",
        "",
        "| metric | runs | leave one run out | leave one setup out | leave one device out |",
        "| --- | --- | --- | --- | --- |",
    ]
    for metric, e in p.errors.items():
        setup, device = ("n/a" if e.get(k) is None else f"{e[k]:.1%}" for k in ("setup", "device"))
        out.append(f"| {metric} | {e['runs']} | {e['case']:.1%} | {setup} | {device} |")
    if p.holdout_device:
        out += _by_device(p, device_of)
    errors = [abs(math.exp(r) - 1) for r in p.holdout.values()]
    out += [
        "",
        f"Distribution of the {len(errors)} held-out (leave one run out) errors: median "
        f"{statistics.median(errors):.1%}, "
        f"within 10%: {sum(e <= 0.10 for e in errors) / len(errors):.0%}, within 25%: "
        f"{sum(e <= 0.25 for e in errors) / len(errors):.0%}, largest {max(errors):.0%}.",
        "",
        "| run | device | figure | measured | fitted | held out | its setup left out | its device left out |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def held(r: float | None) -> str:
        return "-" if r is None else f"{math.exp(r) - 1:+.0%}"

    for key, r in p.residuals.items():
        case, metric = key.split(" ")
        measured = runs[case]["metrics"][metric]
        left_out, device_out = p.holdout.get(f"{key} (left out)"), p.holdout_device.get(f"{key} (device left out)")
        setup_out = p.holdout_setup.get(f"{key} (setup left out)")
        out.append(
            f"| {case} | {card(runs[case])} | {metric} | {measured:.4g} | {math.exp(r) - 1:+.0%} | {held(left_out)} "
            f"| {held(setup_out)} | {held(device_out)} |"
        )
    cog.out("\n".join(out) + "\n")


def _by_device(p, device_of: dict[str, str]) -> list[str]:
    """Each device's fold apart: the median |error| of its runs' figures, priced by the refit without that device,
    and what that refit found (benchmarks/ on the path: serving_reality puts it there)."""
    import math
    import statistics

    import fit_engines

    groups = fit_engines.GROUPS
    shown = [g for g in groups if g in p.errors]
    out = [
        "",
        "Each device left out, device by device (median |predicted / measured - 1| of its runs' figures, refitted "
        "without it; the table above pools them):",
        "",
        "| device left out | runs | " + " | ".join(shown) + " | the refit without it |",
        "| --- | --- |" + " --- |" * len(shown) + " --- |",
    ]
    for d in sorted({device_of[k.split(" ")[0]] for k in p.holdout_device}):
        mine = {k: r for k, r in p.holdout_device.items() if device_of[k.split(" ")[0]] == d}
        cells = []
        for g in shown:
            errors = [abs(math.exp(r) - 1) for k, r in mine.items() if k.split(" ")[1] in groups[g]]
            cells.append(f"{statistics.median(errors):.1%}" if errors else "-")
        count = len({k.split(" ")[0] for k in mine})
        q = fit_engines.era_params(p.device_folds[d], p.name) if d in p.device_folds else None
        fold = (
            f"bandwidth {q['bandwidth_fraction']:.2f}, prefill {q['compute_fraction']:.2f} of peak, "
            f"{q['step_overhead_s'] * 1e3:.2g} ms a step + {q['layer_overhead_s'] * 1e6:.2g} µs a layer, "
            f"{q['request_overhead_s'] * 1e3:.2g} ms a request"
            + "".join(f", {f} weights {v:.2f}" for f, v in fit_engines.formats_of(q).items())
            if q
            else "-"
        )
        out.append(f"| {d} | {count} | " + " | ".join(cells) + f" | {fold} |")
    return out
