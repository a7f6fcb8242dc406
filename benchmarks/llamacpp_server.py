"""The llama-server table of docs/guides/llamacpp.md: start llama-server on loopback with a synthetic GGUF, run
`roofline bench --compare` at four loads in interleaved rounds (1 client, Poisson arrivals at 0.35 and 0.7 of the
capacity simulate predicts for a closed loop as deep as the slots, that closed loop), and print predicted /
measured (median and range over the rounds) of TTFT p50, TPOT p50 and ITL p50 beside the measured medians.

After each run the profile's probes are rerun (as `validate --engine llamacpp` does) and the same requests simulated
again with the profile's times scaled by the machine's drift since it was measured: decode rows and fixed costs by
the decode probe's now / then, prompt rows by the prompt probe's. Those ratios ("drift-scaled") say how much of a
miss is the machine having changed since the profile, which a queue amplifies: a step priced 1.3x fast leaves
requests that overlapped on the server alone in the simulation. And priced once more from the same profile
without its own-shape probe ("two probes": between the 512 and 1024 probes, as a profile measured without -m).
Those two run `roofline simulate`, which starts a closed loop's clients together; the ratio column is `bench
--compare`'s, which starts them when bench sent them: at the closed loop their TTFTs are not comparable.

    python benchmarks/llamacpp_server.py [--profile here.yaml] [--rounds 3]

Needs a llama.cpp build (pip install '.[llamacpp]'); ~6 minutes on a 2-core VM (three rounds). Without --profile,
the q8_0 profile is measured first (~25 s with the attention probe), the served shape's own layer shape probed too
(`measure --engine llamacpp -m`).
"""

import argparse
import statistics
import tempfile
from pathlib import Path

import yaml
from llamacpp_table import SHAPES, cli

from roofline.calc.llamacpp import PROMPT_ROWS
from roofline.measure import llamacpp, llamacpp_profile, synthetic
from roofline.specs.catalog import load_model

LOADS = {  # name -> bench's load flags; Poisson rates as a share of the predicted capacity (see main)
    "1 client": ["--concurrency", "1"],
    "Poisson 0.35x capacity": 0.35,
    "Poisson 0.7x capacity": 0.7,
    "4 clients (closed loop)": ["--concurrency", "4"],
}
WORKLOAD = ["--prompt", "128", "--output", "32"]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def drift_scaled(build, profile: str, kind: str, folder: Path) -> tuple[str, float, float]:
    """A copy of `profile` with `kind`'s times scaled by this machine's drift since it was measured (its probes rerun
    now), written in `folder`; and the decode and prompt drifts (now / then)."""
    spec = yaml.safe_load(Path(profile).read_text())
    entry = spec["engines"]["llamacpp"]["types"][kind]
    decode = llamacpp_profile.reference_seconds_per_byte(build, entry, kind, folder / "wide.gguf")
    decode /= entry["seconds_per_byte"]["1"]
    prompts = llamacpp_profile.reference_prompt_seconds_per_byte(build, entry, kind, folder / "wide_prompt.gguf")
    prompt = statistics.median(s / entry["seconds_per_byte"][m] for m, s in prompts.items())
    own = [(probed, "seconds_per_byte") for probed in (entry.get("at_width") or {}).values()]
    for holder, table in [(entry, "seconds_per_byte"), (entry, "narrow_seconds_per_byte"), *own]:
        holder[table] = {m: t * (prompt if int(m) >= PROMPT_ROWS else decode) for m, t in holder[table].items()}
    entry["per_step_s"] *= decode
    entry["per_layer_s"] *= decode
    path = folder / "drift-scaled.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path), decode, prompt


