"""Each type of a llama.cpp profile left out in turn and priced from the others, against its own measured times:
prompts (128 and 512 rows) at three widths and three weight sizes, by its stand-in's kernels alone, and with its
prompts run alone (`prompt_types`: what a default profile keeps for the types it had no time for, here taken from
the type's own wide shallow prompts and deep prompt ratio, which measure_prompts runs on the same probes).

    python benchmarks/llamacpp_stand_ins.py here.yaml

No llama.cpp run: the profile's own figures only (docs/guides/llamacpp.md, Prompts alone).
"""

import argparse
import statistics
from pathlib import Path

import yaml

from roofline.calc import llamacpp as price

ROWS, WIDTHS, WORKING_SETS = (128, 512), (576, 896, 2048), (48e6, 150e6, 256e6)


def left_out(profile: dict, kind: str, alone: bool) -> dict:
    """`profile` without `kind` among its types; with `alone`, its prompts as a prompts-alone entry."""
    rest = {**profile, "types": {k: v for k, v in profile["types"].items() if k != kind}}
    if not alone:
        return rest
    own = profile["types"][kind]
    table = {p: own["seconds_per_byte"][p] for p in own["seconds_per_byte"] if int(p) >= price.PROMPT_ROWS}
    entry = {"seconds_per_byte": table, **({"prompt_depth": own["prompt_depth"]} if own.get("prompt_depth") else {})}
    return {**rest, "prompt_types": {kind: entry}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a hardware YAML with engines.llamacpp of two types or more")
    profile = yaml.safe_load(Path(parser.parse_args().profile).read_text())["engines"]["llamacpp"]
    pooled: dict[str, list[float]] = {"stand-in": [], "prompts alone": []}
    print("| type | priced by | stand-in: predicted / own | with its prompts alone |")
    print("| --- | --- | --- | --- |")
    for kind in profile["types"]:
        ratios = {}
        for name, alone in (("stand-in", False), ("prompts alone", True)):
            other = left_out(profile, kind, alone)
            ratios[name] = [
                price.seconds_per_byte(other, kind, r, w, ws) / price.seconds_per_byte(profile, kind, r, w, ws)
                for r in ROWS
                for w in WIDTHS
                for ws in WORKING_SETS
            ]
            pooled[name] += ratios[name]
        by = price.measured_type(left_out(profile, kind, False), kind)
        spans = (f"{min(v):.2f}-{max(v):.2f}" for v in ratios.values())
        print(f"| {kind.lower()} | {by.lower()} | {' | '.join(spans)} |")
    for name, ratios in pooled.items():
        within = sum(abs(x - 1) <= 0.15 for x in ratios)
        median = statistics.median(abs(x - 1) for x in ratios)
        print(f"{name}: median |ratio - 1| {median:.1%}, within 15% {within} of {len(ratios)}")


if __name__ == "__main__":
    main()
