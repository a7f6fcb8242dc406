"""How llama.cpp's time per weight byte moves with a model's hidden size, here: the experiment behind the width rule of
roofline/calc/llamacpp.py and the one tried against it (docs/guides/llamacpp.md). Probes of one shape (head_dim 64,
4:1 KV, MLP 3x) at eight widths, each as deep as a bare `measure --engine llamacpp` makes its probes (probe_bytes),
decode M = 1, 2, 4, 8 rows (llama-batched-bench), and on shallow ones (the profile's 48 MB) prompts of 128 and 512
tokens (llama-bench), in interleaved rounds; the fixed cost of a step (the small probes of `measure --engine
llamacpp`) is taken out, and from prompts their attention. Prints the median time per byte [ps] with its spread per
width, then how three rules predict the other widths from the 512- and 1024-wide probes: log-log in width held beyond
them (the rule), a + b / width, log-log not held.

    python benchmarks/llamacpp_widths.py [--types q8_0,q4_0] [--rounds 3] [--cache MiB]

Needs a llama.cpp build (pip install '.[llamacpp]'); ~3 minutes on a 2-core VM.
"""

import argparse
import math
import statistics
import tempfile
from pathlib import Path

from roofline.calc.llamacpp import width_rule
from roofline.measure import llamacpp, llamacpp_profile, machine, synthetic
from roofline.measure.llamacpp_profile import (
    BATCHED_GENERATE,
    DEPTHS,
    GENERATE,
    PROMPT_BYTES,
    PROMPTS,
    SMALL,
    _median_s,
    _per_byte,
    deep_layers,
    fixed_cost,
    layers_for,
    probe,
    streaming_s,
)
from roofline.specs.checkpoint import gguf_model
from roofline.specs.params import Architecture

WIDTHS = (512, 576, 768, 896, 1024, 1280, 1536, 2048)
DECODE = (1, 2, 4, 8)
ROWS = (*DECODE, *PROMPTS)
LOW, HIGH = 512, 1024


