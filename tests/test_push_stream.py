"""The streamed weight push (generation/transfer/buckets.py, GeneratorPool.push, train.weights.trainer_tensors):
the byte layout by hand, round trips through buckets smaller than a tensor, then real generator
processes that send their weights back (tests/push_worker.py): from one trainer rank to two fp32
generators, and from two FSDP2-sharded gloo ranks to a bf16 generator."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import REPO
from push_worker import WORKER, echo, echo_spec

from scalerl.generation.transfer.buckets import in_order, lay_out, pack, pack_all, unpack, weight_schema



def _state():
    g = torch.Generator().manual_seed(0)
    return {"a": torch.randn(2, 3, generator=g), "n": torch.arange(5), "big": torch.randn(40, generator=g),
            "empty": torch.empty(0, 3), "c": torch.randn(3, generator=g)}


def _round_trip(state, dtype, bucket_bytes):
    layout = lay_out(weight_schema(state, dtype), bucket_bytes)
    bufs = [torch.full((bucket_bytes,), 255, dtype=torch.uint8) for _ in range(2)]
    sent = []
    for k, bucket in pack(layout, in_order(layout, state), bufs):
        assert any(buf.data_ptr() <= bucket.data_ptr() < buf.data_ptr() + bucket_bytes for buf in bufs)  # no other memory
        sent.append(bucket.clone())
    arriving = iter(sent)

    def recv(buf):
        src = next(arriving)
        return lambda: buf.copy_(src)

    return layout, sent, list(unpack(layout, recv))


def test_the_layout_by_hand():
    layout = lay_out(weight_schema(_state(), "bfloat16"), bucket_bytes=32)
    # bf16 floats, int64 kept: a 12 B at 0; n 40 B at 16; big 80 B at 64 (16-aligned); empty 0 B at 144;
    # c 6 B at 144: a stream of 150 B. At 32 B buckets a tensor of >= 16 B (ALIGN, the floor of 32 / 16)
    # has buckets of its own: a [0, 12); n [16, 48) [48, 56); big [64, 96) [96, 128) [128, 144); c [144, 150).
    # The alignment gaps (12..16, 56..64) do not travel: 138 B in 7 buckets.
    assert [s.dtype for s in layout.specs] == ["bfloat16", "int64", "bfloat16", "bfloat16", "bfloat16"]
    assert layout.offsets == (0, 16, 64, 144, 144) and layout.total == 150
    assert layout.starts == (0, 16, 48, 64, 96, 128, 144) and layout.ends == (12, 48, 56, 96, 128, 144, 150)
    assert layout.own == (-1, 1, 1, 2, 2, 2, -1) and layout.nbytes == 138
    assert list(layout.pieces(1)) == [(1, 0, 0, 32), (2, 0, 32, 40)]
    assert list(layout.pieces(2)) == [(3, 0, 0, 32), (4, 0, 32, 64), (5, 0, 64, 80)]
    assert list(layout.pieces(3)) == []  # the empty tensor travels in no bucket
    with pytest.raises(ValueError, match="multiple of 16"):
        lay_out(layout.specs, 40)


def test_small_tensors_share_a_bucket_and_never_straddle_one():
    # 512 B buckets: own buckets from 512 / 16 = 32 B. w1 8 B at 0 and w2 12 B at 16 share bucket 0
    # [0, 28); big 600 B at 32 is cut at 512 B: [32, 544) [544, 632); w3 6 B at 640 and w4 16 B at 656
    # share [640, 672). A small tensor that would cross the 512 B mark opens a bucket instead.
    spec = weight_schema({"w1": torch.zeros(4, dtype=torch.bfloat16), "w2": torch.zeros(6, dtype=torch.bfloat16),
                          "big": torch.zeros(300, dtype=torch.bfloat16), "w3": torch.zeros(3, dtype=torch.bfloat16),
                          "w4": torch.zeros(2, dtype=torch.int64)})
    layout = lay_out(spec, 512)
    assert layout.offsets == (0, 16, 32, 640, 656)
    assert layout.starts == (0, 32, 544, 640) and layout.ends == (28, 544, 632, 672) and layout.own == (-1, 2, 2, -1)
    assert list(layout.pieces(4)) == [(3, 16, 0, 16)]
    small = weight_schema({f"s{i}": torch.zeros(7) for i in range(40)})  # 28 B each, 32 B apart: 16 per 512 B
    layout = lay_out(small, 512)
    assert layout.own == (-1, -1, -1) and layout.starts == (0, 512, 1024) and layout.ends == (508, 1020, 1276)


@pytest.mark.parametrize("dtype,bucket_bytes", [(None, 16), (None, 48), ("bfloat16", 32), ("bfloat16", 4096)])
def test_buckets_round_trip_in_the_generators_dtype(dtype, bucket_bytes):
    state = _state()
    layout, sent, got = _round_trip(state, dtype, bucket_bytes)
    assert [n for n, _ in got] == list(state)  # schema order
    for (name, t), (_, ref) in zip(got, state.items()):
        want = ref.to(torch.bfloat16) if dtype and ref.is_floating_point() else ref
        assert t.dtype == want.dtype and torch.equal(t, want), name
    assert sum(b.numel() for b in sent) == layout.nbytes <= layout.total  # the stream's bytes, less gaps between buckets


@pytest.mark.parametrize("bucket_bytes", [16, 48, 4096])
def test_a_snapshot_is_the_streamed_layout_byte_for_byte(bucket_bytes):
    """``pack_all`` (vLLM's relay holds a push until a decode step) builds its schema as the pairs
    come: the same bytes ``pack`` sends for that schema, so the receiver's ``unpack`` reads them."""
    state = {n: (t.to(torch.bfloat16) if t.is_floating_point() and n != "c" else t) for n, t in _state().items()}
    schema, bufs = pack_all(state.items(), bucket_bytes)
    assert schema == weight_schema(state)  # each tensor's own dtype: what the relay was handed
    layout, sent, _ = _round_trip(state, None, bucket_bytes)
    assert len(bufs) == len(sent) == layout.n_buckets
    for mine, streamed in zip(bufs, sent):
        assert mine.numel() == streamed.numel()
        for i, spec in enumerate(layout.specs):  # the tensors' bytes (not the alignment gaps) agree
            for k, off, a, b in layout.pieces(i):
                if mine is bufs[k]:
                    assert torch.equal(mine[off : off + b - a], streamed[off : off + b - a]), spec.name
    arriving = iter(bufs)
    got = list(unpack(layout, lambda buf: (lambda src: lambda: buf.copy_(src))(next(arriving))))
    assert all(torch.equal(t, state[n]) and t.dtype == state[n].dtype for n, t in got)


def test_a_receiver_reuses_a_bucket_only_once_no_view_of_it_is_alive():
    state = {f"w{i}": torch.full((4,), float(i)) for i in range(12)}  # 16 B each: one per bucket
    layout, sent, _ = _round_trip(state, None, 16)
    for keep in (False, True):
        arriving, buffers, kept = iter(sent), set(), []

        def recv(buf):
            buffers.add(buf.data_ptr())
            src = next(arriving)
            return lambda: buf.copy_(src)

        for name, t in unpack(layout, recv):
            kept.append(t if keep else t.clone())  # an engine that holds views, or one that copies at once
        assert [float(t[0]) for t in kept] == [float(i) for i in range(12)]
        assert len(buffers) == (12 if keep else 3)  # the one read, the one arriving, and one freed


def test_a_receiver_takes_a_tensor_with_buckets_of_its_own_in_place():
    # 64 B buckets (own from 16 B): a (24 B) and big (160 B: 3 buckets) are received straight into the
    # receiver's tensors, n (int64, 40 B) is refused as a destination (the receiver holds it as int32),
    # c (12 B) is small and shares a bucket. Only n's buckets and c's take a receive buffer.
    state = _state()
    layout, sent, _ = _round_trip(state, None, 64)
    mine = {"a": torch.zeros(2, 3), "n": torch.zeros(5, dtype=torch.int32), "big": torch.zeros(40),
            "c": torch.zeros(3), "empty": torch.zeros(0, 3)}
    before = {k: t.data_ptr() for k, t in mine.items()}
    arriving, into_mine = iter(sent), []

    def recv(buf):
        inside = [k for k, t in mine.items() if t.numel() and
                  t.data_ptr() <= buf.data_ptr() < t.data_ptr() + t.numel() * t.element_size()]
        into_mine.extend(inside)
        src = next(arriving)
        return lambda: buf.copy_(src)

    got = dict(unpack(layout, recv, into=lambda spec: mine[spec.name]))
    assert into_mine == ["a", "big", "big", "big"]  # n (wrong dtype) and c (shared bucket) go through buffers
    for name in ("a", "big"):  # the receiver's own tensors, at their own addresses, with the pushed values
        assert got[name] is not mine[name] and got[name].data_ptr() == before[name] == mine[name].data_ptr()
        assert torch.equal(mine[name], state[name])
    assert all(torch.equal(got[k], state[k]) and got[k].dtype == state[k].dtype for k in state)
    assert torch.equal(mine["c"], torch.zeros(3))  # a shared bucket's tensor is the consumer's to copy


def test_small_buckets_share_a_buffer_and_a_buffer_is_refilled_only_after_reuse():
    # 12 tensors of 16 B, 16 B buckets, two buffers of 64 B: buckets 0-3 fill buffer 0, 4-7 buffer 1,
    # 8-11 buffer 0 again, and reuse(0) comes before bucket 8 is written: a sender keeps four buckets
    # of a buffer in flight and waits once per buffer, not once per bucket.
    state = {f"w{i}": torch.full((4,), float(i)) for i in range(12)}
    layout = lay_out(weight_schema(state), 16)
    bufs = [torch.zeros(64, dtype=torch.uint8) for _ in range(2)]
    flying, calls = [], []

    def reuse(b):
        calls.append((b, len(flying)))
        for view, want in flying:  # every bucket still in flight is intact when its buffer is handed back
            assert torch.equal(view, want)
        flying[:] = [(v, w) for v, w in flying if v.data_ptr() - bufs[b].data_ptr() not in range(64)]

    for k, bucket in pack(layout, in_order(layout, state), bufs, reuse):
        assert bucket.data_ptr() == bufs[(k // 4) % 2].data_ptr() + 16 * (k % 4)
        flying.append((bucket, bucket.clone()))
    assert calls == [(0, 0), (1, 4), (0, 8)]
    assert all(torch.equal(v, w) for v, w in flying)


def test_a_push_out_of_order_or_incomplete_is_refused():
    state = _state()
    layout = lay_out(weight_schema(state), 64)
    with pytest.raises(KeyError, match="lacks \\['c'\\]"):
        in_order(layout, {k: v for k, v in state.items() if k != "c"})  # a dict is checked before anything
    bufs = [torch.empty(64, dtype=torch.uint8)] * 2
    swapped = [("n", state["n"]), ("a", state["a"])]
    with pytest.raises(ValueError, match="got 'n' at position 0, the schema's is 'a'"):
        list(pack(layout, in_order(layout, swapped), bufs))
    with pytest.raises(ValueError, match="got 2 tensors, the schema has 5"):
        list(pack(layout, in_order(layout, list(state.items())[:2]), bufs))


# ------------------------------------------------------- generator processes
@pytest.mark.slow
def test_a_streamed_push_gives_two_generators_the_trainers_weights(tiny_cfg, monkeypatch):
    from scalerl.generation.fleet.pool import GeneratorPool
    from scalerl.models.load import load_checkpoint
    from scalerl.train.setup import prepare_checkpoint
    from scalerl.train.weights import trainer_tensors

    _, ckpt = prepare_checkpoint(tiny_cfg("async=pipeline_rl"))
    model, _ = load_checkpoint(ckpt, dtype=torch.float32, device=torch.device("cpu"))
    sizes = {n: t.numel() * 4 for n, t in model.state_dict().items()}
    bucket = 16 * 1024  # several buckets; the embedding (and the head) are larger than one
    assert max(sizes.values()) > bucket and sum(sizes.values()) > 4 * bucket
    monkeypatch.setattr(GeneratorPool, "worker", WORKER)
    pool = GeneratorPool(echo_spec(ckpt, 2, "float32"), 2, model.state_dict(), bucket_bytes=bucket)
    pool.start()
    try:
        for version, as_pairs in ((1, False), (2, True)):
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(0.01 * torch.randn_like(p))
            pool.push(version, trainer_tensors(model, torch.float32, bucket, sharded=False) if as_pairs else model.state_dict())
            ref = model.state_dict()
            for got in echo(pool, version):
                assert set(got) == set(ref)
                assert all(torch.equal(got[k], ref[k]) for k in ref)  # exact: the same fp32 bits
    finally:
        pool.close()


SHARDED = r'''
import json, sys
import torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
sys.path.insert(0, sys.argv[3])
from scalerl.generation.fleet.pool import GeneratorPool
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import CompletionLogits
from scalerl.precision.base import linear_head
from scalerl.train.sharding import full_state_dict, iter_full_tensors, shard_trainer
from scalerl.train.weights import push_weights
from push_worker import WORKER, echo, echo_spec
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
    pool = GeneratorPool(echo_spec(sys.argv[1], 1, "bfloat16"), 1, model.state_dict(), bucket_bytes=bucket)
    pool.start()
push_weights(pool, 1, model, "bfloat16", sharded=True)  # every rank: rank 0 sends, rank 1 joins the gathers
if rank == 0:
    (got,) = echo(pool, 1)
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
