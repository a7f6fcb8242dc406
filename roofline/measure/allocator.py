"""Keep the memory a CPU run frees, as serving engines keep their activation buffers (glibc's mallopt).

An eager CPU prefill allocates its activations fresh, megabytes per tensor. glibc serves a block above its
mmap threshold (128 KiB, rising to at most 32 MiB as blocks are freed) with mmap and unmaps it on free, and
returns a heap top larger than its trim threshold to the system, so each prefill faults its activations in
again page by page: 1.4-1.9 GB a prefill of Qwen2.5-0.5B's shape at batch 16 (bf16, 128-token prompts) on a
2-core Zen 5 VM whose first-touch fill rate moved between 0.6 and 4.3 GB/s, and an out-of-place multiply of
4 MiB tensors there ran at 8 GB/s instead of 35-50. Engines that serve reuse their buffers (PyTorch's CUDA
caching allocator, llama.cpp's compute buffer), so `measure` and `validate` run with glibc told to keep what
is freed: no mmap (M_MMAP_MAX 0; glibc still maps when the heap cannot grow) and no trim below 2 GiB
(M_TRIM_THRESHOLD). Source: mallopt(3), https://man7.org/linux/man-pages/man3/mallopt.3.html
"""

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc malloc.h
TRIM_THRESHOLD = 2**31 - 1  # mallopt takes an int


def keep_freed_memory() -> str:
    """Tell glibc to keep freed memory for reuse; returns what the allocator does now, for the profile's record."""
    if not sys.platform.startswith("linux"):
        return "the system allocator (not glibc)"
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl has no mallopt
        return "the system allocator (no mallopt)"
    if mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD):
        return "glibc, keeping freed memory (M_MMAP_MAX 0, M_TRIM_THRESHOLD 2 GiB)"
    return "glibc defaults (mallopt refused)"
