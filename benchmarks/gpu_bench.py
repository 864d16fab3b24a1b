"""GPU throughput of the torch engine on a randomly initialised Qwen2-style ~0.5B model (bf16 body,
fp32 head, FSDP2 trainer on one rank). Run by ``benchmarks/gpu_check.sh``; needs CUDA.

    python benchmarks/gpu_bench.py --out results.json
    python benchmarks/gpu_bench.py --out smoke.json --smoke   # the script itself, on a CPU, tiny sizes

- ``copy_bandwidth_GBps``: a device-to-device copy of a 2 GiB buffer, bytes read + written per second.
- decode at batch 256 (256 prompts, ``--new-tokens`` tokens each, no early stop: a random model
  almost never samples EOS from 151,936 tokens): generated tokens per second, and that as a fraction
  of the memory-bandwidth bound, batch / (weight bytes / copy bandwidth) tokens per second (every
  decode step reads every body weight and the generator's head once; KV-cache reads are not
  counted, so the true bound is a little lower and the fraction a little pessimistic).
- a training step (one ``policy_update`` over ``--train-prompts`` x 16 completions, 2 minibatches):
  achieved FLOP/s = 6 N x trained tokens / seconds, and as a fraction of ``--peak-tflops``
  (H200 dense bf16: 989), with its peak memory (``torch.cuda.max_memory_allocated``), twice in
  the same run: ``train_step_before``, the trainer as it was before docs/trainer-memory.md (full
  (N, T, V) logits, no activation checkpointing), and ``train_step``, as ``model=hf`` runs now
  (the LM head in chunks, each decoder layer checkpointed; ``--micro-batch-tokens`` adds
  micro-batches). Both count 6 N per token: the recompute is not credited, so it lowers the MFU.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "gpu"))
from gpu_models import build_random_qwen2  # noqa: E402

from scalerl.config import compose, validate  # noqa: E402
from scalerl.generation import SamplingParams  # noqa: E402
from scalerl.train.distributed import init_distributed, shutdown  # noqa: E402
from scalerl.train.rollout import rollout  # noqa: E402
from scalerl.train.run_plan import plan_run, resolve  # noqa: E402
from scalerl.train.setup import build_run, prepare_start  # noqa: E402
from scalerl.train.update import policy_update  # noqa: E402


def timed(fn) -> float:
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def copy_bandwidth(device: str, gib: float = 2.0, reps: int = 10) -> float:
    src = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t = min(timed(lambda: dst.copy_(src)) for _ in range(reps))
    return 2 * src.numel() / t  # bytes read + written per second


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--train-prompts", type=int, default=8)
    ap.add_argument("--train-tokens", type=int, default=256)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--micro-batch-tokens", type=int, default=0, help="train.micro_batch_tokens of the 'after' step")
    ap.add_argument("--smoke", action="store_true", help="CPU, a 2-layer model, tiny sizes: checks the script only")
    a = ap.parse_args()
    device = "cpu" if a.smoke else "cuda"
    if a.smoke:
        a.batch, a.new_tokens, a.train_prompts, a.train_tokens = 8, 4, 2, 4
    res: dict = {"torch": torch.__version__, "smoke": a.smoke,
                 "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu"}
    bw = copy_bandwidth(device, gib=0.125 if a.smoke else 2.0)
    res["copy_bandwidth_GBps"] = bw / 1e9
    with tempfile.TemporaryDirectory() as d:
        path = build_random_qwen2(Path(d) / "qwen2", small=a.smoke)
        cfg = validate(compose(["logger=none", "model=hf", f"model.path={path}", f"train.device={device}",
                                "model.dtype=bfloat16",
                                "precision=fp32_head", "length=truncate", f"length.max_new_tokens={a.train_tokens}",
                                f"batch.prompts={a.train_prompts}", "batch.generations=16", "batch.minibatches=2"]))
        task, ckpt, tok = prepare_start(cfg)
        dist = init_distributed(torch.device(device), sharded=True)
        try:
            plan = plan_run(cfg, dist, resolve(cfg, torch.device(device), tok))
            r = build_run(plan, task, ckpt)
            res["n_params"] = r.n_params
            # ------------------------------------------------------------- decode
            # Bytes a decode step must read: every body weight and the head the generator uses (its own
            # fp32 copy here); the input embedding table is only gathered row by row.
            gen, head = r.policy.model, r.policy.head_weight
            emb = gen.get_input_embeddings().weight
            weight_bytes = sum(p.numel() * p.element_size() for p in gen.parameters() if p is not emb)
            if not any(head is p for p in gen.parameters() if p is not emb):
                weight_bytes += head.numel() * head.element_size()
            prompts = [[1] + [4 + (i * 7 + j) % 90 for j in range(16)] for i in range(a.batch)]
            params = SamplingParams(max_new_tokens=a.new_tokens, eos_token_id=2, pad_token_id=0, n=1,
                                    seeds=torch.arange(a.batch))
            r.generator.generate(prompts[:8], SamplingParams(max_new_tokens=8, eos_token_id=2, pad_token_id=0))  # warm-up
            box = {}
            t = timed(lambda: box.update(g=r.generator.generate(prompts, params)))
            prefill = timed(lambda: r.generator.generate(prompts, SamplingParams(max_new_tokens=1, eos_token_id=2,
                                                                                 pad_token_id=0)))
            generated = int(box["g"].present.sum())
            decode_s = max(t - prefill, 1e-9)
            bound = a.batch / (weight_bytes / bw)  # tokens/s if each step only read the weights once
            res["decode"] = {"batch": a.batch, "new_tokens": a.new_tokens, "generated_tokens": generated,
                             "seconds": t, "prefill_seconds": prefill, "tokens_per_s": generated / decode_s,
                             "weight_bytes": weight_bytes, "bandwidth_bound_tokens_per_s": bound,
                             "fraction_of_bound": generated / decode_s / bound}
            # -------------------------------------------------------------- train
            rank_groups = slice(0, a.train_prompts)
            ro = rollout(list(range(a.train_prompts)), rank_groups, task, group=16, seed=0, step=1,
                         draw_lengths=plan.recipe.draw_lengths, trains_on=plan.recipe.trains_on, refill_rounds=0, sampler=r.sampler,
                         generator=r.generator, tok=plan.sampling.tok, max_new_tokens=a.train_tokens, temperature=1.0,
                         device=dist.device)
            adv = torch.randn(a.train_prompts, 16, generator=torch.Generator().manual_seed(0))
            keep = torch.ones(a.train_prompts, dtype=torch.bool)

            from scalerl.models.policy import checkpoint_layers

            def step(micro: int):
                box["u"] = policy_update(r.trainer, r.optimizer, r.params, ro, adv, keep, plan.recipe, minibatches=2,
                                         grad_clip=1.0, temperature=1.0, rank_groups=rank_groups, dist=dist, micro_batch_tokens=micro)

            # before: one full-logits forward per minibatch, no checkpointing; after: model=hf's defaults.
            sides = {"train_step_before": (False, 10**12, 0), "train_step": (True, 0, a.micro_batch_tokens)}
            for key, (ckpt_layers, head_chunk, micro) in sides.items():
                checkpoint_layers(r.model, enabled=ckpt_layers)
                r.trainer.head_chunk = head_chunk
                if device == "cuda":
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                step(micro)  # warm-up (allocator, lazy FSDP init)
                t = min(timed(lambda: step(micro)) for _ in range(3))
                tokens = box["u"]["train_tokens"]
                flops = 6.0 * r.n_params * tokens
                res[key] = {"trained_tokens": tokens, "seconds": t, "tflops": flops / t / 1e12,
                            "fraction_of_peak": flops / t / 1e12 / a.peak_tflops, "peak_tflops": a.peak_tflops,
                            "activation_checkpointing": ckpt_layers, "head_chunk": head_chunk,
                            "micro_batch_tokens": micro, "loss": box["u"].get("loss"),
                            "max_memory_GiB": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None}
            res["train_step_memory_ratio"] = (res["train_step_before"]["max_memory_GiB"] / res["train_step"]["max_memory_GiB"]
                                              if device == "cuda" else None)
        finally:
            shutdown(dist)
    a.out.write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
