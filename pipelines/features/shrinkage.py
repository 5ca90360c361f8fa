"""Empirical-Bayes shrinkage: blend a sparse rate toward its parent by n / (n + m), m fitted from data.

The design (Features: "Time: memorize the calendar") asks for a pseudocount fitted per level from
the ratio of within-cell to between-cell variance, not one shared constant: 200 observations and
3 observations need completely different amounts of help.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

# Bounds keep a degenerate level (one group, or no between-group variance) from producing an
# infinite or zero pseudocount.
MIN_PSEUDOCOUNT = 0.5
MAX_PSEUDOCOUNT = 10_000.0


def fit_pseudocount(successes: npt.ArrayLike, trials: npt.ArrayLike) -> float:
    """Method-of-moments beta-binomial fit: the pseudocount m = (1 - rho) / rho.

    With groups i of n_i trials and k_i successes around a pooled rate p, the intra-class
    correlation rho satisfies sum n_i (r_i - p)^2 ~= p (1 - p) [G + rho (N - G)]
    (G groups, N trials): between-group spread beyond binomial noise is what rho measures.

    Sums are exact (``math.fsum``), so the fit does not depend on the order the groups arrive in:
    Spark returns them in an order that differs between a local session and a cluster, and a
    float sum in that order made gold differ in the last bit between the two (and the p_rsvp
    model trained on it differ).
    """
    k = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    keep = n > 0
    k, n = k[keep], n[keep]
    return pseudocount_from_sums(len(n), math.fsum(n), math.fsum(k), math.fsum(k * k / n))


def pseudocount_from_sums(groups: float, trials: float, successes: float, squares: float) -> float:
    """``fit_pseudocount`` from four sums over the groups with n > 0: how many (G), sum n (N),
    sum k (K) and sum k^2 / n (Q). The spread sum n (k/n - p)^2 is Q - p K.

    Sums are all the fit needs, so Spark can compute them for many populations at once (one per
    UTC day, ``transforms.daily_pseudocounts``) and hand over a few numbers per day.
    """
    if groups < 2 or trials <= groups:
        return MAX_PSEUDOCOUNT
    p = successes / trials
    if p <= 0.0 or p >= 1.0:
        return MAX_PSEUDOCOUNT
    spread = squares - p * successes
    rho = (spread / (p * (1 - p)) - groups) / (trials - groups)
    if rho <= 0:
        return MAX_PSEUDOCOUNT
    return float(np.clip((1 - rho) / rho, MIN_PSEUDOCOUNT, MAX_PSEUDOCOUNT))


def shrink(successes: npt.ArrayLike, trials: npt.ArrayLike, prior: npt.ArrayLike, m: float) -> np.ndarray:
    """(k + m * prior) / (n + m): a level keeps n / (n + m) of its own estimate."""
    k = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    return (k + m * np.asarray(prior, dtype=float)) / (n + m)
