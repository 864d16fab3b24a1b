"""One RL step: scalerl vs TRL's GRPOTrainer, same tiny model, batch and task.

    python benchmarks/bench_step.py [--steps 6] [--rounds 4] [--threads 1] [--async pipeline_rl]

Both sides: the embedded warm-started tiny Llama, 16 prompts x 16 generations,
at most ``--max-new-tokens`` completion tokens (default: the default config's budget, 64, in
which the reasoning-shaped task thinks for about 40; 8 was the answers-only shape), T=1, CISPO-style loss with token aggregation and
per-group std normalization, no KL/reference model, one optimizer update per
generation batch, fp32 on CPU, the same torch thread count, in one process.
A "step" is generation + reward + loss + backward + AdamW. The sides take turns
in ``--rounds`` blocks of ``--steps`` steps (A-B, B-A, A-B, ...; the first step
of each block is discarded). Each round's ratio is TRL's median step over
scalerl's in that round, and the headline is the median of the rounds' ratios:
a shared VM drifts by tens of percent over a minute, so a ratio is only
meaningful between blocks run seconds apart.

Each side loads the checkpoint its own default way: scalerl with the tiny
model option's ``attn_implementation: auto`` (eager in fp32; then its generator
samples through ``scalerl/models/lean.py``), TRL with transformers' default (sdpa).
``--trl-attn eager`` gives TRL's model the same attention, to show how much
of the ratio is that choice.

``--async pipeline_rl`` runs scalerl's side as PipelineRL (arXiv 2510.13786
§3.1) on the same cores: one thread generates in its own process while the
others train, so a step's wall time is the slower of the two, not their sum.
That trainer learns from data up to ``max_lag`` (8) versions old, where TRL's
steps are on-policy; the comparison is one of throughput at the same batch.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from scalerl.config import compose, validate
from scalerl.core.jsonio import JsonlFile
from scalerl.train.loop import train
from scalerl.train.setup import prepare_checkpoint

OVERRIDES = ["logger=none", "loss=cispo", "aggregation=token", "adv_norm=prompt", "filter=none", "length=truncate",
             "precision=fp32", "batch.prompts=16", "batch.generations=16", "batch.minibatches=1", "train.eval_every=1000"]


def scalerl_step_times(steps: int, threads: int, mode: str = "sync", split: str | None = None,
                       overrides: tuple[str, ...] = ()) -> list[float]:
    extra = list(overrides)
    if mode == "pipeline_rl":  # threads: TRAINER+GENERATOR (default: the rest + 1)
        trainer, gen = map(int, (split or f"{max(1, threads - 1)}+1").split("+"))
        extra, threads = [*extra, f"async.generator_threads={gen}"], trainer + gen
    cfg = validate(compose([*OVERRIDES, f"async={mode}", *extra, f"train.steps={steps}", f"train.threads={threads}"]))
    with tempfile.TemporaryDirectory() as d:
        train(cfg, Path(d), run_name="bench", group="bench", config_dict={})
        return [r["step_time_s"] for r in JsonlFile(Path(d) / "steps.jsonl").rows()][1:]


def trl_step_times(steps: int, threads: int, model_path: Path, task, attn: str | None = None,
                   max_new_tokens: int = 8, temperature: float = 1.0, lr: float = 1.5e-4) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from scalerl.tasks.rewards import exact_match_reward

    torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(model_path)
    data = Dataset.from_dict({"prompt": [tok.bos_token + p.prompt for p in task.train],
                              "answer": [p.answer for p in task.train]})

    def reward(completions, answer, **_):
        return [exact_match_reward(c, a) for c, a in zip(completions, answer)]

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *a, **k):
            times.append(time.perf_counter() - self.t0)

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(output_dir=out, per_device_train_batch_size=256, gradient_accumulation_steps=1,
                          num_generations=16, max_completion_length=max_new_tokens, temperature=temperature, learning_rate=lr,
                          loss_type="cispo", beta=0.0, max_steps=steps, use_cpu=True, report_to=[],
                          logging_steps=10_000, save_strategy="no", bf16=False, seed=0, dataloader_num_workers=0,
                          disable_dropout=True)
        kw = {"attn_implementation": attn} if attn else {}
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, **kw)
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok,
                              callbacks=[Timer()])
        trainer.train()
    return times[1:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6, help="steps per block (plus one discarded)")
    ap.add_argument("--rounds", type=int, default=4, help="blocks per side, alternating A-B, B-A, ...")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--async", dest="mode", default="sync", choices=["sync", "pipeline_rl"])
    ap.add_argument("--split", default=None, help="pipeline_rl threads as TRAINER+GENERATOR (default: the rest+1)")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    help="a config override for scalerl's side (repeatable), e.g. train.length_buckets=1")
    ap.add_argument("--trl-attn", default=None, help="attn_implementation for TRL's model (default: transformers')")
    ap.add_argument("--max-new-tokens", type=int, default=None,
                    help="completion budget of both sides (default: the default config's length.max_new_tokens)")
    a = ap.parse_args()
    if a.max_new_tokens is None:
        a.max_new_tokens = validate(compose(OVERRIDES)).length.max_new_tokens
    OVERRIDES.append(f"length.max_new_tokens={a.max_new_tokens}")
    cfg = validate(compose(OVERRIDES))
    task, model_path = prepare_checkpoint(cfg)  # the warm-started tiny model
    skip = 0 if a.mode == "sync" else 2  # the pipeline's first steps wait for its generator to start streaming

    def ours() -> list[float]:
        return scalerl_step_times(a.steps + 1 + skip, a.threads, a.mode, a.split, tuple(a.overrides))[skip:]

    def theirs() -> list[float]:
        return trl_step_times(a.steps + 1, a.threads, model_path, task, a.trl_attn, a.max_new_tokens,
                              cfg.train.temperature, cfg.train.lr)

    rounds = []
    for r in range(a.rounds):
        first, second = (ours, theirs) if r % 2 == 0 else (theirs, ours)
        x, y = first(), second()
        s, t = (x, y) if first is ours else (y, x)
        rounds.append((statistics.median(s), statistics.median(t)))
        print(f"round {r + 1}: scalerl {rounds[-1][0] * 1000:6.1f} ms, TRL {rounds[-1][1] * 1000:6.1f} ms, "
              f"ratio {rounds[-1][1] / rounds[-1][0]:.2f}x", flush=True)
    ratios = [t / s for s, t in rounds]
    s, t = statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)
    split = f" {a.split}" if a.split and a.mode == "pipeline_rl" else ""
    split += f", TRL attn {a.trl_attn}" if a.trl_attn else ""
    print(f"scalerl  median step {s * 1000:8.1f} ms  (median of {a.rounds} blocks of {a.steps} steps)")
    print(f"TRL GRPO median step {t * 1000:8.1f} ms")
    print(f"ratio TRL/scalerl = {statistics.median(ratios):.2f}x  (median of the rounds' ratios "
          f"{min(ratios):.2f}-{max(ratios):.2f}; target >= 3x; threads={a.threads}, async={a.mode}{split}, "
          f"max_new_tokens={a.max_new_tokens}, "
          f"torch {torch.__version__})")


if __name__ == "__main__":
    main()
