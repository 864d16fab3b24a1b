"""Checkpoints of an FSDP2-sharded trainer, with ``torch.distributed.checkpoint`` (DCP).

``checkpoints/step_XXXXXXXX/`` holds the model and the AdamW state, written by
every rank in parallel with names independent of the sharding (the HF
parameter names), plus ``extra.json`` (scheduler, prompt sampler with its NPR
history, run counters; JSON, so loading it runs no pickle). DCP re-shards on
load, so a run resumes on any number of ranks. ``resume`` also reads the plain
``step_*.pt`` files of 1-rank runs (``checkpoint.py``) and loads either kind
into either kind of trainer: a run can move between 1 rank and N.

Atomic like the plain ones: written to a temp directory, renamed by rank 0
once every rank has finished; a checkpoint with a non-finite parameter on any
rank is refused; an unreadable newest checkpoint falls back to the one before.

DCP's ``.metadata`` is a pickle. A run directory someone sends you must not run
code when it resumes, so it is read by ``_MetadataUnpickler``, which builds only
DCP's own metadata records (and the torch dtypes, sizes and paths they hold); a
file naming anything else is refused like a truncated one and the run falls
back to the checkpoint before it. The tensors themselves DCP reads with
``weights_only=True``.
"""
from __future__ import annotations

import json
import pickle
import re
import shutil
from pathlib import Path

from scalerl.core.jsonio import write_json_atomic
from scalerl.train.checkpoint import CheckpointsRefused, check_finite, ckpt_dir, list_checkpoints, load_plain
from scalerl.train.sharding import is_sharded

EXTRA = "extra.json"


def _step(path: Path) -> int:
    return int(re.search(r"step_(\d+)", path.name).group(1))


def list_sharded(run_dir: Path) -> list[Path]:
    """Complete sharded checkpoints (DCP metadata and extra state both written), oldest first."""
    return sorted(p for p in ckpt_dir(run_dir).glob("step_*") if p.is_dir() and (p / EXTRA).exists()
                  and (p / ".metadata").exists())


