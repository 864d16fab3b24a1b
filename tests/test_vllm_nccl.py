"""vLLM's ``nccl`` data plane fed by the trainer (generation.weight_transfer=nccl, vllm_nccl.py), on
CPU: the chunks by hand; the trainer's chunks against vLLM's own packing and received by vLLM's
own consumer (its CUDA streams stubbed out, the broadcast a copy); the init and update payloads
parsed by vLLM's own dataclasses; the handshakes that keep every NCCL call behind the generators'
word (torch's NCCL bindings stubbed); the generator process's side; and the config's refusals.
None of this runs NCCL: docs/limitations.md says so, benchmarks/gpu_check_vllm.sh runs it on GPUs."""
from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
import torch
from vllm_helpers import vllm_module

from scalerl.config import ConfigError, check_environment, compose, validate
from scalerl.generation.transfer import vllm_nccl
from scalerl.generation.transfer.buckets import in_order, lay_out, weight_schema
from scalerl.generation.transfer.vllm_nccl import NcclPlane, chunks, entered_key, init_info, joining_key, pack_chunks, update_info


def _state(bias=4):
    g = torch.Generator().manual_seed(0)
    return {"embed": torch.randn(7, 4, generator=g), "q": torch.randn(4, 4, generator=g), "bias": torch.randn(bias, generator=g),
            "steps": torch.arange(3), "empty": torch.empty(0, 4), "head": torch.randn(5, 4, generator=g)}


def _chunk_bytes(schema, chunk_bytes, state=None):
    layout = chunks(schema, chunk_bytes)
    state = state or _state()
    return layout, list(pack_chunks(schema, layout, in_order(lay_out(schema), state),
                                  lambda n: torch.full((n,), 255, dtype=torch.uint8)))


def test_the_chunk_plan_by_hand():
    # In bf16: embed 56 B, q 32 B, bias 8 B, steps 24 B (int64 kept), empty 0 B, head 40 B. At 64 B a
    # chunk closes once it holds MORE than 64 B: embed + q = 88 (closes), bias + steps + empty + head
    # = 72 (closes). At 88 B, 88 is not more: embed, q, bias (96) close the first chunk.
    schema = weight_schema(_state(), "bfloat16")
    assert [s.nbytes for s in schema] == [56, 32, 8, 24, 0, 40]
    assert chunks(schema, 64) == [range(0, 2), range(2, 6)]
    assert chunks(schema, 88) == [range(0, 3), range(3, 6)]
    assert chunks(schema, 1000) == [range(0, 6)]  # the rest is the last chunk
    assert chunks(schema, 1) == [range(0, 1), range(1, 2), range(2, 3), range(3, 4), range(4, 6)]  # empty joins head


@pytest.mark.filterwarnings("ignore:Tensor .* exceeds buffer_size_bytes")  # vLLM's, at 1 B chunks
@pytest.mark.parametrize("chunk_bytes", [1, 64, 88, 1000])
@pytest.mark.parametrize("bias", [4, 3])  # 3: the int64 after it starts at an odd byte (a cast, then a copy)
def test_the_trainers_chunks_are_vllms_packing_byte_for_byte(chunk_bytes, bias):
    packed = vllm_module("vllm.distributed.weight_transfer.packed_tensor")
    state = _state(bias)
    schema = weight_schema(state, "bfloat16")
    chunk_rows, mine = _chunk_bytes(schema, chunk_bytes, state)
    # vLLM's trainer-side packing (its producer), of the same tensors already in the generator's dtype.
    cast = iter([(s.name, t.to(s.torch_dtype)) for s, t in zip(schema, state.values())])
    theirs = []
    while (chunk := packed.pack_tensors(cast, lambda item: item[1], chunk_bytes)) is not None:
        theirs.append(chunk)
    assert [c.names for c in theirs] == [[schema[i].name for i in rows] for rows in chunk_rows]
    assert len(mine) == len(theirs) and all(torch.equal(a, b.packed_tensor) for a, b in zip(mine, theirs))


