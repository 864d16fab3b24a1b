"""Supervised warm start, cached on disk by a hash of its config.

RL needs a policy that sometimes succeeds: on the embedded task a 4% start
wastes most of the compute on groups without signal, while 10-15% learns at
once (docs/embedded.md). We fit the answer tokens of fresh problems (never the
held-out split) until the sampled held-out pass rate reaches the target.
The thread count is fixed, so the cached checkpoint is reproducible.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch
from filelock import FileLock

from scalerl import models
from scalerl.core.hashing import stable_hash
from scalerl.generation.engines import TorchGenerator
from scalerl.length.base import LengthLimits
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import Policy, token_logprobs
from scalerl.precision.base import linear_head
from scalerl.train.distributed import Dist
from scalerl.train.evaluate import heldout_pass_rate
from scalerl.train.heldout import split_record
from scalerl.train.rollout import encode_prompt
from scalerl.train.signals import exit_code, pending_stop


RECIPE = 2
"""Bump when ``warm_start``'s code changes what it builds for the same settings (2: counter-based
noise in the sampler): the cached and the shipped warm starts are then rebuilt."""
DEMOS_FINGERPRINTED = 64
"""Demonstrations of each phase whose text goes into the key: a changed task generator shows there."""
KEY_NEUTRAL = {"think_mul": 0.0}
"""Task fields added after the shipped warm starts were built, with the value that builds what they
built: at that value a field stays out of the key, so those warm starts still match (docs/embedded.md)."""


def warm_start_key(cfg, base: Path, task, tok) -> dict:
    """Everything that determines the warm start of ``cfg`` from the checkpoint ``base``: the model
    option's settings, the warm start's, the task's, the held-out split and the demonstrations'
    text, the tokenizer's vocabulary and the code's ``RECIPE``. No path or machine in it, so the
    shipped copy (``warmstart_asset.py``) and every cache agree on it."""
    ws = cfg.model.warmstart
    demos = [task.sft_stream(ws.seed), (task.sft_final_stream or task.sft_stream)(ws.seed + 2)]
    texts = [[(p.prompt, p.answer) for p, _ in zip(stream, range(DEMOS_FINGERPRINTED))] for stream in demos]
    return {"base": cfg.model.identity(base), "warmstart": asdict(ws), "task": task_key(cfg.task),
            "heldout": split_record(task)["fingerprint"], "demonstrations": stable_hash(texts, n=16),
            "tokenizer": stable_hash(sorted(tok.get_vocab().items()), n=16), "sampler": RECIPE}


def task_key(task_cfg) -> dict:
    """The task's settings as the key holds them: every field, but a ``KEY_NEUTRAL`` one at its neutral value.

    >>> from scalerl.tasks.arith import ArithConfig
    >>> "think_mul" in task_key(ArithConfig(name="arith")), task_key(ArithConfig(name="arith", think_mul=0.02))["think_mul"]
    (False, 0.02)
    """
    return {k: v for k, v in asdict(task_cfg).items() if not (k in KEY_NEUTRAL and v == KEY_NEUTRAL[k])}


# ---------------------------------------------------------------- the shipped copy

ASSETS = Path(models.__file__).parent / "assets"
"""The shipped warm starts, one folder each (``warmstart_asset.py`` builds them, docs/embedded.md)."""
SEARCH_ENV = "SCALERL_WARM_STARTS"
"""More folders of warm starts like ``ASSETS`` (``os.pathsep``-separated), searched after it: the
tests' answers-only shape lives in tests/assets, and tests/conftest.py names it here (docs/embedded.md)."""
ASSET = ASSETS / "tiny_warm"
"""The default's."""
MANIFEST = "manifest.json"
REBUILD = "python -m scalerl.train.warmstart_asset build"


