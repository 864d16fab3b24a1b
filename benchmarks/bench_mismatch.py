"""The generator-trainer mismatch each precision option gives, with the generator's weights as a
serving engine holds them (``precision.generator_body=engine``, docs/mismatch.md).

    python benchmarks/bench_mismatch.py [--qwen] [--prompts 16] [--samples 4] [--new-tokens 24]
    python benchmarks/bench_mismatch.py --qwen --qwen-prompts 16 --qwen-new-tokens 16   # a larger Qwen-shape sample

For each option of the ``precision`` axis: the generator (its own copy of the weights, bf16-rounded,
its own head) samples ``--samples`` completions of ``--prompts`` prompts, then the trainer (fp32 body,
its own head) computes the same tokens' log-probs in one forward; the mismatch metrics
(``scalerl/correction/mismatch.py``) compare the two. Both sides hold the same weights: there is no
staleness, only numerics. Models: the embedded tiny model, warm-started (the default run's, from
SCALERL_CACHE), on the arithmetic task's prompts at the run's temperature 0.6; with ``--qwen`` also a
random-init model of Qwen2-0.5B's shape (896 wide, 24 layers, vocabulary 151936; ~2 GB per fp32 copy),
at temperature 1, on random token prompts. One thread; results in benchmarks/RESULTS.md.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from scalerl.correction.mismatch import mismatch_stats
from scalerl.generation import SamplingParams
from scalerl.generation.engines.torch_engine import TorchGenerator, left_pad
from scalerl.models.load import load_model
from scalerl.models.policy import CompletionLogits, Policy
from scalerl.precision import PRECISIONS

OPTIONS = {  # label: (option, settings), in the paper's expected order of mismatch
    "fp32 (no engine)": ("fp32", {}),
    "fp32_head": ("fp32_head", {"generator_body": "engine"}),
    "fp32_head, trainer side only": ("fp32_head", {"generator_body": "engine", "generator": False}),
    "fp32_head, generator side only": ("fp32_head", {"generator_body": "engine", "trainer": False}),
    "bf16": ("bf16", {"generator_body": "engine"}),
}


def measure(ckpt: Path, prompts: list[list[int]], *, option: str, settings: dict, samples: int, new_tokens: int,
            temperature: float, eos: int, pad: int, attn) -> dict:
    cpu = torch.device("cpu")
    opt = PRECISIONS[option]
    heads = opt.fn(torch.float32, cfg=opt.schema(**settings))
    trainer_model = load_model(ckpt, dtype=torch.float32, device=cpu, attn_implementation=attn)
    gen_model = load_model(ckpt, dtype=heads.gen_body_dtype or torch.float32, device=cpu, attn_implementation=attn)
    for m in (trainer_model, gen_model):
        m.eval()
    rounds = heads.gen_round_dtype not in (None, heads.gen_body_dtype or torch.float32)
    gen = TorchGenerator(Policy(gen_model, gen_head=heads.gen, train_head=heads.gen), cpu,
                         round_to=heads.gen_round_dtype if rounds else None)
    gen.load_weights(trainer_model.state_dict().items(), 0)  # the trainer's weights, as the engine holds them
    params = SamplingParams(max_new_tokens=new_tokens, eos_token_id=eos, pad_token_id=pad, temperature=temperature,
                            n=samples, seeds=torch.arange(len(prompts)))
    t0 = time.process_time()
    out = gen.generate(prompts, params)
    gen_s = time.process_time() - t0
    ids, mask = left_pad(prompts, pad, cpu)
    with torch.no_grad():
        logp, _ = CompletionLogits(trainer_model, heads.train)(ids, mask, out.tokens, out.present.long(), samples,
                                                               temperature=temperature)
    return {**mismatch_stats(logp[out.sampled], out.logprobs[out.sampled]), "gen_s": gen_s}


def bf16_activations_in_lean_decoder() -> None:
    """Round every matmul's input and output in the generator's lean decoder to bf16 (computed in
    fp32): the residual stream's updates, q, k, v, the attention and MLP outputs. Only the generator
    runs the lean decoder, so the trainer's side keeps fp32 activations, as with a real engine."""
    import types

    import torch.nn.functional as F

    from scalerl.models import lean

    def rnd(x):
        return x.to(torch.bfloat16).to(x.dtype)

    lean.F = types.SimpleNamespace(linear=lambda x, w: rnd(F.linear(rnd(x), w)), silu=F.silu)


