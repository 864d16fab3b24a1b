"""The PipelineRL transport runs nothing it receives and hears only peers with the run's
secret (issue 27 point 2): the store listens on the address it was given only, a control
message or rollout header planted by a second client is refused, a client without the
secret is refused, and all of it holds with the trainer and a generator in different
network namespaces joined by a veth pair (addresses made here, nothing external).

Every planted payload is a pickle that would write a marker file if anything unpickled it."""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import pickle
import secrets
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from helpers import REPO, veth_namespaces

from scalerl.generation import GENERATORS
from scalerl.generation.engines.interface import Generation, SamplingParams
from scalerl.generation.fleet.pool import Hub
from scalerl.generation.fleet.transport import Spoke, TransportError, decode, encode
from scalerl.generation.transfer.wire import Signed
from scalerl.generation.transfer.buckets import TensorSpec
from scalerl.generation.fleet.generator_loop import Shard, WorkerSpec, wire_types
from scalerl.precision import PRECISIONS


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def listening_addresses(port: int) -> set[str]:
    """The local addresses a TCP socket of this network namespace listens on at ``port``."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.rsplit(":", 1)
            if state == "0A" and int(p, 16) == port:
                out.add(addr)
    return out


def test_the_wire_format_round_trips_and_builds_only_what_it_is_allowed():
    types, functions = wire_types()
    heads = partial(PRECISIONS["fp32_head"].fn, cfg=PRECISIONS["fp32_head"].schema())
    by_type = {"int": 3, "str": "cpu", "float": 5.0, "bool": True, "Callable": heads, "Optional[str]": None}
    required = {f.name: by_type.get(f.type, ()) for f in dataclasses.fields(WorkerSpec)
                if f.default is dataclasses.MISSING}  # whatever fields it has today
    spec = WorkerSpec(**{**required, "schema": (TensorSpec("w", (2, 3), "float32"),),
                         "generation_cfg": GENERATORS["torch"].schema()})
    back = decode(encode(spec), types, functions)
    assert dataclasses.replace(back, heads=None) == dataclasses.replace(spec, heads=None)
    assert back.heads.func is heads.func and back.heads.keywords == heads.keywords  # partials never compare equal
    shard = Shard([[1, 2], [3]], SamplingParams(4, 0, 0, seeds=torch.tensor([7, 8]), force_ids=(5, 6)))
    got = decode(encode({"step": 3, "shards": [shard]}), types)
    assert got["shards"][0].prompts == [[1, 2], [3]] and got["shards"][0].params.force_ids == (5, 6)
    assert torch.equal(got["shards"][0].params.seeds, torch.tensor([7, 8]))
    gen = Generation(*(torch.tensor([[1.5, -2.0]], dtype=d) for d in (torch.bfloat16, torch.float32)),
                     *(torch.tensor([[True, False]]),) * 2, torch.tensor([False]), torch.tensor([True]),
                     torch.zeros(1, 0, dtype=torch.long))
    out = decode(encode(gen), [Generation])
    assert all(torch.equal(getattr(out, f), getattr(gen, f)) and getattr(out, f).dtype == getattr(gen, f).dtype
               for f in ("tokens", "logprobs", "sampled", "present", "truncated", "interrupted", "version"))
    with pytest.raises(TransportError, match="refused a WorkerSpec"):
        decode(encode(spec), [Generation], functions)  # a rollout may not carry a spec
    with pytest.raises(TransportError, match="refused the function"):
        decode(encode(partial(os.system, "true")), types, functions)
    with pytest.raises(TransportError, match="malformed"):
        decode(pickle.dumps(_Payload("/nonexistent")), types, functions)


def test_planted_messages_and_clients_without_the_secret_are_refused(tmp_path):
    marker = tmp_path / "ran"
    hub = Hub(1, timeout_s=10)

    def landed(client, key):
        """A TCPStore client's set is not acknowledged, so another connection may not see it yet:
        a get on the same connection is served after the set, so the key is in the store then."""
        client.get(key)

    try:
        host, port = hub.address.rsplit(":", 1)
        assert listening_addresses(int(port)) == {"0100007F"}  # 127.0.0.1 only, not every interface
        spoke = Spoke(hub.address, 0, 10, hub.secret)
        stranger = dist.TCPStore(host, int(port), None, False, datetime.timedelta(seconds=10))
        stranger.set("ctl/0", pickle.dumps(("order", _Payload(marker))))  # what ran code in the generator
        landed(stranger, "ctl/0")
        with pytest.raises(TransportError, match="refused 'ctl/0': not signed with this run's secret"):
            spoke.poll()
        Signed(stranger, secrets.token_bytes(32)).set("ctl/0", encode(["stop", None]))  # signed, wrong secret
        landed(stranger, "ctl/0")
        with pytest.raises(TransportError, match="not signed with this run's secret"):
            spoke.poll()
        hub.send("stop")  # the trainer's own message replaces the planted one and is read
        landed(hub.store, "ctl/0")
        assert spoke.poll() == ["stop", None]
        # the trainer's side: a planted readiness mark, rollout header or error report
        stranger.set("done/0/1", pickle.dumps({"nbytes": 4, "x": _Payload(marker)}))
        with pytest.raises(TransportError, match="refused 'done/0/1'"):
            hub.recv(0, "done/0/1", 1, "waiting for a rollout")
        stranger.set("blocked/0/3", b"")
        landed(stranger, "blocked/0/3")
        with pytest.raises(TransportError, match="refused 'blocked/0/3'"):
            hub.has(["blocked/0/3"])
        # a generator without the secret cannot even read its spec
        hub.put_spec(0, {"checkpoint": "/c"})
        with pytest.raises(TransportError, match="refused 'spec/0'"):
            Spoke(hub.address, 0, 10, secrets.token_bytes(32)).spec()
        assert Spoke(hub.address, 0, 10, hub.secret).spec() == {"checkpoint": "/c"}
        assert not marker.exists()
    finally:
        hub.close()


def test_gloo_connections_are_used_only_after_both_ends_prove_the_secret():
    """A peer that took a generator's place in gloo's (unsigned) rendezvous is refused."""
    import threading

    from scalerl.generation.transfer.trust import gloo_group, handshake

    def pair(secrets_by_rank):
        store, errors = dist.HashStore(), {}

        def rank(r):
            try:
                handshake(gloo_group(store, "g", r, 2, 10, "127.0.0.1"), r, 2, secrets_by_rank[r], "g", 10)
            except TransportError as e:
                errors[r] = str(e)

        threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
        [t.start() for t in threads]
        [t.join(60) for t in threads]
        return errors

    key = secrets.token_bytes(32)
    assert pair({0: key, 1: key}) == {}
    refused = pair({0: key, 1: secrets.token_bytes(32)})
    assert refused == {0: "g: rank 1 of the group did not prove this run's secret; refused",
                       1: "g: rank 0 of the group did not prove this run's secret; refused"}


# ------------------------------------------------------------- two network namespaces
HUB = r"""
import json, socket, sys, torch
from scalerl.generation.fleet.pool import Hub
from scalerl.generation.fleet.transport import TransportError
hub = Hub(1, timeout_s=60, host=sys.argv[1])
port = int(hub.address.rsplit(":", 1)[1])
print(json.dumps({"address": hub.address, "secret": hub.secret.hex()}), flush=True)
try:
    socket.create_connection(("127.0.0.1", port), timeout=5)
    loopback = "open"