class ShippedWarmStartError(RuntimeError):
    """The shipped checkpoint is incomplete or corrupted (its files do not match the manifest's hashes)."""


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def checkpoint_files(folder: Path) -> dict[str, str]:
    """{file name: sha256} of a checkpoint folder (the manifest and the cache's build record aside)."""
    return {p.name: sha256(p) for p in sorted(Path(folder).iterdir())
            if p.is_file() and p.name not in (MANIFEST, "warmstart.json")}


def read_manifest(asset: Path = ASSET) -> dict | None:
    path = Path(asset) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def key_hash(key: dict) -> str:
    return stable_hash(key, n=64)


def verify(asset: Path = ASSET) -> dict:
    """The manifest, once every file it lists has its recorded sha256; else a clear error, not garbage
    weights (a truncated download, an edited file, a checkout without git-lfs-like surprises)."""
    manifest = read_manifest(asset)
    if manifest is None:
        raise ShippedWarmStartError(f"{asset}: no {MANIFEST}; reinstall scalerl or rebuild it with `{REBUILD}`")
    for name, want in manifest["sha256"].items():
        path = Path(asset) / name
        got = sha256(path) if path.exists() else "missing"
        if got != want:
            raise ShippedWarmStartError(
                f"the shipped warm start is corrupted: {path} has sha256 {got}, its manifest says {want}. "
                f"Restore it (git checkout -- {Path(asset).name}, or reinstall scalerl) or rebuild it with `{REBUILD}`")
    return manifest


def warm_start_roots() -> list[Path]:
    """Where warm starts are looked up: the package's, then ``$SCALERL_WARM_STARTS``'s folders."""
    return [ASSETS, *(Path(p).expanduser() for p in os.environ.get(SEARCH_ENV, "").split(os.pathsep) if p)]


def shipped_folders(roots: list[Path] | None = None) -> list[Path]:
    """The warm starts' folders (those with a manifest) under ``roots`` (default: ``warm_start_roots()``)."""
    return [p for root in (warm_start_roots() if roots is None else roots) if Path(root).is_dir()
            for p in sorted(Path(root).iterdir()) if (p / MANIFEST).exists()]


def shipped_warm_start(key: dict, folders: list[Path] | None = None) -> Path | None:
    """The shipped checkpoint built from ``key``'s settings (its hashes checked); None if none was."""
    want = key_hash(key)
    for asset in shipped_folders() if folders is None else folders:
        if (read_manifest(asset) or {}).get("key_hash") == want:
            verify(asset)
            return Path(asset)
    return None


def warm_start_checkpoint(cfg, base: Path, task, tok, cache: Path, *, log=print, shipped: bool = True) -> Path:
    """The warm start of ``cfg`` from ``base``: the shipped one when its key matches (and ``shipped``),
    else the one cached under ``cache`` by the key's hash, built now if it is not there yet."""
    key = warm_start_key(cfg, base, task, tok)
    found = shipped_warm_start(key) if shipped else None
    if found is not None:
        log(f"[scalerl] warm start: the shipped one ({found})")
        return found
    return cached_warm_start(base, Path(cache) / f"warm-{stable_hash(key)}", cfg.model.warmstart, task, log=log)


# ---------------------------------------------------------------- building one


def no_length_control(n: int, rng) -> LengthLimits:
    """Plain truncation at the budget: the warm start's answers are short."""
    return LengthLimits()


