"""Host memory that a freed tensor gives back (the trainer's CPU peak).

glibc serves an allocation from ``mmap`` (returned to the kernel on free) only above its mmap
threshold, and by default that threshold follows the largest block freed so far, up to 32 MiB.
After the first few MiB-sized tensors are freed, every later tensor below 32 MiB comes from the
heap instead, and the heap only shrinks from its top: a layer's recomputed activations, freed in
its backward, stay resident under the gradients allocated after them. Measured with
``benchmarks/bench_memory.py step`` on the Qwen2-0.5B shape at 2 x 4 x 256 tokens, that retained
heap was ~55 MB per decoder layer, most of the step's activation memory (``benchmarks/RESULTS.md``).

A fixed threshold (which also switches the adjustment off) sends every block of at least
``threshold`` bytes to ``mmap``. The price is a page fault per page of a large tensor: small next to
the matmuls that fill it at a real model's width, but not at the embedded default's (hidden size 96,
~5 MB activations): there a step spent ~45% of its time in the kernel, so the trainer sets it only
where ``model.release_freed_memory`` says (on for ``model=hf``).
"""
from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
MMAP_THRESHOLD = 4 << 20


def return_large_frees(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process. Returns whether it
    took effect (False where the C library is not glibc, e.g. macOS or musl: nothing changes)."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, threshold) == 1
