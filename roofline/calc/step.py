"""One step's roofline: its work, times and bound (a Phase), and the exact mean of a run of decode steps."""

from typing import NamedTuple

from roofline.calc import formulas as f
from roofline.calc.shape import Shape


class Phase(NamedTuple):
    """One step's work and its roofline times [FLOP, B, s]."""

    flops: float
    bytes: float
    intensity_flop_per_byte: float
    compute_s: float
    memory_s: float
    comm_s: float  # tensor-parallel all-reduces, added to the roofline time
    time_s: float
    bound: str  # "compute" or "memory"
    cached_tokens: int = 0  # prefill: prompt tokens per sequence served from a prefix cache


def phase(flops: float, nbytes: float, F: float, W: float, time_s: float = 0.0, comm_s: float = 0.0) -> Phase:
    """A step's roofline plus its communication; `time_s` is a mean of per-step maxima when the step stands for many."""
    compute_s, memory_s = flops / F, nbytes / W
    return Phase(
        flops=flops,
        bytes=nbytes,
        intensity_flop_per_byte=flops / nbytes,
        compute_s=compute_s,
        memory_s=memory_s,
        comm_s=comm_s,
        time_s=max(time_s, compute_s, memory_s) + comm_s,
        bound="compute" if compute_s >= memory_s else "memory",
    )


def decode_step(shape: Shape, B: int, P: int, steps: int, F: float, W: float, link, latency, ep_link) -> Phase:
    """The mean of `steps` decode steps from context P at batch B (exact: the work is piecewise linear in the step)."""
    mean_time, mean_compute, mean_memory = f.mean_of_max_piecewise(
        lambda j: shape.decode_flops(B, P + j) / F,
        lambda j: shape.decode_bytes(B, P + j) / W,
        steps,
        shape.decode_breakpoints(P),
    )
    return phase(mean_compute * F, mean_memory * W, F, W, mean_time, shape.comm_seconds(B, link, latency, ep_link))


class Work(NamedTuple):
    """One step's (or a run of steps') time and the bytes and FLOPs it moves per device [s, B, FLOP]."""

    seconds: float
    bytes: float
    flops: float

    def __add__(self, other: "Work") -> "Work":
        return Work(self.seconds + other.seconds, self.bytes + other.bytes, self.flops + other.flops)

    def __mul__(self, x: float) -> "Work":
        return Work(self.seconds * x, self.bytes * x, self.flops * x)


NO_WORK = Work(0.0, 0.0, 0.0)


def step_work(flops: float, nbytes: float, comm_s: float, F: float, W: float) -> Work:
    """A step's roofline time max(FLOPs / F, bytes / W) plus its communication, with the work it moves."""
    return Work(max(flops / F, nbytes / W) + comm_s, nbytes, flops)
