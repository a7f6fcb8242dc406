"""Price the published serving runs the presets were not fitted on (benchmarks/data/gpustack-candidates.json:
GPUStack's performance lab, extracted with their sources; its closed loops are training runs) with the stored
presets, the way each was measured: every request at once (`vllm bench serve` at rate inf, 100-1000 requests: the
engine saturated). Prints each run's errors, and their medians grouped by whether the run's simulated mean batch is
beyond the largest its preset's fitted runs reached (`batch_covered`, where `estimate` and `simulate` say their
typical error stops), and last the pooled medians of served / priced output tokens/s over all, within and beyond
(the figures presets.at_once and presets.beyond_runs quote). Which runs: `serving_cases.lab`.

    python benchmarks/candidates.py [vllm|sglang]
"""

import math
import statistics
import sys
from pathlib import Path

from roofline.calc.presets import beyond_runs
from roofline.specs import presets

sys.path.insert(0, str(Path(__file__).parent))
import fit_engines  # noqa: E402
import serving_cases  # noqa: E402


def cases(engine: str) -> list[dict]:
    """The lab's runs of `engine` the presets were not fitted on: those of every request at once."""
    fitted = {c["id"] for c in serving_cases.cases(engine)}
    return [c for c in serving_cases.lab(engine) if c["id"] not in fitted]


def main(engines: list[str]) -> None:
    served = []  # (measured / priced output tokens/s, batch, beyond its preset's batches) of each run, all engines
    for engine in engines:
        found = cases(engine)
        pricer, params = fit_engines.Pricer(engine, found), fit_engines.stored(engine)
        groups: dict[tuple[str, str], list[float]] = {}
        print(f"{engine}: {len(found)} runs")
        loaded = {era: presets.load(era) for era in fit_engines.eras(engine)}
        for c in found:
            errors = {m: math.exp(r) - 1 for m, r in pricer.residuals(c, params).items()}
            batch = pricer.batch(c, params)
            beyond = beyond_runs(loaded[fit_engines.era_of(engine, c)], batch) is not None
            print(f"  {c['id']:<70} {c['requests']:>5} at once  batch {batch:5.0f}{' beyond' if beyond else ''}",
                  " ".join(f"{m} {e:+.0%}" for m, e in errors.items()))  # fmt: skip
            for m, e in errors.items():
                groups.setdefault(("all", m), []).append(e)
                groups.setdefault(("beyond" if beyond else "within", m), []).append(e)
            if "output_tok_s" in errors:
                served.append((1 / (1 + errors["output_tok_s"]), batch, beyond))
        for (group, m), errors in sorted(groups.items()):
            print(f"  {group:<7} {m:<14} runs {len(errors):>3}  median {statistics.median(errors):+.0%}")
    for group, runs in (
        ("all", served),
        ("within", [r for r in served if not r[2]]),
        ("beyond", [r for r in served if r[2]]),
    ):
        if runs:  # the figures presets.at_once and presets.beyond_runs quote
            low, high = min(b for _, b, _ in runs), max(b for _, b, _ in runs)
            print(
                f"{group}, {' and '.join(engines)}: {len(runs)} runs at mean batches {low:.0f}-{high:.0f} served a "
                f"median {statistics.median(r for r, _, _ in runs):.2f}x the output tokens/s priced"
            )


if __name__ == "__main__":
    asked = sys.argv[1:] or ["vllm", "sglang"]
    if not set(asked) <= {"vllm", "sglang"}:
        sys.exit(f"candidates.py: expected vllm and/or sglang, got {' '.join(asked)}")
    main(asked)
