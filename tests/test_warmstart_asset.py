"""The shipped warm start (scalerl/train/warmstart_asset.py): built from today's default settings,
intact, loaded by the default's runs, and its builder working on a small configuration; and the
tests' answers-only one, found in tests/assets through SCALERL_WARM_STARTS (set by conftest.py)."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from scalerl.config import compose, validate
from scalerl.train.setup import prepare_checkpoint
from helpers import ANSWERS_ONLY, TEST_WARM_STARTS, WARM_STARTS_ENV

from scalerl.train.warmstart import (ASSET, ASSETS, REBUILD, SEARCH_ENV, ShippedWarmStartError, key_hash, read_manifest,
                                     sha256, shipped_folders, shipped_warm_start, verify)
from scalerl.train.warmstart_asset import build, check, default_key


ANSWERS = TEST_WARM_STARTS / "tiny_warm_answers"
MOE = ASSETS / "tiny_moe_warm"
FOLDERS = {"tiny_warm": ASSET, "tiny_moe_warm": MOE, "tiny_warm_answers": ANSWERS}


def test_the_default_ships_and_the_tests_shape_is_found_beside_the_tests(monkeypatch):
    assert WARM_STARTS_ENV == SEARCH_ENV and os.environ[SEARCH_ENV] == str(TEST_WARM_STARTS)
    assert shipped_folders() == [MOE, ASSET, ANSWERS]
    # the package holds the embedded models' warm starts and no test gear
    assert [p.name for p in shipped_folders([ASSETS])] == ["tiny_moe_warm", "tiny_warm"]
    assert read_manifest(ASSET)["overrides"] == [] and read_manifest(MOE)["overrides"] == ["model=tiny_moe"]
    monkeypatch.delenv(SEARCH_ENV)
    assert shipped_folders() == [MOE, ASSET]
    monkeypatch.setenv(SEARCH_ENV, os.pathsep.join(["/nonexistent", str(TEST_WARM_STARTS)]))
    assert shipped_folders() == [MOE, ASSET, ANSWERS]


@pytest.mark.parametrize("name", ["tiny_warm", "tiny_moe_warm", "tiny_warm_answers"])
def test_shipped_warm_start_was_built_from_todays_settings(name, tmp_path):
    # Fails when the demonstrations, the warm-start or task settings, the model shape or the
    # warm start's code version change without rebuilding the shipped copy; the message says how.
    problem = check(FOLDERS[name], cache_dir=str(tmp_path))
    assert problem is None, problem


@pytest.mark.parametrize("name", ["tiny_warm", "tiny_moe_warm", "tiny_warm_answers"])
def test_shipped_files_have_their_recorded_hashes(name):
    asset = FOLDERS[name]
    manifest = verify(asset)
    assert sorted(manifest["sha256"]) == ["config.json", "generation_config.json", "model.safetensors",
                                          "tokenizer.json", "tokenizer_config.json"]
    assert manifest["sha256"]["model.safetensors"] == sha256(asset / "model.safetensors")
    assert (asset / "model.safetensors").stat().st_size > 1_000_000  # the real weights, not a pointer file


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
        shipped_warm_start(read_manifest(copy)["key"], [copy])
    assert REBUILD in str(err.value)


def test_the_default_loads_the_shipped_warm_start_and_trains_no_sft(tmp_path):
    cfg = validate(compose(["logger=none", f"cache_dir={tmp_path}"]))
    logs = []
    _, ckpt = prepare_checkpoint(cfg, log=logs.append)
    assert ckpt == ASSET
    assert not [p for p in tmp_path.glob("warm-*") if p.is_dir()], "the default built a warm start of its own"
    assert not any("SFT" in line for line in logs), logs
    # Another warm-start setting is another key: not the shipped one.
    # The tests' answers-only shape loads its own from tests/assets; another setting is another key, found nowhere.
    assert prepare_checkpoint(validate(compose(["logger=none", f"cache_dir={tmp_path}", *ANSWERS_ONLY])),
                              log=logs.append)[1] == ANSWERS
    other = validate(compose(["logger=none", f"cache_dir={tmp_path}", "model.warmstart.final_steps=59"]))
    assert shipped_warm_start(default_key(other)) is None


SMALL = ["logger=none", "model.hidden_size=16", "model.num_heads=2", "model.num_layers=1",
         "model.intermediate_size=16", "model.warmstart.max_steps=2", "model.warmstart.eval_every=1",
         "model.warmstart.batch_size=4", "model.warmstart.final_steps=1", "task.n_heldout=8", "task.n_train=64"]


def test_build_writes_a_checkpoint_its_key_and_hashes_on_a_small_configuration(tmp_path):
    overrides = [*SMALL[1:], f"cache_dir={tmp_path / 'cache'}"]
    cfg = validate(compose(["logger=none", *overrides]))
    asset = tmp_path / "asset"
    manifest = build(overrides, asset, log=lambda *a: None)
    key = default_key(cfg)
    assert manifest["key_hash"] == key_hash(key) == read_manifest(asset)["key_hash"]
    assert manifest["built"]["steps"] == 2 and manifest["built"]["final_steps"] == 1
    assert verify(asset) == manifest
    assert shipped_warm_start(key, [asset]) == asset
    assert check(asset) is None
    built = next(p for p in (tmp_path / "cache").glob("warm-*") if p.is_dir())  # the same bytes as the cache's build
    assert sha256(built / "model.safetensors") == manifest["sha256"]["model.safetensors"]
    other = validate(compose([*SMALL, f"cache_dir={tmp_path / 'cache'}", "model.warmstart.lr=1e-3"]))
    assert shipped_warm_start(default_key(other), [asset]) is None
    # Its settings changed since (as a change of the code's defaults would): check says how to rebuild.
    manifest["overrides"] = [o.replace("model.warmstart.final_steps=1", "model.warmstart.final_steps=2") for o in overrides]
    (asset / "manifest.json").write_text(json.dumps(manifest))
    problem = check(asset)
    assert "final_steps" in problem and f"{REBUILD} --name asset --dir " in problem and "final_steps=2" in problem
