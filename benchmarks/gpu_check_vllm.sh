#!/usr/bin/env bash
# The vLLM section of the GPU check (benchmarks/gpu_check.sh calls it; it also runs alone), for a
# machine with a CUDA GPU and the GPU build of vLLM (`pip install -e '.[vllm]'`). About 4-6 min (2-3 more with 2+ GPUs):
#   1. tests/test_vllm.py with the engine on the GPU: behaviour vs trainer log-probs (fp32, and bf16
#      body + fp32 head, at T=1 and 0.7), weight updates into the running engine, interruptions,
#      in-flight updates; the trainer side stays on the CPU, so this also checks cross-device parity;
#      and tests/test_vllm_pipeline.py's in-flight push into a vLLM generator process;
#   2. a 10-step run, `python -m scalerl.sweep generation=vllm async=sync train.device=cuda`, trainer and engine
#      sharing the GPU; then 6 steps of `async=pipeline_rl` (the vLLM generator process on the GPU after
#      the trainer's, or on the same one with a single GPU, hence gpu_memory_utilization=0.4);
#   3. benchmarks/bench_generation.py on the GPU: torch engine vs vLLM vs HF generate(), on the
#      embedded model and on a random Llama of width 1024 x 16 layers (decoding cost of a real body);
#   4. vLLM's own nccl data plane (generation.weight_transfer=nccl, scalerl/generation/transfer/vllm_nccl.py), on a
#      machine with 2+ GPUs (NCCL pairs distinct devices; with one GPU it is recorded as skipped): the
#      CPU-side tests of its wire format and handshakes, a push from the trainer on cuda:0 into a vLLM
#      generator process on cuda:1 checked on log-probs (tests/test_vllm_pipeline.py -k nccl), and 6 steps
#      of `async=pipeline_rl generation.weight_transfer=nccl` through the entry point. Written without a
#      GPU: never run yet.
# Writes OUT_DIR/gpu_check_vllm.json (and the logs next to it). Without vLLM or a GPU it writes
# {"status": "skipped", "reason": ...} and exits 0, so gpu_check.sh can always call it.
#
#   bash benchmarks/gpu_check_vllm.sh [OUT_DIR]     # default: $OUT if set, else benchmarks/gpu_results
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=${1:-${OUT:-benchmarks/gpu_results}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} SCALERL_CACHE=${SCALERL_CACHE:-/tmp/scalerl-gpu-cache}
export SCALERL_TEST_CACHE=$SCALERL_CACHE SCALERL_NO_BAR=1 WANDB_MODE=disabled HYDRA_FULL_ERROR=1
t0=$(date +%s)
log() { echo "[gpu_check_vllm $(( $(date +%s) - t0 ))s] $*"; }
json() { python - "$out/gpu_check_vllm.json" "$@" <<'PY'
import json, sys
path, status, reason = sys.argv[1], sys.argv[2], sys.argv[3]
json.dump({"status": status, "reason": reason}, open(path, "w"), indent=1)
PY
}

