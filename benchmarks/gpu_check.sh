#!/usr/bin/env bash
# Everything scalerl checks on a GPU, as one script for one GPU (about 3-5 min on an H100/H200; the
# budget is 8): the tests in tests/gpu (one RL step of the tiny model and of a random ~0.5B
# Qwen2-style model in bf16 with the fp32 head, sampler vs trainer log-probs, a sharded checkpoint
# round trip, a 2-rank FSDP2 run if 2 GPUs are visible), then the entry point itself on the GPU
# (`python -m scalerl.sweep train.device=cuda`, warm start included, for GPU_RUN_STEPS=40 steps
# with the recipe's pipeline_rl, with async=sync and with ppo_off_policy, killed and resumed, and a
# 2-arm local sweep whose arms must each get their own GPUs, scalerl/launch/gpus.py),
# then benchmarks/gpu_bench.py (copy bandwidth, decode throughput at batch 256 against the
# memory-bandwidth bound, a training step's FLOP/s and peak memory, before and after the trainer's
# memory work of docs/trainer-memory.md: targets 25 GiB and 25% MFU at 8 x 16 x 256). Writes one JSON: OUT_DIR/gpu_check.json;
# "ok" is true when all three passed.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]      # default: $OUT if set, else benchmarks/gpu_results
#
# Needs CUDA torch >= 2.6 and transformers. Whatever else is missing it installs from
# benchmarks/wheels/ (make it with benchmarks/gpu_wheels.sh where PyPI is reachable, and bring it
# along); it never uses the network. Without pip, the wheels are unpacked onto PYTHONPATH instead.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=${1:-${OUT:-benchmarks/gpu_results}}
mkdir -p "$out" && out=$(cd "$out" && pwd)
wheels=${SCALERL_WHEELS:-$repo/benchmarks/wheels}
export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} SCALERL_CACHE=${SCALERL_CACHE:-/tmp/scalerl-gpu-cache}
export SCALERL_NO_BAR=1 WANDB_MODE=disabled PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 HYDRA_FULL_ERROR=1
t0=$(date +%s)
GPU_RUN_STEPS=${GPU_RUN_STEPS:-40}
log() { echo "[gpu_check $(( $(date +%s) - t0 ))s] $*"; }

# ------------------------------------------------------------------ 1. what is missing
need="hydra-core omegaconf hydra-submitit-launcher submitit cloudpickle rich pytest filelock"
if python -c "import hydra, omegaconf, submitit, cloudpickle, rich, pytest, filelock, hydra_plugins.hydra_submitit_launcher" 2>/dev/null; then
  log "all Python dependencies present"
elif [ -d "$wheels" ] && python -m pip --version >/dev/null 2>&1; then
  log "installing the missing ones from $wheels"
  python -m pip install --quiet --no-index --find-links "$wheels" $need || { log "pip could not install from $wheels"; exit 2; }