def test_vllms_own_consumer_receives_the_trainers_chunks(monkeypatch):
    """vLLM 0.32's ``packed_nccl_broadcast_consumer`` (its worker's receive) fed the trainer's chunks:
    it cuts its receive buffers from ``update_info`` alone, so chunks that differed from ours would
    fail the size check below, and it hands ``load_weights`` the trainer's tensors in bf16."""
    packed = vllm_module("vllm.distributed.weight_transfer.packed_tensor")
    schema = weight_schema(_state(), "bfloat16")
    _, mine = _chunk_bytes(schema, 64)

    class Stream:
        def synchronize(self):
            pass

    monkeypatch.setattr(packed, "_get_streams", lambda device, n: tuple(Stream() for _ in range(n)))
    monkeypatch.setattr(packed.torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(packed.torch.accelerator, "current_device_index", lambda: 0)
    arriving = iter(mine)

    class Group:  # the broadcast, in memory: the receive buffer vLLM sized must be the chunk we sent
        def broadcast(self, tensor, src):
            chunk = next(arriving)
            assert src == 0 and tensor.numel() == chunk.numel()
            tensor.copy_(chunk)

    loaded = {}
    info = update_info(schema)
    metadata = ((n, (shape, getattr(torch, d))) for n, d, shape in zip(info["names"], info["dtype_names"], info["shapes"]))
    packed.packed_nccl_broadcast_consumer(metadata, Group(), 0, lambda pairs: loaded.update(
        {n: t.clone() for n, t in pairs}), buffer_size_bytes=64, num_buffers=2, device="cpu")
    assert next(arriving, None) is None  # every chunk was taken
    for s, t in zip(schema, _state().values()):
        assert loaded[s.name].dtype == s.torch_dtype and torch.equal(loaded[s.name], t.to(s.torch_dtype)), s.name


def test_the_init_and_update_payloads_are_vllms_dataclasses():
    nccl_common = vllm_module("vllm.distributed.weight_transfer.nccl_common")
    nccl_engine = vllm_module("vllm.distributed.weight_transfer.nccl_engine")
    uid = bytes(range(128))  # ncclUniqueId is 128 bytes
    got = nccl_common.NCCLWeightTransferInitInfo(**init_info(uid, rank_offset=2, world_size=3, chunk_bytes=4096))
    assert got.nccl_unique_id_bytes == uid and (got.rank_offset, got.world_size) == (2, 3)
    assert got.packed and got.packed_buffer_size_bytes == 4096 and got.packed_num_buffers == vllm_nccl.CHUNK_BUFFERS
    assert got.master_address is None  # the unique-id rendezvous: no vLLM store on the trainer's side
    schema = weight_schema(_state(), "bfloat16")
    upd = nccl_engine.NCCLWeightTransferUpdateInfo(**update_info(schema))
    assert upd.names == [s.name for s in schema] and upd.dtype_names[3] == "int64" and upd.shapes[0] == [7, 4]


def test_the_option_list_is_the_engines_backend_list():
    vllm_module("vllm")
    from scalerl.generation.engines.vllm_engine import BACKENDS
    from scalerl.generation.engines.vllm_option import WEIGHT_TRANSFERS

    assert tuple(BACKENDS) == WEIGHT_TRANSFERS and BACKENDS["nccl"] == "nccl"  # vLLM's own backend


# ------------------------------------------------------------- the handshakes, NCCL stubbed
class _Hub:
    """The trainer's hub: the control stream, and the store's marks, which the generators set
    ``marks_after`` polls into a wait (as a generator reads the message at its next decode step)."""

    def __init__(self, marks_after=3):
        self.sent, self.marks, self.log, self.pending = [], set(), [], []
        self.marks_after = marks_after
        self.store = self

    def send(self, kind, payload=None):
        self.sent.append((kind, payload))
        self.log.append(f"send {kind}")

    def generators_say(self, keys):
        self.pending = list(keys)

    def has(self, keys):
        return set(keys) <= self.marks

    def wait(self, ready, stage):
        for i in range(self.marks_after + 1):
            if ready():
                self.log.append(f"ready after {i} polls")
                return 0.0
            if i == self.marks_after - 1:
                self.marks |= set(self.pending)
        raise AssertionError(f"still waiting: {stage}")

    def delete_key(self, key):
        self.marks.discard(key)


@pytest.fixture
def fake_nccl(monkeypatch):
    """torch.cuda's NCCL bindings, events and device guard, as records."""
    import torch.cuda.nccl as nccl

    calls = []

    class Event:
        def record(self, stream=None):
            calls.append(("record",))

        def query(self):
            return True

    monkeypatch.setattr(nccl, "unique_id", lambda: b"u" * 128)
    monkeypatch.setattr(nccl, "init_rank", lambda world, uid, rank: calls.append(("init", world, uid, rank)) or "comm")
    monkeypatch.setattr(nccl, "all_reduce", lambda inputs, comms=None: calls.append(
        ("all_reduce", inputs[0].dtype, inputs[0].numel(), comms)))
    monkeypatch.setattr(nccl, "broadcast", lambda inputs, root=0, streams=None, comms=None: calls.append(
        ("broadcast", inputs[0].clone(), root, comms)))
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "stream")
    monkeypatch.setattr(torch.cuda, "Event", Event)
    return calls