reason=$(python - <<'PY' 2>&1
import importlib.util, sys
if importlib.util.find_spec("vllm") is None:
    sys.exit("vLLM is not installed (pip install -e '.[vllm]')")
import torch
if not torch.cuda.is_available():
    sys.exit("no CUDA device visible")
import vllm
print(f"vllm {vllm.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
PY
) || { log "skipped: $reason"; json skipped "$reason"; exit 0; }
log "$reason"

log "1. tests/test_vllm.py tests/test_vllm_pipeline.py"
timeout 600 python -m pytest -q -rs -s -o addopts="" -p no:cacheprovider tests/test_vllm.py tests/test_vllm_pipeline.py -k "not end_to_end and not nccl" \
  --junitxml="$out/vllm_tests.xml" > "$out/vllm_tests.log" 2>&1
tests_rc=$?
grep -E "dlogp|passed|failed" "$out/vllm_tests.log" | grep -v "^(" | tail -n 12

log "2. 10 steps of python -m scalerl.sweep generation=vllm on the GPU"
run_out=$out/vllm_run && rm -rf "$run_out"
SCALERL_OUTPUT=$run_out timeout 600 python -m scalerl.sweep generation=vllm async=sync train.device=cuda train.steps=10 \
  train.eval_every=5 logger=none > "$out/vllm_run.log" 2>&1
run_rc=$?
tail -n 3 "$out/vllm_run.log"
SCALERL_OUTPUT=$run_out timeout 600 python -m scalerl.sweep generation=vllm async=pipeline_rl async.max_lag=2 \
  generation.gpu_memory_utilization=0.4 train.device=cuda train.steps=6 train.eval_every=3 logger=none \
  > "$out/vllm_pipeline_run.log" 2>&1
run_rc=$(( run_rc | $? ))
tail -n 3 "$out/vllm_pipeline_run.log"

log "3. generation throughput"
timeout 600 python benchmarks/bench_generation.py --device cuda --reps 3 > "$out/vllm_bench_tiny.log" 2>&1
bench_rc=$?
timeout 600 python benchmarks/bench_generation.py --device cuda --reps 3 --hidden 1024 --layers 16 --heads 16 \
  > "$out/vllm_bench_1024.log" 2>&1
bench_rc=$(( bench_rc | $? ))
grep "^|\|^model" "$out"/vllm_bench_*.log

gpus=$(python -c "import torch; print(torch.cuda.device_count())")
nccl_rc=0
if [ "$gpus" -ge 2 ]; then
  log "4. vLLM's nccl data plane: tests, then 6 steps of async=pipeline_rl generation.weight_transfer=nccl"
  timeout 600 python -m pytest -q -rs -s -o addopts="" -p no:cacheprovider tests/test_vllm_nccl.py tests/test_vllm_pipeline.py -k "nccl" \
    --junitxml="$out/vllm_nccl_tests.xml" > "$out/vllm_nccl_tests.log" 2>&1
  nccl_rc=$?
  grep -E "nccl plane|passed|failed|SKIPPED" "$out/vllm_nccl_tests.log" | tail -n 6
  nccl_out=$out/vllm_nccl_run && rm -rf "$nccl_out"
  SCALERL_OUTPUT=$nccl_out timeout 600 python -m scalerl.sweep generation=vllm async=pipeline_rl async.max_lag=2 \
    generation.weight_transfer=nccl generation.gpu_memory_utilization=0.4 train.device=cuda train.steps=6 \
    train.eval_every=3 logger=none > "$out/vllm_nccl_run.log" 2>&1
  nccl_rc=$(( nccl_rc | $? ))
  tail -n 3 "$out/vllm_nccl_run.log"
else
  log "4. vLLM's nccl data plane: skipped, it needs 2 GPUs and this machine has $gpus"
fi

python - "$out" "$tests_rc" "$run_rc" "$bench_rc" "$nccl_rc" "$gpus" "$(( $(date +%s) - t0 ))" <<'PY'
import json, sys
from pathlib import Path
out, tests_rc, run_rc, bench_rc, nccl_rc, gpus, seconds = Path(sys.argv[1]), *map(int, sys.argv[2:])
steps = [json.loads(l) for p in (out / "vllm_run").rglob("steps.jsonl") for l in p.read_text().splitlines() if l]
nccl_steps = [json.loads(l) for p in (out / "vllm_nccl_run").rglob("steps.jsonl") for l in p.read_text().splitlines() if l]
nccl_log = out / "vllm_nccl_tests.log"
nccl = {"status": "skipped", "reason": f"needs 2 GPUs, this machine has {gpus}"} if gpus < 2 else {
    "status": "ok" if nccl_rc == 0 else "failed", "rc": nccl_rc,
    "dlogp": [l.strip() for l in (nccl_log.read_text() if nccl_log.exists() else "").splitlines()
              if "nccl plane" in l and not l.startswith("(")],
    "run_logp_mismatch": [s.get("logp_mismatch") for s in nccl_steps],
    "run_push_time_s": [s.get("push_time_s") for s in nccl_steps]}
result = {
    "status": "ok" if tests_rc == run_rc == bench_rc == nccl_rc == 0 else "failed",
    "seconds": seconds,
    "tests_rc": tests_rc,
    "dlogp": [l.strip() for l in (out / "vllm_tests.log").read_text().splitlines() if "dlogp" in l and not l.startswith("(")],
    "run_rc": run_rc,
    "run_logp_mismatch": [s.get("logp_mismatch") for s in steps],
    "run_staleness_max": [s.get("staleness_max") for s in steps],
    "run_step_time_s": [s.get("step_time_s") for s in steps],
    "bench_rc": bench_rc,
    "bench": {p.stem: [l for l in p.read_text().splitlines() if l.startswith("|") or l.startswith("model")]
              for p in sorted(out.glob("vllm_bench_*.log"))},
    "nccl": nccl,
}
(out / "gpu_check_vllm.json").write_text(json.dumps(result, indent=1))
print(json.dumps({**{k: result[k] for k in ("status", "seconds", "tests_rc", "run_rc", "bench_rc")},
                  "nccl": nccl["status"]}))
PY
[ "$tests_rc" -eq 0 ] && [ "$run_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$nccl_rc" -eq 0 ]
