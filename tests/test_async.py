"""The async axis (arXiv 2510.13786 §3.1): version arithmetic by hand, weight
buckets, in-flight swaps that keep the KV cache, and the recipes' choices;
then real generator processes: exact weight pushes (1 and 2 generators, and a
generator with its own bf16 body), the lag bound at both deterministic
extremes, a forced in-flight update, PPO-off-policy-k, a killed generator,
and a dead trainer."""
from __future__ import annotations

import copy
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import REPO, VOLATILE, make_pool, read_rows, wait_for
from paced import pace
from transformers import DynamicCache

from scalerl.asynchrony.base import Interleaving, version_stats, within_lag
from scalerl.config import compose, validate
from scalerl.core.jsonio import JsonlFile
from scalerl.generation import SamplingParams
from scalerl.generation.engines.torch_engine import TorchGenerator
from scalerl.generation.fleet.transport import TransportError
from scalerl.generation.transfer.buckets import in_order, lay_out, pack, unpack, weight_schema
from scalerl.launch.local_pool import arm_threads
from scalerl.launch.studies import load_study
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import Policy, positions_from_mask, token_logprobs
from scalerl.models.tiny import build_tiny_checkpoint
from scalerl.precision.base import linear_head
from scalerl.registry import build_recipe
from scalerl.train.loop import train

FAST = ["async.timeout_s=60"]


def run(cfg, run_dir):
    return train(cfg, run_dir, run_name=run_dir.name, group="test", config_dict={})


def small_buckets(monkeypatch, bucket_bytes=16 << 10):
    """Pushes in 16 KiB buckets: the tiny model's matrices (all under the default 64 MiB bucket's 4 MiB
    share) then travel in buckets of their own and are received straight into the generator's weights
    (buckets.unpack's ``into``); the default sends them all in one shared bucket, copied out."""
    import scalerl.generation.fleet.pool as pool_module

    real = pool_module.lay_out
    monkeypatch.setattr(pool_module, "lay_out", lambda schema, _: real(schema, bucket_bytes))


def rows(run_dir, name="steps.jsonl"):
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in JsonlFile(run_dir / name).rows()]


# ------------------------------------------------------------------ pure parts
def test_version_arithmetic_by_hand():
    # Trainer at version 4. Row 0: tokens of versions 3, 4 (+ pad); row 1: all 4; row 2: 1, 1; row 3: 4, 2.
    version = torch.tensor([[3, 4, 0], [4, 4, 4], [1, 1, 0], [4, 2, 9]])
    present = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    s = version_stats(version, present, 4)
    # staleness per present token: 1,0 | 0,0,0 | 3,3 | 0,2  -> mean 9/9 = 1, max 3
    assert s["staleness_mean"] == pytest.approx(1.0) and s["staleness_max"] == 3
    assert s["multi_version_frac"] == pytest.approx(2 / 4)  # rows 0 and 3 span two versions
    # Groups of 2 rows: group 0 = rows 0-1 (oldest 3 -> 1 stale), group 1 = rows 2-3 (oldest 1 -> 3 stale).
    assert within_lag(version, present, 4, 2, max_lag=2).tolist() == [True, False]
    assert within_lag(version, present, 4, 2, max_lag=3).tolist() == [True, True]


@pytest.mark.parametrize("option,max_lag,push_every,gens", [
    ("sync", 0, 1, 0), ("ppo_off_policy", 7, 8, 0), ("pipeline_rl", 8, 1, 1)])
def test_each_option_makes_its_interleaving(option, max_lag, push_every, gens):
    mode = build_recipe(validate(compose([f"async={option}"]))).interleaving
    assert (mode.max_lag, mode.push_every, mode.generators) == (max_lag, push_every, gens)
    assert mode.in_flight == (option == "pipeline_rl")


def test_lag_bound_and_pushes_of_an_interleaving():
    ppo3 = Interleaving(max_lag=2, push_every=3, in_flight=False, generators=0)
    # Version 3 (pushed after step 3) may generate steps 4, 5, 6 and no later: 7 needs version >= 4.
    assert [ppo3.min_version(s) for s in (1, 4, 6, 7)] == [0, 1, 3, 4]
    # which versions it pushes: the road applies push_every (tests/test_weights_road.py)


