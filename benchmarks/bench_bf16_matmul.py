"""What a bf16 generator costs on this CPU: the generator's matmuls in bf16 against fp32.

    python benchmarks/bench_bf16_matmul.py [--reps 15]

A serving engine samples from bf16 weights with bf16 kernels. On a CPU without native bf16
(no AVX512_BF16 / AMX) torch emulates bf16 matmuls, and the embedded default's generator would
then be slower than its fp32 trainer. Timed here: y = x @ W^T for the shapes of one decoding step
of the embedded tiny model (256 rows: 16 prompts x 16 samples) and of Qwen2-0.5B's shape (64 rows),
in fp32, in bf16, and in fp32 on bf16-rounded weights (what ``precision.generator_body=engine``
computes when bf16 is too slow, docs/mismatch.md). One thread, CPU seconds of this process,
median over ``--reps`` after a warm-up.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

SHAPES = {  # name: (rows, in, out), the largest matmuls of one decoding step
    "tiny qkv/o (256x96 @ 96x96)": (256, 96, 96),
    "tiny mlp (256x96 @ 96x192)": (256, 96, 192),
    "tiny head (256x96 @ 96x32)": (256, 96, 32),
    "qwen2-0.5b mlp (64x896 @ 896x4864)": (64, 896, 4864),
    "qwen2-0.5b head (64x896 @ 896x151936)": (64, 896, 151936),
}


def cpu_time(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"{'shape':42s} {'fp32 ms':>9s} {'bf16 ms':>9s} {'bf16/fp32':>9s} {'rounded ms':>10s}")
    for name, (n, k, m) in SHAPES.items():
        x, w = torch.randn(n, k), torch.randn(m, k) / k**0.5
        xb, wb = x.bfloat16(), w.bfloat16()
        wr = wb.float()  # bf16-rounded weights, fp32 arithmetic
        reps = args.reps if m < 10000 else max(3, args.reps // 5)
        f32 = cpu_time(lambda: torch.nn.functional.linear(x, w), reps)
        b16 = cpu_time(lambda: torch.nn.functional.linear(xb, wb), reps)
        rnd = cpu_time(lambda: torch.nn.functional.linear(x, wr), reps)
        print(f"{name:42s} {f32 * 1e3:9.3f} {b16 * 1e3:9.3f} {b16 / f32:9.2f} {rnd * 1e3:10.3f}")


if __name__ == "__main__":
    main()
