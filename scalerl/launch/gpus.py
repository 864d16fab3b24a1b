"""Which GPUs each arm of a local sweep gets, on one machine with several (docs/slurm.md).

The local launcher runs ``workers`` arms at once; each slot owns a disjoint share of the visible
GPUs, and an arm started in a slot sees only that share in ``CUDA_VISIBLE_DEVICES`` (set in its
process before anything touches CUDA). Inside its share, the trainer takes the first GPU and its
generator processes the next ones (``train/pipeline.generator_device`` counts within what the
process sees), so a generator never lands on another arm's GPU. No two slots share a GPU unless
``hydra.launcher.share_gpus=true``.

``assign`` is pure (device lists in, shares out) and tested by hand; ``visible_gpus`` asks the
environment. Nothing here has run on a machine with several GPUs: ``benchmarks/gpu_check.sh``
checks a 2-arm sweep's assignment on the first device a session draws.
"""
from __future__ import annotations

import os

from scalerl.core.errors import ConfigError

GPUS_ENV = "SCALERL_GPUS"
"""A comma-separated GPU list that replaces the driver's (tests fake a multi-GPU box with it)."""


def visible_gpus() -> list[str]:
    """The GPU ids this sweep may divide: ``SCALERL_GPUS`` if set, else those of
    ``CUDA_VISIBLE_DEVICES`` (ids or UUIDs, as given) when the driver sees a device, else every
    device the driver sees; [] without a driver."""
    fake = os.environ.get(GPUS_ENV)
    if fake is not None:
        return [g.strip() for g in fake.split(",") if g.strip()]
    from scalerl.config import cuda_devices  # ctypes on libcuda, not torch: the sweep's parent never imports it

    count = cuda_devices()
    if count <= 0:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        return [g.strip() for g in visible.split(",") if g.strip()][:count]
    return [str(i) for i in range(count)]


def assign(devices: list[str], workers: int, gpus_per_arm: int | str = "auto",
           share: bool = False) -> tuple[int, list[list[str]]]:
    """(workers, one GPU share per slot) for ``workers`` arms at once on ``devices``.

    gpus_per_arm "auto" (or 0): the GPUs divided evenly among the slots, the remainder unused
    (an arm's ranks and generators expect equal shares); with fewer GPUs than slots, one GPU a
    slot and fewer slots, so the other arms queue. A number k: k GPUs a slot, and at most
    len(devices) // k slots. share=True keeps every slot and hands the GPUs out round robin, so
    slots share them. No devices: every slot gets [] (CPU arms; CUDA_VISIBLE_DEVICES untouched).
    """
    workers = max(1, int(workers))
    if not devices:
        return workers, [[] for _ in range(workers)]
    auto = gpus_per_arm in ("auto", 0, None)
    if not auto and (isinstance(gpus_per_arm, bool) or not isinstance(gpus_per_arm, int) or gpus_per_arm < 0):
        raise ConfigError("hydra.launcher.gpus_per_arm", f"must be auto or an integer >= 1, got {gpus_per_arm!r}")
    n = len(devices)
    per = max(1, n // workers) if auto else gpus_per_arm
    if per > n:
        raise ConfigError("hydra.launcher.gpus_per_arm", f"{per} GPUs per arm, and this machine shows {n} "
                          f"({','.join(devices)})", f"give at most {n}")
    if share:
        return workers, [[devices[(s * per + j) % n] for j in range(per)] for s in range(workers)]
    workers = min(workers, n // per)
    return workers, [devices[s * per:(s + 1) * per] for s in range(workers)]
