"""Data-parallel ranks on CPU with gloo: the FSDP2 trainer against one rank, resuming on a
different number of ranks, hundreds of steps with uneven splits, and fp32 master weights;
PipelineRL's generator processes serving two ranks (rank 0 owns them) against the same run.

The 2-rank runs are real: ``torchrun --nproc_per_node 2 -m scalerl.sweep``, two processes,
FSDP2 over a gloo process group. Sampling is keyed by prompt, not rank, so both rank counts
draw the same completions; what may differ is float summation order (two partial gradient
sums reduced, against one), which AdamW turns into parameter differences of order
lr x 1e-7 per step. The tolerances below are ~100x what we measure and ~100x below what a
real divergence (one different token, a wrong gradient scale) produces.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import ANSWERS_ONLY, REPO, TINY_RUN, read_rows, torchrun
from safetensors.torch import load_file

from scalerl.train.loop import train
from scalerl.train.update import minibatch_groups

# Small and fast, but the ScaleRL recipe (default filter zero_variance_npr, interruptions),
# synchronous (bit-reproducible); ``PIPE`` streams instead, at max_lag 0 (docs/async.md).
# generator_body=auto: the engine's bf16 rounding (the default, docs/mismatch.md) is discontinuous, so
# the fp32 rounding by which 1 and 2 ranks' weights differ (~1e-7) can flip a weight by a bf16 step and
# move the behaviour log-probs by far more than the loss tolerance; rank-equivalence is about fp32.
STEPS = 24
PIPE = ["async=pipeline_rl", "async.max_lag=0", "async.generators=2", "async.timeout_s=120"]
COMPARED = ("train_reward", "response_length", "effective_batch", "truncation_rate", "interrupt_rate")


def one_rank(tiny_cfg, run_dir: Path, *overrides: str) -> dict:
    return train(tiny_cfg(*TINY_RUN, *overrides), run_dir, run_name=run_dir.name, group="test", config_dict={})


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "final_policy" / "model.safetensors"))


def assert_same_run(a: Path, b: Path, start: dict, first_step: int = 1) -> None:
    """Same samples (exactly), same losses and weights (to float rounding)."""
    sa = {r["step"]: r for r in read_rows(a / "steps.jsonl")}
    sb = {r["step"]: r for r in read_rows(b / "steps.jsonl")}
    assert sorted(sa) == sorted(sb) == list(range(1, STEPS + 1))
    for step in range(first_step, STEPS + 1):
        ra, rb = sa[step], sb[step]
        assert {k: ra[k] for k in COMPARED} == {k: rb[k] for k in COMPARED}, step
        assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-4, abs=1e-6), step
        # The norm sums every parameter's squared gradient, in another order on 2 ranks; on an AMD
        # EPYC (AVX2) its rounding reached 1.1e-4 of a norm of 20 by step 19 (the loss still within
        # 1e-4). A wrong normalizer or a missing rank's share moves it by far more than 1e-3.
        assert ra["grad_norm"] == pytest.approx(rb["grad_norm"], rel=1e-3), step
    ma, mb = read_rows(a / "metrics.jsonl"), read_rows(b / "metrics.jsonl")
    assert [(r["step"], r["pass_rate"]) for r in ma] == [(r["step"], r["pass_rate"]) for r in mb]
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    worst = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    moved = max((wa[k] - start[k]).abs().max().item() for k in wa)  # what training changed
    print(f"{b.name}: max |weight difference| {worst:.1e}; training moved weights by up to {moved:.1e}")
    assert worst < 1e-5 < 1e-3 < moved, (worst, moved)


# ------------------------------------------------------------------ unit


def test_minibatch_split_is_as_even_as_possible():
    keep = torch.tensor([True] * 9 + [False] * 3)
    assert [len(c) for c in minibatch_groups(keep, 4)] == [3, 2, 2, 2]  # was [3, 3, 3, 0]
    assert sum(minibatch_groups(keep, 4), []) == list(range(9))
    assert minibatch_groups(torch.tensor([False, True]), 2) == [[1]]
    assert minibatch_groups(torch.zeros(4, dtype=torch.bool), 2) == []


class TwinDist:
    """Rank ``rank`` of 2 whose twin contributes exactly what it does: enough to run one
    rank's side of the update in-process (the collectives are sums)."""

    def __init__(self, rank: int):
        self.rank, self.world, self.device, self.mesh = rank, 2, torch.device("cpu"), None

    def all_sum(self, x):
        return x * 2


