"""Trainer memory on the CPU: one update step, and the start-up of a sharded run, of a random
model of Qwen2-0.5B's shape (vocabulary 151,936, 24 layers, 494M parameters), this checkout
against another one (``--old``: a checkout before docs/trainer-memory.md), both measured in the
same run. Each side runs in a fresh process; its peak is the kernel's high-water mark of
resident memory (VmHWM, reset through /proc/self/clear_refs just before the measured part).

    python benchmarks/bench_memory.py step --old /tmp/base --old-tokens 16 40 --tokens 256
    python benchmarks/bench_memory.py step --prompts 1 --group 1 --tokens 8192 --sides new
    python benchmarks/bench_memory.py load --old /tmp/base
    python benchmarks/bench_memory.py padding
    python benchmarks/bench_memory.py run --tokens 512 [--old /tmp/bd8]

``step``: one ``policy_update`` (CISPO, prompt aggregation, one minibatch; AdamW's state
already allocated, as on every step after the first) on P prompts x G completions x T tokens.
Activation memory = peak RSS of the forward and backward - 16 bytes per parameter (fp32
weights, gradients and AdamW's two moments); the optimizer step's own peak (AdamW's temporary, one
tensor's at a time on a CPU, the same on both sides) is printed apart. The old side at the full length does not fit this 24 GB machine, so ``--old-tokens``
measures it at shorter lengths and the activation memory is extrapolated linearly in T (its
attention is SDPA's, linear in T too); the printed table says which numbers are measured.

``run``: one whole RL step through the real entry point (``python -m scalerl.sweep model=hf
train.steps=1``, the torch engine, ``async=sync``, fp32 trainer, the default precision: the
generator samples from its own bf16-rounded weights) on a random checkpoint of that shape written
once to ``--ckpt`` (bf16 on disk, scalerl's char tokenizer, whose ids are a prefix of the large
vocabulary). The peak is that of the process tree: its summed RSS polled every 20 ms, and each
process's own VmHWM (read while it lives). The step-0 and last-step evals see one held-out prompt
once (``task.n_heldout=1 train.eval_samples=1``): the step is what is measured, not the eval.
``filter=none``: a random model fails every prompt, and the recipe's zero-variance filter would
then skip the update; ``length=truncate``: every completion is ``--tokens`` long, no forced phrase.

``load``: ``--world`` gloo ranks (default 2) build the FSDP2-sharded fp32 trainer from a bf16
safetensors checkpoint written once to ``--ckpt``. Each rank's peak above its RSS before the
build is compared with its share of the fp32 weights plus the largest unit (the root:
embeddings, tied head, final norm).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QWEN2_05B = dict(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                 num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True,
                 max_position_embeddings=32_768, rope_theta=1_000_000.0)

COMMON = r'''
import json, os, resource, sys, time
def rss():  # (current, peak) resident memory in bytes
    f = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    return int(f["VmRSS"].split()[0]) * 1024, int(f["VmHWM"].split()[0]) * 1024
def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
'''

STEP = COMMON + r'''
import torch
from functools import partial
from types import SimpleNamespace
from transformers import Qwen2Config, Qwen2ForCausalLM
from scalerl.models.policy import CompletionLogits
from scalerl.precision.base import linear_head
from scalerl.losses.cispo import CispoConfig, cispo_loss
from scalerl.aggregation.prompt import prompt_mean
from scalerl.train.update import policy_update
a = json.loads(sys.argv[1])
torch.set_num_threads(a["threads"])
if a["new"]:  # what the trainer sets at start-up for model=hf (model.release_freed_memory, core/heap.py)
    from scalerl.core.heap import return_large_frees
    return_large_frees()
if a.get("progress"):  # a long run leaves its resident memory so far, every 30 s
    import threading
    def watch():
        while True:
            with open(a["progress"], "a") as f:
                print(json.dumps({"t": time.time(), "rss": rss()[0], "hwm": rss()[1]}), file=f)
            time.sleep(30)
    threading.Thread(target=watch, daemon=True).start()
torch.manual_seed(0)
model = Qwen2ForCausalLM(Qwen2Config(**a["shape"], attn_implementation="sdpa")).train()
trainer = CompletionLogits(model, linear_head(torch.float32))
kw = {}
if a["new"]:
    from scalerl.models.policy import checkpoint_layers
    if a["ckpt_layers"]:
        checkpoint_layers(model)
    trainer.head_chunk = a["head_chunk"]
    kw["micro_batch_tokens"] = a["micro"]
params = [p for p in trainer.parameters() if p.requires_grad]
n_params = sum(p.numel() for p in params)
opt = torch.optim.AdamW(params, lr=1e-6, foreach=False)  # the same on both sides: activations are compared
for p in params:  # allocate AdamW's state, as every step after the first has it
    p.grad = torch.zeros_like(p)
opt.step()
opt.zero_grad(set_to_none=True)
P, G, T, W = a["prompts"], a["group"], a["tokens"], 16
g = torch.Generator().manual_seed(1)
V = a["shape"]["vocab_size"]
gen = SimpleNamespace(tokens=torch.randint(0, V, (P * G, T), generator=g), present=torch.ones(P * G, T, dtype=torch.bool),
                      sampled=torch.ones(P * G, T, dtype=torch.bool), logprobs=torch.full((P * G, T), -11.9))
ro = SimpleNamespace(gen=gen, correct=torch.zeros(P, G), prompt_ids=torch.randint(0, V, (P, W), generator=g),
                     prompt_mask=torch.ones(P, W, dtype=torch.long))
recipe = SimpleNamespace(loss=partial(cispo_loss, cfg=CispoConfig()), aggregate=partial(prompt_mean, cfg=None),
                         needs_old_logp=False)
dist = SimpleNamespace(rank=0, world=1, device=torch.device("cpu"), mesh=None, all_sum=lambda x: x, all_cat=lambda x: x)
adv = torch.randn(P, G, generator=g)
phases = {}
real_step = opt.step
def step_probe(*args, **kwargs):  # the forward/backward peak, then the optimizer step's own
    phases["fwd_bwd"] = rss()[1]
    reset_peak()
    real_step(*args, **kwargs)
    phases["opt_step"] = rss()[1]
opt.step = step_probe
before = rss()[0]
reset_peak()
t0 = time.perf_counter()
out = policy_update(trainer, opt, params, ro, adv, torch.ones(P, dtype=torch.bool), recipe, minibatches=1, grad_clip=1.0,
                    temperature=1.0, rank_groups=slice(0, P), dist=dist, **kw)
wall = time.perf_counter() - t0
print(json.dumps({"n_params": n_params, "before": before, "peak": phases["fwd_bwd"], "step_peak": phases["opt_step"],
                  "wall_s": wall, "loss": out.get("loss"), "entropy": out.get("entropy")}))
'''

LOAD = COMMON + r'''
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
a = json.loads(sys.argv[1])
torch.set_num_threads(1)
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
from scalerl.models.policy import CompletionLogits
from scalerl.precision.base import linear_head
from scalerl.train.sharding import shard_trainer
from scalerl.models.load import load_checkpoint
if a["new"]:
    from scalerl.models.load import CheckpointUnits, build_empty
dist.barrier()
before = rss()[0]
reset_peak()
if a["new"]:
    model = build_empty(a["ckpt"], dtype=torch.float32)
    units = CheckpointUnits(a["ckpt"], model, dtype=torch.float32, device=torch.device("cpu"))
    trainer = CompletionLogits(model, linear_head(torch.float32))
    shard_trainer(trainer, mesh, compute_dtype=torch.float32, head_dtype=torch.float32, materialize=units.materialize)
else:
    model, _ = load_checkpoint(a["ckpt"], dtype=torch.float32, device=torch.device("cpu"))
    trainer = CompletionLogits(model, linear_head(torch.float32))
    shard_trainer(trainer, mesh, compute_dtype=torch.float32, head_dtype=torch.float32)
peak = rss()[1]
n_params = sum(p.numel() for p in trainer.parameters())
local = sum(p.to_local().numel() * 4 for p in trainer.parameters())
root = sum(p.numel() * 4 for n, p in trainer.named_parameters() if ".layers." not in n)
check = float(sum(p.to_local().double().abs().sum() for p in trainer.parameters()))
dist.barrier()
print("RESULT " + json.dumps({"rank": dist.get_rank(), "before": before, "peak": peak, "n_params": n_params,
                              "local_bytes": local, "root_bytes": root, "abs_sum": check}), flush=True)
dist.destroy_process_group()
'''


def child(code: str, args: dict, pythonpath: Path, *, torchrun: int = 0, env_extra: dict | None = None) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "OMP_NUM_THREADS": str(args.get("threads", 1)), **(env_extra or {})}
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(code)
    cmd = [sys.executable, f.name, json.dumps(args)]
    if torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={torchrun}", *cmd[1:]]
    proc = subprocess.run(cmd, cwd=pythonpath, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    lines = [ln.split("RESULT ", 1)[1] if "RESULT " in ln else ln for ln in proc.stdout.splitlines()]
    return [json.loads(ln) for ln in lines if ln.startswith("{")]


GB = 2**30


def run_step(ns) -> None:
    base = dict(shape={**QWEN2_05B, "num_hidden_layers": ns.layers}, prompts=ns.prompts, group=ns.group, threads=ns.threads,
                progress=ns.progress)
    rows = []
    if "old" in ns.sides:
        # --old-heap: the old side with the new side's allocator setting too (glibc's environment
        # twin of core/heap.py), to tell what the chunked path saves from what the setting saves.
        heap = {"MALLOC_MMAP_THRESHOLD_": "4194304"} if ns.old_heap else None
        old = [child(STEP, {**base, "tokens": t, "new": False}, Path(ns.old), env_extra=heap)[0] | {"tokens": t}
               for t in ns.old_tokens]
        for r in old:
            rows.append(("old", r["tokens"], "measured", r))
    if "new" in ns.sides:
        new = child(STEP, {**base, "tokens": ns.tokens, "new": True, "ckpt_layers": not ns.no_ckpt_layers,
                           "head_chunk": ns.head_chunk, "micro": ns.micro}, REPO)[0]
        rows.append(("new", ns.tokens, "measured", new))
    print(f"one step, {ns.prompts} prompts x {ns.group} completions; Qwen2-0.5B shape, fp32, {ns.threads} threads")
    print(f"{'side':5} {'T':>6} {'':10} {'peak GB':>8} {'16B/param GB':>13} {'activation GB':>14} {'AdamW step GB':>14} {'s':>7}")
    act = {}
    for side, t, how, r in rows:
        fixed = 16 * r["n_params"]
        act[(side, t)] = (r["peak"] - fixed) / GB
        print(f"{side:5} {t:6d} {how:10} {r['peak'] / GB:8.2f} {fixed / GB:13.2f} {act[(side, t)]:14.2f} "
              f"{r['step_peak'] / GB:14.2f} {r['wall_s']:7.1f}")
        print(f"      loss {r['loss']:.6f} entropy {r['entropy']:.4f}")
    if ("old", ns.tokens) in act and ("new", ns.tokens) in act:
        print(f"activation memory ratio old/new at T={ns.tokens}, both measured: "
              f"{act[('old', ns.tokens)] / act[('new', ns.tokens)]:.1f}x")
    elif "old" in ns.sides and len(ns.old_tokens) >= 2 and "new" in ns.sides:
        (t1, t2) = ns.old_tokens[:2]
        slope = (act[("old", t2)] - act[("old", t1)]) / (t2 - t1)
        old_at = act[("old", t1)] + slope * (ns.tokens - t1)
        print(f"old   {ns.tokens:6d} {'linear fit':10} {'':8} {'':13} {old_at:14.2f}   "
              f"({slope * 1024:.1f} MB per token of T, from T={t1},{t2})")
        print(f"activation memory ratio old/new at T={ns.tokens}: {old_at / act[('new', ns.tokens)]:.1f}x")


def run_load(ns) -> None:
    ckpt = Path(ns.ckpt)
    if not (ckpt / "model.safetensors").exists():
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        torch.manual_seed(0)
        Qwen2ForCausalLM(Qwen2Config(**QWEN2_05B)).to(torch.bfloat16).save_pretrained(ckpt, safe_serialization=True)
    print(f"start-up of {ns.world} gloo ranks, Qwen2-0.5B shape, bf16 checkpoint -> fp32 FSDP2 shards")
    sums = {}
    for side, path in (("old", Path(ns.old)), ("new", REPO)):
        if side not in ns.sides:
            continue
        res = sorted(child(LOAD, {"ckpt": str(ckpt), "new": side == "new"}, path, torchrun=ns.world), key=lambda r: r["rank"])
        for r in res:
            share, unit = 4 * r["n_params"] / ns.world, r["root_bytes"]
            rise = r["peak"] - r["before"]
            print(f"{side} rank {r['rank']}: peak above start {rise / GB:.2f} GB; share {share / GB:.2f} GB, largest unit "
                  f"{unit / GB:.2f} GB; bound 1.5 x share + unit = {(1.5 * share + unit) / GB:.2f} GB -> "
                  f"{rise / (1.5 * share + unit):.2f} of it")
        sums[side] = sum(r["abs_sum"] for r in res)
    if len(sums) == 2:
        print(f"same shards on both sides: sum |w| {sums['old']:.6e} vs {sums['new']:.6e}")


def run_padding(ns) -> None:
    """Padding fraction of one rank's minibatch: one forward padded to its longest row (before)
    against micro-batches of ``--micro`` padded tokens, longest rows first (after)."""
    import random

    from scalerl.train.update import micro_batches, padding_fraction

    rng = random.Random(0)
    budget = ns.micro or 32_768
    before, after, parts = [], [], []
    for _ in range(ns.steps):
        lengths = []
        for _ in range(ns.prompts):  # a prompt's difficulty sets its group's typical length
            typical = ns.median * rng.lognormvariate(0.0, 0.6)
            lengths += [min(ns.max_len, max(1, int(typical * rng.lognormvariate(0.0, 0.6)))) for _ in range(ns.group)]
        split = micro_batches(lengths, budget)
        before.append(padding_fraction(lengths, [list(range(len(lengths)))]))
        after.append(padding_fraction(lengths, split))
        parts.append(len(split))
    rows = ns.prompts * ns.group
    print(f"padding fraction, {ns.steps} minibatches of {ns.prompts} prompts x {ns.group} completions = {rows} rows; "
          f"lengths: per-prompt lognormal median {ns.median} (sigma 0.6) x per-sample lognormal (sigma 0.6), "
          f"truncated at {ns.max_len}")
    print(f"before (one forward, padded to the longest row): {sum(before) / len(before):.1%}")
    print(f"after  (micro_batch_tokens={budget}, longest first): {sum(after) / len(after):.1%} "
          f"in {sum(parts) / len(parts):.1f} micro-batches on average")


def write_hf_checkpoint(ckpt: Path) -> Path:
    """A random checkpoint of Qwen2-0.5B's shape (bf16 on disk, like real ones), with scalerl's char
    tokenizer (pad/bos/eos 0/1/2 in both), written once."""
    if (ckpt / "model.safetensors").exists():
        return ckpt
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from scalerl.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(**QWEN2_05B, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(ckpt, safe_serialization=True)
    tok.save_pretrained(ckpt)
    return ckpt


def tree_memory(root: int) -> tuple[int, dict[int, int]]:
    """(summed RSS of ``root`` and its descendants, {pid: VmHWM}) in bytes, now."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    rss, hwm, todo = 0, {}, [root]
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            f = dict(ln.split(":", 1) for ln in open(f"/proc/{pid}/status").read().splitlines() if ":" in ln)
        except OSError:
            continue
        if "VmRSS" in f:
            rss += int(f["VmRSS"].split()[0]) * 1024
            hwm[pid] = int(f["VmHWM"].split()[0]) * 1024
    return rss, hwm