except OSError:
    loopback = "closed"
hub.put_spec(0, {"hello": "generator"})
hub.connect()
hub.send("order", {"ids": torch.arange(6).reshape(2, 3)})
header, rollout = hub.recv(0, "done/0/1", 1, "waiting for the rollout")
try:
    hub.recv(0, "done/0/2", 2, "waiting for the planted rollout")
    planted = "accepted"
except TransportError as e:
    planted = str(e)
hub.send("stop")
print(json.dumps({"loopback": loopback, "rollout": rollout.tolist(), "header": header["elapsed"], "planted": planted}),
      flush=True)
hub.close()
"""

GENERATOR = r"""
import datetime, json, os, pickle, sys, time, torch
import torch.distributed as dist
from scalerl.generation.fleet.transport import Spoke, TransportError
from scalerl.generation.transfer.trust import secret_from_env
address, marker = sys.argv[1], sys.argv[2]
host, port = address.rsplit(":", 1)
try:
    Spoke(address, 0, 30, os.urandom(32)).spec()
    stranger = "accepted"
except TransportError as e:
    stranger = str(e)
spoke = Spoke(address, 0, 60, secret_from_env())
spec = spoke.spec()
spoke.connect(1)
while (msg := spoke.poll()) is None:
    time.sleep(0.01)
