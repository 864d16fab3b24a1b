"""How many arms the local launcher runs at once (launch/local_pool.py), also what the cost estimate
assumes (launch/cost_plan.py): its own module, so the estimate need not import the launcher."""
from __future__ import annotations

import os


def auto_parallel(n_arms: int, threads_per_arm: int) -> int:
    """Arms to run at once: one per core-slot, but when the arms barely outnumber
    the slots (3 arms, 2 cores) run them all, so no core idles through a last
    lone arm (1.5x instead of 2x the single-arm time)."""
    slots = max(1, (os.cpu_count() or 1) // max(threads_per_arm, 1))
    return n_arms if n_arms <= slots * 3 // 2 else slots
