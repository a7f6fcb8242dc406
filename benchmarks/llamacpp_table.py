"""The held-out llama.cpp table of docs/guides/llamacpp.md: measure llama.cpp's profile here (on the synthetic probes),
then `validate --engine llamacpp` shapes and weight types the profile never ran, and print predicted / measured,
raw and corrected for the machine's drift since the profile (its probes rerun each round: decode and prompts).

    python benchmarks/llamacpp_table.py [--profile here.yaml] [--repeat 3] [--prompt 128]

Needs a llama.cpp build (pip install '.[llamacpp]'); ~2 minutes on a 2-core VM.
"""

import argparse
import contextlib
import io
import json
import tempfile
from pathlib import Path

from roofline.cli import run

SHAPES = Path(__file__).parent / "shapes"
CASES = [  # (shape, --layers, --type): none of them is a probe's shape
    ("smollm2-135m", None, "q8_0"),
    ("smollm2-135m", None, "q4_0"),
    ("smollm2-135m", None, "q4_k_m"),
    ("qwen2.5-0.5b", 8, "q8_0"),
    ("qwen2.5-0.5b", 8, "f16"),
    ("tinyllama-1.1b", 4, "q5_0"),
]


def cli(args: list[str]) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run(args)
    if code:
        raise SystemExit(f"roofline {' '.join(args)} exited {code}")
    return json.loads(out.getvalue()) if "--json" in args else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="an existing profile with engines.llamacpp [default: measure one now]")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", default="1,4")
    parser.add_argument("--prompt", default="128", help="prompt tokens (384: one row's cache view past 256 cells)")
    options = parser.parse_args()
    profile = options.profile
    if profile is None:
        profile = str(Path(tempfile.mkdtemp()) / "here.yaml")
        cli(["measure", "--engine", "llamacpp", "--save", profile])
    head = "| shape | layers | type | batch | TTFT measured | predicted | ratio | TPOT measured | predicted | ratio "
    print(head + "| drift | TPOT ratio x drift | prompt drift | TTFT ratio x prompt drift |")
    print("| --- " * 14 + "|")
    for shape, layers, kind in CASES:
        args = ["validate", "--engine", "llamacpp", "-m", str(SHAPES / f"{shape}.yaml"), "--type", kind, "-H", profile]
        args += ["--batch", options.batch, "--prompt", options.prompt, "--output", "32"]
        args += ["--repeat", str(options.repeat)]
        args += ["--layers", str(layers)] if layers else []
        report = cli([*args, "--json"])
        for r in report["rows"]:
            ttft = f"{r['measured_ttft_s'] * 1e3:.1f} ms | {r['predicted_ttft_s'] * 1e3:.1f} ms | {r['ttft_ratio']:.2f}"
            tpot = f"{r['measured_tpot_s'] * 1e3:.2f} ms | {r['predicted_tpot_s'] * 1e3:.2f} ms | {r['tpot_ratio']:.2f}"
            layers_run = layers or report["model"]["layers"]
            drift, prompts = report["drift"]["ratio"], report["drift"]["prompt_ratio"]
            fixed = f"{drift:.2f} | {r['drift_corrected_tpot_ratio']:.2f}"
            fixed += f" | {prompts:.2f} | {r['drift_corrected_ttft_ratio']:.2f}"
            print(f"| {shape} | {layers_run} | {kind} | {r['batch']} | {ttft} | {tpot} | {fixed} |", flush=True)


if __name__ == "__main__":
    main()