def shape(width: int, layers: int) -> Architecture:
    """The profile's probe with its MLP 3x at every width, so that only the width changes, and as many KV heads as
    the largest divisor of its heads up to a quarter of them (llama.cpp aborts where they do not divide: 576 wide
    has 9 heads, 896 has 14)."""
    heads = width // 64
    kv = max(d for d in range(1, max(heads // 4, 1) + 1) if heads % d == 0)
    return probe(width, layers)._replace(intermediate_size=3 * width, num_kv_heads=kv)


def small_probe_cost(build, folder: Path, kind: str) -> tuple[float, float]:
    """(per step, per layer) [s] of a decode step, from the small probe at two depths, as the profile measures it."""
    steps = {}
    for depth in DEPTHS:
        path = synthetic.write(probe(SMALL, depth), folder / f"small{depth}.gguf", kind)
        result = llamacpp.bench(build, path, [], GENERATE)[0][0]
        steps[depth] = _median_s(result) / result["n_gen"]
        path.unlink()
    return fixed_cost(steps)


def line(narrow: float, wide: float, width: float) -> float:
    """a + b / width through the two probes, a floored at 0 beyond the wide one (the rule tried against the other)."""
    a = wide - (narrow - wide) * LOW / (HIGH - LOW)
    a = max(a, 0.0) if width > HIGH else a
    return a + (wide - a) * HIGH / width


def loglog(narrow: float, wide: float, width: float) -> float:
    """The rule's log-log line, not held beyond the probes."""
    return wide * (narrow / wide) ** (math.log(HIGH / width) / math.log(HIGH / LOW))


def cache_option(parser: argparse.ArgumentParser) -> None:
    """--cache MiB: size the probes as another run did, to compare with it."""
    parser.add_argument(
        "--cache",
        type=float,
        help="the cache [MiB] to size probes by [default: a bare measure's: its ladder, else the OS]",
    )


def probe_cache(options: argparse.Namespace) -> tuple[float, str]:
    """The cache [B] the probes are sized by, and where it came from: --cache, else as a bare measure sizes them."""
    if options.cache:
        return options.cache * 2**20, "--cache"
    return llamacpp_profile.probe_cache(None, machine.cpu_cache(), ladder=llamacpp_profile.ladder_cache)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default="q8_0,q4_0")
    parser.add_argument("--rounds", type=int, default=3)
    cache_option(parser)
    options = parser.parse_args()
    build = llamacpp.find()
    cache, source = probe_cache(options)
    deep = llamacpp_profile.probe_bytes(cache) / 1e6
    print(f"{machine.cpu_name()}, cache {cache / 2**20:.0f} MiB ({source}): deep probes {deep:.0f} MB, {build.found}\n")
    with tempfile.TemporaryDirectory(prefix="roofline-widths-") as name:
        folder = Path(name)
        for kind in (k.upper() for k in options.types.split(",")):
            per_step, per_layer = small_probe_cost(build, folder, kind)
            files, prompt_files = {}, {}
            for width in WIDTHS:
                for table, depth, layers in (
                    (files, "deep", deep_layers(shape(width, 1), kind, cache)),
                    (prompt_files, "shallow", layers_for(shape(width, 1), kind, PROMPT_BYTES)),
                ):
                    a = shape(width, layers)
                    path = synthetic.write(a, folder / f"{depth}{width}-{kind}.gguf", kind)
                    table[width] = (a, path, sum(gguf_model(path)[1].streamed_by_dtype.values()))
            samples: dict[tuple[int, int], list[float]] = {}
            for _ in range(options.rounds):
                for width in WIDTHS:  # interleaved: every width once per round
                    a, path, streamed = files[width]
                    fixed = per_step + a.layers * per_layer
                    for r in llamacpp.batched(build, path, 4, BATCHED_GENERATE, list(DECODE))[0]:
                        step = streaming_s(r["t_tg"] / r["tg"], fixed)
                        samples.setdefault((width, r["pl"]), []).append(step / streamed)
                    a, path, streamed = prompt_files[width]
                    fixed = per_step + a.layers * per_layer
                    for r in llamacpp.bench(build, path, list(PROMPTS), 0)[0]:
                        step = streaming_s(_median_s(r), fixed)
                        samples.setdefault((width, r["n_prompt"]), []).append(
                            _per_byte(a, streamed, r["n_prompt"], step)
                        )
            for _, path, _ in [*files.values(), *prompt_files.values()]:
                path.unlink()
            print_type(kind, per_step, per_layer, samples)


def spread(values: list[float]) -> str:
    return f"{min(values) * 1e12:.1f}-{max(values) * 1e12:.1f}"


def print_type(kind: str, per_step: float, per_layer: float, samples: dict) -> None:
    median = {key: statistics.median(v) for key, v in samples.items()}
    print(f"{kind.lower()}: fixed cost {per_step * 1e6:.0f} µs a step + {per_layer * 1e6:.1f} µs a layer")
    print("| width | " + " | ".join(f"M = {m} [ps/B]" for m in ROWS) + " |")
    print("| --- " * (len(ROWS) + 1) + "|")
    for width in WIDTHS:
        cells = [f"{median[width, m] * 1e12:.1f} ({spread(samples[width, m])})" for m in ROWS]
        print(f"| {width} | " + " | ".join(cells) + " |")
    print(f"\n{kind.lower()}: predicted from the {LOW}- and {HIGH}-wide probes / measured - 1")
    print("| width | rule | " + " | ".join(f"M = {m}" for m in ROWS) + " |")
    print("| --- " * (len(ROWS) + 2) + "|")
    for width in (w for w in WIDTHS if w not in (LOW, HIGH)):
        rules = {
            "log-log, held beyond the probes (the rule)": lambda n, w: width_rule(n, w, LOW, HIGH, width),
            "a + b / width": lambda n, w: line(n, w, width),
        }
        if width > HIGH:
            rules["log-log, not held"] = lambda n, w: loglog(n, w, width)
        for rule, guess in rules.items():
            cells = [f"{guess(median[LOW, m], median[HIGH, m]) / median[width, m] - 1:+.0%}" for m in ROWS]
            print(f"| {width} | {rule} | " + " | ".join(cells) + " |")
    print()


if __name__ == "__main__":
    main()