def test_recipes_choose_the_papers_async_setting():
    for recipe, option in [("scalerl", "pipeline_rl"), ("magistral", "pipeline_rl"), ("minimax", "ppo_off_policy"),
                           ("qwen_dapo", "ppo_off_policy"), ("deepseek_grpo", "ppo_off_policy")]:
        node = getattr(validate(compose([f"recipe={recipe}"])), "async")
        assert node.name == option
        assert (node.max_lag if option == "pipeline_rl" else node.k) == 8
    _, arms = load_study(["loo"])
    assert ["async=ppo_off_policy"] in [a[:1] for a in arms]


def test_generator_processes_count_as_threads_of_their_arm():
    assert arm_threads(compose(["async=sync"]), 1) == 1
    assert arm_threads(compose(["async=pipeline_rl", "async.generators=2"]), 1) == 3
    assert arm_threads(compose(["async=pipeline_rl"]), 4) == 4


def test_timeouts_and_thread_counts_do_not_change_a_runs_identity():
    from scalerl.launch.rundir import config_hash

    base = config_hash(compose([]))
    assert config_hash(compose(["async.timeout_s=60", "async.generator_threads=2"])) == base
    assert config_hash(compose(["async.max_lag=4"])) != base


def test_weight_buckets_round_trip_across_dtypes_and_splits():
    # More cases in tests/test_push_stream.py (the streamed push).
    state = {"a": torch.arange(6.0).view(2, 3), "b": torch.arange(4, dtype=torch.bfloat16), "c": torch.ones(5)}
    layout = lay_out(weight_schema(state), bucket_bytes=32)  # a at 0 (24 B), b at 32 (8 B), c at 48 (20 B): 3 buckets
    assert layout.offsets == (0, 32, 48) and layout.n_buckets == 3
    bufs = [torch.empty(32, dtype=torch.uint8) for _ in range(2)]
    sent = iter([b.clone() for _, b in pack(layout, in_order(layout, state), bufs)])

    def recv(buf):  # the broadcast, in memory: bucket k arrives in the receiver's buffer
        src = next(sent)
        return lambda: buf.copy_(src)

    got = dict(unpack(layout, recv))
    assert all(torch.equal(got[k], v) and got[k].dtype == v.dtype for k, v in state.items())


def test_a_broken_connection_names_the_generator_whose_exit_shows_a_moment_later():
    # A SIGKILLed generator's sockets close before its exit can be collected: the trainer's
    # receive fails first. The error must still name the death, not a bare connection error.
    from scalerl.generation.fleet.pool import Hub
    from scalerl.generation.transfer.wire import encode

    class ClosedGroup:
        def recv(self, *a):
            raise RuntimeError("Connection closed by peer")

    hub = Hub(1, timeout_s=30)
    try:
        hub._rollouts = ClosedGroup()
        hub.signed.set("done/0/3", encode({"nbytes": 4}))
        looks = iter([None, None])  # the first two looks still see a live process
        hub.alive = lambda j: next(looks, "(pid 4242) exited with code -9")
        with pytest.raises(TransportError) as e:
            hub.recv(0, "done/0/3", 3, "waiting for step 3's rollout (job 3)")
        assert str(e.value) == "waiting for step 3's rollout (job 3): generator 0 (pid 4242) exited with code -9"
    finally:
        hub.store = None


def _tiny(tmp_path):
    return build_tiny_checkpoint(tmp_path / "m", hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                                 max_position_embeddings=128, seed=0)