def _state(model, optimizer) -> dict:
    """The DCP state of model + optimizer. An optimizer without state yet (before the first
    update) gets it initialised by a zero-lr step, which sets AdamW's step count to 1:
    callers record ``fresh`` and clear it again (``_forget``), or bias correction would shift."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    return {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, optimizer)}


def _forget(optimizer) -> None:
    """Back to a never-stepped optimizer (the zero-lr initialisation left the weights unchanged)."""
    optimizer.state.clear()


def save_sharded(run_dir: Path, step: int, model, optimizer, extra: dict, dist) -> Path:
    """Collective: every rank writes its shards; rank 0 the extra state and the rename (pruning: ``prune``)."""
    import torch.distributed.checkpoint as dcp

    check_finite(model, dist)  # collective: every rank its own shards
    d = ckpt_dir(run_dir)
    path, tmp = d / f"step_{step:08d}", d / f".step_{step:08d}.tmp"
    if dist.main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    fresh = not optimizer.state
    dcp.save(_state(model, optimizer), checkpoint_id=str(tmp))
    if fresh:
        _forget(optimizer)
    if dist.main:
        write_json_atomic(tmp / EXTRA, {**extra, "optimizer_fresh": fresh})
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
    dist.barrier()
    return path


def prune(run_dir: Path, keep: int) -> None:
    """Keep the ``keep`` newest checkpoints of either kind (the one place old checkpoints are removed)."""
    both = sorted([*list_checkpoints(run_dir), *list_sharded(run_dir)], key=_step)
    for old in both[:-keep]:
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink(missing_ok=True)


def resume(run_dir: Path, r, log=print) -> dict | None:
    """Load the newest loadable checkpoint of either kind into the run ``r`` (model, optimizer,
    scheduler, sampler); returns its extra state (``state``: the run counters; ``async``:
    the schedule's, plain checkpoints only), or None when there is none.
    Collective when ``r`` is sharded: every rank must call it.

    Raises ``CheckpointsRefused`` when checkpoints exist but none can be loaded: starting
    again from step 0 would drop every metric row the run has written."""
    both = sorted([*list_sharded(run_dir), *list_checkpoints(run_dir)], key=_step)
    refused = []
    for path in reversed(both):
        try:
            extra = _load_one(path, r)
        except Exception as e:  # truncated, damaged, or naming objects that could run code: try the previous one
            why = _why(e)
            refused.append(f"{path.name}: {why}")
            log(f"[scalerl] warning: unreadable checkpoint {path} ({why}); trying an older one")
            continue
        r.scheduler.load_state_dict(extra["scheduler"])
        r.sampler.load_state_dict(extra["sampler"])
        return extra
    if refused:
        raise CheckpointsRefused(
            f"every checkpoint in {ckpt_dir(run_dir)} was refused ({'; '.join(refused[:3])}); nothing was "
            f"changed: restore a good checkpoint there, or move {ckpt_dir(run_dir)} and metrics.jsonl away "
            "to train this run again from step 0")
    return None


def _why(e: BaseException) -> str:
    text = str(e).strip()
    if "weights only load failed" in text.lower() or "refusing to load" in text.lower():
        return "it names objects other than tensors and plain data, which could run code; not loaded"
    return text.splitlines()[0] if text else type(e).__name__


def _load_one(path: Path, r) -> dict:
    """One checkpoint into ``r``'s model and optimizer; returns its extra state."""
    if path.is_dir():
        extra = json.loads((path / EXTRA).read_text())
        if extra["state"]["step"] != _step(path):
            raise ValueError(f"holds step {extra['state']['step']}, but its name says step {_step(path)}")
        _load_dcp(path, r)
        if extra.get("optimizer_fresh"):
            _forget(r.optimizer)
        return extra
    ck = load_plain(path)
    if ck["state"]["step"] != _step(path):  # a renamed file: its weights are not this step's
        raise ValueError(f"holds step {ck['state']['step']}, but its name says step {_step(path)}")
    _load_full(ck["model"], ck["optimizer"], r)
    return {k: ck[k] for k in ("scheduler", "sampler", "state", "async") if k in ck}


# DCP's metadata records and what they hold; nothing else may be built from a ``.metadata``.
_DCP_METADATA = "torch.distributed.checkpoint.metadata"
_ALLOWED = {
    (_DCP_METADATA, n) for n in ("Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "TensorProperties",
                                 "ChunkStorageMetadata", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")
} | {("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
      ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("pathlib", "WindowsPath"),
      ("pathlib", "PurePosixPath"), ("collections", "OrderedDict")}


class _MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata records, torch dtypes and sizes; refuses every other global."""

    def find_class(self, module, name):
        import torch

        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a checkpoint's .metadata")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing a persistent id in a checkpoint's .metadata")


def _safe_reader(path: Path):
    """A DCP ``FileSystemReader`` whose metadata goes through ``_MetadataUnpickler``."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args, **kwargs) -> Metadata:
            rank = kwargs.get("rank")
            with open(Path(self.path) / (".metadata" if rank is None else f"__{rank}.metadata"), "rb") as f:
                metadata = _MetadataUnpickler(f).load()
            if not isinstance(metadata, Metadata):
                raise pickle.UnpicklingError(f"{path}/.metadata holds a {type(metadata).__name__}, not DCP metadata")
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(str(path))


def _load_dcp(path: Path, r) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    from torch.distributed.checkpoint.api import CheckpointException

    reader = _safe_reader(path)
    reader.read_metadata()  # a refused .metadata raises here, plainly, on every rank
    state = _state(r.model, r.optimizer)  # the layout to load into; DCP re-shards to it
    try:
        dcp.load(state, storage_reader=reader)
    except CheckpointException as e:  # a BaseException: resume's fallback would not see it
        raise RuntimeError(f"DCP could not load {path.name}: {str(e).strip().splitlines()[-1]}") from None
    set_model_state_dict(r.model, state["model"])
    set_optimizer_state_dict(r.model, r.optimizer, state["optim"])


def _load_full(model_sd: dict, optim_sd: dict, r) -> None:
    """A plain checkpoint's full state dicts (HF names; the optimizer's native format)."""
    if not is_sharded(r.model):
        r.model.load_state_dict(model_sd)
        r.optimizer.load_state_dict(optim_sd)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    full = StateDictOptions(full_state_dict=True)
    set_model_state_dict(r.model, model_sd, options=full)
    set_optimizer_state_dict(r.model, r.optimizer, native_to_named(optim_sd, r.model), options=full)
    if not optim_sd["state"]:  # saved before the first update
        _forget(r.optimizer)


def native_to_named(optim_sd: dict, model) -> dict:
    """``optimizer.state_dict()`` (state keyed by parameter index, in ``model.parameters()``
    order) -> the name-keyed form that ``set_optimizer_state_dict`` reads."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    state = {names[i]: v for i, v in optim_sd["state"].items()}
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [names[i] for i in g["params"]]}
              for g in optim_sd["param_groups"]]
    return {"state": state, "param_groups": groups}
