"""The embedded model's head layout: 3 heads of 32 (vLLM's CPU attention accepts it) vs the
former 4 heads of 24, same width and parameter count.

    python benchmarks/bench_tiny_heads.py [--reps 7]

One RL step's two halves on each layout, in one process, one thread, interleaved
(4, 3, 4, 3, ...) so drift hits both: a rollout (16 prompts x 16 samples, 8 new
tokens, the torch engine) and an update (forward + backward + AdamW over those
256 completions). Timed in CPU seconds of this process (``time.process_time``), so
other jobs on a shared machine do not count; medians over ``--reps`` after a
warm-up rep. Random-init weights: the cost of a step does not depend on them.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from scalerl.generation import SamplingParams
from scalerl.generation.engines.torch_engine import TorchGenerator, left_pad
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import Policy, token_logprobs
from scalerl.models.tiny import build_tiny_checkpoint
from scalerl.precision.base import linear_head

PROMPT = [1, 20, 21, 22, 15, 23, 24, 25, 33]  # BOS + "123+456=" in the char vocabulary's id range


def setup(heads: int, d: str):
    path = build_tiny_checkpoint(f"{d}/h{heads}", hidden_size=96, num_layers=3, num_heads=heads, intermediate_size=192,
                                 max_position_embeddings=256, seed=0)
    model, _ = load_checkpoint(path, dtype=torch.float32, device=torch.device("cpu"))
    head = linear_head(torch.float32)
    policy = Policy(model, gen_head=head, train_head=head)
    return policy, torch.optim.AdamW(model.parameters(), lr=1e-4)


def one_step(policy, opt) -> tuple[float, float]:
    prompts = [PROMPT] * 16
    p = SamplingParams(max_new_tokens=8, eos_token_id=2, pad_token_id=0, n=16)
    t0 = time.process_time()
    g = TorchGenerator(policy, torch.device("cpu")).generate(prompts, p, torch.Generator().manual_seed(0))
    t1 = time.process_time()
    ids, mask = left_pad(prompts, 0, torch.device("cpu"))
    logp = token_logprobs(policy.completion_logits(ids, mask, g.tokens, g.present.long(), group=16), g.tokens)
    opt.zero_grad()
    (-(logp * g.sampled).sum()).backward()
    opt.step()
    return t1 - t0, time.process_time() - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        runs = {h: setup(h, d) for h in (4, 3)}
        times: dict[int, list[tuple[float, float]]] = {4: [], 3: []}
        for rep in range(args.reps + 1):
            for h, (policy, opt) in runs.items():
                t = one_step(policy, opt)
                if rep:
                    times[h].append(t)
    med = {h: (statistics.median(a for a, _ in ts), statistics.median(b for _, b in ts)) for h, ts in times.items()}
    print("| layout | rollout (CPU ms) | update (CPU ms) | step (CPU ms) |")
    print("|---|---|---|---|")
    for h, label in ((4, "4 heads of 24"), (3, "3 heads of 32")):
        print(f"| {label} | {med[h][0] * 1e3:.1f} | {med[h][1] * 1e3:.1f} | {sum(med[h]) * 1e3:.1f} |")
    print(f"ratio (3 heads / 4 heads), whole step: {sum(med[3]) / sum(med[4]):.3f}")


if __name__ == "__main__":
    main()