def test_in_flight_swap_keeps_the_sequences_and_their_kv_cache(tmp_path):
    old, tok = load_checkpoint(_tiny(tmp_path), dtype=torch.float32, device=torch.device("cpu"))
    new = copy.deepcopy(old)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(0.05 * torch.randn_like(p))
    head = linear_head(torch.float32)
    prompt = [tok.bos_token_id] + tok("12+34=", add_special_tokens=False)["input_ids"]
    params = SamplingParams(max_new_tokens=6, eos_token_id=-1, pad_token_id=tok.pad_token_id)  # never stops early
    gen = TorchGenerator(Policy(copy.deepcopy(old), gen_head=head, train_head=head), torch.device("cpu"))
    base = gen.generate([prompt], params)
    swap = lambda t: gen.load_weights(new.state_dict().items(), 1) if t == 3 else None  # noqa: E731
    g = gen.generate([prompt], params, between_steps=swap)
    assert g.version.tolist() == [[0, 0, 0, 1, 1, 1]]  # every token records the weights that produced it
    assert torch.equal(g.tokens[:, :3], base.tokens[:, :3])  # nothing restarted: the sequence went on
    # Token 3 comes from the new weights reading the KV cache the old weights wrote (PipelineRL), ...
    seq = torch.tensor([prompt + g.tokens[0, :3].tolist()])
    ones = torch.ones_like(seq)
    with torch.no_grad():
        p_old, p_new = Policy(old, gen_head=head, train_head=head), Policy(new, gen_head=head, train_head=head)
        _, cache = p_old.hidden(seq[:, :-1], ones[:, :-1], positions_from_mask(ones[:, :-1]), cache=DynamicCache())
        h, _ = p_new.hidden(seq[:, -1:], ones, positions_from_mask(ones)[:, -1:], cache=cache)
        kept = token_logprobs(p_new.logits(h[:, -1:], "gen"), g.tokens[:, 3:4])
        h_full, _ = p_new.hidden(seq, ones, positions_from_mask(ones))
        recomputed = token_logprobs(p_new.logits(h_full[:, -1:], "gen"), g.tokens[:, 3:4])
    assert torch.allclose(g.logprobs[:, 3:4], kept, atol=1e-5)
    assert (g.logprobs[:, 3:4] - recomputed).abs().item() > 1e-4  # ... not from a cache recomputed by them


# ------------------------------------------------------- generator processes
def _pool(tiny_cfg, n, generator_body="auto"):
    return make_pool(tiny_cfg("async=pipeline_rl", f"precision.generator_body={generator_body}"), n)


def _probe(pool, pol):
    ids = torch.tensor([[1, 20, 21, 22, 23], [0, 1, 24, 25, 26]])
    mask = (ids != 0).long()
    with torch.no_grad():
        h, _ = pol.hidden(ids, mask, positions_from_mask(mask))
        return pool.probe(ids, mask), pol.logits(h[:, -1], side="gen")


@pytest.mark.slow
def test_after_a_push_two_generators_logits_equal_the_trainers(tiny_cfg):
    torch.set_num_threads(1)  # the generators' thread count: the same kernels give the same bits
    pool, model, pol = _pool(tiny_cfg, 2)
    try:
        for version in (1, 2):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.01 * torch.randn_like(p))
            pool.push(version, model.state_dict())
            got, ref = _probe(pool, pol)
            assert len(got) == 2 and all(torch.equal(g, ref) for g in got)
    finally:
        pool.close()


@pytest.mark.slow
def test_a_generator_keeps_its_own_precision(tiny_cfg):
    # A bf16 generator body against an fp32 trainer: a real generator-trainer mismatch.
    pool, model, pol = _pool(tiny_cfg, 1, generator_body="bfloat16")
    try:
        pool.push(1, model.state_dict())
        (got,), ref = _probe(pool, pol)
        assert 1e-3 < (got - ref).abs().max().item() < 0.5
    finally:
        pool.close()


@pytest.mark.slow
def test_an_in_process_generator_with_its_own_body_dtype_gets_its_own_weights(tiny_cfg, tmp_path):
    # sync, no generator process: a bf16 generator body needs its own copy of the weights, pushed
    # after every step; the logged generator-trainer mismatch is then a real one.
    for name, body in (("same", "auto"), ("bf16", "bfloat16")):
        run(tiny_cfg("precision=fp32_head", f"precision.generator_body={body}", "train.steps=2", "train.eval_every=2"),
            tmp_path / name)
    same, bf16 = rows(tmp_path / "same"), rows(tmp_path / "bf16")
    assert max(s["logp_mismatch"] for s in same) < 1e-5 < 1e-3 < min(s["logp_mismatch"] for s in bf16)
    assert bf16[1]["staleness_max"] == 0  # pushed after step 1: step 2 still generated by the current weights


