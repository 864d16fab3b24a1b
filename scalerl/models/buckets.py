"""Length buckets: which rows of a forward share a padded grid (``train.length_buckets``,
docs/trainer-memory.md). Pure; ``CompletionLogits`` (``policy.py``) runs one pass per part."""
from __future__ import annotations

MIN_SAVED = 128
"""The padded positions a cut must save: a part costs its own pass through every layer, forward and
backward, which on the embedded models is per-op work. tiny_moe at the default's shape (about 16
rows, cuts saving about 60 positions each) took 0.150 s per update in 4 parts against 0.124 s in
one grid; with this floor 0.124 s, while the dense default keeps its gain (0.089 against 0.097 s)
and the step benchmark's batch (cuts of thousands of positions) is cut as before (benchmarks/RESULTS.md)."""


def length_buckets(lengths: list[int], buckets: int, min_saved: int = 1) -> list[list[int]]:
    """Row positions in at most ``buckets`` parts, longest rows first, each padded only to its own
    longest row: the trainer's forward pads a part, not the whole minibatch, to its longest
    completion. Each cut splits the part where one cut saves the most padded positions (the best
    cut point of a part sorted by length), until ``buckets`` parts or no cut saves ``min_saved``.

    >>> length_buckets([5, 46, 28, 46, 37, 28], 3)
    [[1, 3, 4], [2, 5], [0]]
    >>> length_buckets([7, 7, 7], 4)
    [[0, 1, 2]]
    >>> length_buckets([5, 46, 28, 46, 37, 28], 3, min_saved=30)  # the second cut saves 23
    [[1, 3, 4], [2, 5, 0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    parts = [order] if order else []

    def best_cut(part: list[int]) -> tuple[int, int]:  # (positions saved, cut index)
        top = lengths[part[0]]
        return max(((len(part) - k) * (top - lengths[part[k]]), k) for k in range(1, len(part))) if len(part) > 1 else (0, 0)

    while len(parts) < buckets:
        saved, at, i = max((*best_cut(part), i) for i, part in enumerate(parts)) if parts else (0, 0, 0)
        if saved < max(min_saved, 1):
            break
        parts[i : i + 1] = [parts[i][:at], parts[i][at:]]
    return parts
