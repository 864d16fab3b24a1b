#!/usr/bin/env bash
# Build the wheels that benchmarks/gpu_check.sh installs on a GPU machine without a package index.
#
#   bash benchmarks/gpu_wheels.sh [DIR]        # default: benchmarks/wheels (gitignored)
#
# Run it where pip can reach PyPI, in the environment the tests pass in: every package is pinned to
# the version installed here. The GPU machines this project gets have CUDA torch, transformers (with
# numpy, PyYAML, safetensors, tokenizers, packaging, filelock) and Python 3.12, and nothing of ours.
# What scalerl needs beyond that is pure Python, so these py3-none-any wheels (about 4 MB) install
# on any CPython 3.10+; antlr4-python3-runtime ships only an sdist, which pip builds into a wheel here.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-benchmarks/wheels}
mkdir -p "$out"
pins=$(python - <<'PY'
from importlib.metadata import version
names = ["hydra-core", "omegaconf", "antlr4-python3-runtime", "hydra-submitit-launcher", "submitit", "cloudpickle",
         "rich", "markdown-it-py", "mdurl", "pygments", "pytest", "iniconfig", "pluggy", "filelock"]
print(" ".join(f"{n}=={version(n)}" for n in names))
PY
)
echo "+ pip wheel --no-deps $pins"
python -m pip wheel --quiet --no-deps --wheel-dir "$out" $pins
not_pure=$(ls "$out" | grep -v -- '-py3-none-any.whl$' | grep -v -- '-py2.py3-none-any.whl$' || true)
[ -z "$not_pure" ] || { echo "not pure-Python, will not install on the GPU machine: $not_pure" >&2; exit 1; }
ls -l "$out"
echo "carry $out to the GPU machine with the repository, then: bash benchmarks/gpu_check.sh"
