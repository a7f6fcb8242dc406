"""Measuring this machine (torch, imported inside the functions that need it): microbenchmarks, all-reduces,
the plain decoder that `validate` times, and measured profiles.

    roofline.measure.run(device="cpu", quick=True)  # `roofline measure --json`'s result
"""

from roofline.measure.bench import run

__all__ = ["run"]
