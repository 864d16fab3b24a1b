"""A vLLM-CPU engine taking pushes of a random model of Qwen2-0.5B's shape (bf16, 1.17 GB per push;
bench_memory.py / bench_push.py write the checkpoint to /tmp/qwen2-05b-shape): seconds per push
through each data plane (``generation.weight_transfer``), snapshot included.

    python benchmarks/bench_vllm_push.py gloo && python benchmarks/bench_vllm_push.py inline

Run the two one after the other (each starts its own engine); /usr/bin/time -f %M gives the
process's peak RSS.
"""
import sys, time, torch
from pathlib import Path
from scalerl.generation.engines.base import EngineContext
from scalerl.generation.engines.vllm_option import VLLMGenerationConfig, build_vllm_generator
from safetensors.torch import load_file

def main():
    ckpt = Path("/tmp/qwen2-05b-shape")
    ctx = EngineContext(policy=None, checkpoint=ckpt, device=torch.device("cpu"), body_dtype=torch.bfloat16,
                        head_dtype=None, seed=0)
    g = build_vllm_generator(ctx, cfg=VLLMGenerationConfig(kv_cache_gb=0.5, weight_transfer=sys.argv[1]))
    state = load_file(str(ckpt / "model.safetensors"))
    state = {k: v.clone() for k, v in state.items()}
    if "lm_head.weight" not in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    ts = []
    for v in range(1, 4):
        t = time.time()
        g.load_weights(state.items(), version=v)
        ts.append(time.time() - t)
    n = sum(t.numel() * t.element_size() for t in state.values())
    print(sys.argv[1], "GB", round(n / 2**30, 3), "push s", [round(x, 2) for x in ts])
    g.close()

if __name__ == "__main__":
    main()
