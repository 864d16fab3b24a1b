"""The default's warm start, shipped with the package (``scalerl/models/assets/tiny_warm``).

Built on each machine, the warm start's 400-odd SFT steps amplified the CPU's rounding (RL began at
0.061, 0.072 or 0.079 depending on the CPU kind) and took 4-5 minutes of one core on every fresh
install. Shipped, every machine starts RL from the same weights, at once (docs/embedded.md).

The folder holds an ordinary HF checkpoint and ``manifest.json``: the key of the settings that
built it (``warmstart.warm_start_key``: model shape, warm-start settings, task, demonstrations,
tokenizer, code version) and each file's sha256. A run whose key equals the shipped one loads it,
after checking the hashes; any other key builds and caches its own warm start, as before.

The same kind of folder elsewhere is found through ``$SCALERL_WARM_STARTS`` (``warmstart.SEARCH_ENV``):
the tests' answers-only shape (``tests/assets/tiny_warm_answers``, tests/helpers.py's ANSWERS_ONLY)
lives beside the tests, which set it, so the suite trains no SFT either. Each manifest records the
overrides that made it. Rebuild one after changing the demonstrations, the warm-start settings or
their code (``tests/test_warmstart_asset.py`` fails with the exact command), then commit the folder::

    python -m scalerl.train.warmstart_asset build      # the default's; ~5 min of one core
    python -m scalerl.train.warmstart_asset build --name tiny_warm_answers --dir tests/assets task.think=0 \
        length.max_new_tokens=8 model.warmstart.final_steps=0 ...   # the command the test prints
    SCALERL_WARM_STARTS=tests/assets python -m scalerl.train.warmstart_asset check   # key and hashes, no training
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import torch

from scalerl.config import compose, validate
from scalerl.train.setup import base_and_task
from scalerl.train.warmstart import (ASSET, ASSETS, MANIFEST, REBUILD, ShippedWarmStartError, checkpoint_files,
                                     key_hash, shipped_folders, verify, warm_start_checkpoint, warm_start_key)


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


def rebuild_command(asset: Path, overrides: list[str]) -> str:
    name = "" if Path(asset).name == ASSET.name else f" --name {Path(asset).name}"
    parent = Path(asset).resolve().parent
    where = "" if parent == ASSETS.resolve() else f" --dir {os.path.relpath(parent)}"
    return f"{REBUILD}{name}{where}" + "".join(f" {o}" for o in overrides)


def build(overrides: list[str], asset: Path = ASSET, *, log=print) -> dict:
    """Build (or take from ``cache_dir``'s cache) the warm start of the config ``overrides`` make and
    write it, with its manifest, to ``asset``, replacing what was there. Returns the manifest."""
    cfg = validate(compose(["logger=none", *overrides]))
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
    manifest = {"key": key, "key_hash": key_hash(key), "sha256": checkpoint_files(tmp), "overrides": list(overrides),
                "built": {**record, "torch": torch.__version__, "cpu": f"{platform.machine()} "
                          f"{torch.backends.cpu.get_cpu_capability()}", "date": time.strftime("%Y-%m-%d")}}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(asset, ignore_errors=True)
    tmp.rename(asset)
    log(f"[scalerl] wrote the shipped warm start to {asset} (key {manifest['key_hash'][:12]}); commit that folder")
    return manifest


def check(asset: Path = ASSET, *, cache_dir: str | None = None) -> str | None:
    """None when ``asset`` is intact and was built from the settings its recorded overrides give
    today; else what is wrong, with the command that fixes it."""
    try:
        manifest = verify(asset)
    except ShippedWarmStartError as e:
        return str(e)
    overrides = manifest.get("overrides", [])
    cfg = validate(compose(["logger=none", *overrides, *([f"cache_dir={cache_dir}"] if cache_dir else [])]))
    now = default_key(cfg)
    if manifest["key_hash"] == key_hash(now):
        return None
    return (f"the shipped warm start {asset} was built from other settings than `{' '.join(overrides) or 'the default'}`"
            f" gives today:\n{key_difference(manifest['key'], now)}\n"
            f"Rebuild it with `{rebuild_command(asset, overrides)}` and commit {asset.name}/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scalerl.train.warmstart_asset", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["build", "check"], help="build one; check every shipped one")
    parser.add_argument("--name", default=ASSET.name, help=f"the folder under --dir (default: {ASSET.name}, the default's)")
    parser.add_argument("--dir", type=Path, default=ASSETS, help=f"where that folder goes (default: {ASSETS}, shipped)")
    parser.add_argument("overrides", nargs="*", help="config overrides that make the config to build (default: none)")
    args = parser.parse_intermixed_args(argv)
    if args.command == "build":
        build(args.overrides, args.dir / args.name)
        return 0
    problems = [p for p in map(check, shipped_folders()) if p]
    print("\n".join(problems) or f"ok: {len(shipped_folders())} shipped warm starts match their keys and hashes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
