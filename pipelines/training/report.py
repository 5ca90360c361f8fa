"""What an analyst reads in MLflow: metrics on a test slice, reliability and importance plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from models import metrics


def logged_grades(frame: pd.DataFrame) -> np.ndarray:
    """Design grades 3/2/1/0 for logged impressions (rated well / attended / no-show / nothing)."""
    return metrics.grade(frame["rsvped"].fillna(0), frame["attended"].fillna(0), frame["rating"])


def ndcg_per_request_on_logged(frame: pd.DataFrame, score: npt.ArrayLike, k: int = 25) -> pd.Series:
    """Graded NDCG@k of each logged request with a positive grade (``request_id``, ``rsvped``,
    ``attended``, ``rating``), indexed by request id."""
    df = pd.DataFrame(
        {
            "request_id": frame["request_id"].to_numpy(),
            "score": np.asarray(score, dtype=float),
            "grade": logged_grades(frame),
        }
    )
    return metrics.ndcg_per_group(df, "score", k=k)


def ndcg_on_logged(frame: pd.DataFrame, score: npt.ArrayLike, k: int = 25) -> float:
    """Mean graded NDCG@k over logged requests with a positive grade."""
    per = ndcg_per_request_on_logged(frame, score, k)
    return float(per.mean()) if len(per) else float("nan")


def probability_metrics(y: npt.ArrayLike, p: npt.ArrayLike, segments: npt.ArrayLike) -> dict[str, float]:
    """AUC, log-loss, ECE overall and per calibration segment, and the predicted/observed ratio."""
    y_arr = np.asarray(y, dtype=float)
    p_arr = np.asarray(p, dtype=float)
    seg = np.asarray(segments).astype(str)
    out = {
        "auc": metrics.auc(y_arr, p_arr),
        "log_loss": metrics.log_loss(y_arr, p_arr),
        "ece": metrics.ece(y_arr, p_arr),
        "predicted_over_observed": float(p_arr.mean() / y_arr.mean()) if y_arr.mean() > 0 else float("nan"),
        "score_std": float(p_arr.std()),
    }
    for name in np.unique(seg):
        mask = seg == name
        if mask.sum() >= 100:
            out[f"ece_{name.replace('|', '_')}"] = metrics.ece(y_arr[mask], p_arr[mask])
    return out


def reliability_plot(
    y: npt.ArrayLike, p: npt.ArrayLike, segments: npt.ArrayLike, title: str, path: Path
) -> pd.DataFrame:
    """Predicted vs observed per equal-mass bin, one line per segment; returns the table drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y_arr, p_arr = np.asarray(y, dtype=float), np.asarray(p, dtype=float)
    seg = np.asarray(segments).astype(str)
    tables = []
    fig, ax = plt.subplots(figsize=(6, 6))
    for name in ["all", *np.unique(seg)]:
        mask = np.ones(len(seg), bool) if name == "all" else seg == name
        if mask.sum() < 100:
            continue
        table = metrics.reliability_table(y_arr[mask], p_arr[mask], bins=10).assign(segment=name)
        tables.append(table)
        ax.plot(
            table["predicted"],
            table["observed"],
            marker="o",
            linewidth=2 if name == "all" else 1,
            label=f"{name} (n={int(mask.sum())})",
        )
    # Axes end just past the bins drawn, not at the largest single prediction, so the region
    # where the data lies fills the plot.
    drawn = (
        pd.concat(tables, ignore_index=True) if tables else pd.DataFrame({"predicted": [], "observed": []})
    )
    top = 1.1 * max(float(drawn["predicted"].max()), float(drawn["observed"].max())) if len(drawn) else 1.0
    top = min(max(top, 0.01), 1.0)
    ax.plot([0, top], [0, top], color="grey", linestyle="--", linewidth=1, label="perfect")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("predicted probability (bin mean)")
    ax.set_ylabel("observed rate")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def importance_plot(booster: Any, title: str, path: Path, top: int = 30) -> pd.DataFrame:
    """Total gain per feature (top ``top``), as a horizontal bar chart; returns the full table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = (
        pd.DataFrame(
            {
                "feature": booster.feature_name(),
                "gain": booster.feature_importance(importance_type="gain"),
                "splits": booster.feature_importance(importance_type="split"),
            }
        )
        .sort_values("gain", ascending=False)
        .reset_index(drop=True)
    )
    shown = table.head(top).iloc[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.25 * len(shown) + 1.5))
    ax.barh(shown["feature"], shown["gain"])
    ax.set_xlabel("total gain (sum of the loss reductions of the feature's splits)")
    ax.set_ylabel(f"feature (top {len(shown)} of {len(table)} by gain)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return table