def cached_warm_start(src: Path, dst: Path, cfg, task, log=print) -> Path:
    """Warm-start ``src`` into ``dst`` unless a finished copy is already there."""
    with FileLock(str(dst) + ".lock"):
        if (dst / "warmstart.json").exists():
            return dst
        tmp = dst.with_name(dst.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        info = warm_start(src, tmp, cfg, task, log=log)
        (tmp / "warmstart.json").write_text(json.dumps(info, indent=2))
        shutil.rmtree(dst, ignore_errors=True)
        tmp.rename(dst)
    return dst


def sft_batch(tok, problems, device):
    """(ids, attention mask, loss mask) for BOS+prompt+answer+EOS; loss on answer+EOS only."""
    seqs, starts = [], []
    for p in problems:
        prompt = encode_prompt(tok, p.prompt)
        seqs.append(prompt + tok(p.answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
        starts.append(len(prompt))
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    loss_mask = torch.zeros((len(seqs), width - 1), dtype=torch.bool)
    for i, (s, st) in enumerate(zip(seqs, starts)):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        loss_mask[i, st - 1 : len(s) - 1] = True  # position t predicts token t+1
    return ids.to(device), attn.to(device), loss_mask.to(device)


def warm_start(src: Path, dst: Path, cfg, task, log=print) -> dict:
    """SFT until the held-out pass rate reaches ``cfg.target_pass_rate``, then, with
    ``cfg.final_steps``, that many steps at ``cfg.final_lr`` on the task's final demonstrations
    (``TaskData.sft_final_stream``; arith: fewer of them think, so RL starts from a policy that
    knows how to think but rarely does, docs/embedded.md)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        device = torch.device("cpu")
        torch.manual_seed(cfg.seed)
        model, tok = load_checkpoint(src, dtype=torch.float32, device=device)
        policy = Policy(model, gen_head=linear_head(torch.float32), train_head=linear_head(torch.float32))
        gen = TorchGenerator(policy, device)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
        stream = task.sft_stream(cfg.seed)
        probe = task.sft_stream(cfg.seed + 1)  # targets may be formatted (math: \\boxed{...})
        budget = max(max(len(p.answer) for p in task.heldout), *(len(next(probe).answer) for _ in range(256))) + 2

        def sft_step(step: int, demos) -> float:
            signum = pending_stop()
            if signum is not None:  # Ctrl-C / SIGTERM: nothing to checkpoint yet, so stop now, not in 60 s
                log(f"[scalerl] warm start stopped by signal {signum} at step {step}; nothing cached")
                raise SystemExit(exit_code(signum))
            ids, attn, lmask = sft_batch(tok, [next(demos) for _ in range(cfg.batch_size)], device)
            logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
            loss = -(token_logprobs(logits, ids[:, 1:]) * lmask).sum() / lmask.sum()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.item()

        def pass_rate(step: int) -> float:
            model.eval()
            rate = heldout_pass_rate(task, samples=1, seed=cfg.seed, step=step, dist=Dist(), generator=gen,
                                     tok=tok, draw_lengths=no_length_control, max_new_tokens=budget,
                                     temperature=1.0, device=device)["pass_rate"]
            model.train()
            return rate

        t0, rate, step = time.time(), 0.0, 0
        log(f"[scalerl] warm start: SFT until held-out pass rate >= {cfg.target_pass_rate} -> {dst}")
        for step in range(1, cfg.max_steps + 1):
            loss = sft_step(step, stream)
            if step % cfg.eval_every == 0:
                rate = pass_rate(step)
                log(f"[scalerl] warm start step {step}: loss {loss:.3f}, pass rate {rate:.3f} ({time.time() - t0:.0f}s)")
                if rate >= cfg.target_pass_rate:
                    break
        info = {"steps": step, "pass_rate": rate}
        if cfg.final_steps:
            final = (task.sft_final_stream or task.sft_stream)(cfg.seed + 2)
            for group in opt.param_groups:
                group["lr"] = cfg.final_lr
            for k in range(1, cfg.final_steps + 1):
                loss = sft_step(step + k, final)
            rate = pass_rate(step + cfg.final_steps)
            log(f"[scalerl] warm start: {cfg.final_steps} final steps at lr {cfg.final_lr}: loss {loss:.3f},"
                f" pass rate {rate:.3f} ({time.time() - t0:.0f}s)")
            info.update(final_steps=cfg.final_steps, final_pass_rate=rate)
        model.save_pretrained(dst, safe_serialization=True)
        tok.save_pretrained(dst)
        return {**info, "seconds": time.time() - t0, "source": str(src)}
    finally:
        torch.set_num_threads(threads)
