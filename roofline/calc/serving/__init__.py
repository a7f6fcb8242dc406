"""Serving features priced on top of the roofline step, one module each holding its validation, its pricing and
its output record: prefix caching (prefix), speculative decoding and multi-token prediction (speculative),
chunked prefill (chunked), pipeline stages (pipeline) and disaggregated prefill/decode pools (disagg). Each
module's docstring gives its formula, its source and what it assumes; roofline.calc.estimate applies them.
Their pricing functions take `p`, the roofline.calc.prepare.Prepared setup of the estimate.
"""
