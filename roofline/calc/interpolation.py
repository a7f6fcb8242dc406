"""Interpolation of measured curves: piecewise-linear in log x (and log y), held constant beyond the ends."""

import math


def interpolate(points: list[tuple[float, float]], x: float, log_y: bool = True) -> float:
    """Piecewise-linear in log x (and log y), held constant beyond the ends."""
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            t = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
            if log_y:
                return math.exp(math.log(y0) + t * (math.log(y1) - math.log(y0)))
            return y0 + t * (y1 - y0)
    raise AssertionError("unreachable")
