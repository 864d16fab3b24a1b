"""How often a policy opens the product scratchpad (``task.think_mul``, docs/embedded.md, "A miniature
whose ceiling the recipe decides") and how often that fork is right, against its direct answers.

    python benchmarks/product_fork.py task.think_mul=0.02                      # the warm start (step 0)
    python benchmarks/product_fork.py task.think_mul=0.02 --ckpt RUN/final_policy --samples 8
    python benchmarks/product_fork.py task.think_mul=0.25 --force-think   # the fork's completions, forced

Samples ``--samples`` completions of every held-out product (and, for scale, of as many held-out
additions) at the run's temperature (``train.temperature``, 0.6) with a 64-token budget and no length
control, from the config's warm start (built and cached under SCALERL_CACHE if needed) or ``--ckpt``
(an HF folder: a run's ``final_policy``). The generator computes in fp32 here, the run's in its
precision option: the shares can differ from a run's step-0 samples by a few tenths of a percent.
"""
from __future__ import annotations

import argparse
import json

import torch

from scalerl.generation import SamplingParams
from scalerl.generation.engines import TorchGenerator
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import Policy
from scalerl.precision.base import linear_head
from scalerl.tasks.rewards import exact_match_reward
from scalerl.train.rollout import decode_completions, encode_prompt


def fork_stats(texts: list[str], answers: list[str]) -> dict:
    """texts: completions (EOS stripped); answers: each one's right answer. The share that opens a thought,
    and the pass rate of those that do and of those that answer directly."""
    right = [exact_match_reward(t + "<eos>", a) == 1.0 for t, a in zip(texts, answers)]
    fork = [t.startswith("<think>") for t in texts]
    n_fork = sum(fork)
    return {"n": len(texts), "fork": n_fork / max(len(texts), 1), "n_fork": n_fork,
            "pass": sum(right) / max(len(texts), 1),
            "pass_fork": sum(r for r, f in zip(right, fork) if f) / n_fork if n_fork else None,
            "pass_direct": sum(r for r, f in zip(right, fork) if not f) / (len(texts) - n_fork)
            if len(texts) > n_fork else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. task.think_mul=0.02")
    ap.add_argument("--ckpt", default=None, help="an HF checkpoint folder (default: the config's warm start)")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--show", type=int, default=5, help="print this many forked product completions")
    ap.add_argument("--force-think", action="store_true",
                    help="append <think> to every prompt: how right the fork is when taken, however rare")
    args = ap.parse_args()
    from scalerl.config import compose, validate
    from scalerl.train.setup import prepare_checkpoint

    cfg = validate(compose(["logger=none", *args.overrides]))
    task, ckpt = prepare_checkpoint(cfg)
    ckpt = args.ckpt or ckpt
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    model, tok = load_checkpoint(ckpt, dtype=torch.float32, device=cpu)
    model.eval()
    gen = TorchGenerator(Policy(model, gen_head=linear_head(torch.float32), train_head=linear_head(torch.float32)), cpu)
    prefix = "<think>" if args.force_think else ""
    out = {"ckpt": str(ckpt), "temperature": cfg.train.temperature, "samples": args.samples,
           "force_think": args.force_think}
    for kind in ("mul2", "add3"):
        probs = [p for p in task.heldout if p.kind == kind]
        if kind != "mul2":
            probs = probs[: out["mul2"]["problems"]]
        texts, answers = [], []
        for start in range(0, len(probs), 32):
            chunk = probs[start:start + 32]
            params = SamplingParams(max_new_tokens=64, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                    temperature=cfg.train.temperature, n=args.samples,
                                    seeds=torch.arange(start, start + len(chunk)))
            with torch.no_grad():
                g = gen.generate([encode_prompt(tok, p.prompt + prefix) for p in chunk], params)
            texts += [prefix + t for t in decode_completions(tok, g)]
            answers += [p.answer for p in chunk for _ in range(args.samples)]
        out[kind] = {"problems": len(probs), **fork_stats(texts, answers)}
        if kind == "mul2":
            forked = [(t, a) for t, a in zip(texts, answers) if t.startswith("<think>")]
            for t, a in forked[: args.show]:
                print(f"  {a}: {t}")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