def run_one_step(ns) -> None:
    ckpt = write_hf_checkpoint(Path(ns.ckpt))
    sides = [("new", REPO)] + ([("old", Path(ns.old))] if ns.old != str(REPO) else [])
    print(f"one RL step through the entry point, Qwen2-0.5B shape (random, {ckpt}), fp32 trainer, torch engine, "
          f"async=sync, {ns.prompts} prompts x {ns.group} completions x {ns.tokens} new tokens, {ns.threads} threads")
    for side, path in sides:
        if side not in ns.sides:
            continue
        out = Path(tempfile.mkdtemp(prefix=f"bench_run_{side}_"))
        cmd = [sys.executable, "-m", "scalerl.sweep", "model=hf", f"model.path={ckpt}", "generation=torch", "async=sync",
               "logger=none", "train.steps=1", f"batch.prompts={ns.prompts}", f"batch.generations={ns.group}",
               "batch.minibatches=1", "length=truncate", f"length.max_new_tokens={ns.tokens}", "filter=none",
               "train.eval_samples=1", "task.n_heldout=1",
               f"train.threads={ns.threads}", "train.temperature=1.0", f"hydra.run.dir={out}", *ns.overrides]
        env = {**os.environ, "PYTHONPATH": str(path), "SCALERL_NO_BAR": "1"}
        t0 = time.time()
        trace = open(out / "rss_trace.tsv", "w")
        proc = subprocess.Popen(cmd, cwd=path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        log: list[str] = []
        reader = threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True)
        reader.start()
        peak, peak_t, hwms = 0, 0.0, {}
        while proc.poll() is None:
            rss, hwm = tree_memory(proc.pid)
            hwms.update(hwm)
            if rss > peak:
                peak, peak_t = rss, time.time() - t0
            print(f"{time.time() - t0:.2f}\t{rss}", file=trace)
            time.sleep(0.02)
        reader.join()
        trace.close()
        for heavy in ("checkpoints", "final_policy"):  # a 0.5B run's are 9 GB: keep the trace and the rows
            shutil.rmtree(out / heavy, ignore_errors=True)
        if proc.returncode != 0:
            raise SystemExit(f"{side} failed ({proc.returncode}):\n{''.join(log)[-4000:]}")
        print(f"{side:4} ({path}): peak RSS of the tree {peak / 1e9:.2f} GB at {peak_t:.0f} s of {time.time() - t0:.0f} s; "
              f"largest VmHWM {max(hwms.values()) / 1e9:.2f} GB over {len(hwms)} process(es); trace {out / 'rss_trace.tsv'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["step", "load", "padding", "run"])
    ap.add_argument("--old", default=str(REPO), help="checkout for the old side")
    ap.add_argument("--sides", nargs="+", default=["old", "new"])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--old-tokens", type=int, nargs="+", default=[16, 40])
    ap.add_argument("--head-chunk", type=int, default=0)
    ap.add_argument("--micro", type=int, default=0, help="train.micro_batch_tokens on the new side")
    ap.add_argument("--no-ckpt-layers", action="store_true")
    ap.add_argument("--old-heap", action="store_true", help="step: the old side with a fixed 4 MiB mmap threshold too")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--ckpt", default="/tmp/qwen2-05b-shape")
    ap.add_argument("--layers", type=int, default=24, help="fewer for a smoke run (step only)")
    ap.add_argument("--progress", default="", help="step: a file the child appends its RSS to every 30 s")
    ap.add_argument("--steps", type=int, default=200, help="padding: minibatches drawn")
    ap.add_argument("--median", type=int, default=3000, help="padding: median completion length")
    ap.add_argument("--max-len", type=int, default=16_384, help="padding: generation budget (truncation)")
    ap.add_argument("--overrides", nargs="*", default=[], help="run: more Hydra overrides")
    ns = ap.parse_args()
    if ns.what == "run" and ns.ckpt == "/tmp/qwen2-05b-shape":
        ns.ckpt = "/tmp/qwen2-05b-shape-hf"  # with a tokenizer: the entry point needs one
    {"step": run_step, "load": run_load, "padding": run_padding, "run": run_one_step}[ns.what](ns)


if __name__ == "__main__":
    main()