def two_probes(profile: str, folder: Path) -> str:
    """A copy of `profile` without its own-width probes (written in `folder`): priced from the two probe widths."""
    spec = yaml.safe_load(Path(profile).read_text())
    for entry in spec["engines"]["llamacpp"]["types"].values():
        entry.pop("at_width", None)
    path = folder / "two-probes.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="a profile with engines.llamacpp [default: measure q8_0 now]")
    parser.add_argument("--shape", default="qwen2.5-0.5b")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--type", default="q8_0")
    parser.add_argument("--vocab-size", type=int, help="the shape's vocabulary replaced [default: its own]")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--kv-unified", action="store_true", help="the server's slots share one KV stream (-kvu)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--loads", default=",".join(LOADS), help="which of the loads, comma-separated")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    profile = options.profile or str(folder / "here.yaml")
    shape = load_model(str(SHAPES / f"{options.shape}.yaml")).arch
    shape = shape._replace(layers=options.layers, vocab_size=options.vocab_size or shape.vocab_size)
    model = synthetic.write(shape, folder / "m.gguf", options.type)
    if options.profile is None:  # the served model's own layer shape probed too
        cli(["measure", "--engine", "llamacpp", "--dtype", options.type, "-m", str(model), "--save", profile])
    priced = ["-m", str(model), "-H", profile, "--engine", "llamacpp", "--max-num-seqs", str(options.slots)]
    priced += ["--kv-unified"] if options.kv_unified else []
    # The capacity: the requests a second simulate predicts for a closed loop as deep as the slots.
    closed = ["--concurrency", str(options.slots), "--requests", str(10 * options.slots)]
    capacity = cli(["simulate", *priced, *closed, *WORKLOAD, "--json"])["requests_per_s"]
    print(f"predicted capacity {capacity:.2f} requests/s", flush=True)
    loads = {
        name: load if isinstance(load, list) else ["--rate", f"{load * capacity:.3g}/s"] for name, load in LOADS.items()
    }
    results: dict[str, list[dict]] = {name: [] for name in options.loads.split(",")}
    scaled: dict[str, list[dict[str, float]]] = {name: [] for name in results}
    widths: dict[str, list[dict[str, float]]] = {name: [] for name in results}
    plain = two_probes(profile, folder)
    drifts: list[tuple[float, float]] = []
    build, kind = llamacpp.find(), options.type.upper()
    with llamacpp.server(build, model, options.slots, 1024 * options.slots, kv_unified=options.kv_unified) as url:
        for _ in range(options.rounds):
            for name in results:
                requests = [*loads[name], "--requests", str(options.requests), "--warmup", "2", *WORKLOAD]
                args = ["bench", url, *requests, "--vocab", str(shape.vocab_size), "--compare", *priced]
                run = cli([*args, "--quiet", "--json"])
                results[name].append(run)
                # The same requests (the same seed and flags) simulated with the profile as the machine runs now.
                path, decode, prompt = drift_scaled(build, profile, kind, folder)
                drifts.append((decode, prompt))
                again = ["-m", str(model), "-H", path, *priced[4:]]
                predicted = cli(["simulate", *again, *requests, "--json"])
                scaled[name].append(
                    {key: predicted[key]["p50"] / run["measured"][key]["p50"] for key in ("ttft_s", "tpot_s")}
                )
                # And with the two probe widths only, as a profile without the model's own width prices it.
                predicted = cli(["simulate", "-m", str(model), "-H", plain, *priced[4:], *requests, "--json"])
                widths[name].append(
                    {key: predicted[key]["p50"] / run["measured"][key]["p50"] for key in ("ttft_s", "tpot_s")}
                )
    decode, prompt = (", ".join(f"{d[i]:.2f}" for d in drifts) for i in (0, 1))
    print(f"drift (now / profile) after each run: decode {decode}; prompts {prompt}\n")
    head = "| load | rate | TTFT p50 measured | ratio | drift-scaled | two probes | TPOT p50 measured | ratio |"
    print(head + " drift-scaled | two probes | ITL p50 ratio |")
    print("| --- " * 11 + "|")
    for name, runs in results.items():
        ttft = statistics.median(r["measured"]["ttft_s"]["p50"] for r in runs) * 1e3
        tpot = statistics.median(r["measured"]["tpot_s"]["p50"] for r in runs) * 1e3
        ratio = {key: [r["ratio"][key]["p50"] for r in runs] for key in ("ttft_s", "tpot_s", "itl_s")}
        again = {key: [r[key] for r in scaled[name]] for key in ("ttft_s", "tpot_s")}
        plain_ratio = {key: [r[key] for r in widths[name]] for key in ("ttft_s", "tpot_s")}
        rate = loads[name][1] if loads[name][0] == "--rate" else "closed loop"
        row = [name, rate, f"{ttft:.0f} ms", spread(ratio["ttft_s"]), spread(again["ttft_s"])]
        row += [spread(plain_ratio["ttft_s"]), f"{tpot:.1f} ms", spread(ratio["tpot_s"]), spread(again["tpot_s"])]
        row += [spread(plain_ratio["tpot_s"]), spread(ratio["itl_s"])]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