@pytest.mark.slow
def test_pipeline_with_max_lag_0_reproduces_the_sync_run_bit_for_bit(tiny_cfg, tmp_path, monkeypatch):
    # One generator process, its own weights pushed every step, streaming at max_lag 0: the transport
    # and the pushes lose nothing, so the run equals the in-process synchronous one exactly. The pushes
    # are received in place (small buckets): the generator's weights keep their addresses, and the bits
    # of the run stay the same (weights moved to another layout changed them: benchmarks/RESULTS.md).
    short = ["train.steps=4", "train.eval_every=2"]
    run(tiny_cfg(*short), tmp_path / "sync")
    small_buckets(monkeypatch)
    run(tiny_cfg(*short, "async=pipeline_rl", "async.max_lag=0", *FAST), tmp_path / "pipe")
    for name in ("steps.jsonl", "metrics.jsonl"):
        assert rows(tmp_path / "pipe", name) == rows(tmp_path / "sync", name)


@pytest.mark.slow
def test_pipeline_refills_like_the_in_process_rollout(tiny_cfg, tmp_path):
    # DAPO dynamic sampling through the generator processes (train/rollout.py:refill, one loop for
    # both schedules): at max_lag 0 the refilled batches, and so the run, equal the sync run's.
    short = ["filter=dapo_dynamic", "train.steps=3", "train.eval_every=3"]
    run(tiny_cfg(*short), tmp_path / "sync")
    run(tiny_cfg(*short, "async=pipeline_rl", "async.max_lag=0", *FAST), tmp_path / "pipe")
    sync = rows(tmp_path / "sync")
    assert sum(s["effective_batch"] for s in sync) / 3 >= 12  # of 16: the refills replaced dropped groups
    assert rows(tmp_path / "pipe") == sync


@pytest.mark.slow
def test_lag_bound_holds_with_fast_generators_and_with_slow_ones(tiny_cfg, tmp_path, monkeypatch):
    # Fast generators, slow trainer (two generator processes, always as far ahead as allowed):
    # every batch is exactly as stale as the bound allows, never more.
    pace(monkeypatch, "generators_first")
    run(tiny_cfg("async=pipeline_rl", "async.max_lag=2", "async.lookahead=-1", "async.generators=2",
                 "train.steps=6", "train.eval_every=6", *FAST), tmp_path / "fast")
    steps = rows(tmp_path / "fast")
    assert [s["staleness_max"] for s in steps] == [0, 1, 2, 2, 2, 2]
    assert [s["lag_dropped"] for s in steps] == [0] * 6
    # Device-hours count the trainer's device and each generator process's: 1 + 2 here.
    (last,) = read_rows(tmp_path / "fast" / "metrics.jsonl")[-1:]
    assert last["device_hours"] == pytest.approx(last["wall_s"] * 3 / 3600, rel=1e-9)
    # Slow generators, fast trainer: each batch waits for the newest weights, nothing is stale.
    pace(monkeypatch, "trainer_first")
    run(tiny_cfg("async=pipeline_rl", "async.max_lag=2", "train.steps=4", "train.eval_every=4", *FAST),
        tmp_path / "slow")
    assert [s["staleness_max"] for s in rows(tmp_path / "slow")] == [0, 0, 0, 0]
    (last,) = read_rows(tmp_path / "slow" / "metrics.jsonl")[-1:]
    assert last["device_hours"] == pytest.approx(last["wall_s"] * 2 / 3600, rel=1e-9)  # 1 trainer + 1 generator


