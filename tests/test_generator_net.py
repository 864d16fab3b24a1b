"""Generators anywhere (issue 25, items 3 and 4): the trainer's store listens on the run's
address (``MASTER_ADDR``), a generator joins with that address and its index alone (the
real worker entry point, the secret from a file only the user can read), the trainer judges
a generator by its heartbeat, and a run started with ``async.external_generators`` waits for
a generator someone else starts and finishes with it.

The network tests put the trainer and the generator in two network namespaces joined by a
veth pair (addresses made here, nothing external), so no loopback shortcut can pass; taking
the generator's link down is a generator on another node that vanished without a word."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, _ip, read_rows, veth_namespaces

from scalerl.generation.fleet.pool import Hub
from scalerl.generation.fleet.transport import BEAT_S, Spoke, TransportError

LINE = re.compile(r"SCALERL_TRANSPORT_SECRET=\$\(cat (\S+)\) python -m scalerl.generation.worker (\S+) J")


def _env(**extra: str) -> dict:
    """The environment of a child (read now: the session's cache is set after import)."""
    return {**os.environ, "PYTHONPATH": str(REPO), "TORCH_CPP_LOG_LEVEL": "ERROR", **extra}


def _join_line(stream, lines: list[str], timeout: float = 120) -> tuple[Path, str]:
    """Read the trainer's output until its one line for the operator: (secret file, address)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        lines.append(line)
        if m := LINE.search(line):
            return Path(m.group(1)), m.group(2)
    raise AssertionError("the trainer never said how to start its generators:\n" + "".join(lines)[-3000:])


def _secret_of(path: Path) -> str:
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    return path.read_text()


# ------------------------------------------------------------------ heartbeat
def test_a_spoke_that_stops_beating_is_declared_dead_and_one_that_beats_is_not():
    timeout_s = 2.0
    hub = Hub(2, timeout_s=timeout_s)
    spokes = [Spoke(hub.address, j, timeout_s, hub.secret) for j in range(2)]
    try:
        for s in spokes:
            s.start_heartbeat()
        spokes[1].set_state("step 3: generating")
        deadline = time.monotonic() + 30
        while hub.beat(0) is None or hub.beat(1) is None or hub.beat(1)["state"] != "step 3: generating":
            assert time.monotonic() < deadline, "no heartbeat arrived"
            time.sleep(0.05)
        hub.health("alive")  # both beat: nobody is dead
        # Generator 1 falls silent (its thread stops, as a frozen or unreachable process's would);
        # generator 0 goes on beating.
        spokes[1]._quiet.set()
        spokes[1]._beating.join()
        with pytest.raises(TransportError) as e:
            while True:
                hub.health("waiting for step 3's rollout")
                time.sleep(0.1)
        msg = str(e.value)
        assert msg.startswith("waiting for step 3's rollout: generator 1 on 127.0.0.1 (pid ")
        assert f"(async.timeout_s={timeout_s:g}); it was last 'step 3: generating'" in msg
        # Declared dead only after timeout_s (+2 beats) without a move: the quiet it reports.
        quiet = float(re.search(r"has not moved for (\d+) s", msg).group(1))
        assert quiet >= round(timeout_s + 2 * BEAT_S) - 1
        hub._judge_beat(0, "still")  # the one that beats is still alive
    finally:
        for s in spokes:
            s.close()
        hub.close()


def test_the_store_listens_on_master_addr(monkeypatch):
    from scalerl.generation.transfer.trust import run_host

    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert run_host() == "127.0.0.1" and run_host("127.0.0.2") == "127.0.0.2"
    monkeypatch.setenv("MASTER_ADDR", "localhost")  # what torchrun/SLURM set wins, resolved to an address
    assert run_host("127.0.0.2") in ("127.0.0.1", "::1")


# ----------------------------------------------------------- serving orders
class _Spoke:
    """The generator's end of the link, scripted: the queued messages, then "stop" once every
    order is answered (or the trainer is lost)."""

    def __init__(self, messages, n_orders):
        self.messages, self.n_orders = list(messages), n_orders
        self.sent, self.states, self.lost, self.stopped = [], [], None, False

    def poll(self):
        if self.messages:
            return self.messages.pop(0)
        if len(self.sent) == self.n_orders and not self.stopped:
            self.stopped = True
            return ["stop", None]
        return None

    def set_state(self, text):
        self.states.append((len(self.sent), text))

    def mark_blocked(self, version):
        pass

    def send(self, key, tag, header, obj):
        self.sent.append((key, tag, obj))


class _Engine:
    def __init__(self):
        self.calls = []

    def generate(self, prompts, params, between_steps=None):
        for t in range(2):
            between_steps(t)
        self.calls.append(prompts)
        return _Rows(prompts)

    def close(self):
        pass


class _Rows(list):
    def to(self, device):
        return self


def _server(monkeypatch, spoke):
    import torch

    from scalerl.generation.fleet import generator_loop as worker

    engine = _Engine()
    monkeypatch.setattr(worker, "build_engine", lambda spec: engine)
    spec = worker.WorkerSpec(rank=0, n_generators=1, checkpoint="", device="cpu", dtype="float32",
                             compute_dtype="float32", heads=None, attn_implementation=None,
                             threads=torch.get_num_threads(), timeout_s=30, in_flight=True, schema=())
    server = worker.GeneratorServer(spoke, spec)
    server.version = 0  # as if the initial weights had arrived
    return server, engine


def test_a_generator_serves_ready_orders_back_to_back_by_step_then_job(monkeypatch):
    from scalerl.generation.engines.interface import SamplingParams
    from scalerl.generation.fleet.generator_loop import Shard

    params = SamplingParams(max_new_tokens=2, eos_token_id=2, pad_token_id=0)

    def order(job, step, min_version):
        return ["order", {"job": job, "step": step, "min_version": min_version,
                          "shards": [Shard([[job, step]], params)]}]

    # Step 2's batch, step 1's, then a refill of step 1 (job 3), all with weights allowed.
    spoke = _Spoke([order(1, 2, 0), order(2, 1, 0), order(3, 1, 0)], n_orders=3)
    server, engine = _server(monkeypatch, spoke)
    server.run()
    assert engine.calls == [[[2, 1]], [[3, 1]], [[1, 2]]]  # by step, then job: the refill before step 2
    assert [(key, tag) for key, tag, _ in spoke.sent] == [("done/0/2", 2), ("done/0/3", 3), ("done/0/1", 1)]
    assert [rows for _, _, rows in spoke.sent] == engine.calls  # each order's rows under its own key
    # No wait between the shards (a wait would set the state and count idle time); then "stop".
    assert spoke.states == [] and server.idle_s == 0.0


def test_a_generator_that_lost_its_trainer_stops_at_its_next_decode_step(monkeypatch):
    from scalerl.generation.engines.interface import SamplingParams
    from scalerl.generation.fleet.generator_loop import Shard

    shard = Shard([[5]], SamplingParams(max_new_tokens=2, eos_token_id=2, pad_token_id=0))
    spoke = _Spoke([["order", {"job": 1, "step": 1, "min_version": 0, "shards": [shard]}]], n_orders=9)
    spoke.lost = "lost the trainer's store at 10.0.0.1:1234 (Connection reset by peer)"  # the heartbeat saw it
    server, engine = _server(monkeypatch, spoke)
    with pytest.raises(TransportError, match="generator 0: lost the trainer's store at 10.0.0.1:1234"):
        server.run()
    assert engine.calls == [] and spoke.sent == []  # stopped before its first decode step finished a shard


# --------------------------------------------------------- two network namespaces
@pytest.fixture
def two_namespaces():
    """Network namespaces A (10.232.k.1, the trainer) and B (10.232.k.2, the generator) joined by
    a veth pair; yields (A, B, the trainer's address, the generator's link)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make network namespaces (CI runs as root)")
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("needs iproute2 (ip) and util-linux (unshare) to make network namespaces")
    with veth_namespaces("gn", 232) as spaces:
        yield spaces

TRAINER = r"""
import json, socket, sys, time, torch
from functools import partial
from scalerl.generation.engines.interface import SamplingParams
from scalerl.generation.fleet.pool import GeneratorPool
from scalerl.generation.engines.torch_engine import TorchGenerator
from scalerl.generation.fleet.transport import TransportError
from scalerl.generation.fleet.generator_loop import Shard, WorkerSpec
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import Policy
from scalerl.precision import PRECISIONS

ckpt, secret_dir, timeout_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
torch.set_num_threads(1)  # the generator's thread count: the same kernels give the same bits
model, _ = load_checkpoint(ckpt, dtype=torch.float32, device=torch.device("cpu"))
heads = partial(PRECISIONS["fp32_head"].fn, cfg=PRECISIONS["fp32_head"].schema())
spec = WorkerSpec(rank=0, n_generators=1, checkpoint=ckpt, device="cpu", dtype="float32", compute_dtype="float32",
                  heads=heads, attn_implementation=None, threads=1, timeout_s=120, in_flight=True, schema=())
pool = GeneratorPool(spec, 1, model.state_dict(), external=1, secret_dir=secret_dir)
pool.start()  # MASTER_ADDR: listens there; external: waits for the generator to join
port = int(pool.hub.address.rsplit(":", 1)[1])
try:
    socket.create_connection(("127.0.0.1", port), timeout=5)
    loopback = "open"
except OSError:
    loopback = "closed"
pool.push(0, model.state_dict())
params = SamplingParams(max_new_tokens=6, eos_token_id=2, pad_token_id=0, seeds=torch.tensor([11, 12]))
prompts = [[1, 20, 21, 22], [1, 23]]
pool.order(1, 1, 0, [Shard(prompts, params)])
[(gen, header)] = pool.collect(1, 1)
h = heads(torch.float32)
ref = TorchGenerator(Policy(model, gen_head=h.gen, train_head=h.gen), torch.device("cpu")).generate(prompts, params)
print(json.dumps({"same": torch.equal(gen.tokens, ref.tokens) and torch.equal(gen.logprobs, ref.logprobs),
                  "tokens": gen.tokens.tolist(), "loopback": loopback}), flush=True)
pool.hub.timeout_s = timeout_s  # start-up (imports on a loaded machine) had 120 s; the failure gets a short deadline
pool.order(2, 2, 5, [Shard(prompts, params)])  # weights >= 5 never come: the generator waits, beating
while not (pool.hub.beat(0) or {}).get("state", "").startswith("step 2"):
    time.sleep(0.05)
print("WAITING", flush=True)
t0 = time.monotonic()
try:
    pool.collect(2, 2)
    error = "collected"
except TransportError as e:
    error = str(e)
print(json.dumps({"error": error, "after_s": time.monotonic() - t0}), flush=True)
pool.close(grace_s=1)
"""


@pytest.mark.slow
def test_a_generator_in_another_namespace_joins_by_address_and_its_lost_link_fails_the_run(
        two_namespaces, tiny_cfg, tmp_path):
    from scalerl.train.setup import prepare_checkpoint

    a, b, host, link = two_namespaces
    _, ckpt = prepare_checkpoint(tiny_cfg())
    timeout_s = 10
    trainer = subprocess.Popen(["ip", "netns", "exec", a, sys.executable, "-c", TRAINER, str(ckpt),
                                str(tmp_path / "secrets"), str(timeout_s)], cwd=REPO, env=_env(MASTER_ADDR=host),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    gen = None
    try:
        lines: list[str] = []
        secret_file, address = _join_line(trainer.stdout, lines)
        assert address.startswith(f"{host}:")  # the run's address, told to the operator; the secret is not
        assert not any(_secret_of(secret_file) in line for line in lines)
        # The operator's command, in the other namespace: the address and the index alone.
        gen = subprocess.Popen(["ip", "netns", "exec", b, sys.executable, "-m", "scalerl.generation.worker", address, "0"],
                               cwd=REPO, env=_env(SCALERL_TRANSPORT_SECRET=_secret_of(secret_file)),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = None
        for line in trainer.stdout:
            lines.append(line)
            if line.startswith("{"):
                first = json.loads(line)
            if line.startswith("WAITING"):
                break
        assert first is not None, "".join(lines)[-3000:] + (gen.kill() or gen.communicate()[0])[-3000:]
        assert first["loopback"] == "closed"  # bound to 10.232.k.1 only
        assert first["same"], first  # the remote generator's rollout equals the trainer's own sampler's
        _ip("-n", b, "link", "set", link, "down")  # the generator's node drops off the network
        out, _ = trainer.communicate(timeout=120)
        lines.append(out)
        last = json.loads(out.strip().splitlines()[-1])
    finally:
        for p in (trainer, gen):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    msg = last["error"]
    assert msg.startswith("waiting for step 2's rollout (job 2) (generator 0 is 'step 2: lag bound"), msg
    assert f"still waiting after {timeout_s} s (async.timeout_s)" in msg
    # named: which generator, on which host, doing what when last heard
    assert re.search(r"generator 0 on 10\.232\.\d+\.2 \(pid \d+\): heartbeat moved [\d.]+ s ago, last 'step 2: lag bound", msg), msg
    assert not secret_file.exists()  # the pool removes the secret file when it stops


# --------------------------------------------------------------- a whole run
@pytest.mark.slow
def test_a_run_with_an_external_generator_waits_for_it_and_finishes(tmp_path):
    # Without async.external_generators wired to the pool, the arm starts its own generator and
    # never prints the join line: _join_line fails at the arm's end of output.
    env = _env(SCALERL_OUTPUT=str(tmp_path / "out"), SCALERL_NO_BAR="1", HOME=str(tmp_path / "home"))
    env.pop("MASTER_ADDR", None)
    # The answers-only shape (ANSWERS_ONLY's warm-start settings) loads the shipped warm start; with
    # final_steps left at its default the arm trained its own SFT first (over 300 s of the 660 s).
    args = ["logger=none", "train.threads=2", "task.think=0", "model.warmstart.final_steps=0",
            "length.max_new_tokens=8", "train.steps=2",
            "train.eval_every=2", "async=pipeline_rl", "async.external_generators=1", "async.timeout_s=60",
            "study=external"]
    sweep = subprocess.Popen([sys.executable, "-m", "scalerl.sweep", *args], cwd=REPO, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    gen = None
    try:
        lines: list[str] = []
        # The arm loads the shipped warm start before it says how to join; the deadline is generous
        # for a busy machine, and the wait ends as soon as the line comes.
        secret_file, address = _join_line(sweep.stdout, lines, timeout=600)
        assert address.startswith("127.0.0.1:")  # no MASTER_ADDR: a plain local run stays on loopback
        gen = subprocess.Popen([sys.executable, "-m", "scalerl.generation.worker", address, "0"], cwd=REPO,
                               env=_env(SCALERL_TRANSPORT_SECRET=_secret_of(secret_file)),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out, _ = sweep.communicate(timeout=300)
        lines.append(out)
        assert sweep.returncode == 0, "".join(lines)[-4000:]
        assert gen.wait(timeout=60) == 0, gen.stdout.read()[-3000:]  # it read "stop" and exited cleanly
    finally:
        for p in (sweep, gen):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    (steps,) = list((tmp_path / "out").rglob("steps.jsonl"))
    assert [r["step"] for r in read_rows(steps)] == [1, 2]
    assert not secret_file.exists()


def test_after_a_failed_collective_the_silent_generator_is_named_not_the_one_it_starved():
    """A generator cut off from the network stops beating and reports nothing; a live one that
    waited on the trainer (itself stuck on the lost one) reports its own timeout. The hub names
    the silent one, with the other's report after it."""
    hub = Hub(2, timeout_s=2.0)
    spokes = [Spoke(hub.address, j, 2.0, hub.secret) for j in range(2)]
    try:
        for s in spokes:
            s.start_heartbeat()
        deadline = time.monotonic() + 30
        while hub.beat(0) is None or hub.beat(1) is None:
            assert time.monotonic() < deadline, "no heartbeat arrived"
            time.sleep(0.05)
        spokes[1]._quiet.set()  # generator 1's node drops off: no more beats
        spokes[1]._beating.join()
        spokes[0].report_error("generator 0: waiting for an order: still waiting after 2 s (async.timeout_s)")
        with pytest.raises(TransportError) as e:
            hub.explain("waiting for step 3's rollout (job 3)", grace_s=2.0)
        msg = str(e.value)
        assert msg.startswith("waiting for step 3's rollout (job 3): generator 1 on 127.0.0.1 (pid "), msg
        assert "stopped answering" in msg and msg.endswith(
            "; generator 0 failed: generator 0: waiting for an order: still waiting after 2 s (async.timeout_s)"), msg
    finally:
        for s in spokes:
            s.close()
        hub.close()
