"""roofline: napkin math of LLM inference, done correctly, and checked against the machine it runs on.

    import roofline
    result = roofline.estimate(roofline.load_model("llama-3.1-8b"), roofline.load_hardware("h100-sxm"), batch=8)
    print(result.tpot_s, result.to_dict()["decode"]["bound"])
"""

__version__ = "0.1.0"

from roofline.calc import Estimate, estimate
from roofline.errors import RooflineError, UsageError
from roofline.specs import Hardware, Model, load_hardware, load_model

__all__ = ["Estimate", "Hardware", "Model", "RooflineError", "UsageError", "estimate", "load_hardware", "load_model"]