elif [ -d "$wheels" ]; then
  log "no pip: unpacking $wheels onto PYTHONPATH"
  site=$out/site && mkdir -p "$site"
  for w in "$wheels"/*.whl; do python -m zipfile -e "$w" "$site"; done
  export PYTHONPATH=$PYTHONPATH:$site
else
  log "missing Python packages and no $wheels: run benchmarks/gpu_wheels.sh first"; exit 2
fi
python -c "import torch, transformers; assert torch.cuda.is_available(), 'no CUDA device visible'; \
print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, \
'gpus', torch.cuda.device_count(), torch.cuda.get_device_name(0))" || exit 2

# ------------------------------------------------------------------ 2. the GPU tests
log "tests/gpu"
timeout "${GPU_TESTS_TIMEOUT:-240}" python -m pytest -q -rs -s -o addopts="" -p no:cacheprovider tests/gpu --junitxml="$out/gpu_tests.xml" 2>&1 | tee "$out/gpu_tests.log"
tests_rc=${PIPESTATUS[0]}

# ------------------------------------------------------------------ 3. the entry point on CUDA
# The README's own command on the GPU, warm start included: the ScaleRL recipe as configured
# (pipeline_rl, its generator process on the same GPU, weights pushed across processes), then
# async=sync, then ppo_off_policy (batches generated ahead and kept in checkpoints), which is
# killed during its last eval (a fail point: SIGKILL, as kill -9) and relaunched: it resumes from
# its last sharded checkpoint, which for this schedule is a phase boundary (a sharded checkpoint
# does not hold the batches generated ahead; docs/async.md). The run directories stay outside
# OUT; the summary reads them.
runs=${SCALERL_GPU_RUNS:-/tmp/scalerl-gpu-runs}
rm -rf "$runs"
for mode in ${GPU_RUN_MODES:-pipeline_rl sync ppo_off_policy}; do
  cmd=(python -m scalerl.sweep logger=none train.device=cuda async=$mode train.steps=$GPU_RUN_STEPS
       train.eval_every=$(( GPU_RUN_STEPS / 2 )) hydra.run.dir="$runs/$mode")
  log "${cmd[*]}"
  : > "$out/run_$mode.log"
  if [ "$mode" = ppo_off_policy ]; then
    SCALERL_FAILPOINT=eval@$GPU_RUN_STEPS timeout "${GPU_RUN_TIMEOUT:-150}" "${cmd[@]}" >> "$out/run_$mode.log" 2>&1
    echo "[gpu_check] killed at eval@$GPU_RUN_STEPS (exit $?); relaunching" | tee -a "$out/run_$mode.log"
  fi
  timeout "${GPU_RUN_TIMEOUT:-150}" "${cmd[@]}" >> "$out/run_$mode.log" 2>&1
  echo $? > "$runs/$mode.rc"
  tail -n 4 "$out/run_$mode.log"
done

# ------------------------------------------------------------------ 3b. each arm its own GPUs
# A 2-arm local sweep (scalerl/launch/gpus.py): with N visible GPUs each arm gets N // 2 of its own in
# CUDA_VISIBLE_DEVICES (derived.json records it); with one GPU the arms take it in turn, never at once.
shares_out=$runs/shares
log "2-arm local sweep: each arm its own GPUs"
SCALERL_OUTPUT=$shares_out timeout "${GPU_RUN_TIMEOUT:-150}" python -m scalerl.sweep -m loss=cispo,dapo train.device=cuda \
  async=sync train.steps=4 train.eval_every=2 logger=none hydra.sweeper.n_boot=0 hydra.launcher.n_parallel=2 \
  study=gpu_shares > "$out/run_gpu_shares.log" 2>&1
echo $? > "$shares_out.rc.shares"
grep "GPUs per slot" "$out/run_gpu_shares.log"

# ------------------------------------------------------------------ 4. throughput
log "benchmarks/gpu_bench.py"
timeout "${GPU_BENCH_TIMEOUT:-240}" python benchmarks/gpu_bench.py --out "$out/gpu_bench.json" 2>&1 | tee "$out/gpu_bench.log"
bench_rc=${PIPESTATUS[0]}

# ------------------------------------------------------------------ 5. one JSON
python - "$out" "$tests_rc" "$bench_rc" "$(( $(date +%s) - t0 ))" "$runs" <<'PY'
import json, statistics, sys, xml.etree.ElementTree as ET
from pathlib import Path
import torch, transformers
out, tests_rc, bench_rc, seconds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = {}
for rc_file in sorted(Path(sys.argv[5]).glob("*.rc")):
    d, rc = rc_file.with_suffix(""), int(rc_file.read_text())
    rows = lambda name: [json.loads(l) for l in (d / name).read_text().splitlines()] if (d / name).exists() else []
    steps, evals = rows("steps.jsonl"), rows("metrics.jsonl")
    med = lambda k: statistics.median(s[k] for s in steps) if steps and k in steps[0] else None
    runs[d.name] = {"exit_code": rc, "steps": len(steps),
                    "eval_steps": [e["step"] for e in evals],
                    "pass_rate": {e["step"]: round(e["pass_rate"], 4) for e in evals},
                    "nonfinite": sum(s.get("nonfinite", 0) for s in steps),
                    "median_step_time_s": med("step_time_s"), "median_samples_per_s": med("samples_per_s"),
                    "median_logp_mismatch": med("logp_mismatch"), "mean_staleness": med("staleness_mean"),
                    "derived": json.loads((d / "derived.json").read_text()) if (d / "derived.json").exists() else None}
tests = []
if (out / "gpu_tests.xml").exists():
    for case in ET.parse(out / "gpu_tests.xml").iter("testcase"):
        status = "passed"
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                status = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                status += ": " + (node.get("message") or "")[:300]
                break
        tests.append({"test": case.get("name"), "seconds": float(case.get("time", 0)), "status": status})
bench = json.loads((out / "gpu_bench.json").read_text()) if (out / "gpu_bench.json").exists() else None
runs_ok = bool(runs) and all(r["exit_code"] == 0 and r["nonfinite"] == 0 for r in runs.values())
# each arm's GPUs: equal shares of the visible ones, disjoint when there are enough for both at once
shares_dir = Path(sys.argv[5]) / "shares"
rc_file = Path(str(shares_dir) + ".rc.shares")
seen = sorted((json.loads(p.read_text()).get("cuda_visible_devices") or "")
              for p in (shares_dir / "sweeps" / "gpu_shares").glob("*/derived.json"))
n_gpus = torch.cuda.device_count()
disjoint = len(set(",".join(seen).split(","))) == len(",".join(seen).split(",")) if n_gpus >= 2 else seen == ["0", "0"]
gpu_shares = {"exit_code": int(rc_file.read_text()) if rc_file.exists() else None, "visible": n_gpus,
              "cuda_visible_devices": seen, "ok": len(seen) == 2 and all(seen) and disjoint}
gpu_shares["ok"] = gpu_shares["ok"] and gpu_shares["exit_code"] == 0
runs_ok = runs_ok and gpu_shares["ok"]
result = {"ok": tests_rc == 0 and bench_rc == 0 and runs_ok, "seconds": seconds, "torch": torch.__version__,
          "cuda": torch.version.cuda, "transformers": transformers.__version__,
          "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
          "tests_exit_code": tests_rc, "tests": tests, "runs": runs, "gpu_shares": gpu_shares,
          "bench_exit_code": bench_rc, "bench": bench}
(out / "gpu_check.json").write_text(json.dumps(result, indent=2))
print(json.dumps({k: v for k, v in result.items() if k != "bench"}, indent=2))
if bench:  # the 0.5B training step before/after the trainer-memory work (docs/trainer-memory.md)
    for key in ("train_step_before", "train_step"):
        s = bench.get(key) or {}
        print(f"{key}: peak {s.get('max_memory_GiB')} GiB, MFU {s.get('fraction_of_peak')}, {s.get('seconds')} s")
PY
log "wrote $out/gpu_check.json"
python -c "import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))['ok'] else 1)" "$out/gpu_check.json"