@pytest.mark.slow
def test_a_rank_with_no_rows_in_a_minibatch_still_trains(tiny_cfg):
    """Bug: a rank whose share of the kept groups is smaller than batch.minibatches got an empty
    minibatch, its metrics dict was empty and the merge raised KeyError ('entropy')."""
    from scalerl.train.rollout import rollout
    from scalerl.train.run_plan import plan_run, resolve
    from scalerl.train.setup import build_run, prepare_start
    from scalerl.train.update import policy_update

    cfg = tiny_cfg(*TINY_RUN)
    task, ckpt, tok = prepare_start(cfg)
    plan = plan_run(cfg, TwinDist(1), resolve(cfg, torch.device("cpu"), tok))
    r = build_run(plan, task, ckpt)
    gen_kw = dict(generator=r.generator, tok=plan.sampling.tok, max_new_tokens=8, temperature=1.0,
                  device=torch.device("cpu"))
    rank_groups = slice(4, 8)  # rank 1's prompts of 8
    ro = rollout(list(range(8)), rank_groups, task, group=8, seed=0, step=1, draw_lengths=plan.recipe.draw_lengths,
                 trains_on=plan.recipe.trains_on, refill_rounds=0, sampler=r.sampler, **gen_kw)
    keep = torch.tensor([True, True, True, False, False, False, False, True])  # rank 1 keeps only group 7
    adv = torch.randn(8, 8)
    out = policy_update(r.trainer, r.optimizer, r.params, ro, adv, keep, plan.recipe, minibatches=2, grad_clip=1.0,
                        temperature=1.0, rank_groups=rank_groups, dist=TwinDist(1))
    # Global chunks [0, 1] and [2, 7]: rank 1 has no rows in the first, one group in the second.
    assert out["idle_minibatches"] == 1 and out["nonfinite"] == 0
    assert {"entropy", "loss", "grad_norm", "logp_mismatch", "ratio_dev", "clip_frac"} <= set(out)


# ------------------------------------------------------------------ one rank, mixed precision


def test_bf16_compute_keeps_fp32_master_weights(tiny_cfg, tmp_path):
    """Bug: with a bf16 body the weights were bf16 and AdamW updated them in place; at the
    paper's lr (5e-7) the update rounds away and the weights never change. Now the master
    weights are fp32 (FSDP2 mixed precision, one rank) and move by ~lr per step."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    run_dir = tmp_path / "bf16"
    one_rank(tiny_cfg, run_dir, "model.dtype=bfloat16", "train.lr=5e-7", "train.steps=1", "train.eval_every=1")
    states = []
    for step in (0, 1):  # the model weights of either kind of checkpoint
        path = run_dir / "checkpoints" / f"step_{step:08d}"
        if path.is_dir():
            dcp_to_torch_save(path, tmp_path / f"{step}.pt")
            path = tmp_path / f"{step}.pt"
        else:
            path = path.with_suffix(".pt")
        states.append(torch.load(path, weights_only=False)["model"])
    before, after = states
    assert all(t.dtype == torch.float32 for t in after.values())
    delta = torch.cat([(after[k] - before[k]).abs().flatten() for k in before])
    assert (delta > 0).float().mean() > 0.5  # most weights moved...
    assert 1e-7 < delta.median() < 2e-6  # ...by about one AdamW step of lr 5e-7


# ------------------------------------------------------------------ two ranks
# The tests on `pair` and `pipe` share one xdist group: a module fixture is per worker, so under
# `--dist loadgroup` without it two workers each ran the 1- and 2-rank runs (70-150 s each in CI).
PAIR = pytest.mark.xdist_group("two_ranks_pair")


@pytest.fixture(scope="module")
def pair(tmp_path_factory, _session_env):
    """The same run on 1 rank (in-process) and on 2 ranks (torchrun), 24 steps each,
    and the weights both started from."""
    from scalerl.config import compose, validate
    from scalerl.train.setup import prepare_checkpoint

    root = tmp_path_factory.mktemp("pair")
    args = [*TINY_RUN, f"train.steps={STEPS}", f"train.eval_every={STEPS // 2}"]
    cfg = validate(compose(args))
    start = load_file(str(prepare_checkpoint(cfg)[1] / "model.safetensors"))
    train(cfg, root / "one", run_name="one", group="test", config_dict={})
    torchrun(args, root / "two")
    return root, args, start


@pytest.mark.slow
@PAIR
def test_two_ranks_reproduce_one_rank(pair):
    root, _, start = pair
    derived = json.loads((root / "two" / "derived.json").read_text())
    assert derived["world_size"] == 2 and derived["prompts_per_rank"] == 4
    assert any((root / "two" / "checkpoints").glob("step_*/.metadata"))  # sharded (DCP) checkpoints
    steps = read_rows(root / "two" / "steps.jsonl")
    assert sum(r["idle_minibatches"] for r in steps) > 0  # uneven splits happened, and were survived
    assert_same_run(root / "one", root / "two", start)


@pytest.fixture(scope="module")
def pipe(pair):
    """The pair's run on 2 ranks with 2 generator processes streaming at max_lag 0 (torchrun)."""
    root, args, start = pair
    torchrun([*args, *PIPE], root / "pipe")
    return root, args, start


