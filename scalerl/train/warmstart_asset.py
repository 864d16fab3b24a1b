"""The default's warm start, shipped with the package (``scalerl/models/assets/tiny_warm``).

Built on each machine, the warm start's 400-odd SFT steps amplified the CPU's rounding (RL began at
0.061, 0.072 or 0.079 depending on the CPU kind) and took 4-5 minutes of one core on every fresh
install. Shipped, every machine starts RL from the same weights, at once (docs/embedded.md).

The folder holds an ordinary HF checkpoint and ``manifest.json``: the key of the settings that
built it (``warmstart.warm_start_key``: model shape, warm-start settings, task, demonstrations,
tokenizer, code version) and each file's sha256. A run whose key equals the shipped one loads it,
after checking the hashes; any other key builds and caches its own warm start, as before.

Rebuild it after changing the demonstrations, the warm-start settings or their code (the unit
test ``tests/test_warmstart_asset.py`` says when), then commit the folder::

    python -m scalerl.train.warmstart_asset build      # ~5 min of one core
    python -m scalerl.train.warmstart_asset check      # key and hashes, no training
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from pathlib import Path

import torch

from scalerl.config import compose, validate
from scalerl.train.setup import base_and_task
from scalerl.train.warmstart import (ASSET, MANIFEST, REBUILD, ShippedWarmStartError, checkpoint_files, key_hash,
                                     verify, warm_start_checkpoint, warm_start_key)


def key_difference(shipped: dict, now: dict) -> str:
    """The top-level fields of two keys that differ, one line each."""
    lines = [f"  {k}: shipped {shipped.get(k)!r}, now {now.get(k)!r}"
             for k in sorted(set(shipped) | set(now)) if json.dumps(shipped.get(k), sort_keys=True, default=str)
             != json.dumps(now.get(k), sort_keys=True, default=str)]
    return "\n".join(lines) or "  (the same fields; the hash differs)"


def default_key(cfg) -> dict:
    """The warm-start key ``cfg`` has today (the tiny base model is built and cached if needed: seconds)."""
    base, tok, task = base_and_task(cfg, log=lambda *a: None)
    return warm_start_key(cfg, base, task, tok)


def build(cfg, asset: Path = ASSET, *, log=print) -> dict:
    """Build (or take from ``cfg.cache_dir``'s cache) the warm start of ``cfg`` and write it, with its
    manifest, to ``asset``, replacing what was there. Returns the manifest."""
    base, tok, task = base_and_task(cfg, log=log)
    built = warm_start_checkpoint(cfg, base, task, tok, Path(cfg.cache_dir).expanduser(), log=log, shipped=False)
    key = warm_start_key(cfg, base, task, tok)
    record = json.loads((built / "warmstart.json").read_text())
    record.pop("source", None)  # a path on the building machine
    tmp = Path(asset).with_name(Path(asset).name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in checkpoint_files(built):
        shutil.copyfile(built / name, tmp / name)
    manifest = {"key": key, "key_hash": key_hash(key), "sha256": checkpoint_files(tmp),
                "built": {**record, "torch": torch.__version__, "cpu": f"{platform.machine()} "
                          f"{torch.backends.cpu.get_cpu_capability()}", "date": time.strftime("%Y-%m-%d")}}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(asset, ignore_errors=True)
    tmp.rename(asset)
    log(f"[scalerl] wrote the shipped warm start to {asset} (key {manifest['key_hash'][:12]}); commit that folder")
    return manifest


def check(cfg, asset: Path = ASSET) -> str | None:
    """None when ``asset`` is intact and was built from ``cfg``'s settings; else what is wrong, with the fix."""
    try:
        manifest = verify(asset)
    except ShippedWarmStartError as e:
        return str(e)
    now = default_key(cfg)
    if manifest["key_hash"] == key_hash(now):
        return None
    return (f"the shipped warm start ({asset}) was built from other settings than the default's today:\n"
            f"{key_difference(manifest['key'], now)}\nRebuild it with `{REBUILD}` and commit {asset.name}/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scalerl.train.warmstart_asset", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "check"])
    parser.add_argument("overrides", nargs="*", help="config overrides (default: none; the shipped one is the default's)")
    args = parser.parse_args(argv)
    cfg = validate(compose(["logger=none", *args.overrides]))
    if args.command == "build":
        build(cfg)
        return 0
    problem = check(cfg)
    print(problem or f"ok: {ASSET} matches the default's warm-start key and its hashes")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
