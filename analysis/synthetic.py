"""Synthetic reward-vs-compute curves with known parameters, to test and benchmark the fit.

Eval noise is binomial, as in the paper's held-out eval (§1: 1,000 prompts x 16 samples),
so a point's sd is sqrt(R (1 - R) / 16000), about 0.004.  Evals are evenly spaced in
compute (the paper evaluates every 100 steps), with the step-0 eval at compute 0.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.models import sigmoid

# paper Table 1 (§4): C_mid in GPU-h, B, A
TABLE1 = {
    "ScaleRL-768-14k": (2542.0, 1.92, 0.610),
    "ScaleRL-32k": (11272.0, 1.89, 0.645),
    "gens-8": (2542.0, 2.44, 0.585),
    "gens-24": (3054.0, 2.22, 0.590),
    "gens-32": (2936.0, 2.07, 0.595),
    "Scout-17Bx16": (4242.0, 1.65, 0.710),
    "batch-512": (2818.0, 1.77, 0.605),
    "batch-2048": (10909.0, 1.70, 0.645),
    "math+code-math": (2896.0, 2.05, 0.595),
    "math+code-code": (1675.0, 1.09, 0.615),
}
EVAL_SAMPLES = 1000 * 16


def simulate_curve(A, B, C_mid, R0=0.30, *, c_end=None, n_points=200, samples=EVAL_SAMPLES, rng=None,
                   wobble=0.0, rho=0.0):
    """(compute, reward, truth) for one run: step 0 plus `n_points` evenly spaced evals.

    c_end defaults to 4 C_mid, so the run shows both the rise and the plateau.
    wobble, rho: policy noise on top of the binomial eval noise, an AR(1) with sd `wobble` and
    lag-1 correlation `rho` between successive evals (a real run's pass rate drifts by
    +-0.02-0.03 over several evals: docs/embedded.md); 0 gives independent binomial noise only.
    """
    rng = np.random.default_rng(rng)
    c_end = 4.0 * C_mid if c_end is None else c_end
    compute = np.concatenate([[0.0], np.linspace(c_end / n_points, c_end, n_points)])
    truth = sigmoid(compute, A, B, C_mid, R0)
    reward = rng.binomial(samples, truth) / samples
    if wobble:
        drift = np.empty(compute.size)
        drift[0] = rng.normal(0.0, wobble)
        for k in range(1, compute.size):        # stationary AR(1): sd `wobble` at every eval
            drift[k] = rho * drift[k - 1] + np.sqrt(1 - rho**2) * rng.normal(0.0, wobble)
        reward = np.clip(reward + drift, 0.0, 1.0)
    return compute, reward, truth


def synthetic_sweep(n_runs=100, n_points=200, *, seed=0, samples=EVAL_SAMPLES, end=(3.0, 6.0),
                    wobble=0.0, rho=0.0):
    """Tidy points table of `n_runs` runs whose parameters jitter around Table 1's rows.

    Each run cycles through Table 1, multiplies C_mid and B by U(0.8, 1.25), shifts A by
    U(-0.02, 0.02), draws R0 in U(0.25, 0.40) and ends at U(*end) C_mid.  The truth is in
    the columns true_A, true_B, true_C_mid, true_R0 (constant per run).  wobble, rho: the
    AR(1) policy noise of `simulate_curve`.
    """
    rng = np.random.default_rng(seed)
    frames = []
    rows = list(TABLE1.items())
    for i in range(n_runs):
        name, (C_mid, B, A) = rows[i % len(rows)]
        C_mid *= rng.uniform(0.8, 1.25)
        B *= rng.uniform(0.8, 1.25)
        A += rng.uniform(-0.02, 0.02)
        R0 = rng.uniform(0.25, 0.40)
        compute, reward, _ = simulate_curve(A, B, C_mid, R0, c_end=rng.uniform(*end) * C_mid,
                                            n_points=n_points, samples=samples, rng=rng,
                                            wobble=wobble, rho=rho)
        frames.append(pd.DataFrame({
            "run": f"{i:03d}-{name}", "compute": compute, "reward": reward,
            "step": np.arange(compute.size) * 100, "recipe": name,
            "true_A": A, "true_B": B, "true_C_mid": C_mid, "true_R0": R0}))
    return pd.concat(frames, ignore_index=True)
