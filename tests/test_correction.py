"""The correction axis (generator-trainer mismatch, docs/mismatch.md): each option's weights
by hand, the mismatch metrics by hand, composition with every loss and async mode, a bad
setting refused in one line, and a few real steps that carry the extra forward's time."""
import itertools
import json
import math

import pytest
import torch
from helpers import cli, run_cli  # cli: the entry point forked from a server that imported it (helpers.ForkedCli)

from scalerl.asynchrony import ASYNC_MODES
from scalerl.config import compose, validate
from scalerl.correction import CORRECTIONS
from scalerl.correction.icepop import IcePopConfig, icepop_weight
from scalerl.correction.mismatch import mismatch_stats
from scalerl.correction.none import NoCorrectionConfig, no_correction
from scalerl.correction.seq_mask import SeqMaskConfig, seq_mask_weight
from scalerl.correction.tis import TisConfig, tis_weight
from scalerl.losses import LOSSES
from scalerl.registry import build_recipe

pytestmark = pytest.mark.unit
log = lambda *p: torch.log(torch.tensor([p], dtype=torch.float64))  # (1, T) log-probs


def test_tis_truncates_the_weight_at_C():
    # w = pi_old / pi_gen = 0.3/0.1, 0.6/0.5, 0.2/0.4 = 3, 1.2, 0.5 -> min(w, 2) = 2, 1.2, 0.5;
    # clipped: the first of the two sampled tokens (the third is not sampled) -> 1/2
    w, m = tis_weight(log(0.3, 0.6, 0.2), log(0.1, 0.5, 0.4), torch.tensor([[True, True, False]]), cfg=TisConfig(C=2.0))
    assert torch.allclose(w, torch.tensor([[2.0, 1.2, 0.5]], dtype=torch.float64))
    assert float(m["correction_clip_frac"]) == 0.5


def test_icepop_masks_tokens_outside_the_band_and_keeps_w_inside():
    # w = 0.3/0.05, 0.6/0.5, 0.05/0.2, 0.2/0.1 = 6, 1.2, 0.25, 2; band [0.5, 5]:
    # 6 and 0.25 leave it (weight 0), 1.2 and 2 keep their w; masked 2 of 4
    w, m = icepop_weight(log(0.3, 0.6, 0.05, 0.2), log(0.05, 0.5, 0.2, 0.1), torch.ones(1, 4, dtype=torch.bool),
                         cfg=IcePopConfig(lo=0.5, hi=5.0))
    assert torch.allclose(w, torch.tensor([[0.0, 1.2, 0.0, 2.0]], dtype=torch.float64))
    assert float(m["correction_masked_frac"]) == 0.5


def test_seq_mask_masks_a_sequence_by_its_largest_token_divergence():
    # log w per token; delta = ln 2 = 0.693:
    #   row 0: 0.1, -0.5 -> max |log w| 0.5 <= 0.693: kept (1, 1)
    #   row 1: 0.2,  0.8 -> 0.8 > 0.693: masked (0, 0)
    #   row 2: 0.0,  3.0 with the 3.0 not sampled -> 0.0: kept
    # masked: 1 of 3 sequences
    gen = torch.zeros(3, 2, dtype=torch.float64)
    old = torch.tensor([[0.1, -0.5], [0.2, 0.8], [0.0, 3.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, True], [True, False]])
    w, m = seq_mask_weight(old, gen, mask, cfg=SeqMaskConfig(delta=math.log(2)))
    assert w.tolist() == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]
    assert float(m["correction_masked_frac"]) == pytest.approx(1 / 3)


def test_none_weighs_every_token_one_and_needs_no_extra_forward():
    w, m = no_correction(log(0.3, 0.6), log(0.1, 0.5), torch.ones(1, 2, dtype=torch.bool), cfg=NoCorrectionConfig())
    assert w.tolist() == [[1.0, 1.0]] and m == {}
    assert not NoCorrectionConfig().needs_old_logp()
    assert all(CORRECTIONS[n].schema().needs_old_logp() for n in ("tis", "icepop", "seq_mask"))


def test_mismatch_stats_by_hand():
    # r = pi_train / pi_gen = 0.5/0.5, 0.2/0.5, 0.4/0.1, 0.1/0.1 = 1, 0.4, 4, 1
    # log r = 0, -0.91629, 1.38629, 0;  |log r| sorted 0, 0, 0.91629, 1.38629
    # mean |log r| = 2.30259 / 4 = 0.57565; max 1.38629
    # p99 (linear): position 0.99 * 3 = 2.97 -> 0.91629 + 0.97 * (1.38629 - 0.91629) = 1.37219
    # k3 KL = mean(r - 1 - log r) = (0 + (0.4 - 1 + 0.91629) + (4 - 1 - 1.38629) + 0) / 4 = 1.93000 / 4 = 0.48250
    # k1 KL = mean(-log r) = -(1.38629 - 0.91629) / 4 = -0.11750
    # outside [0.5, 2]: 0.4 and 4 -> 2 of 4
    s = mismatch_stats(torch.log(torch.tensor([0.5, 0.2, 0.4, 0.1])), torch.log(torch.tensor([0.5, 0.5, 0.1, 0.1])))
    assert s["mismatch_abs_mean"] == pytest.approx(0.57565, abs=1e-5)
    assert s["mismatch_abs_max"] == pytest.approx(1.38629, abs=1e-5)
    assert s["mismatch_abs_p99"] == pytest.approx(1.37219, abs=1e-5)
    assert s["mismatch_kl"] == pytest.approx(0.48250, abs=1e-5)
    assert s["mismatch_kl_k1"] == pytest.approx(-0.11750, abs=1e-5)
    assert s["mismatch_out_frac"] == 0.5 and s["mismatch_tokens"] == 4
    assert mismatch_stats(torch.zeros(0), torch.zeros(0)) == {"mismatch_tokens": 0}


