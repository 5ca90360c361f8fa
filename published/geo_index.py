"""The geo-time index: retrieval as geometry, not as a model (design: "The geo index is the whole
retrieval story").

Pure numpy + h3, no Spark and no I/O, so the exactness claims are testable in milliseconds.

Layout (CSR): every live event is one *posting*. Postings are sorted by (res-5 cell, UTC start,
event id), so each cell's posting list is one contiguous slice ``offsets[c]:offsets[c + 1]``
already in start order; a query's "merge the 61 lists in start order" is a binary search per
list plus one sort of the survivors. Each posting also keeps its res-7 cell, because travel
time is precomputed per res-7 cell pair and serving must not recompute it for 15,000 ids.

What the index holds: **every** live event known at build time (created, not cancelled, not yet
started), however far ahead it starts. The 21-day horizon is applied by the query, not by the
build: an index built at 10:00 and still serving at 10:59 would otherwise be missing the events
that crossed into the horizon during that hour, and the rebuild cost does not depend on it.

Distance: the predicate is exact great-circle distance ``<= radius_km`` on a sphere. It is
evaluated as a chord length between precomputed unit vectors (``|u - v|^2 <= (2 sin(d / 2R))^2``),
which is the haversine predicate rearranged: monotone in the central angle, so it accepts exactly
the same points, but it is only multiplies and adds per candidate, with no trigonometry and no
per-element results that depend on how a SIMD library splits the array.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

import h3
import numpy as np
import numpy.typing as npt

from contracts.geo import chord_sq, chord_sq_limit, chord_sq_to_km, unit_vectors
from contracts.instants import MICROS_PER_SECOND, from_micros, to_micros

if TYPE_CHECKING:
    import pandas as pd

    from conf.settings import IndexSettings

log = logging.getLogger(__name__)


I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Bool = npt.NDArray[np.bool_]
Str = npt.NDArray[np.str_]

# Columns ``build_geo_index`` takes; ``start_us`` is the UTC start in microseconds since the epoch.
EVENT_COLUMNS: Final = ("event_id", "start_us", "lat", "lng")

# Res-5 cells below this area are too small for k=4 to cover 40.23 km (largest failing cell
# measured: 167.1 km^2); 175 leaves a margin. See ``GeoParams.ring_k_for``.
SMALL_CELL_AREA_KM2: Final = 175.0


@dataclass(frozen=True)
class GeoParams:
    """The geometry of retrieval: which grid, how many rings, which radius, window and cap."""

    h3_resolution: int = 5
    travel_resolution: int = 7
    ring_k: int = 4
    radius_km: float = 40.23
    horizon_days: int = 21
    max_candidates: int = 15_000
    # Ring cells smaller than this get one more ring (see ``ring_k_for``).
    small_cell_area_km2: float = SMALL_CELL_AREA_KM2

    @classmethod
    def from_settings(cls, index: IndexSettings) -> GeoParams:
        return cls(
            h3_resolution=index.h3_resolution,
            travel_resolution=index.travel_resolution,
            ring_k=index.ring_k,
            radius_km=index.radius_km,
            horizon_days=index.horizon_days,
            max_candidates=index.max_candidates,
        )

    def ring_k_for(self, cell: str) -> int:
        """The ring size that covers the whole radius for every user standing in ``cell``.

        ``ring_k`` is sized for a typical res-5 cell ((1.5k - 0.5) R = 47.6 km at k=4). H3 cells
        shrink towards the 12 pentagons (128 km^2 at the pentagon, about 154 km^2 next to it,
        against 253 km^2 on average) and the guarantee shrinks with them: measured here, k=4
        misses part of the 40.23 km disc for cells up to about 167 km^2, which is every cell
        within roughly 300 km of a pentagon (Dalian and the Trondheim coast are such places).
        Those cells (about 2 % of all res-5 cells, mostly ocean) get k + 1, which was measured
        to cover them all; everywhere else the ring stays at k (61 cells).
        """
        if h3.cell_area(cell, unit="km^2") < self.small_cell_area_km2:
            return self.ring_k + 1
        return self.ring_k

    @property
    def chord_limit_sq(self) -> float:
        """Squared chord length of a ``radius_km`` arc on the unit sphere."""
        return chord_sq_limit(self.radius_km)


def latlng_to_cells(lat: npt.ArrayLike, lng: npt.ArrayLike, resolution: int) -> I64:
    """H3 cell ids (as int64; H3 ids never set the top bit) for arrays of points."""
    from h3.api import numpy_int as h3n

    la = np.asarray(lat, dtype=np.float64).tolist()
    lo = np.asarray(lng, dtype=np.float64).tolist()
    f = h3n.latlng_to_cell
    return np.fromiter(
        (f(a, b, resolution) for a, b in zip(la, lo, strict=True)), dtype=np.int64, count=len(la)
    )


@dataclass(frozen=True)
class Candidates:
    """One query's answer, soonest first: ``positions`` index the GeoIndex's posting arrays."""

    positions: I64
    event_ids: Str
    start_us: I64
    distance_km: F64
    travel_cell: I64
    user_cell: int
    user_travel_cell: int
    ring_k: int  # rings taken around the user's cell (k, or k + 1 in a small cell)
    ring_cells: int  # cells in the ring (61 for k=4 away from pentagons)
    cells_hit: int  # ring cells that hold at least one posting
    scanned: int  # postings inside the time window that the distance predicate examined
    in_radius: int  # in-radius events in the window before the cap
    truncated: bool  # True when the cap dropped the latest-starting in-radius events
    window_end_us: int

    def __len__(self) -> int:
        return len(self.positions)


@dataclass(frozen=True)
class GeoIndex:
    """Every live event at ``built_at_us``, bucketed by res-5 cell, each bucket sorted by start."""

    params: GeoParams
    built_at_us: int
    cells: I64  # (C,) sorted unique ring-resolution cells that hold postings
    offsets: I64  # (C + 1,) posting slice of each cell
    event_ids: Str  # (N,) in posting order
    start_us: I64  # (N,) UTC start, microseconds
    lat: F64
    lng: F64
    xyz: F64  # (N, 3) unit vectors, precomputed so the predicate needs no trigonometry
    travel_cell: I64  # (N,) travel-resolution cell of the venue
    rank: I64  # (N,) global order by (start, event_id): a total order for stable truncation
    by_rank: I64  # (N,) posting position of each rank: the inverse permutation of ``rank``

    def __len__(self) -> int:
        return len(self.event_ids)

    @property
    def cell_of_posting(self) -> I64:
        out: I64 = np.repeat(self.cells, np.diff(self.offsets))
        return out

    def query(self, lat: float, lng: float, now: datetime, ring_k: int | None = None) -> Candidates:
        """In-radius live events starting in (now, now + horizon], soonest first, at most the cap.

        ``ring_k`` overrides the ring size so tests can show what an undersized ring silently
        loses; serving leaves it to ``GeoParams.ring_k_for``.
        """
        p = self.params
        now_us = to_micros(now)
        end_us = now_us + p.horizon_days * 86_400 * MICROS_PER_SECOND
        cell = h3.latlng_to_cell(lat, lng, p.h3_resolution)
        k = p.ring_k_for(cell) if ring_k is None else ring_k
        user_cell = int(h3.str_to_int(cell))
        user_travel = int(h3.str_to_int(h3.latlng_to_cell(lat, lng, p.travel_resolution)))
        ring = np.fromiter((h3.str_to_int(c) for c in h3.grid_disk(cell, k)), dtype=np.int64)

        # One seek per ring cell: a binary search in the sorted cell array. A ring cell with no
        # postings lands on some other cell's slot, so each hit must be the cell itself.
        slot = np.searchsorted(self.cells, ring)
        found = slot < len(self.cells)
        found[found] = self.cells[slot[found]] == ring[found]
        slot = slot[found]
        slices: list[I64] = []
        for s in np.sort(slot).tolist():
            lo, hi = int(self.offsets[s]), int(self.offsets[s + 1])
            starts = self.start_us[lo:hi]
            # Each list is sorted by start: the window (now, end] is one contiguous run in it.
            a = lo + int(np.searchsorted(starts, now_us, side="right"))
            b = lo + int(np.searchsorted(starts, end_us, side="right"))
            if b > a:
                slices.append(np.arange(a, b, dtype=np.int64))
        window = np.concatenate(slices) if slices else np.empty(0, dtype=np.int64)

        point = unit_vectors([lat], [lng])[0]
        inside = chord_sq(self.xyz[window], point) <= p.chord_limit_sq
        # Merge the lists in start order and stop at the cap: sorting the hits' global ranks and
        # keeping the first ``cap`` is that merge, done by one vectorized sort.
        ranks = np.sort(self.rank[window[inside]])
        n_in = len(ranks)
        cap = p.max_candidates
        hits = self.by_rank[ranks[:cap]]
        hit_c2 = chord_sq(self.xyz[hits], point)
        return Candidates(
            positions=hits,
            event_ids=self.event_ids[hits],
            start_us=self.start_us[hits],
            distance_km=chord_sq_to_km(hit_c2),
            travel_cell=self.travel_cell[hits],
            user_cell=user_cell,
            user_travel_cell=user_travel,
            ring_k=k,
            ring_cells=len(ring),
            cells_hit=len(slot),
            scanned=len(window),
            in_radius=n_in,
            truncated=n_in > cap,
            window_end_us=end_us,
        )


def _as_str_array(ids: npt.ArrayLike) -> Str:
    return np.asarray(ids, dtype=np.str_)


def build_geo_index(events: pd.DataFrame, now: datetime, params: GeoParams) -> GeoIndex:
    """Bucket live events by ring cell, sort each bucket by start.

    ``events`` has ``EVENT_COLUMNS``, one row per live event. The builder refuses input that
    breaks the index's invariants instead of quietly repairing it, because repairs (dropping a
    duplicate, skipping a past event) would hide an upstream bug the validation step exists for.
    """
    missing = [c for c in EVENT_COLUMNS if c not in events.columns]
    if missing:
        raise ValueError(f"events frame lacks {missing}")
    now_us = to_micros(now)
    ids = _as_str_array(events["event_id"].to_numpy())
    start = events["start_us"].to_numpy(dtype=np.int64)
    lat = events["lat"].to_numpy(dtype=np.float64)
    lng = events["lng"].to_numpy(dtype=np.float64)
    if len(np.unique(ids)) != len(ids):
        raise ValueError("duplicate event_id in the events to index")
    if not (np.isfinite(lat).all() and np.isfinite(lng).all()):
        raise ValueError("an event to index has no location")
    if (start <= now_us).any():
        raise ValueError(f"{int((start <= now_us).sum())} events to index have already started")

    # The ring cell is computed from the point, not by truncating the travel cell: H3 is not
    # exactly nested (about 6% of points lie in a res-5 cell other than their res-7 cell's
    # parent), and the ring's coverage guarantee is about the point's own res-5 cell.
    travel = latlng_to_cells(lat, lng, params.travel_resolution)
    ring_cell = latlng_to_cells(lat, lng, params.h3_resolution)
    # Global total order (start, event_id): ties in start resolve the same way in every query,
    # so truncation at the cap is deterministic.
    rank_order = np.lexsort((ids, start))
    rank = np.empty(len(ids), dtype=np.int64)
    rank[rank_order] = np.arange(len(ids), dtype=np.int64)
    order = np.lexsort((rank, ring_cell))
    posting_rank = rank[order]
    by_rank = np.empty(len(ids), dtype=np.int64)
    by_rank[posting_rank] = np.arange(len(ids), dtype=np.int64)

    ring_sorted = ring_cell[order]
    cells, first = np.unique(ring_sorted, return_index=True)
    offsets = np.append(first, len(order)).astype(np.int64)
    lat_s, lng_s = lat[order], lng[order]
    index = GeoIndex(
        params=params,
        built_at_us=now_us,
        cells=cells.astype(np.int64),
        offsets=offsets,
        event_ids=ids[order],
        start_us=start[order],
        lat=lat_s,
        lng=lng_s,
        xyz=unit_vectors(lat_s, lng_s),
        travel_cell=travel[order],
        rank=posting_rank,
        by_rank=by_rank,
    )
    log.info("geo index: %d events in %d cells", len(index), len(cells))
    return index


def scan_candidates(
    event_ids: Str,
    start_us: I64,
    xyz: F64,
    lat: float,
    lng: float,
    now: datetime,
    params: GeoParams,
) -> Str:
    """The brute-force oracle: every event, no grid. Same predicate, same order, same cap.

    Used by tests to prove the ring loses nothing and by the benchmark as the baseline; it
    shares only the distance predicate with ``GeoIndex.query``.
    """
    now_us = to_micros(now)
    end_us = now_us + params.horizon_days * 86_400 * MICROS_PER_SECOND
    point = unit_vectors([lat], [lng])[0]
    ok = (start_us > now_us) & (start_us <= end_us) & (chord_sq(xyz, point) <= params.chord_limit_sq)
    idx = np.flatnonzero(ok)
    order = np.lexsort((event_ids[idx], start_us[idx]))
    out: Str = event_ids[idx[order[: params.max_candidates]]]
    return out


@dataclass(frozen=True)
class IndexCheck:
    """Structural facts about an index, each a failed invariant when non-empty or non-zero."""

    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def check_structure(index: GeoIndex, now_us: int | None = None) -> IndexCheck:
    """Invariants a built (or reloaded) index must satisfy before anyone may query it."""
    problems: list[str] = []
    n = len(index)
    arrays = {
        "start_us": index.start_us,
        "lat": index.lat,
        "lng": index.lng,
        "travel_cell": index.travel_cell,
        "rank": index.rank,
        "by_rank": index.by_rank,
    }
    for name, arr in arrays.items():
        if len(arr) != n:
            problems.append(f"{name} has {len(arr)} rows, event_ids {n}")
    if index.xyz.shape != (n, 3):
        problems.append(f"xyz has shape {index.xyz.shape}, expected ({n}, 3)")
    if problems:
        return IndexCheck(problems)
    off = index.offsets
    if len(off) != len(index.cells) + 1 or (len(off) and (off[0] != 0 or off[-1] != n)):
        problems.append("offsets do not span the postings")
    elif (np.diff(off) <= 0).any():
        problems.append("a cell has an empty or negative posting slice")
    if (np.diff(index.cells) <= 0).any():
        problems.append("cells are not strictly increasing")
    if len(np.unique(index.event_ids)) != n:
        problems.append(f"{n - len(np.unique(index.event_ids))} events are indexed more than once")
    if not problems and n:
        cell = index.cell_of_posting
        if (latlng_to_cells(index.lat, index.lng, index.params.h3_resolution) != cell).any():
            problems.append("a posting sits in a cell other than its location's cell")
        if (latlng_to_cells(index.lat, index.lng, index.params.travel_resolution) != index.travel_cell).any():
            problems.append("a posting's travel cell is not its location's cell")
        # Within each cell, rank (and so start) must increase along the slice.
        same_cell = cell[1:] == cell[:-1]
        if (np.diff(index.rank)[same_cell] <= 0).any() or (np.diff(index.start_us)[same_cell] < 0).any():
            problems.append("a posting list is not sorted by start")
        if ((index.by_rank < 0) | (index.by_rank >= n)).any() or (
            index.rank[index.by_rank] != np.arange(n)
        ).any():
            problems.append("rank is not a permutation of the postings, or by_rank not its inverse")
        elif (np.diff(index.start_us[index.by_rank]) < 0).any():
            problems.append("rank does not follow start order")
    cutoff = index.built_at_us if now_us is None else now_us
    past = int((index.start_us <= cutoff).sum()) if n else 0
    if past:
        problems.append(f"{past} indexed events start at or before {from_micros(cutoff).isoformat()}")
    return IndexCheck(problems)
