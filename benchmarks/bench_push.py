"""The streamed weight push (issue 25, item 2) on a random model of Qwen2-0.5B's shape (vocabulary
151,936, 24 layers, 494M parameters; bench_memory.py writes the bf16 checkpoint once to --ckpt,
nothing is downloaded): an fp32 trainer on 1 or 2 gloo ranks (FSDP2 on CPU for 2) pushes to 1 or 2
bf16 generator processes (the real ``scalerl.generation.fleet.generator_loop``, torch engine).

    python benchmarks/bench_push.py --ranks 1 2 --generators 1 2

For each (trainer ranks, generators), in one torchrun job:

- memory: every trainer rank's resident memory just before the first push (the pool's two bucket
  buffers are made by it) and its high-water mark during it (VmHWM, reset through
  /proc/self/clear_refs), against the bound: on rank 0, the pool's 2 buckets; on every sharded
  rank, ``iter_full_tensors``' two group buffers (a bucket each), the shard it sends (at most a
  bucket) and the one tensor larger than a bucket with its shard (the tied embedding, 260 MiB in
  bf16); an unsharded rank gathers nothing. The generators' rise is printed too (read from
  /proc/PID, as root or the same user).
- speed: seconds per push (the first included: gather, cast, pack, broadcast, until every generator
  has every byte) and its bytes/s, against a raw gloo broadcast of the same bytes from the same
  trainer process to as many fresh processes, measured right after each push (so the machine's
  load moves both alike), two ways: in the push's own bucket sizes, and cut in --bucket-mb pieces
  (fewer, larger broadcasts). The ratio reported is against the faster of the two.

Memory is shared with other jobs: it refuses to start below --need-gb available (``free``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
GB, MB = 2**30, 2**20

TRAINER = r'''
import json, os, sys, time, subprocess
from functools import partial
import torch, torch.distributed as dist
a = json.loads(sys.argv[1])
torch.set_num_threads(1)
def status(pid="self"):
    f = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status").read().splitlines() if ":" in l)
    return int(f["VmRSS"].split()[0]) * 1024, int(f["VmHWM"].split()[0]) * 1024
def reset_peak(pid="self"):
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")
def gloo_options():  # as transport.py's groups: loopback, a deadline
    import datetime
    opts = dist.ProcessGroupGloo._Options()
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    opts._timeout = datetime.timedelta(seconds=300)
    return opts
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
from scalerl.generation.fleet.pool import GeneratorPool
from scalerl.generation.fleet.generator_loop import WorkerSpec
from scalerl.models.load import CheckpointUnits, build_empty, load_checkpoint
from scalerl.models.policy import CompletionLogits
from scalerl.precision import PRECISIONS
from scalerl.precision.base import linear_head
from scalerl.train.sharding import shard_trainer
from scalerl.train.weights import push_weights
if world == 1:
    model, _ = load_checkpoint(a["ckpt"], dtype=torch.float32, device=torch.device("cpu"))
else:
    from torch.distributed.device_mesh import init_device_mesh
    model = build_empty(a["ckpt"], dtype=torch.float32)
    units = CheckpointUnits(a["ckpt"], model, dtype=torch.float32, device=torch.device("cpu"))
    shard_trainer(CompletionLogits(model, linear_head(torch.float32)), init_device_mesh("cpu", (world,)),
                  compute_dtype=torch.float32, head_dtype=torch.float32, materialize=units.materialize)
B, G = a["bucket"], a["generators"]
# What a push may add on this rank (train/sharding.py, generation/transfer/buckets.py): sharded, two gather
# buffers of a bucket and the shard being sent (at most a bucket), plus a tensor too large for
# them (the tied embedding) with its shard; unsharded, nothing (the pool casts into its buckets).
gather = 0
if world > 1:
    sizes = [world * -(-t.shape[0] // world) * t.shape[1:].numel() * 2 for t in model.state_dict().values()]
    big = max([n for n in sizes if n > B] or [0])
    gather = 2 * B + min(B, max(n // world for n in sizes if n <= B)) + big + big // world
unit = gather  # the bound, less rank 0's two buckets
pool = None
if rank == 0:
    cfg = PRECISIONS["fp32_head"].schema(generator_body="bfloat16")
    spec = WorkerSpec(rank=0, n_generators=G, checkpoint=a["ckpt"], device="cpu", dtype="bfloat16",
                      compute_dtype="float32", heads=partial(PRECISIONS["fp32_head"].fn, cfg=cfg),
                      attn_implementation=None, threads=1, timeout_s=600, in_flight=True, schema=())
    pool = GeneratorPool(spec, G, model.state_dict(), bucket_bytes=B)
    pool.start()
    # The raw gloo broadcast of the same bytes, 1 sender + G receivers (fresh processes beside the
    # generators): in the push's bucket sizes, and in --bucket-mb cuts, each right after each push,
    # so a change of the machine's load hits both sides of the ratio alike.
    plan = pool.layout
    cuts = {"push": [plan.bucket_size(k) for k in range(plan.n_buckets)],
            "cut": [min(B, plan.nbytes - at) for at in range(0, plan.nbytes, B)]}
    sizes = os.path.join(os.path.dirname(a["raw"]), "sizes.json")
    with open(sizes, "w") as f:
        json.dump([cuts["push"], cuts["cut"]] * a["pushes"], f)
    store = dist.TCPStore("127.0.0.1", 0, G + 1, True, wait_for_workers=False)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, a["raw"], str(store.port), str(j + 1), str(G + 1), sizes, str(B)],
                              env=env, stdout=subprocess.DEVNULL) for j in range(G)]
    group = dist.ProcessGroupGloo(dist.PrefixStore("raw", store), 0, G + 1, gloo_options())
    bufs = [torch.zeros(B, dtype=torch.uint8) for _ in range(2)]
    opts_b = dist.BroadcastOptions()
    opts_b.rootRank = 0
    time.sleep(2)  # the generators are waiting for their first weights (polling the store)
raw = {"push": [], "cut": []}


def raw_round(name):
    group.barrier().wait()
    t0 = time.perf_counter()
    works = {}
    for k, n in enumerate(cuts[name]):  # double buffered, without the gather, cast and copy
        works[k] = group.broadcast([bufs[k % 2][:n]], opts_b)
        if k - 1 in works:
            works.pop(k - 1).wait()
    for w in works.values():
        w.wait()
    raw[name].append(time.perf_counter() - t0)


dist.barrier()
rows, gens = [], []
for i in range(a["pushes"]):
    before = status()[0]
    gen_before = [status(p)[0] for p in pool.pids] if pool else []
    reset_peak()
    for p in (pool.pids if pool else []):
        reset_peak(p)
    dist.barrier()
    t0 = time.perf_counter()
    held = push_weights(pool, i + 1, model, "bfloat16", sharded=world > 1)
    if pool is not None:
        pool.settle()
    wall = time.perf_counter() - t0
    peak = status()[1]
    if pool is not None:
        time.sleep(1.0)  # the generators copy the last bucket into their weights
        gens.append([status(p)[1] - b for p, b in zip(pool.pids, gen_before)])
        for name in ("push", "cut"):
            raw_round(name)
    dist.barrier()
    rows.append({"before": before, "peak": peak, "wall_s": wall, "held_s": held})
out = {"rank": rank, "world": world, "unit": unit, "bucket": B, "rows": rows}
if pool is not None:
    out["total"], out["n_buckets"], out["gen_rise"] = plan.nbytes, plan.n_buckets, gens
    pool.close()
    for p in procs:
        p.wait(timeout=120)
    out["raw_s"] = raw
print("RESULT " + json.dumps(out), flush=True)
dist.barrier()
dist.destroy_process_group()
'''

RAW_RECEIVER = r'''
import datetime, json, sys, torch, torch.distributed as dist
port, rank, size, B = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[5])
runs = json.load(open(sys.argv[4]))
torch.set_num_threads(1)
store = dist.TCPStore("127.0.0.1", port, size, False, datetime.timedelta(seconds=300))
opts = dist.ProcessGroupGloo._Options()
opts._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
opts._timeout = datetime.timedelta(seconds=300)
group = dist.ProcessGroupGloo(dist.PrefixStore("raw", store), rank, size, opts)
bufs = [torch.empty(B, dtype=torch.uint8) for _ in range(2)]
opts_b = dist.BroadcastOptions()
opts_b.rootRank = 0
for sizes in runs:
    group.barrier().wait()
    for k, n in enumerate(sizes):
        group.broadcast([bufs[k % 2][:n]], opts_b).wait()
'''


def available_gb() -> float:
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def run(ns, ranks: int, generators: int, raw: Path, trainer: Path) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"}
    args = {"ckpt": ns.ckpt, "generators": generators, "bucket": ns.bucket_mb * MB, "pushes": ns.pushes, "raw": str(raw)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}", str(trainer),
           json.dumps(args)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"trainer failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return sorted((json.loads(ln.split("RESULT ", 1)[1]) for ln in proc.stdout.splitlines() if "RESULT " in ln),
                  key=lambda r: r["rank"])


def report(ranks: int, generators: int, res: list[dict]) -> None:
    main = res[0]
    total, B = main["total"], main["bucket"]
    print(f"\n{ranks} trainer rank(s) (fp32{', FSDP2' if ranks > 1 else ''}) -> {generators} bf16 generator(s): "
          f"{total / GB:.3f} GB per push in {main['n_buckets']} buckets of at most {B / MB:.0f} MB")
    for r in res:
        first = r["rows"][0]
        rise = first["peak"] - first["before"]
        bound = (2 * B + r["unit"]) if r["rank"] == 0 else r["unit"]  # rank 0 also holds the pool's two buckets
        later = max(x["peak"] - x["before"] for x in r["rows"][1:]) if len(r["rows"]) > 1 else float("nan")
        print(f"  rank {r['rank']}: RSS before the push {first['before'] / GB:.2f} GB, peak during it "
              f"{first['peak'] / GB:.2f} GB: +{rise / MB:.0f} MB (later pushes +{later / MB:.0f} MB); bound "
              f"{'2 buckets + ' if r['rank'] == 0 else ''}{'gather buffers + largest tensor' if ranks > 1 else '0'}"
              f" = {bound / MB:.0f} MB -> "
              f"{'within' if rise <= bound else 'ABOVE'} ({rise / bound:.2f} of it)")
    for j, rise in enumerate(zip(*main["gen_rise"])):
        print(f"  generator {j}: peak RSS rise during each push {', '.join(f'+{r / MB:.0f}' for r in rise)} MB (the "
              f"first most likely pages of its own weights, mapped from the checkpoint, written once; not verified)")
    walls = [x["wall_s"] for x in main["rows"]]
    helds = [x["held_s"] for x in main["rows"]]
    push_s = sum(walls) / len(walls)
    print(f"  push: {' '.join(f'{w:.2f}' for w in walls)} s (mean {push_s:.2f} s = {total / push_s / GB:.2f} GB/s; "
          f"trainer held up {sum(helds) / len(helds):.2f} s on average)")
    means = {}
    for name, what in (("push", "in the push's bucket sizes"), ("cut", f"in {B / MB:.0f} MB cuts")):
        raw = main["raw_s"][name]
        means[name] = sum(raw) / len(raw)
        print(f"  raw gloo broadcast of the same bytes {what}: {' '.join(f'{w:.2f}' for w in raw)} s (mean "
              f"{means[name]:.2f} s = {total / means[name] / GB:.2f} GB/s)")
    best = min(means, key=means.get)
    print(f"  push/raw throughput {means[best] / push_s:.2f} against the faster raw ({best}; target >= 0.8)")
    if len(walls) > 2:  # the first push of a sharded run also builds the gather's plan; the rest are steady
        raw = main["raw_s"][best]
        steady, raw_steady = sorted(walls[1:])[len(walls[1:]) // 2], sorted(raw[1:])[len(raw[1:]) // 2]
        print(f"  after the first: median push {steady:.2f} s against raw {raw_steady:.2f} s: "
              f"push/raw throughput {raw_steady / steady:.2f}")
        # Each push against the raw broadcasts measured right after it (the same moment's load).
        pairs = sorted(min(main["raw_s"][n][i] for n in means) / w for i, w in enumerate(walls) if i)
        print(f"  after the first, push by push against the faster raw right after it: "
              f"{' '.join(f'{r:.2f}' for r in pairs)} (median {pairs[len(pairs) // 2]:.2f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", default="/tmp/qwen2-05b-shape")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--generators", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--bucket-mb", type=int, default=64)
    ap.add_argument("--pushes", type=int, default=3)
    ap.add_argument("--need-gb", type=float, default=8.0, help="refuse to start with less memory available")
    ns = ap.parse_args()
    if not (Path(ns.ckpt) / "model.safetensors").exists():
        import torch
        from bench_memory import QWEN2_05B
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(0)
        Qwen2ForCausalLM(Qwen2Config(**QWEN2_05B)).to(torch.bfloat16).save_pretrained(ns.ckpt, safe_serialization=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw, trainer = Path(tmp) / "raw.py", Path(tmp) / "trainer.py"
        raw.write_text(RAW_RECEIVER)
        trainer.write_text(TRAINER)
        for ranks in ns.ranks:
            for g in ns.generators:
                free = available_gb()
                if free < ns.need_gb:
                    raise SystemExit(f"only {free:.1f} GB available (--need-gb {ns.need_gb}): not starting")
                print(f"[{ranks} rank(s), {g} generator(s): {free:.1f} GB available]", flush=True)
                report(ranks, g, run(ns, ranks, g, raw, trainer))


if __name__ == "__main__":
    main()
