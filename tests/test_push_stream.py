"""The streamed weight push (generation/buckets.py, GeneratorPool.push, train.weights.trainer_tensors):
the byte layout by hand, round trips through buckets smaller than a tensor, then real generator
processes that send their weights back (tests/push_worker.py): from one trainer rank to two fp32
generators, and from two FSDP2-sharded gloo ranks to a bf16 generator."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO

from scalerl.generation.buckets import in_order, layout, pack, pack_all, unpack, weight_schema

WORKER = (str(Path(__file__).with_name("push_worker.py")),)


def _state():
    g = torch.Generator().manual_seed(0)
    return {"a": torch.randn(2, 3, generator=g), "n": torch.arange(5), "big": torch.randn(40, generator=g),
            "empty": torch.empty(0, 3), "c": torch.randn(3, generator=g)}


def _round_trip(state, dtype, bucket_bytes):
    plan = layout(weight_schema(state, dtype), bucket_bytes)
    bufs = [torch.full((bucket_bytes,), 255, dtype=torch.uint8) for _ in range(2)]
    sent = []
    for k, bucket in pack(plan, in_order(plan, state), bufs):
        assert bucket.data_ptr() == bufs[k % 2].data_ptr()  # two buffers, reused in turn
        sent.append(bucket.clone())
    arriving = iter(sent)

    def recv(buf):
        src = next(arriving)
        return lambda: buf.copy_(src)

    return plan, sent, list(unpack(plan, recv))


def test_the_layout_by_hand():
    plan = layout(weight_schema(_state(), "bfloat16"), bucket_bytes=32)
    # bf16 floats, int64 kept: a 12 B at 0; n 40 B at 16; big 80 B at 64 (16-aligned); empty 0 B at 144;
    # c 6 B at 144. Total 150 B -> 5 buckets of 32 B, the last 22 B.
    assert [s.dtype for s in plan.specs] == ["bfloat16", "int64", "bfloat16", "bfloat16", "bfloat16"]
    assert plan.offsets == (0, 16, 64, 144, 144) and plan.total == 150
    assert plan.n_buckets == 5 and plan.bucket_size(4) == 22
    # n spans buckets 0 (bytes 16..32) and 1 (32..56); big spans buckets 2, 3 and 4.
    assert list(plan.pieces(1)) == [(0, 16, 0, 16), (1, 0, 16, 40)]
    assert list(plan.pieces(2)) == [(2, 0, 0, 32), (3, 0, 32, 64), (4, 0, 64, 80)]
    with pytest.raises(ValueError, match="multiple of 16"):
        layout(plan.specs, 40)


@pytest.mark.parametrize("dtype,bucket_bytes", [(None, 16), (None, 48), ("bfloat16", 32), ("bfloat16", 4096)])
def test_buckets_round_trip_in_the_generators_dtype(dtype, bucket_bytes):
    state = _state()
    plan, sent, got = _round_trip(state, dtype, bucket_bytes)
    assert [n for n, _ in got] == list(state)  # schema order
    for (name, t), (_, ref) in zip(got, state.items()):
        want = ref.to(torch.bfloat16) if dtype and ref.is_floating_point() else ref
        assert t.dtype == want.dtype and torch.equal(t, want), name
    assert sum(b.numel() for b in sent) == plan.total  # only the stream's bytes travel


@pytest.mark.parametrize("bucket_bytes", [16, 48, 4096])
def test_a_snapshot_is_the_streamed_layout_byte_for_byte(bucket_bytes):
    """``pack_all`` (vLLM's relay holds a push until a decode step) builds its schema as the pairs
    come: the same bytes ``pack`` sends for that schema, so the receiver's ``unpack`` reads them."""
    state = {n: (t.to(torch.bfloat16) if t.is_floating_point() and n != "c" else t) for n, t in _state().items()}
    schema, bufs = pack_all(state.items(), bucket_bytes)
    assert schema == weight_schema(state)  # each tensor's own dtype: what the relay was handed
    plan, sent, _ = _round_trip(state, None, bucket_bytes)
    assert len(bufs) == len(sent) == plan.n_buckets
    for mine, streamed in zip(bufs, sent):
        assert mine.numel() == streamed.numel()
        for i, spec in enumerate(plan.specs):  # the tensors' bytes (not the alignment gaps) agree
            for k, off, a, b in plan.pieces(i):
                if mine is bufs[k]:
                    assert torch.equal(mine[off : off + b - a], streamed[off : off + b - a]), spec.name
    arriving = iter(bufs)
    got = list(unpack(plan, lambda buf: (lambda src: lambda: buf.copy_(src))(next(arriving))))
    assert all(torch.equal(t, state[n]) and t.dtype == state[n].dtype for n, t in got)


def test_a_receiver_reuses_a_bucket_only_once_no_view_of_it_is_alive():
    state = {f"w{i}": torch.full((4,), float(i)) for i in range(12)}  # 16 B each: one per bucket
    plan, sent, _ = _round_trip(state, None, 16)
    for keep in (False, True):
        arriving, buffers, kept = iter(sent), set(), []

        def recv(buf):
            buffers.add(buf.data_ptr())
            src = next(arriving)
            return lambda: buf.copy_(src)

        for name, t in unpack(plan, recv):
            kept.append(t if keep else t.clone())  # an engine that holds views, or one that copies at once
        assert [float(t[0]) for t in kept] == [float(i) for i in range(12)]
        assert len(buffers) == (12 if keep else 3)  # the one read, the one arriving, and one freed


def test_a_push_out_of_order_or_incomplete_is_refused():
    state = _state()
    plan = layout(weight_schema(state), 64)
    with pytest.raises(KeyError, match="lacks \\['c'\\]"):
        in_order(plan, {k: v for k, v in state.items() if k != "c"})  # a dict is checked before anything
    bufs = [torch.empty(64, dtype=torch.uint8)] * 2
    swapped = [("n", state["n"]), ("a", state["a"])]
    with pytest.raises(ValueError, match="got 'n' at position 0, the schema's is 'a'"):
        list(pack(plan, in_order(plan, swapped), bufs))
    with pytest.raises(ValueError, match="got 2 tensors, the schema has 5"):
        list(pack(plan, in_order(plan, list(state.items())[:2]), bufs))


# ------------------------------------------------------- generator processes
def _echo(pool, version):
    from push_worker import ECHO_TAG

    return [pool.hub.recv(j, f"echo/{j}/{version}", ECHO_TAG + version, "waiting for the echo")[1]
            for j in range(pool.n)]


def _spec(ckpt, n, dtype):
    from functools import partial

    from scalerl.generation.worker import WorkerSpec
    from scalerl.precision import PRECISIONS

    heads = partial(PRECISIONS["fp32"].fn, cfg=PRECISIONS["fp32"].schema())
    return WorkerSpec(rank=0, n_generators=n, checkpoint=str(ckpt), device="cpu", dtype=dtype, compute_dtype="float32",
                      heads=heads, attn_implementation=None, threads=1, timeout_s=60, in_flight=True, schema=())


@pytest.mark.slow
def test_a_streamed_push_gives_two_generators_the_trainers_weights(tiny_cfg, monkeypatch):
    from scalerl.generation.pool import GeneratorPool
    from scalerl.models.load import load_checkpoint
    from scalerl.train.setup import prepare_checkpoint
    from scalerl.train.weights import trainer_tensors

    _, ckpt = prepare_checkpoint(tiny_cfg("async=pipeline_rl"))
    model, _ = load_checkpoint(ckpt, dtype=torch.float32, device=torch.device("cpu"))
    sizes = {n: t.numel() * 4 for n, t in model.state_dict().items()}
    bucket = 16 * 1024  # several buckets; the embedding (and the head) are larger than one
    assert max(sizes.values()) > bucket and sum(sizes.values()) > 4 * bucket
    monkeypatch.setattr(GeneratorPool, "worker", WORKER)
    pool = GeneratorPool(_spec(ckpt, 2, "float32"), 2, model.state_dict(), bucket_bytes=bucket)
    pool.start()
    try:
        for version, as_pairs in ((1, False), (2, True)):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.01 * torch.randn_like(p))
            pool.push(version, trainer_tensors(model, torch.float32, bucket) if as_pairs else model.state_dict())
            ref = model.state_dict()
            for got in _echo(pool, version):
                assert set(got) == set(ref)
                assert all(torch.equal(got[k], ref[k]) for k in ref)  # exact: the same fp32 bits
    finally:
        pool.close()