def test_rank_0_joins_the_group_only_after_every_generator_says_it_is_joining(fake_nccl):
    schema = weight_schema(_state(), "bfloat16")
    plane, hub = NcclPlane(schema, "cpu", n=2, chunk_bytes=64), _Hub()
    hub.generators_say([joining_key(0), joining_key(1)])
    plane.connect(hub)
    (kind, payload), = hub.sent
    assert kind == "weights_group" and [i["rank_offset"] for i in payload["init_info"]] == [1, 2]
    assert {i["world_size"] for i in payload["init_info"]} == {3} and plane.world == 3
    assert hub.log == ["send weights_group", "ready after 3 polls"]  # polled (with the hub's deadline) until both said so
    # Then rank 0 of 3, from the id it sent, and vLLM's warm-up: a one-element float32 all-reduce.
    assert fake_nccl == [("init", 3, b"u" * 128, 0), ("all_reduce", torch.float32, 1, ["comm"])]
    assert payload["init_info"][0]["nccl_unique_id_b64"] == init_info(b"u" * 128, 1, 3)["nccl_unique_id_b64"]


def test_a_push_gathers_and_broadcasts_only_after_every_generator_entered_vllms_update(fake_nccl):
    schema = weight_schema(_state(), "bfloat16")
    plane, hub = NcclPlane(schema, "cpu", n=2, chunk_bytes=64), _Hub()
    hub.generators_say([joining_key(0), joining_key(1)])
    plane.connect(hub)
    del fake_nccl[:]

    def gathered():  # the trainer's tensors, gathered as they are read (a sharded trainer's iterator)
        hub.log.append("gather")
        yield from in_order(lay_out(schema), _state())

    hub.generators_say([entered_key(0, 7), entered_key(1, 7)])
    done = plane.push(hub, 7, gathered())
    assert hub.sent[-1] == ("push", {"version": 7, "transfer": "nccl"})
    assert hub.log[-3:] == ["send push", "ready after 3 polls", "gather"]  # nothing gathered before both entered
    assert not hub.marks  # the marks are deleted once read
    sent = [c for c in fake_nccl if c[0] == "broadcast"]
    _, mine = _chunk_bytes(schema, 64)
    assert len(sent) == len(mine) == 2 and all(torch.equal(c[1], m) and c[2:] == (0, ["comm"]) for c, m in zip(sent, mine))
    assert fake_nccl[-1] == ("record",) and done()  # completion is an event polled with the hub's deadline


