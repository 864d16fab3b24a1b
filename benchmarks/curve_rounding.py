"""How far RL's 20 stored steps move when every weight is rounded differently in its last bit: the
tolerance of the stored-curve test (tests/test_train.py) after step 0.

Another CPU kind runs other kernels (vector widths, FMA, summation order): its results differ from
this machine's in the last bits, and sampling turns a last-bit difference into another token now
and then. This starts the stored curve's run (same config, same seed) from the shipped warm start
with each weight moved by one float32 ulp in a random direction (``--seed`` picks the directions),
and prints its curve against the stored one:

    nice -n 10 python benchmarks/curve_rounding.py --seed 1

and, for scale, what a wrong setting moves (no perturbation; e.g. another normalizer):

    nice -n 10 python benchmarks/curve_rounding.py --seed -1 adv_norm=prompt
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import test_train  # noqa: E402  (the stored curve's config and recorder)
from scalerl.train import setup  # noqa: E402


def perturbed_copy(src: Path, dst: Path, seed: int) -> Path:
    shutil.copytree(src, dst)
    g = torch.Generator().manual_seed(seed)
    state = load_file(str(dst / "model.safetensors"))
    for k, w in state.items():
        step = torch.where(torch.rand(w.shape, generator=g) < 0.5, -torch.inf, torch.inf).to(w.dtype)
        state[k] = torch.nextafter(w, step)  # one ulp up or down
    save_file(state, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1, help="-1: no perturbation")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    real, copies = setup.prepare_start, []
    with tempfile.TemporaryDirectory() as d:
        def perturbed(cfg, log=print):
            task, ckpt, tok = real(cfg, log=log)
            copies.append(perturbed_copy(ckpt, Path(d) / "ckpt", args.seed))
            return task, copies[-1], tok

        if args.seed >= 0:
            setup.prepare_start = perturbed  # what the run's set-up calls for its checkpoint
        got = test_train.record_curve(Path(d) / "curve.json", *args.overrides)
    if args.seed >= 0 and not copies:  # a renamed set-up would otherwise run unperturbed, silently
        sys.exit("the run never called setup.prepare_start: nothing was perturbed")
    ref = json.loads(test_train.CURVE.read_text())
    print(f"seed {args.seed}, overrides {args.overrides}")
    print("| step | stored pass | this pass | diff | stored reward | this reward | diff |")
    print("|---|---|---|---|---|---|---|")
    for k in ("loss", "grad_norm"):
        a, b = ref[-1]["first_update"][k], got[-1]["first_update"][k]
        print(f"first update {k}: stored {a:.9g}, this {b:.9g}, relative difference {abs(b - a) / abs(a):.2e}")
    for g, r in zip(got[:-1], ref[:-1]):
        gr, rr = g.get("train_reward", 0.0), r.get("train_reward", 0.0)
        print(f"| {g['step']} | {r['pass_rate']:.4f} | {g['pass_rate']:.4f} | {g['pass_rate'] - r['pass_rate']:+.4f} "
              f"| {rr:.4f} | {gr:.4f} | {gr - rr:+.4f} |")


if __name__ == "__main__":
    main()