spoke.send("done/0/1", 1, {"elapsed": 1.5}, msg[1]["ids"] * 2)
class Payload:
    def __reduce__(self):
        return os.system, (f"touch {marker}",)
raw = dist.TCPStore(host, int(port), None, False, datetime.timedelta(seconds=30))
raw.set("done/0/2", pickle.dumps({"nbytes": 1, "x": Payload()}))  # no secret: planted from this namespace
while (stop := spoke.poll()) is None:
    time.sleep(0.01)
print(json.dumps({"spec": spec, "stranger": stranger, "stop": stop}), flush=True)
spoke.close()
"""


@pytest.fixture
def two_namespaces():
    """Network namespaces A (10.231.k.1) and B (10.231.k.2) joined by a veth pair; nothing else."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make network namespaces")
    with veth_namespaces("v", 231) as (a, b, address, _):
        yield a, b, address


@pytest.mark.slow
def test_trainer_and_generator_in_different_network_namespaces(two_namespaces, tmp_path):
    a, b, host = two_namespaces
    marker = tmp_path / "ran"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TORCH_CPP_LOG_LEVEL": "ERROR"}
    trainer = subprocess.Popen(["ip", "netns", "exec", a, sys.executable, "-c", HUB, host], cwd=REPO, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        hello = json.loads(trainer.stdout.readline() or "null") or pytest.fail(trainer.stderr.read())
        gen = subprocess.run(["ip", "netns", "exec", b, sys.executable, "-c", GENERATOR, hello["address"], str(marker)],
                             cwd=REPO, env={**env, "SCALERL_TRANSPORT_SECRET": hello["secret"]},
                             capture_output=True, text=True, timeout=120)
        assert gen.returncode == 0, gen.stderr[-3000:]
        out, err = trainer.communicate(timeout=120)
        assert trainer.returncode == 0, err[-3000:]
    finally:
        trainer.kill()
        trainer.wait()
    seen, got = json.loads(gen.stdout.splitlines()[-1]), json.loads(out.splitlines()[-1])
    assert seen["spec"] == {"hello": "generator"} and seen["stop"] == ["stop", None]
    assert "refused 'spec/0': not signed with this run's secret" in seen["stranger"]  # no secret: nothing read
    assert got["rollout"] == [[0, 2, 4], [6, 8, 10]] and got["header"] == 1.5  # the real generator was heard
    assert "refused 'done/0/2'" in got["planted"]
    assert got["loopback"] == "closed"  # bound to the address it was given, not every interface
    assert not marker.exists()


def test_a_closed_hub_never_closes_a_file_that_reused_its_fd(tmp_path):
    """Bug: the hub closed its listening socket and the store closed the same fd again when it was
    destroyed; by then a file of the same process could hold that number, and its next read failed
    with EBADF (seen as OSErrors in unrelated tests: hydra's and pandas' file reads)."""
    import gc

    hub = Hub(1, timeout_s=10)
    hub.close()
    with open(tmp_path / "later.txt", "w+") as f:  # the lowest free number: the socket's, if it was freed
        del hub
        gc.collect()
        f.write("still open")
        f.flush()
        f.seek(0)
        assert f.read() == "still open"
        assert os.fstat(f.fileno()).st_size == len("still open")
