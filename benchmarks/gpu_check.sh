#!/usr/bin/env bash
# Everything scalerl checks on a GPU, as one script for one GPU (about 3-5 min on an H100/H200; the
# budget is 8): the tests in tests/gpu (one RL step of the tiny model and of a random ~0.5B
# Qwen2-style model in bf16 with the fp32 head, sampler vs trainer log-probs, a sharded checkpoint
# round trip, a 2-rank FSDP2 run if 2 GPUs are visible), then benchmarks/gpu_bench.py (copy
# bandwidth, decode throughput at batch 256 against the memory-bandwidth bound, a training step's
# FLOP/s). Writes one JSON: OUT_DIR/gpu_check.json.
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
timeout 360 python -m pytest -q -rs -s -p no:cacheprovider tests/gpu --junitxml="$out/gpu_tests.xml" 2>&1 | tee "$out/gpu_tests.log"
tests_rc=${PIPESTATUS[0]}

# ------------------------------------------------------------------ 3. throughput
log "benchmarks/gpu_bench.py"
timeout 300 python benchmarks/gpu_bench.py --out "$out/gpu_bench.json" 2>&1 | tee "$out/gpu_bench.log"
bench_rc=${PIPESTATUS[0]}

# ------------------------------------------------------------------ 4. one JSON
python - "$out" "$tests_rc" "$bench_rc" "$(( $(date +%s) - t0 ))" <<'PY'
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path
import torch, transformers
out, tests_rc, bench_rc, seconds = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
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
result = {"ok": tests_rc == 0 and bench_rc == 0, "seconds": seconds, "torch": torch.__version__,
          "cuda": torch.version.cuda, "transformers": transformers.__version__,
          "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
          "tests_exit_code": tests_rc, "tests": tests, "bench_exit_code": bench_rc, "bench": bench}
(out / "gpu_check.json").write_text(json.dumps(result, indent=2))
print(json.dumps({k: v for k, v in result.items() if k != "bench"}, indent=2))
PY
log "wrote $out/gpu_check.json"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
