"""The in-process columnar copy of every live event's features, refreshed in the background.

Reading 15,000 event rows through the Feast SDK costs ~3.5 s (bench/README.md), and even the raw
store read is ~1 s, so a request cannot fetch event rows. Event features change slowly (static
attributes, entity stats, hourly dynamics), so serving keeps one dense float matrix of them,
aligned with plain arrays of the routing attributes a request needs (organizer, category,
venue position and zone, start), and swaps in a new snapshot when a refresh succeeds. A refresh
that fails leaves the last snapshot serving: that is the "online store down" path.

Per request, candidate rows are picked from the matrix by one fancy-index, never per event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt
import pandas as pd

from contracts.geo import unit_vectors

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Str = npt.NDArray[np.str_]

# A snapshot's ``source`` when the online store could not be read: events, no feature values.
CATALOG_ONLY: Final = "catalog_only"
# Columns every snapshot frame carries besides the model features.
META_COLUMNS: Final = (
    "event_id",
    "organizer_id",
    "category",
    "metro",
    "timezone",
    "venue_lat",
    "venue_lng",
    "start_ts",
)
# Model inputs that exist only per request: computed in serving.features, never stored here.
REQUEST_SIDE: Final = frozenset(
    {
        "distance_km",
        "distance_bucket",
        "lead_time_hours",
        "request_hour_of_week",
        "category_affinity",
        "friends_going",
        "friends_going_bucket",
    }
)


def _strings(values: pd.Series) -> Str:
    """A fixed-width unicode array (fast vectorized compares and searches; object arrays are not)."""
    return np.asarray(values.fillna("").astype(str).tolist(), dtype=np.str_)


def _codes(values: npt.ArrayLike) -> tuple[tuple[str, ...], I64]:
    """Dictionary-encode strings: (sorted distinct values, code per row); missing -> ''."""
    arr = pd.Series(values).fillna("").astype(str).to_numpy()
    names, codes = np.unique(arr, return_inverse=True)
    return tuple(names.tolist()), codes.astype(np.int64)


@dataclass(frozen=True)
class EventSnapshot:
    """Live events' features as arrays; row ``i`` of every array is the same event."""

    built_at_s: float  # when the values were read (epoch s): its age is reported by /healthz
    source: str  # where it was read from ("online_store", "synthetic", ...)
    event_id: Str
    organizer_id: Str
    organizer_code: I64
    category_code: I64
    categories: tuple[str, ...]
    zone_code: I64
    zones: tuple[str, ...]
    metro: Str
    venue_lat: F64
    venue_lng: F64
    xyz: F64  # unit vectors, for the index-down scan
    start_ts: F64  # UTC start, epoch seconds
    org_event_count: F64  # NaN when the organizer has no stats yet: cold
    popularity: F64  # the metro-popularity fallback's score (precomputed)
    # (N, F) model inputs that depend on the event only, column-major: a request gathers a few
    # columns for every candidate, and each column's values are then contiguous.
    features: F64
    feature_names: tuple[str, ...]
    tower_version: str | None = None
    _sorted_ids: Str = field(repr=False, default_factory=lambda: np.empty(0, dtype=np.str_))
    _sorted_rows: I64 = field(repr=False, default_factory=lambda: np.empty(0, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.event_id)

    @classmethod
    def from_frame(
        cls,
        frame: pd.DataFrame,
        feature_names: list[str],
        built_at_s: float,
        source: str,
        tower_version: str | None = None,
    ) -> EventSnapshot:
        """One row per event with ``META_COLUMNS`` plus ``feature_names`` (missing ones -> NaN).

        ``popularity`` defaults to the event's RSVP count, broken towards the market's shrunk
        RSVP rate: what the metro as a whole responds to, with no model in the loop.
        """
        missing = [c for c in META_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"snapshot frame lacks {missing}")
        ids = _strings(frame["event_id"])
        if len(np.unique(ids)) != len(ids):
            raise ValueError("duplicate event_id in the snapshot frame")
        names = [n for n in feature_names if n not in REQUEST_SIDE]
        matrix = np.full((len(frame), len(names)), np.nan, order="F")
        for j, name in enumerate(names):
            if name in frame.columns:
                matrix[:, j] = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)

        def numbers(name: str) -> F64:
            if name not in frame.columns:
                return np.full(len(frame), np.nan)
            out: F64 = pd.to_numeric(frame[name], errors="coerce").to_numpy(dtype=float)
            return out

        if "popularity" in frame.columns:
            popularity = numbers("popularity")
        else:
            popularity = np.nan_to_num(numbers("rsvp_count")) + np.nan_to_num(numbers("market_rsvp_rate"))
        _, organizer_code = _codes(frame["organizer_id"])
        categories, category_code = _codes(frame["category"])
        zones, zone_code = _codes(frame["timezone"])
        lat, lng = numbers("venue_lat"), numbers("venue_lng")
        order = np.argsort(ids, kind="stable")
        return cls(
            built_at_s=built_at_s,
            source=source,
            event_id=ids,
            organizer_id=_strings(frame["organizer_id"]),
            organizer_code=organizer_code,
            category_code=category_code,
            categories=categories,
            zone_code=zone_code,
            zones=zones,
            metro=_strings(frame["metro"]),
            venue_lat=lat,
            venue_lng=lng,
            xyz=unit_vectors(np.nan_to_num(lat), np.nan_to_num(lng)),
            start_ts=numbers("start_ts"),
            org_event_count=numbers("org_event_count"),
            popularity=popularity,
            features=matrix,
            feature_names=tuple(names),
            tower_version=tower_version,
            _sorted_ids=ids[order],
            _sorted_rows=order.astype(np.int64),
        )

    def rows_for(self, event_ids: npt.ArrayLike) -> I64:
        """Snapshot row of each id, -1 where the snapshot does not hold it (one binary search)."""
        ids = np.asarray(event_ids, dtype=np.str_)
        if len(self) == 0 or len(ids) == 0:
            return np.full(len(ids), -1, dtype=np.int64)
        slot = np.clip(np.searchsorted(self._sorted_ids, ids), 0, len(self) - 1)
        hit = self._sorted_ids[slot] == ids
        return np.where(hit, self._sorted_rows[slot], -1).astype(np.int64)

    def column_positions(self, names: list[str]) -> I64:
        """Position of each name in ``features`` (-1 where the snapshot does not carry it)."""
        where = {n: i for i, n in enumerate(self.feature_names)}
        return np.array([where.get(n, -1) for n in names], dtype=np.int64)