@pytest.mark.slow
@PAIR
def test_two_ranks_with_generator_processes_reproduce_one_synchronous_rank(pipe):
    """pipeline_rl at max_lag 0 with 2 trainer ranks and 2 generators: rank 0 collects and scores
    each batch and hands every rank its share (train/schedules/pipeline.py), so the samples are the 1-rank
    sync run's exactly and the weights equal it to float rounding, as for 2 sync ranks."""
    root, _, start = pipe
    derived = json.loads((root / "pipe" / "derived.json").read_text())
    assert derived["world_size"] == 2 and derived["generator_devices"] == 2
    steps = read_rows(root / "pipe" / "steps.jsonl")
    assert all(r["staleness_max"] == 0 and r["lag_dropped"] == 0 for r in steps)
    assert_same_run(root / "one", root / "pipe", start)


@pytest.mark.slow
@PAIR
def test_two_ranks_with_generator_processes_resume_exactly(pipe):
    """Back to the middle checkpoint (sharded, with every rank's sampler snapshot): the relaunch
    regenerates the batches that were in flight and continues as the uninterrupted run."""
    root, args, start = pipe
    half = f"step_{STEPS // 2:08d}"
    shutil.copytree(root / "pipe", root / "pipe_resumed")
    for p in (root / "pipe_resumed" / "checkpoints").iterdir():
        if not p.name.startswith(half):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    shutil.rmtree(root / "pipe_resumed" / "final_policy")
    (root / "pipe_resumed" / "summary.json").unlink()  # else the entry point skips a finished run
    out = torchrun([*args, *PIPE], root / "pipe_resumed")
    assert "resuming" in out.stdout + out.stderr
    assert_same_run(root / "one", root / "pipe_resumed", start, first_step=STEPS // 2 + 1)


@pytest.mark.slow
@PAIR
def test_resume_on_a_different_number_of_ranks(pair, tiny_cfg):
    """2 ranks -> 1 (a sharded DCP checkpoint loaded into a plain model) and 1 -> 2 (a plain .pt
    checkpoint sharded on load): both continue exactly as the uninterrupted run."""
    root, args, start = pair
    half = f"step_{STEPS // 2:08d}"
    for src, dst in (("two", "two_then_one"), ("one", "one_then_two")):
        shutil.copytree(root / src, root / dst)
        for p in (root / dst / "checkpoints").iterdir():  # back to the middle of the run
            if not p.name.startswith(half):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        shutil.rmtree(root / dst / "final_policy")
    from scalerl.config import compose, validate

    train(validate(compose(args)), root / "two_then_one", run_name="x", group="test", config_dict={})
    out = torchrun(args, root / "one_then_two")
    assert "resuming" in out.stdout + out.stderr
    assert (root / "one_then_two" / "checkpoints" / f"step_{STEPS:08d}" / ".metadata").exists()
    assert_same_run(root / "one", root / "two_then_one", start, first_step=STEPS // 2 + 1)
    assert_same_run(root / "one", root / "one_then_two", start, first_step=STEPS // 2 + 1)


@pytest.mark.slow
def test_two_rank_run_with_the_default_filter_finishes_hundreds_of_steps(tmp_path):
    """Bug: with zero_variance_npr about 6-7% of steps split the kept groups unevenly over
    2 ranks, and the rank with an empty minibatch crashed. A tiny batch (2 prompts per rank)
    makes uneven splits common; evaluation is rare and small to keep this affordable."""
    run_dir = tmp_path / "long"
    torchrun(["logger=none", "train.threads=1", "async=sync", *ANSWERS_ONLY, "batch.prompts=4", "batch.generations=4",
              "batch.minibatches=2",
              "train.steps=300", "train.eval_every=150", "train.eval_samples=1", "train.ckpt_every=1000",
              "train.export_policy=false", "length=truncate"], run_dir)
    steps = read_rows(run_dir / "steps.jsonl")
    assert [r["step"] for r in steps] == list(range(1, 301))
    uneven = sum(r["idle_minibatches"] > 0 for r in steps)
    assert uneven >= 30, uneven  # measured: about a third of the steps
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "done"


@pytest.mark.slow
def test_ppo_off_policy_on_two_ranks_checkpoints_at_phase_boundaries(tmp_path):
    """Batches generated ahead do not fit a sharded checkpoint's JSON state: a 2-rank
    ppo_off_policy run skips the checkpoints that fall inside a phase (step 3 of k=2 phases)
    and still finishes, with every eval row."""
    run_dir = tmp_path / "ppo"
    torchrun(["logger=none", "train.threads=1", "async=ppo_off_policy", "async.k=2", *ANSWERS_ONLY, "batch.prompts=4",
              "batch.generations=4", "batch.minibatches=2", "train.steps=6", "train.eval_every=3",
              "train.eval_samples=1", "train.ckpt_every=1000", "train.export_policy=false"], run_dir)
    assert [r["step"] for r in read_rows(run_dir / "metrics.jsonl")] == [0, 3, 6]
    kept = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))
    assert kept == ["step_00000000", "step_00000006"]


def test_a_sweep_under_torchrun_is_refused_with_a_clear_error(tmp_path):
    proc = torchrun(["-m", "loss=cispo,dapo", "logger=none"], tmp_path / "x", check=False, timeout=300)
    assert proc.returncode != 0
    assert "torchrun starts the ranks of one run" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_micro_batches_on_two_ranks_reproduce_one_forward_on_one_rank(tiny_cfg, tmp_path):
    """``train.micro_batch_tokens`` on 2 ranks (rows bucketed into micro-batches of at most 24
    padded tokens, ranks padding to the same micro-batch count), with per-layer activation
    checkpointing under FSDP2, the LM head in chunks of 7 positions (under FSDP2's root unit)
    and the meta-device, unit-by-unit load, against one forward per
    minibatch on 1 rank: the same samples, losses and weights to float rounding."""
    steps = 4
    args = [*TINY_RUN, f"train.steps={steps}", f"train.eval_every={steps}", "train.export_policy=true"]
    one = tmp_path / "one"
    train(tiny_cfg(*args), one, run_name="one", group="test", config_dict={})
    torchrun([*args, "train.micro_batch_tokens=24", "model.activation_checkpointing=true", "train.head_chunk=7"],
             tmp_path / "two")
    sa, sb = read_rows(one / "steps.jsonl"), read_rows(tmp_path / "two" / "steps.jsonl")
    assert [r["step"] for r in sa] == [r["step"] for r in sb] == list(range(1, steps + 1))
    for ra, rb in zip(sa, sb):
        assert {k: ra[k] for k in COMPARED} == {k: rb[k] for k in COMPARED}, ra["step"]
        assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-4, abs=1e-6)
        assert ra["grad_norm"] == pytest.approx(rb["grad_norm"], rel=1e-4)
    wa, wb = weights(one), weights(tmp_path / "two")
    worst = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    assert worst < 1e-5, worst
