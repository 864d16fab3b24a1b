"""The ScaleRL compute-reward law and its power-law baseline, as pure functions.

Paper §1:  R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)
           R(C) = A - D / C^B          (power-law alternative, C >= C0)

Everything here is numpy in, numpy out, with no state; parameters broadcast, so a
(n_boot, 1) column of bootstrap parameters against a (n_points,) compute row gives a
(n_boot, n_points) band.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit


def sigmoid(compute, A, B, C_mid, R0):
    """Mean reward after `compute` units of RL compute under the ScaleRL law (paper §1).

    Written as R0 + (A - R0) * expit(-B * log(C_mid / C)), which is the same function
    but never overflows, and gives R0 exactly at C = 0.

    >>> float(sigmoid(2542.0, A=0.61, B=1.92, C_mid=2542.0, R0=0.2))   # (R0 + A) / 2 at C_mid
    0.405
    >>> float(sigmoid(0.0, A=0.61, B=1.92, C_mid=2542.0, R0=0.2))      # no compute: R0
    0.2
    """
    C = np.asarray(compute, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.asarray(B, dtype=float) * (np.log(C_mid) - np.log(C))
    return R0 + (np.asarray(A, dtype=float) - R0) * expit(-u)


def power_law(compute, A, D, B):
    """The power-law baseline A - D / C^B (paper §1); diverges to -inf at C = 0.

    >>> float(power_law(4.0, A=0.7, D=0.2, B=0.5))    # 0.7 - 0.2 / 2
    0.6
    """
    C = np.asarray(compute, dtype=float)
    with np.errstate(divide="ignore"):
        return A - D * C ** (-np.asarray(B, dtype=float))


def power_law_from_sigmoid(A, B, C_mid, R0):
    """(A, D, B) of the power law that the sigmoid tends to when C >> C_mid (paper §1).

    D = (A - R0) * C_mid^B.
    """
    return A, (A - R0) * C_mid**B, B


def guess(compute, reward, R0):
    """Starting values (A, B, C_mid) read off the data, lmfit-style.

    A is a little above the mean of the last three points. B and C_mid come from the
    straight line the sigmoid becomes under the logit transform:
    log((R - R0) / (A - R)) = B log C - B log C_mid.
    Falls back to B = 1 and the median compute when fewer than two points lie strictly
    between R0 and A.
    """
    C = np.asarray(compute, dtype=float)
    R = np.asarray(reward, dtype=float)
    keep = np.isfinite(C) & np.isfinite(R) & (C > 0)
    C, R = C[keep], R[keep]
    if C.size == 0:
        return float(min(max(R0, 0.0) + 0.1, 1.0)), 1.0, 1.0
    order = np.argsort(C)
    C, R = C[order], R[order]
    tail = float(np.mean(R[-3:]))
    A = float(np.clip(tail + 0.1 * max(tail - R0, 0.0) + 1e-3, R0 + 1e-3, 1.0))
    inside = (R > R0) & (R < A)
    if inside.sum() >= 2 and np.ptp(np.log(C[inside])) > 0:
        z = np.log((R[inside] - R0) / (A - R[inside]))
        slope, intercept = np.polyfit(np.log(C[inside]), z, 1)
        if slope > 0:
            return A, float(slope), float(np.exp(-intercept / slope))
    return A, 1.0, float(np.median(C))
