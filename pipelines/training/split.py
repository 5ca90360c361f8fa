"""Temporal split of a training set (design: "Training": the split must be temporal).

The label window is cut into train | calibration | test at two fractions of its length (so the
boundaries are known before any row is built, and negatives are downsampled only where they
train). For the rsvp head the test slice keeps
only rows of events created after the training slice ended, so no event has a row on both sides
of the boundary: a validation row is never scored with knowledge of its own event's popularity.
Injected negatives (never-impressed hard zeros) stay in training only; calibration and test are
natural impressions, the population the calibrated probability must describe.

A random split is computed only as a leakage diagnostic (``random_split``), never to select.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Split:
    train: np.ndarray  # boolean masks over the frame's rows
    calibration: np.ndarray
    test: np.ndarray
    calibration_start: pd.Timestamp
    test_start: pd.Timestamp

    def sizes(self) -> dict[str, int]:
        return {
            "train": int(self.train.sum()),
            "calibration": int(self.calibration.sum()),
            "test": int(self.test.sum()),
        }


def split_boundaries(
    start: datetime, label_end: datetime, calibration_start: float, test_start: float
) -> tuple[datetime, datetime]:
    """The instants where calibration and test begin, as fractions of [start, label_end)."""
    if not 0 < calibration_start < test_start < 1:
        raise ValueError("need 0 < calibration_start < test_start < 1")
    span = label_end - start
    return start + span * calibration_start, start + span * test_start


def temporal_split(
    frame: pd.DataFrame, calibration_start: datetime, test_start: datetime, new_events_only: bool = True
) -> Split:
    """Masks for the three slices; see the module docstring for the rules.

    ``new_events_only=False`` keeps test rows of events created before training ended: for the
    attend head, whose rows are RSVPs (a few per event, not hundreds of impressions), the rule
    leaves almost nothing to test on a month of history.
    """
    t = (
        (pd.to_datetime(frame["event_timestamp"], utc=True) - pd.Timestamp(0, tz="UTC"))
        .dt.total_seconds()
        .to_numpy()
    )
    b1, b2 = calibration_start.timestamp(), test_start.timestamp()
    natural = frame["is_injected"].to_numpy() == 0
    created = frame["event_created_ts"].to_numpy(dtype=float)
    train = t < b1
    calibration = (t >= b1) & (t < b2) & natural
    test = (t >= b2) & natural & ((created >= b1) | (not new_events_only))
    split = Split(train, calibration, test, pd.Timestamp(calibration_start), pd.Timestamp(test_start))
    for name, n in split.sizes().items():
        if n == 0:
            raise ValueError(f"temporal split left the {name} slice empty: {split.sizes()}")
    return split


def random_split(frame: pd.DataFrame, pool: np.ndarray, seed: int, valid_share: float = 0.2) -> Split:
    """The leaky split, over the same rows as ``pool``: for the diagnostic only."""
    rng = np.random.default_rng(seed)
    u = rng.random(len(frame))
    natural = frame["is_injected"].to_numpy() == 0
    valid = pool & (u < valid_share)
    train = pool & ~valid
    # Early stopping needs its own slice: a tenth of the random training rows.
    stop = train & (u >= 1 - 0.1 * (1 - valid_share)) & natural
    return Split(train & ~stop, stop, valid & natural, pd.Timestamp(0, tz="UTC"), pd.Timestamp(0, tz="UTC"))