@pytest.mark.slow
def test_the_lookahead_keeps_fast_generators_one_batch_ahead(tiny_cfg, tmp_path, monkeypatch):
    # The same fast generators under the default lookahead of 1: they may not run ahead to the lag
    # bound of 8. Batch s+2 is ordered just before version s is pushed, so it is generated by version
    # s (staleness 1) or, when the generator takes the order before the push announcement that follows
    # it arrives (a race that load widens), by s-1 (staleness 2); never older.
    pace(monkeypatch, "generators_first")
    run(tiny_cfg("async=pipeline_rl", "async.lookahead=1", "train.steps=5", "train.eval_every=5", *FAST),
        tmp_path / "a")
    steps = rows(tmp_path / "a")
    assert [s["staleness_max"] for s in steps][:2] == [0, 1]
    assert all(1 <= s["staleness_max"] <= 2 for s in steps[1:]), [s["staleness_max"] for s in steps]
    # Without the lookahead every batch is ordered at once and made by version 0: staleness climbs.
    run(tiny_cfg("async=pipeline_rl", "async.lookahead=-1", "train.steps=5", "train.eval_every=5", *FAST),
        tmp_path / "b")
    assert [s["staleness_max"] for s in rows(tmp_path / "b")] == [0, 1, 2, 3, 4]


@pytest.mark.slow
def test_an_in_flight_update_gives_completions_two_versions_deterministically(tiny_cfg, tmp_path, monkeypatch):
    # At decode step 2 of batch s the generator swaps in version s-1 mid-sequence: tokens 0-1 are from
    # version s-2, the rest from s-1.
    pace(monkeypatch, "generators_first", swap_at=2)
    cfg = tiny_cfg("async=pipeline_rl", "async.max_lag=1", "train.steps=4", "train.eval_every=4", *FAST)
    run(cfg, tmp_path / "a")
    steps = rows(tmp_path / "a")
    assert [s["staleness_max"] for s in steps] == [0, 1, 1, 1]
    assert steps[0]["multi_version_frac"] == 0 and all(s["multi_version_frac"] > 0.9 for s in steps[1:])


@pytest.mark.slow
def test_ppo_off_policy_k1_is_sync_and_k3_trains_three_steps_per_phase(tiny_cfg, tmp_path, monkeypatch):
    short = ["train.steps=6", "train.eval_every=3", "batch.minibatches=1"]
    run(tiny_cfg(*short), tmp_path / "sync")
    run(tiny_cfg(*short, "async=ppo_off_policy", "async.k=1"), tmp_path / "k1")
    assert rows(tmp_path / "k1") == rows(tmp_path / "sync")
    events = []
    import scalerl.train.schedules.local as schedule
    from scalerl.train.optimizer import SlicedAdamW   # the trainer's AdamW on a CPU

    real_rollout, real_step = schedule.rollout, SlicedAdamW.step
    monkeypatch.setattr(schedule, "rollout", lambda *a, **k: events.append("gen") or real_rollout(*a, **k))
    monkeypatch.setattr(SlicedAdamW, "step", lambda self, *a, **k: events.append("opt") or real_step(self, *a, **k))
    run(tiny_cfg(*short, "async=ppo_off_policy", "async.k=3"), tmp_path / "k3")
    assert "".join("g" if e == "gen" else "o" for e in events) == "gggooo" * 2  # one version, three steps
    assert [s["staleness_max"] for s in rows(tmp_path / "k3")] == [0, 1, 2, 0, 1, 2]
    # The same phases with a generator process (weights pushed every third step, between batches,
    # received in place).
    small_buckets(monkeypatch)
    run(tiny_cfg(*short, "async=ppo_off_policy", "async.k=3", "async.generators=1", *FAST), tmp_path / "k3_process")
    assert rows(tmp_path / "k3_process") == rows(tmp_path / "k3")


@pytest.mark.slow
def test_ppo_off_policy_saves_its_pending_batches_so_a_resume_is_exact(tiny_cfg, tmp_path, monkeypatch):
    cfg = tiny_cfg("async=ppo_off_policy", "async.k=3", "train.steps=6", "train.eval_every=2", "batch.minibatches=1")
    run(cfg, tmp_path / "ref")
    import scalerl.train.loop as loop

    real, calls = loop.policy_update, {"n": 0}

    def crash_at_step_4(*a, **k):
        calls["n"] += 1
        if calls["n"] == 4:  # mid-phase (steps 4-6 share one version); the last checkpoint is step 2's
            raise RuntimeError("simulated crash")
        return real(*a, **k)

    monkeypatch.setattr(loop, "policy_update", crash_at_step_4)
    with pytest.raises(RuntimeError, match="simulated"):
        run(cfg, tmp_path / "r")
    monkeypatch.setattr(loop, "policy_update", real)
    run(cfg, tmp_path / "r")  # resumes at step 2 with step 3's batch, generated by version 0, from the checkpoint
    for name in ("steps.jsonl", "metrics.jsonl"):
        assert rows(tmp_path / "r", name) == rows(tmp_path / "ref", name)