SHARDED = r'''
import json, sys
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
sys.path.insert(0, sys.argv[3])
from scalerl.generation.pool import GeneratorPool
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import CompletionLogits
from scalerl.precision.base import linear_head
from scalerl.train.sharding import full_state_dict, iter_full_tensors, shard_trainer
from scalerl.train.weights import push_weights
from test_push_stream import WORKER, _echo, _spec
dist.init_process_group("gloo")
rank = dist.get_rank()
model, _ = load_checkpoint(sys.argv[1], dtype=torch.float32, device=torch.device("cpu"))
torch.manual_seed(0)
with torch.no_grad():
    for p in model.parameters():
        p.add_(0.01 * torch.randn_like(p))  # the same on both ranks: weights no checkpoint has
shard_trainer(CompletionLogits(model, linear_head(torch.float32)), init_device_mesh("cpu", (2,)),
              compute_dtype=torch.float32, head_dtype=torch.float32)
ref = full_state_dict(model)  # the one-gather reference
bucket = 16 * 1024
groups = [[(n, t.clone()) for n, t in g] for g in iter_full_tensors(model, torch.bfloat16, bucket)]
names = [n for g in groups for n, _ in g]
out = {"groups": len(groups), "order": names == list(ref),
       "gathered_bf16": all(torch.equal(t, ref[n].to(torch.bfloat16)) for g in groups for n, t in g),
       "group_bytes_ok": all(sum(t.numel() * 2 for _, t in g) <= bucket or len(g) == 1 for g in groups),
       "uneven": [n for n, t in ref.items() if t.shape[0] % 2][:2]}
pool = None
if rank == 0:
    GeneratorPool.worker = WORKER
    pool = GeneratorPool(_spec(sys.argv[1], 1, "bfloat16"), 1, model.state_dict(), bucket_bytes=bucket)
    pool.start()
push_weights(pool, 1, model, "bfloat16")  # every rank: rank 0 sends, rank 1 joins the gathers
if rank == 0:
    (got,) = _echo(pool, 1)
    out["echo_bf16"] = set(got) == set(ref) and all(got[k].dtype == torch.bfloat16 and torch.equal(got[k], ref[k].to(torch.bfloat16)) for k in ref)
    out["echo_differs_from_fp32"] = any(not torch.equal(got[k].float(), ref[k]) for k in ref)
    pool.close()
    print("RESULT " + json.dumps(out), flush=True)
dist.barrier()
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_a_push_from_two_sharded_ranks_gives_a_bf16_generator_the_trainers_cast(tiny_cfg, tmp_path):
    from scalerl.train.setup import prepare_checkpoint

    _, ckpt = prepare_checkpoint(tiny_cfg("async=pipeline_rl"))
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script), str(ckpt), "-", str(REPO / "tests")], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    out = json.loads(line.removeprefix("RESULT "))
    assert out["groups"] > 4 and out["order"] and out["gathered_bf16"] and out["group_bytes_ok"]
    assert out["uneven"]  # a tensor whose rows do not split evenly over 2 ranks was gathered too
    assert out["echo_bf16"] and out["echo_differs_from_fp32"]
