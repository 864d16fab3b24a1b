#!/usr/bin/env bash
# The README's main command as a new user meets it: a fresh clone, a fresh virtualenv, empty pip
# and model caches, then exactly the two steps the README gives (install, then the sweep), each
# timed. Prints the install's and the sweep's seconds and their sum, then the learning criteria
# of the user's command (docs/findings.md) from the sweep's own evals.
#
#     bash benchmarks/quickstart_fresh.sh [REPO] [SEEDS]   # REPO: a git repo to clone (default: this one)
#
# SEEDS (default 0) adds `seed=...` to the command, e.g. 0,1,2 for the criteria over three seeds;
# with the default the command is the README's, word for word.
set -euo pipefail
src=${1:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}
seeds=${2:-0}
work=$(mktemp -d /tmp/quickstart.XXXXXX)
git clone -q "$src" "$work/scalerl"
python3 -m venv "$work/venv"
# shellcheck disable=SC1091
. "$work/venv/bin/activate"
export PIP_CACHE_DIR="$work/pip-cache" SCALERL_CACHE="$work/model-cache" HF_HOME="$work/hf"
unset SCALERL_OUTPUT SCALERL_TEST_CACHE PYTHONPATH
cd "$work/scalerl"
echo "[quickstart] $(git rev-parse --short HEAD) in $work; load $(cut -d' ' -f1-3 /proc/loadavg)"

t0=$(date +%s.%N)
# pip's log goes to a file (its "Location ... ignored" warnings fill screens); its tail is shown if it fails.
{ pip install torch==2.13.0 && pip install -e '.[cpu]'; } > "$work/pip.log" 2>&1 || { tail -30 "$work/pip.log"; exit 1; }
t1=$(date +%s.%N)
if [ "$seeds" = 0 ]; then
  python -m scalerl.sweep -m loss=cispo,dapo,gspo
else
  python -m scalerl.sweep -m "seed=$seeds" loss=cispo,dapo,gspo
fi
t2=$(date +%s.%N)
echo "[quickstart] install $(python -c "print(round($t1-$t0))") s, sweep $(python -c "print(round($t2-$t1))") s," \
     "total $(python -c "print(round($t2-$t0))") s; load $(cut -d' ' -f1-3 /proc/loadavg)"
sweep=$(ls -d outputs/sweeps/*/ | head -1)
# --grid 1: the "log" rows are the sweep's own eval steps (the default schedule), unchanged.
python benchmarks/eval_schedule_ab.py "$sweep" --grid 1 | sed -n '/## The criteria/,$p' | grep -E '^\s+log|gain >=' | grep log
