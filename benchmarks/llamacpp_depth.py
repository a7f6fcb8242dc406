"""How llama.cpp's time per weight byte of a prompt moves with the depth of a model's weights, here: the experiment
behind prompt_depth in roofline/measure/llamacpp_profile.py (docs/guides/llamacpp.md, Depth). One layer shape
(Qwen2.5-0.5B's: 896 wide, MLP 4864, 2 KV heads, qkv biases; a 1,024-token vocabulary) at three depths: the
profile's shallow prompt probe (48 MB of matrices), 4x and 12x the last-level cache. Only the number of layers
changes, so a layer's matrices, rows and fixed cost are the same and what moves is whether the weights stay in
cache between passes. Prompts of 128 and 512 tokens (llama-bench), interleaved rounds; the small probe's fixed cost
and the attention taken out as the profile does. Prints the median time per byte [ps] with its range, and each
depth's ratio to the shallow one per round.

    python benchmarks/llamacpp_depth.py [--type q8_0] [--rounds 4] [--cache MiB]

Needs a llama.cpp build (pip install '.[llamacpp]'); ~3 minutes on a 2-core VM.
"""

import argparse
import statistics
import tempfile
from pathlib import Path

from llamacpp_widths import cache_option, probe_cache, small_probe_cost

from roofline.calc.llamacpp import BITS
from roofline.measure import llamacpp, machine, synthetic
from roofline.measure.llamacpp_profile import PROMPT_BYTES, PROMPTS, _matrix_params, _median_s, _per_byte, streaming_s
from roofline.specs.catalog import load_model
from roofline.specs.checkpoint import gguf_model

SHAPE = Path(__file__).parent / "shapes" / "qwen2.5-0.5b.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--type", default="q8_0")
    parser.add_argument("--rounds", type=int, default=4)
    cache_option(parser)
    options = parser.parse_args()
    kind = options.type.upper()
    build = llamacpp.find()
    cache, source = probe_cache(options)
    print(f"{machine.cpu_name()}, last-level cache {cache / 2**20:.0f} MiB ({source}), {build.found}, {kind.lower()}\n")
    layer = load_model(str(SHAPE)).arch._replace(vocab_size=1024, layers=1)
    per_layer_bytes = _matrix_params(layer) * BITS[kind] / 8
    depths = {
        "48 MB": PROMPT_BYTES,
        "4x cache": 4 * cache,
        "12x cache": 12 * cache,
    }
    with tempfile.TemporaryDirectory(prefix="roofline-depth-") as name:
        folder = Path(name)
        per_step, per_layer = small_probe_cost(build, folder, kind)
        files = {}
        for label, target in depths.items():
            a = layer._replace(layers=max(2, round(target / per_layer_bytes)))
            path = synthetic.write(a, folder / f"{len(files)}.gguf", kind)
            files[label] = (a, path, sum(gguf_model(path)[1].streamed_by_dtype.values()))
        samples: dict[tuple[str, int], list[float]] = {}
        for _ in range(options.rounds):
            for label, (a, path, streamed) in files.items():  # interleaved: every depth once per round
                fixed = per_step + a.layers * per_layer
                for r in llamacpp.bench(build, path, list(PROMPTS), 0)[0]:
                    step = streaming_s(_median_s(r), fixed)
                    samples.setdefault((label, r["n_prompt"]), []).append(_per_byte(a, streamed, r["n_prompt"], step))
    print("| depth | layers | matrices | " + " | ".join(f"M = {m} [ps/B] | ratio to 48 MB" for m in PROMPTS) + " |")
    print("| --- " * (3 + 2 * len(PROMPTS)) + "|")
    for label, (a, _, streamed) in files.items():
        cells = []
        for m in PROMPTS:
            values, base = samples[label, m], samples["48 MB", m]
            ratios = [v / b for v, b in zip(values, base, strict=True)]
            cells.append(f"{statistics.median(values) * 1e12:.0f} ({min(values) * 1e12:.0f}-{max(values) * 1e12:.0f})")
            cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        print(f"| {label} | {a.layers} | {streamed / 1e6:.0f} MB | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
