"""Calibration: the exact odds correction for negative sampling, and per-segment isotonic maps.

The score feeds an absolute threshold (the notification path, the feed's quality floor), so it
must be a real probability. Every step that distorts it carries its correction here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

EPS = 1e-7


def logit(p: npt.ArrayLike) -> np.ndarray:
    q = np.clip(np.asarray(p, dtype=float), EPS, 1 - EPS)
    return np.log(q / (1 - q))


def sigmoid(z: npt.ArrayLike) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.asarray(z, dtype=float)))


@dataclass(frozen=True)
class SamplingCorrection:
    """Undo what negative downsampling and negative injection did to the odds.

    Training saw ``keep_rate * N`` of the N natural negatives plus ``injected_per_negative * N``
    injected ones, so every predicted odds is off by the constant factor
    ``1 / (keep_rate + injected_per_negative)``. Injecting 25 random negatives per 100 natural
    ones (20% of all negatives) turns a true 0.30 into 0.255; multiplying the odds back by 1.25
    restores it exactly. Downsampling is the same identity with the sign flipped.
    """

    keep_rate: float = 1.0
    injected_per_negative: float = 0.0

    @property
    def odds_factor(self) -> float:
        return self.keep_rate + self.injected_per_negative

    def apply(self, p_trained: npt.ArrayLike) -> np.ndarray:
        """Probabilities in the natural (impression) population."""
        return sigmoid(logit(p_trained) + np.log(self.odds_factor))


@dataclass(frozen=True)
class IsotonicMap:
    """A fitted isotonic curve as plain data (thresholds), so it loads without pickle."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    def __call__(self, p: npt.ArrayLike) -> np.ndarray:
        return np.interp(np.asarray(p, dtype=float), self.x, self.y)


@dataclass(frozen=True)
class SegmentCalibrators:
    """One isotonic map per segment (e.g. free/paid x user history depth), with a global fallback."""

    maps: dict[str, IsotonicMap]
    fallback: IsotonicMap
    min_rows: int = 200
    counts: dict[str, int] = field(default_factory=dict)

    def __call__(self, p: npt.ArrayLike, segments: npt.ArrayLike) -> np.ndarray:
        p = np.asarray(p, dtype=float)
        seg = np.asarray(segments).astype(str)
        out = self.fallback(p)
        for name, curve in self.maps.items():
            mask = seg == name
            if mask.any():
                out[mask] = curve(p[mask])
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_rows": self.min_rows,
            "counts": self.counts,
            "fallback": {"x": list(self.fallback.x), "y": list(self.fallback.y)},
            "maps": {k: {"x": list(v.x), "y": list(v.y)} for k, v in self.maps.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SegmentCalibrators:
        def curve(d: dict[str, Any]) -> IsotonicMap:
            return IsotonicMap(tuple(d["x"]), tuple(d["y"]))

        return cls(
            maps={k: curve(v) for k, v in data["maps"].items()},
            fallback=curve(data["fallback"]),
            min_rows=int(data["min_rows"]),
            counts={k: int(v) for k, v in data.get("counts", {}).items()},
        )


def _fit_isotonic(p: np.ndarray, y: np.ndarray) -> IsotonicMap:
    """Centered isotonic regression: sklearn's isotonic fit, with one knot per constant block at
    the block's centroid, joined by straight lines.

    The plain fit is a staircase: on the 90-day quality bench the p_rsvp head's 16,621 test
    scores took 97 distinct values, and the feed broke the ties arbitrarily (92.1% of the
    oracle's expected attendance; 92.7% through the centroids, test ECE 0.0024 -> 0.0020). The
    block means are the same; only the flat steps between them become slopes.
    """
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(p, y)
    levels, block = np.unique(iso.predict(p), return_inverse=True)
    centers = np.bincount(block, weights=p) / np.bincount(block)  # increasing with the level
    x = np.concatenate([[p.min()], centers, [p.max()]])
    levels = np.concatenate([levels[:1], levels, levels[-1:]])
    keep = np.concatenate([[True], np.diff(x) > 0])  # a one-point end block repeats its x
    return IsotonicMap(tuple(float(v) for v in x[keep]), tuple(float(v) for v in levels[keep]))


def fit_segment_calibrators(
    p: npt.ArrayLike, y: npt.ArrayLike, segments: npt.ArrayLike, min_rows: int = 200
) -> SegmentCalibrators:
    """Fit isotonic maps per segment on a held-out slice; thin segments use the global map."""
    p_arr = np.asarray(p, dtype=float)
    y_arr = np.asarray(y, dtype=float)
    seg = np.asarray(segments).astype(str)
    counts = {str(s): int((seg == s).sum()) for s in np.unique(seg)}
    maps = {
        s: _fit_isotonic(p_arr[seg == s], y_arr[seg == s])
        for s, n in counts.items()
        if n >= min_rows and 0 < y_arr[seg == s].sum() < n
    }
    return SegmentCalibrators(
        maps=maps, fallback=_fit_isotonic(p_arr, y_arr), min_rows=min_rows, counts=counts
    )
