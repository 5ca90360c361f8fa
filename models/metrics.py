"""Offline metrics: graded NDCG@25, Recall@25, AUC, log-loss, expected calibration error, and a
bootstrap interval for a statistic of paired test units."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pandas as pd

# Design grades: 3 attended and rated well, 2 attended, 1 RSVPed but no-show, 0 nothing.
# Gain 2^g - 1 makes them 7/3/1/0: a satisfied attendance is worth seven no-shows.
GOOD_RATING = 4


def grade(rsvped: npt.ArrayLike, attended: npt.ArrayLike, rating: npt.ArrayLike) -> np.ndarray:
    r = np.asarray(rsvped, dtype=bool)
    a = np.asarray(attended, dtype=bool)
    rating_arr = np.nan_to_num(np.asarray(rating, dtype=float), nan=0.0)
    return np.where(a & (rating_arr >= GOOD_RATING), 3, np.where(a, 2, np.where(r, 1, 0)))


def ndcg_per_group(
    frame: pd.DataFrame, score: str, grade_col: str = "grade", group: str = "request_id", k: int = 25
) -> pd.Series:
    """NDCG@k of each group (request) that has at least one positive grade."""
    df = frame[[group, score, grade_col]].copy()
    df["_gain"] = 2.0 ** df[grade_col].to_numpy(dtype=float) - 1.0
    df["_rank"] = df.groupby(group)[score].rank(method="first", ascending=False)
    df["_ideal"] = df.groupby(group)["_gain"].rank(method="first", ascending=False)
    disc = 1.0 / np.log2(df["_rank"].to_numpy() + 1.0)
    ideal_disc = 1.0 / np.log2(df["_ideal"].to_numpy() + 1.0)
    df["_dcg"] = np.where(df["_rank"] <= k, df["_gain"] * disc, 0.0)
    df["_idcg"] = np.where(df["_ideal"] <= k, df["_gain"] * ideal_disc, 0.0)
    per = df.groupby(group)[["_dcg", "_idcg"]].sum()
    per = per[per["_idcg"] > 0]
    return per["_dcg"] / per["_idcg"]


def ndcg_at_k(
    frame: pd.DataFrame, score: str, grade_col: str = "grade", group: str = "request_id", k: int = 25
) -> float:
    """Mean NDCG@k over requests that have at least one positive grade."""
    per = ndcg_per_group(frame, score, grade_col, group, k)
    return float(per.mean()) if len(per) else float("nan")


def bootstrap_interval(
    statistic: Callable[[np.ndarray], float],
    units: int,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``units`` test units drawn with replacement.

    ``statistic`` gets the drawn unit indices. For a paired comparison it measures both models on
    the same draw (e.g. the mean of per-request differences), so what the two share cancels.
    Resamples where the statistic is undefined (an AUC without a positive) are left out.
    """
    if units < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    values = np.array([statistic(rng.integers(0, units, units)) for _ in range(resamples)])
    values = values[np.isfinite(values)]
    if not len(values):
        return float("nan"), float("nan")
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def recall_at_k(frame: pd.DataFrame, score: str, label: str, group: str = "request_id", k: int = 25) -> float:
    """Share of positives ranked in the top k of their request (over requests with a positive)."""
    df = frame[[group, score, label]].copy()
    df["_rank"] = df.groupby(group)[score].rank(method="first", ascending=False)
    pos = df[df[label] > 0]
    return float((pos["_rank"] <= k).mean()) if len(pos) else float("nan")


def auc(y: npt.ArrayLike, p: npt.ArrayLike) -> float:
    from sklearn.metrics import roc_auc_score

    y_arr = np.asarray(y)
    return float(roc_auc_score(y_arr, p)) if 0 < y_arr.sum() < len(y_arr) else float("nan")


def log_loss(y: npt.ArrayLike, p: npt.ArrayLike) -> float:
    q = np.clip(np.asarray(p, dtype=float), 1e-7, 1 - 1e-7)
    y_arr = np.asarray(y, dtype=float)
    return float(-np.mean(y_arr * np.log(q) + (1 - y_arr) * np.log(1 - q)))


MIN_ROWS_PER_BIN = 200


def ece(y: npt.ArrayLike, p: npt.ArrayLike, bins: int = 15) -> float:
    """Expected calibration error over equal-mass bins (rare positives need equal-mass bins).

    At most ``bins`` bins, and no fewer than 200 rows per bin (but at least 5 bins): with 35 rows a
    bin's observed rate alone is off by ~0.08 at p=0.6, and ECE would measure that noise.
    """
    p_arr = np.asarray(p, dtype=float)
    y_arr = np.asarray(y, dtype=float)
    if len(p_arr) == 0:
        return float("nan")
    order = np.argsort(p_arr, kind="stable")
    n_bins = max(5, min(bins, len(order) // MIN_ROWS_PER_BIN))
    chunks = np.array_split(order, min(n_bins, len(order)))
    return float(sum(len(c) * abs(p_arr[c].mean() - y_arr[c].mean()) for c in chunks if len(c)) / len(p_arr))


def reliability_table(y: npt.ArrayLike, p: npt.ArrayLike, bins: int = 10) -> pd.DataFrame:
    """Predicted vs observed rate per equal-mass bin (what a reliability plot draws)."""
    p_arr = np.asarray(p, dtype=float)
    y_arr = np.asarray(y, dtype=float)
    order = np.argsort(p_arr, kind="stable")
    rows = [
        {"predicted": p_arr[c].mean(), "observed": y_arr[c].mean(), "n": len(c)}
        for c in np.array_split(order, min(bins, max(len(order), 1)))
        if len(c)
    ]
    return pd.DataFrame(rows)