def test_a_generator_process_says_so_before_each_nccl_step(monkeypatch):
    from scalerl.generation.fleet import generator_loop as worker

    log = []

    class Engine:
        def join_weight_group(self, info):
            log.append(("join", info))

        def receive_broadcast(self, info, version):
            log.append(("receive", info["names"], version))

        def close(self):
            pass

    class Spoke:
        def __init__(self, messages):
            self.messages = messages

        def poll(self):
            return self.messages.pop(0) if self.messages else None

        def tell(self, key):
            log.append(("tell", key))

    monkeypatch.setattr(worker, "build_engine", lambda spec: Engine())
    schema = tuple(weight_schema(_state(), "bfloat16"))
    spec = worker.WorkerSpec(rank=1, n_generators=2, checkpoint="", device="cpu", dtype="bfloat16",
                             compute_dtype="float32", heads=None, attn_implementation=None,
                             threads=torch.get_num_threads(), timeout_s=30, in_flight=True, schema=schema)
    infos = [{"rank_offset": 1}, {"rank_offset": 2}]
    server = worker.GeneratorServer(Spoke([["weights_group", {"init_info": infos}],
                                           ["push", {"version": 5, "transfer": "nccl"}]]), spec)
    server.drain()
    names = [s.name for s in schema]
    assert log == [("tell", joining_key(1)), ("join", {"rank_offset": 2}),
                   ("tell", entered_key(1, 5)), ("receive", names, 5)]
    assert server.version == 5


# ------------------------------------------------------------------ the config
def test_nccl_is_refused_without_cuda_without_a_trainer_gpu_and_without_generator_processes(monkeypatch):
    import scalerl.config as config

    nccl = ["generation=vllm", "generation.weight_transfer=nccl"]
    with pytest.raises(ConfigError, match=r"^generation.weight_transfer: nccl broadcasts from the trainer to "
                                          r"generator processes, and async=sync has none") as e:
        validate(compose([*nccl, "async=sync"]))
    assert "\n" not in str(e.value)
    cfg = validate(compose([*nccl, "async=pipeline_rl"]))
    monkeypatch.setattr(config.importlib.util, "find_spec", lambda name: object())  # vLLM "installed"
    monkeypatch.setattr(config, "cuda_devices", lambda: 0)
    with pytest.raises(ConfigError, match=r"^generation.weight_transfer: nccl moves the weights between GPUs, and "
                                          r"this machine has no CUDA device") as e:
        check_environment(cfg)
    assert "\n" not in str(e.value)
    monkeypatch.setattr(config, "cuda_devices", lambda: 2)
    check_environment(cfg)  # two GPUs and train.device=auto: accepted
    with pytest.raises(ConfigError, match=r"^generation.weight_transfer: nccl broadcasts from the trainer's GPU, "
                                          r"and train.device=cpu"):
        check_environment(validate(compose([*nccl, "async=pipeline_rl", "train.device=cpu"])))
    check_environment(validate(compose(["generation=vllm", "async=pipeline_rl", "train.device=cpu"])))  # gloo: fine


def test_a_generator_on_the_trainers_own_gpu_is_refused_before_anything_starts():
    from scalerl.generation.fleet.pool import GeneratorPool
    from scalerl.generation.engines.vllm_option import VLLMGenerationConfig
    from scalerl.generation.fleet.generator_loop import WorkerSpec

    spec = WorkerSpec(rank=0, n_generators=2, checkpoint="", device="cpu", dtype="bfloat16", compute_dtype="float32",
                      heads=None, attn_implementation=None, threads=1, timeout_s=30, in_flight=True, schema=(),
                      generation="vllm", generation_cfg=VLLMGenerationConfig(weight_transfer="nccl"))
    state = _state()
    with pytest.raises(ConfigError, match=r"generation.weight_transfer: nccl needs every generator on a GPU of its "
                                          r"own, and generator\(s\) 1 would share the trainer's cuda:0"):
        GeneratorPool(spec, 2, state, devices=["cuda:1", "cuda:0"], device=torch.device("cuda:0"))
    pool = GeneratorPool(spec, 2, state, devices=["cuda:1", "cuda:2"], device=torch.device("cuda:0"))
    assert pool.nccl is not None and pool.nccl.world == 3
    gloo = GeneratorPool(replace(spec, generation_cfg=VLLMGenerationConfig()), 2, state, devices=["cuda:0", "cuda:0"],
                         device=torch.device("cuda:0"))
    assert gloo.nccl is None  # the gloo plane goes through host memory: a shared GPU is fine