@pytest.mark.parametrize("correction,loss,mode", list(itertools.product(sorted(CORRECTIONS), sorted(LOSSES),
                                                                         sorted(ASYNC_MODES))))
def test_every_correction_composes_with_every_loss_and_async_mode(correction, loss, mode):
    cfg = validate(compose([f"correction={correction}", f"loss={loss}", f"async={mode}", "logger=none"]))
    recipe = build_recipe(cfg)
    assert cfg.correction.name == correction and recipe.needs_old_logp == (correction != "none")


@pytest.mark.parametrize("override,key", [("correction=tis correction.C=-1", "correction.C"),
                                          ("correction=icepop correction.hi=0.1", "correction.hi"),
                                          ("correction=seq_mask correction.delta=0", "correction.delta")])
def test_a_bad_setting_is_refused_with_one_line_naming_the_key(tmp_path, override, key):
    # The dry run's convention (tests/test_adding_an_option.py): one line names the key, says what is
    # wrong and that nothing was launched
    proc = cli(["--dry-run", "logger=none", *override.split()], tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"[scalerl] config error: {key}: must be") and "nothing was launched" in lines[0], lines


def test_a_corrected_run_logs_the_extra_forward_and_the_mismatch(tiny_cfg, tmp_path):
    from scalerl.train.loop import train

    cfg = tiny_cfg("correction=tis", "loss=dapo", "precision=fp32_head", "precision.generator_body=bfloat16",
                   "train.steps=2", "train.eval_every=2")
    train(cfg, tmp_path / "r", run_name="r", group="t", config_dict={})
    rows = [json.loads(line) for line in (tmp_path / "r" / "steps.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert row["correction_forward_s"] > 0 and 0 <= row["correction_clip_frac"] <= 1
        # sync: every token has staleness 0, and the bf16 generator differs from the fp32 trainer
        assert row["mismatch_tokens"] > 0 and row["mismatch_abs_max"] > 0 and row["mismatch_kl"] >= 0


@pytest.mark.parametrize("precision, exact", [("fp32", True), ("fp32_head", False)])
def test_the_mismatch_one_version_back_uses_that_versions_weights(tiny_cfg, tmp_path, precision, exact):
    from scalerl.train.loop import train

    # PPO-off-policy-2: each phase's second batch was sampled whole by the version before the
    # trainer's, which only the kept copy can recompute. With fp32 the generator is the trainer, so
    # that recompute must agree to rounding (a copy one update off would not: lr 1e-3 moves the
    # log-probs by far more than 1e-8); with the bf16-rounded generator it must not.
    cfg = tiny_cfg("async=ppo_off_policy", "async.k=2", f"precision={precision}", "train.steps=4",
                   "train.eval_every=4", "train.lr=1e-3", "train.warmup_steps=0")
    train(cfg, tmp_path / "r", run_name="r", group="t", config_dict={})
    rows = [json.loads(line) for line in (tmp_path / "r" / "steps.jsonl").read_text().splitlines()]
    lagged = [r for r in rows if r.get("mismatch_lagged_tokens")]
    assert [r["step"] for r in lagged] == [2, 4], rows  # the phases' second steps
    for r in lagged:
        assert r["mismatch_forward_s"] > 0
        assert (r["mismatch_kl"] < 1e-10) if exact else (r["mismatch_kl"] > 1e-8), r
        assert (r["mismatch_abs_max"] < 1e-4) if exact else (r["mismatch_abs_max"] > 1e-4), r


def test_the_mismatch_counts_only_rows_of_staleness_0():
    from types import SimpleNamespace

    from scalerl.train.behaviour import fresh_tokens

    # trainer version 4. Row 0 began at version 3 and went on at 4 after a push: its version-4 tokens
    # attend to the KV cache version 3 computed, so none of it counts. Row 1 is all version 4 but for
    # a forced (unsampled) token of another version, which does not matter. Row 2 is all version 3.
    version = torch.tensor([[3, 4, 4], [2, 4, 4], [3, 3, 3]])
    sampled = torch.tensor([[True, True, True], [False, True, True], [True, True, True]])
    ro = SimpleNamespace(gen=SimpleNamespace(version=version, sampled=sampled))
    rows = torch.tensor([0, 1, 2])
    fresh = fresh_tokens(ro, rows, 4)
    assert fresh.tolist() == [[False, False, False], [False, True, True], [False, False, False]]
    assert fresh_tokens(ro, rows, 3).tolist() == [[False, False, False], [False, False, False], [True, True, True]]
    assert fresh_tokens(ro, rows, None).tolist() == sampled.tolist()
    # Only the fresh tokens enter: row 0's version-4 tokens (log r 0.5, 0.7, stale KV) are left out.
    # fresh log r = 0.1, -0.3 -> mean |log r| 0.2, max 0.3
    train = torch.tensor([[3.0, 0.5, 0.7], [9.0, 0.1, -0.3], [1.0, 1.0, 1.0]])
    s = mismatch_stats(train[fresh], torch.zeros(3, 3)[fresh])
    assert s["mismatch_tokens"] == 2 and s["mismatch_abs_mean"] == pytest.approx(0.2)
    assert s["mismatch_abs_max"] == pytest.approx(0.3)
