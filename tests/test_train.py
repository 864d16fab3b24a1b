"""In-process training runs: determinism against a stored curve, learning,
NaN handling, DAPO refill and the precision mismatch metric."""
import json
import math
import signal
import warnings
from pathlib import Path

import pytest
import torch

from scalerl.core.jsonio import JsonlFile
from scalerl.losses import LOSSES
from scalerl.train.checkpoint import list_checkpoints, load_plain
from scalerl.train.loop import train

DATA = Path(__file__).parent / "data"


def cpu_kind() -> str:
    """The CPU's vendor and torch's kernel level: the warm start's 400-odd SFT steps amplify their
    rounding (an AMD EPYC with AVX2 starts RL at 0.061, one with AVX-512 at 0.072, the
    curve_20steps.json machine, whose kind was not noted, at 0.079), so each kind keeps its own
    reference curve."""
    vendor = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("vendor_id")), "unknown") if Path("/proc/cpuinfo").exists() else "unknown"
    return f"{vendor}-{torch.backends.cpu.get_cpu_capability()}"


# This kind's curve if one was recorded, else the first one (recorded before kinds were told apart),
# which stands for its own kind only: a run whose step 0 differs from it is another kind.
OWN_CURVE = DATA / f"curve_20steps-{cpu_kind()}.json"
CURVE = OWN_CURVE if OWN_CURVE.exists() else DATA / "curve_20steps.json"
SHORT = ["train.steps=20", "train.eval_every=5"]


def run(cfg, run_dir):
    return train(cfg, run_dir, run_name=run_dir.name, group="test", config_dict={})


def curve(run_dir):
    return [{k: r[k] for k in ("step", "pass_rate", "compute", "tokens", "train_reward") if k in r}
            for r in JsonlFile(run_dir / "metrics.jsonl").rows()]


@pytest.mark.slow
def test_deterministic_run_matches_stored_curve(tmp_path):
    # The default's reasoning shape (not tiny_cfg's answers-only one), synchronous and on one thread.
    from scalerl.config import compose, validate

    cfg = validate(compose(["logger=none", "train.threads=1", "async=sync", *SHORT]))
    a, b = tmp_path / "a", tmp_path / "b"
    assert run(cfg, a)["status"] == "done"
    run(cfg, b)
    assert curve(a) == curve(b)  # same seed, same thread count: bit-identical
    got = curve(a)
    assert [r["step"] for r in got] == [0, 5, 10, 15, 20]
    ref = json.loads(CURVE.read_text())
    if CURVE != OWN_CURVE and got[0] != ref[0]:
        # A CPU kind met for the first time: its rounding gives the warm start another step-0 policy
        # (0.061, 0.072 and 0.079 on the three kinds so far) and the 20 steps another path, too far
        # apart for any tolerance. Nothing to compare with yet: its curve is written, to be committed.
        # Whether the default learns is tests/test_default_learns.py's, on every kind.
        OWN_CURVE.write_text(json.dumps(got, indent=1))
        warnings.warn(f"no stored 20-step curve for the CPU kind {cpu_kind()}: recorded {OWN_CURVE}; commit it")
        return
    # Same machine kind and thread count: the curve reproduces bit for bit; the tolerances absorb
    # machines that report one kind but round differently. They are tighter than one changed sample
    # in a step (1/128 of train_reward) times a few, so a wrong normalizer, loss or filter fails here.
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g["step"] == r["step"]
        assert abs(g["pass_rate"] - r["pass_rate"]) <= 0.01, (g, r)
        assert abs(g.get("train_reward", 0.0) - r.get("train_reward", 0.0)) <= 0.01, (g, r)
        assert math.isclose(g["compute"], r["compute"], rel_tol=0.01) or g["step"] == 0


@pytest.mark.slow
def test_nan_loss_skips_the_step_and_never_reaches_a_checkpoint(tiny_cfg, tmp_path, monkeypatch):
    real = LOSSES["cispo"]
    calls = {"n": 0}

    def sometimes_nan(logp, behav, adv, mask, *, cfg):
        calls["n"] += 1
        loss, m = real.fn(logp, behav, adv, mask, cfg=cfg)
        if calls["n"] in (3, 4, 5):  # minibatches of steps 2 and 3
            loss = loss * float("nan")
        return loss, m

    monkeypatch.setitem(LOSSES, "cispo", type(real)(real.schema, sometimes_nan))
    out = run(tiny_cfg("train.steps=6", "train.eval_every=3"), tmp_path / "r")
    assert out["status"] == "done" and out["nan_skips"] == 2
    steps = JsonlFile(tmp_path / "r" / "steps.jsonl").rows()
    assert [s["nonfinite"] for s in steps] == [0, 2, 1, 0, 0, 0]  # minibatch losses 3-5 = step 2 (both), step 3 (first)
    ck = load_plain(list_checkpoints(tmp_path / "r")[-1])
    assert all(torch.isfinite(v).all() for v in ck["model"].values())


@pytest.mark.slow
def test_persistent_nan_aborts_with_clean_checkpoint(tiny_cfg, tmp_path, monkeypatch):
    real = LOSSES["cispo"]
    monkeypatch.setitem(LOSSES, "cispo", type(real)(real.schema, lambda *a, cfg: (real.fn(*a, cfg=cfg)[0] * float("inf"), {})))
    with pytest.raises(FloatingPointError, match="train.max_nan_skips"):
        run(tiny_cfg("train.steps=20", "train.max_nan_skips=3"), tmp_path / "r")
    assert [p.name for p in list_checkpoints(tmp_path / "r")] == ["step_00000000.pt"]
    # The aborted run gave SIGTERM back: a later run in this process can still be stopped.
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.slow
def test_dapo_dynamic_refills_groups(tiny_cfg, tmp_path):
    out = run(tiny_cfg("filter=dapo_dynamic", "train.steps=3", "train.eval_every=3"), tmp_path / "r")
    steps = JsonlFile(tmp_path / "r" / "steps.jsonl").rows()
    assert out["status"] == "done"
    # Refilling replaces most zero-variance groups (20% of prompts are unlearnable products).
    assert sum(s["effective_batch"] for s in steps) / 3 >= 14


@pytest.mark.slow
def test_one_sided_fp32_head_shows_generator_trainer_mismatch(tiny_cfg, tmp_path):
    # On CPU both sides run the same kernels, so a two-sided head agrees to float
    # rounding; a head that differs between the sides (the paper's "one side
    # only") shows up in the logged mismatch and importance ratios.
    mism = {}
    for name, extra in (("both", []), ("one_side", ["precision.trainer=false"])):
        # generator_body=auto: the generator samples from the trainer's own weights (not the engine's bf16)
        run(tiny_cfg("precision=fp32_head", "precision.generator_body=auto", *extra, "train.steps=2",
                     "train.eval_every=2"), tmp_path / name)
        rows = JsonlFile(tmp_path / name / "steps.jsonl").rows()
        mism[name] = (sum(s["logp_mismatch"] for s in rows) / 2, sum(s["ratio_dev"] for s in rows) / 2)
    assert mism["both"][0] < 1e-5 and mism["both"][1] < 1e-5
    assert mism["one_side"][0] > 1e-3 and mism["one_side"][1] > 1e-3
