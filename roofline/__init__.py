"""roofline: napkin math of LLM inference, done correctly, and checked against the machine it runs on.

    import roofline
    result = roofline.estimate(roofline.load_model("llama-3.1-8b"), roofline.load_hardware("h100-sxm"), batch=8)
    print(result.tpot_s, result.to_dict()["decode"]["bound"])
"""

__version__ = "0.1.0"

from roofline.calc.estimate import Estimate, estimate
from roofline.errors import RooflineError, UsageError
from roofline.specs.records import Hardware, Model
from roofline.specs.hardware import load_hardware
from roofline.specs.catalog import load_model

__all__ = ["Estimate", "Hardware", "Model", "RooflineError", "UsageError", "estimate", "load_hardware", "load_model"]
