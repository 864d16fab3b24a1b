"""The shipped warm start (scalerl/train/warmstart_asset.py): built from today's default settings,
intact, loaded by the default's runs, and its builder working on a small configuration."""
from __future__ import annotations

import shutil

import pytest

from scalerl.config import compose, validate
from scalerl.train.setup import prepare_checkpoint
from scalerl.train.warmstart import (ASSET, REBUILD, ShippedWarmStartError, key_hash, read_manifest, sha256,
                                     shipped_warm_start, verify)
from scalerl.train.warmstart_asset import build, check, default_key


def test_shipped_warm_start_was_built_from_todays_default_settings():
    # Fails when the demonstrations, the warm-start or task settings, the model shape or the
    # warm start's code version change without rebuilding the shipped copy; the message says how.
    problem = check(validate(compose(["logger=none"])))
    assert problem is None, problem


def test_shipped_files_have_their_recorded_hashes():
    manifest = verify(ASSET)
    assert sorted(manifest["sha256"]) == ["config.json", "generation_config.json", "model.safetensors",
                                          "tokenizer.json", "tokenizer_config.json"]
    assert manifest["sha256"]["model.safetensors"] == sha256(ASSET / "model.safetensors")
    assert (ASSET / "model.safetensors").stat().st_size > 1_000_000  # the real weights, not a pointer file


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_a_damaged_shipped_file_is_a_clear_error(tmp_path, damage):
    copy = tmp_path / "tiny_warm"
    shutil.copytree(ASSET, copy)
    weights = copy / "model.safetensors"
    data = weights.read_bytes()
    if damage == "truncate":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    else:
        weights.unlink()
    with pytest.raises(ShippedWarmStartError, match="corrupted.*model.safetensors") as err:
        shipped_warm_start(read_manifest(copy)["key"], copy)
    assert REBUILD in str(err.value)


def test_the_default_loads_the_shipped_warm_start_and_trains_no_sft(tmp_path):
    cfg = validate(compose(["logger=none", f"cache_dir={tmp_path}"]))
    logs = []
    _, ckpt = prepare_checkpoint(cfg, log=logs.append)
    assert ckpt == ASSET
    assert not [p for p in tmp_path.glob("warm-*") if p.is_dir()], "the default built a warm start of its own"
    assert not any("SFT" in line for line in logs), logs
    # Another warm-start setting is another key: not the shipped one.
    other = validate(compose(["logger=none", f"cache_dir={tmp_path}", "model.warmstart.final_steps=59"]))
    assert key_hash(default_key(other)) != read_manifest(ASSET)["key_hash"]


SMALL = ["logger=none", "model.hidden_size=16", "model.num_heads=2", "model.num_layers=1",
         "model.intermediate_size=16", "model.warmstart.max_steps=2", "model.warmstart.eval_every=1",
         "model.warmstart.batch_size=4", "model.warmstart.final_steps=1", "task.n_heldout=8", "task.n_train=64"]


def test_build_writes_a_checkpoint_its_key_and_hashes_on_a_small_configuration(tmp_path):
    cfg = validate(compose([*SMALL, f"cache_dir={tmp_path / 'cache'}"]))
    asset = tmp_path / "asset"
    manifest = build(cfg, asset, log=lambda *a: None)
    key = default_key(cfg)
    assert manifest["key_hash"] == key_hash(key) == read_manifest(asset)["key_hash"]
    assert manifest["built"]["steps"] == 2 and manifest["built"]["final_steps"] == 1
    assert verify(asset) == manifest
    assert shipped_warm_start(key, asset) == asset
    built = next(p for p in (tmp_path / "cache").glob("warm-*") if p.is_dir())  # the same bytes as the cache's build
    assert sha256(built / "model.safetensors") == manifest["sha256"]["model.safetensors"]
    other = validate(compose([*SMALL, f"cache_dir={tmp_path / 'cache'}", "model.warmstart.lr=1e-3"]))
    assert shipped_warm_start(default_key(other), asset) is None