def tiny_setup():
    from scalerl.config import compose, validate
    from scalerl.train.setup import prepare_checkpoint
    from scalerl.train.rollout import encode_prompt
    from scalerl.models.load import load_tokenizer

    cfg = validate(compose(["logger=none"]))
    task, ckpt = prepare_checkpoint(cfg, log=lambda *a, **k: None)
    tok = load_tokenizer(ckpt)
    return ckpt, tok, task, cfg.train.temperature, cfg.model.attn_implementation


def qwen_shape_checkpoint(root: Path) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, rope_theta=1e6, bos_token_id=0, eos_token_id=1)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(root)
    return root


def report(name: str, results: dict) -> None:
    print(f"\n{name}")
    print(f"{'option':34s} {'KL (k3)':>10s} {'|dlogp| mean':>12s} {'p99':>9s} {'max':>9s} {'out [.5,2]':>10s} {'tokens':>7s} {'gen CPU s':>9s}")
    for label, s in results.items():
        print(f"{label:34s} {s['mismatch_kl']:10.2e} {s['mismatch_abs_mean']:12.2e} {s['mismatch_abs_p99']:9.2e} "
              f"{s['mismatch_abs_max']:9.2e} {s['mismatch_out_frac']:10.4f} {s['mismatch_tokens']:7d} {s['gen_s']:9.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--qwen", action="store_true", help="also a random model of Qwen2-0.5B's shape")
    ap.add_argument("--qwen-prompts", type=int, default=4, help="its random prompts (2 samples of each)")
    ap.add_argument("--qwen-new-tokens", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=24)
    ap.add_argument("--acts", action="store_true", help="an experiment: the generator's lean decoder (the tiny "
                    "model's) also rounds every matmul's input and output to bf16, as a bf16 engine's activations")
    ap.add_argument("--body", default="engine", help="generator_body of every option but fp32: engine (bf16-rounded "
                    "weights, fp32 compute) or bfloat16 (bf16 weights and compute)")
    args = ap.parse_args()
    for label, (o, s) in OPTIONS.items():
        if "generator_body" in s:
            s["generator_body"] = args.body
    torch.set_num_threads(1)
    if args.acts:
        bf16_activations_in_lean_decoder()
    ckpt, tok, task, temperature, attn = tiny_setup()
    from scalerl.train.rollout import encode_prompt

    prompts = [encode_prompt(tok, p.prompt) for p in task.train[: args.prompts]]
    kw = dict(samples=args.samples, new_tokens=args.new_tokens, eos=tok.eos_token_id, pad=tok.pad_token_id)
    report(f"tiny (warm-started), {args.prompts} prompts x {args.samples}, temperature {temperature}",
           {label: measure(ckpt, prompts, option=o, settings=s, temperature=temperature, attn="eager", **kw)
            for label, (o, s) in OPTIONS.items()})
    if args.qwen:
        with tempfile.TemporaryDirectory() as d:
            qckpt = qwen_shape_checkpoint(Path(d))
            g = torch.Generator().manual_seed(1)
            prompts = [torch.randint(2, 151936, (16,), generator=g).tolist() for _ in range(args.qwen_prompts)]
            report(f"random Qwen2-0.5B shape, {args.qwen_prompts} prompts x 2, {args.qwen_new_tokens} new tokens,"
                   " temperature 1",
                   {label: measure(qckpt, prompts, option=o, settings=s, samples=2, new_tokens=args.qwen_new_tokens,
                                   temperature=1.0, eos=1, pad=1, attn="eager") for label, (o, s) in OPTIONS.items()})


if __name__ == "__main__":
    main()