@pytest.mark.slow
def test_a_killed_generator_fails_the_run_naming_the_stage_and_a_relaunch_resumes(tiny_cfg, tmp_path, monkeypatch):
    cfg = tiny_cfg("async=pipeline_rl", "async.max_lag=1", "train.steps=6", "train.eval_every=2", *FAST)
    import scalerl.train.loop as loop

    real, calls = loop.policy_update, {"n": 0}

    def kill_generator_at_step_3(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            pids = read_rows_progress(tmp_path / "r")["generator_pids"]
            os.kill(pids[0], signal.SIGKILL)
            calls["killed_at"] = time.monotonic()
        return real(*a, **k)

    monkeypatch.setattr(loop, "policy_update", kill_generator_at_step_3)
    with pytest.raises(TransportError) as e:
        run(cfg, tmp_path / "r")
    assert time.monotonic() - calls["killed_at"] < 30  # within async.timeout_s (60): a dead process fails fast
    assert "generator 0" in str(e.value) and "exited with code -9" in str(e.value)
    assert "pushing weights" in str(e.value) or "rollout" in str(e.value)  # the stage it was in
    monkeypatch.setattr(loop, "policy_update", real)
    assert run(cfg, tmp_path / "r")["status"] == "done"  # the relaunch resumes from step 2's checkpoint
    assert [r["step"] for r in read_rows(tmp_path / "r" / "metrics.jsonl")] == [0, 2, 4, 6]  # none lost or doubled
    assert [r["step"] for r in read_rows(tmp_path / "r" / "steps.jsonl")] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_a_stuck_generator_fails_the_wait_after_the_timeout_naming_the_stage(tiny_cfg):
    # A live but stuck process (SIGSTOP) is not noticed by the death check: only the deadline can
    # end the wait. Stopped, it cannot answer, so the error is certain, never a slow-machine artefact.
    pool, _, pol = _pool(tiny_cfg, 1)
    pid = pool.pids[0]
    try:
        pool.hub.timeout_s = 2.0  # start-up used the generous 60 s; this wait gets a short deadline
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(TransportError) as e:
            _probe(pool, pol)
        assert 2.0 <= time.monotonic() - t0 < 30
        assert "waiting for a probe's logits" in str(e.value) and "still waiting after 2 s (async.timeout_s)" in str(e.value)
    finally:
        os.kill(pid, signal.SIGCONT)
        pool.close()


def read_rows_progress(run_dir):
    import json

    return json.loads((run_dir / "progress.json").read_text())


TRAINER = """
import sys, time
sys.path.insert(0, {tests!r})
from helpers import make_pool
from scalerl.config import compose, validate
pool, _, _ = make_pool(validate(compose(["logger=none", "async=pipeline_rl"])), 1)
sys.stdout.write(f"GENERATOR_PID {{pool.pids[0]}}\\n")  # one write: the generator's own output may come between print()'s pieces
sys.stdout.flush()
time.sleep(600)
"""


@pytest.mark.slow
def test_a_dead_trainer_stops_its_generators(tiny_cfg, tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER.format(tests=str(REPO / "tests")))
    trainer = subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        found = None
        while found is None:  # the generator shares this stdout: its output may surround the marker
            line = trainer.stdout.readline()
            assert line, "the trainer script died"
            found = re.search(r"GENERATOR_PID (\d+)", line)
        gen_pid = int(found.group(1))
    finally:
        trainer.kill()  # SIGKILL: no chance to say goodbye
        trainer.wait(timeout=30)
    t0 = time.monotonic()
    wait_for(lambda: not _alive(gen_pid), timeout=50, what="the orphaned generator to exit")
    assert time.monotonic() - t0 < 30  # it noticed the lost trainer, not its own 60 s timeout


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
