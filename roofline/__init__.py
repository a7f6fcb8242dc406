"""roofline: napkin math of LLM inference, done correctly, and checked against the machine it runs on.

    import roofline
    model, device = roofline.load_model("llama-3.1-8b"), roofline.load_hardware("h100-sxm")
    result = roofline.estimate(model, device, batch=8, knobs=roofline.Knobs(weight_dtype="fp8"))
    print(result.tpot_s, result.to_dict()["decode"]["bound"])
    roofline.sweep(model, device, tpot_slo=0.05).summary.best_batch
    roofline.compare([model], [device], batch=8).rows

The public API is `__all__` below; everything else is importable but may move between releases.
"""

__version__ = "0.1.0"

from roofline.calc.estimate import Estimate, estimate
from roofline.calc.knobs import Knobs
from roofline.errors import RooflineError, UsageError
from roofline.specs.catalog import load_model
from roofline.specs.hardware import load_hardware
from roofline.specs.records import Hardware, Model

__all__ = [
    "Estimate",
    "Hardware",
    "Knobs",
    "Model",
    "RooflineError",
    "UsageError",
    "compare",
    "estimate",
    "load_hardware",
    "load_model",
    "sweep",
]


def __getattr__(name: str):
    """sweep and compare load on first use: the CLI's start-up (benchmarks/startup.py) does not need them."""
    if name in ("sweep", "compare"):
        from roofline.calc import sweep as sweeps

        return getattr(sweeps, name)
    raise AttributeError(f"module 'roofline' has no attribute {name!r}")
