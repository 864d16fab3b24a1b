"""Atomic checkpoints: model, optimizer, scheduler, prompt sampler and run counters.

No RNG state is stored: every step's sampling seed is derived from (seed, rank,
step), so a resumed run draws exactly what it would have drawn. Written to a
temp file then renamed, so a kill mid-save leaves the previous
checkpoint intact; an unreadable newest checkpoint falls back (``sharded_checkpoint.resume``, the one resume path) to the one
before. A checkpoint is refused if any parameter is non-finite.

Checkpoints are loaded with ``weights_only=True``: a run directory someone sends
you cannot run code when it resumes. So everything in the payload is tensors or
plain data (numbers, strings, None, lists, tuples and dicts of them); ``plain``
converts what is merely a subclass (a numpy float) and refuses anything else
when saving, not when loading.
"""
from __future__ import annotations

import json
import numbers
import os
import re
from collections import OrderedDict
from pathlib import Path

import torch

from scalerl.core.errors import CheckpointsRefused  # noqa: F401 (raised by sharded_checkpoint, caught by the entry point)
from scalerl.core.errors import ConfigError
from scalerl.core.jsonio import os_reason
from scalerl.train.sharding import is_dtensor

ATOMS = (bool, int, float, str, type(None))


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, say); its message names the file."""


def ckpt_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[Path]:
    return sorted(ckpt_dir(run_dir).glob("step_*.pt"))


def plain(obj, where: str = "checkpoint"):
    """``obj`` with every leaf a tensor or an exact int/float/bool/str/None (what ``weights_only`` loads)."""
    if isinstance(obj, torch.Tensor) or type(obj) in ATOMS:
        return obj
    if isinstance(obj, dict):
        out = OrderedDict() if isinstance(obj, OrderedDict) else {}
        out.update((k, plain(v, f"{where}.{k}")) for k, v in obj.items())
        if getattr(obj, "_metadata", None) is not None:  # module state dicts carry their versions here
            out._metadata = plain(obj._metadata, f"{where}._metadata")
        return out
    if isinstance(obj, (list, tuple)):
        items = [plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else tuple(items)
    if isinstance(obj, numbers.Integral):  # bool subclasses, numpy integers
        return int(obj)
    if isinstance(obj, numbers.Real):  # numpy floats
        return float(obj)
    raise TypeError(f"{where}: a {type(obj).__name__} cannot go into a checkpoint that loads with "
                    "weights_only=True; store tensors, numbers, strings, lists or dicts")


def is_finite(t: torch.Tensor) -> bool:
    """No NaN or infinity in ``t``. Its least and largest values, in one pass: a NaN or an infinity
    is one of them. ``torch.isfinite(t).all()`` makes a copy of ``t`` and two masks on the way (0.8 GB
    for Qwen2-0.5B's embedding, the peak of a 0.5B run's last checkpoint: benchmarks/RESULTS.md).

    >>> is_finite(torch.tensor([1.0, -2.0])), is_finite(torch.tensor([1.0, float("nan")])), is_finite(torch.tensor([float("-inf")]))
    (True, False, False)
    """
    if t.numel() == 0 or not t.is_floating_point():
        return True
    lo, hi = torch.aminmax(t)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def check_finite(model: torch.nn.Module, dist=None) -> None:
    """Raise if any parameter is non-finite. With ``dist``, a collective: every rank looks
    at its own shards and all raise together, so none is left waiting in the next collective."""
    bad = [n for n, p in model.named_parameters() if not is_finite(p.to_local() if is_dtensor(p) else p)]
    n_bad = len(bad) if dist is None else int(dist.all_sum(torch.tensor([float(len(bad))])).item())
    if n_bad:
        raise FloatingPointError(f"refusing to checkpoint non-finite parameters: {bad[:3] or 'on another rank'}")


def _reason(err: BaseException) -> str:
    """The OS-level reason behind a failed save (torch wraps it in its own RuntimeError)."""
    seen = err
    while seen is not None:
        if isinstance(seen, OSError):
            return os_reason(seen)
        seen = seen.__context__ or seen.__cause__
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def save_checkpoint(run_dir: Path, step: int, payload: dict, model: torch.nn.Module) -> Path:
    """Write one plain checkpoint; pruning the old ones is ``sharded_checkpoint.prune``'s alone."""
    check_finite(model)
    d = ckpt_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"step_{step:08d}.pt"
    tmp = d / f".{path.name}.tmp"
    payload = plain(payload)
    try:
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as e:
        tmp.unlink(missing_ok=True)  # a partial checkpoint frees its space for summary.json
        error = CheckpointWriteError(f"could not write checkpoint {path}: {_reason(e)}")
        error.errno = getattr(e, "errno", None)
        raise error from None
    return path


def load_plain(path: Path) -> dict:
    """One plain checkpoint, tensors and plain data only (``weights_only``)."""
    return torch.load(path, map_location="cpu", weights_only=True)


def step_of(path: Path) -> int:
    """The step in a checkpoint's name (``step_00000012.pt`` or the sharded ``step_00000012/``)."""
    return int(re.search(r"step_(\d+)", Path(path).name).group(1))


def identity(path: Path) -> dict | None:
    """A checkpoint's own record of the step it was saved at and its run's identity (``run_identity``:
    the config hash less the horizon, ``launch/rundir.py``; None in checkpoints from before it was recorded); None when it cannot be read (resume's
    fallback handles a damaged file). A plain one is memory-mapped: its tensors are not read."""
    try:
        if Path(path).is_dir():
            extra = json.loads((Path(path) / "extra.json").read_text())
        else:
            extra = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return {"step": extra["state"]["step"], "run_identity": extra.get("run_identity")}
    except Exception:
        return None


def foreign(path: Path, run_identity: str | None) -> str | None:
    """Why the checkpoint at ``path`` is not this run's, or None: the step inside is not the one
    in its name (a renamed file), or it was written by a run of another config (``run_identity``)."""
    ident = identity(path)
    if ident is None:
        return None
    if ident["step"] != step_of(path):
        return f"holds step {ident['step']}, but its name says step {step_of(path)}: it was renamed or copied in"
    if run_identity and ident["run_identity"] and ident["run_identity"] != run_identity:
        return (f"was written by a run of another config (identity {ident['run_identity']}, this run's is "
                f"{run_identity}): "
                "it comes from another run")
    return None


def check_checkpoints(run_dir: Path, run_identity: str | None) -> None:
    """Refuse (one line naming the file) a run directory holding a checkpoint of another run:
    loading it would continue someone else's weights under this run's rows."""
    for path in sorted(ckpt_dir(run_dir).glob("step_*")):
        if path.name.startswith("."):
            continue
        why = foreign(path, run_identity)
        if why:
            raise ConfigError(str(path), f"{why}; nothing was loaded or changed",
                              f"move {path} away, or give a new hydra.run.dir")
