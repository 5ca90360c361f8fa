"""Precomputed travel time between res-7 cells, per metro, 4 dayparts x 2 modes.

No routing service exists here (and 18M route calls per second would not be served anyway), so
minutes come from the great-circle distance between cell centres, a detour factor, and a
per-metro congestion model by daypart. What matters for the design is the shape: one dense
array per metro, so a request turns 15,000 routing calls into one vectorized array read.
"""

from __future__ import annotations

from dataclasses import dataclass

import h3
import numpy as np
import numpy.typing as npt
import pandas as pd

from contracts.geo import haversine_km

DAYPARTS: tuple[str, ...] = ("night", "am_peak", "midday", "pm_peak")  # 22-6, 6-10, 10-16, 16-22 local
MODES: tuple[str, ...] = ("drive", "transit")
DETOUR_FACTOR = 1.3  # streets are not great circles
# Free-flow drive speed (km/h) by daypart, then a per-metro congestion multiplier on peaks.
DRIVE_KMH = {"night": 48.0, "am_peak": 26.0, "midday": 34.0, "pm_peak": 22.0}
TRANSIT_KMH = 20.0
TRANSIT_WAIT_MIN = {"night": 15.0, "am_peak": 5.0, "midday": 8.0, "pm_peak": 6.0}
METRO_CONGESTION = {"nyc": 1.35, "sf": 1.25, "chicago": 1.15, "london": 1.3, "berlin": 1.05, "paris": 1.3}
SAME_CELL_KM = 1.5  # a trip inside one res-7 cell (~1.2 km edge) is still a short trip


def daypart_of_hour(local_hour: npt.ArrayLike) -> np.ndarray:
    """Index into DAYPARTS for a venue-local hour of day."""
    h = np.asarray(local_hour)
    return np.select([(h >= 6) & (h < 10), (h >= 10) & (h < 16), (h >= 16) & (h < 22)], [1, 2, 3], 0)


@dataclass(frozen=True)
class TravelTimeMatrix:
    """minutes[daypart, mode, origin, destination] for one metro's populated cells."""

    metro: str
    cells: np.ndarray  # sorted uint64 H3 ids
    minutes: np.ndarray  # float32, shape (len(DAYPARTS), len(MODES), n, n)

    def lookup(
        self, origin: npt.ArrayLike, destination: npt.ArrayLike, daypart: npt.ArrayLike, mode: int = 0
    ) -> np.ndarray:
        """Vectorized minutes for pairs of cells (NaN where a cell is not in this metro)."""
        o = np.asarray(origin, dtype=np.uint64)
        d = np.asarray(destination, dtype=np.uint64)
        oi = np.clip(np.searchsorted(self.cells, o), 0, len(self.cells) - 1)
        di = np.clip(np.searchsorted(self.cells, d), 0, len(self.cells) - 1)
        known = (self.cells[oi] == o) & (self.cells[di] == d)
        out = self.minutes[np.asarray(daypart), mode, oi, di].astype(np.float64)
        return np.where(known, out, np.nan)

    def cell_names(self) -> list[str]:
        """The cells as H3 hex strings, in ``cells`` order."""
        return [h3.int_to_str(int(c)) for c in self.cells]

    def to_rows(self) -> pd.DataFrame:
        """One row per (daypart, mode, origin), ``minutes`` holding the float32 row to every cell.

        8n rows of n floats: what the gold job hands to Spark, which explodes it to the long table.
        The long table has 8n^2 rows, and as a pandas frame of cell strings it outgrew one machine
        (40M rows at 10x the 1M-impression history, bench/bench_growth.py).
        """
        n = len(self.cells)
        dp, md, oi = np.meshgrid(np.arange(len(DAYPARTS)), np.arange(len(MODES)), np.arange(n), indexing="ij")
        return pd.DataFrame(
            {
                "metro": self.metro,
                "origin_cell": np.asarray(self.cell_names(), dtype=object)[oi.ravel()],
                "daypart": np.asarray(DAYPARTS)[dp.ravel()],
                "mode": np.asarray(MODES)[md.ravel()],
                "minutes": list(self.minutes.reshape(-1, n)),
            }
        )

    def to_frame(self) -> pd.DataFrame:
        """Long format (one row per origin, destination, daypart, mode): in pandas, what the gold job
        writes through Spark from ``to_rows``."""
        rows = self.to_rows()
        frame = rows.drop(columns="minutes").loc[rows.index.repeat(len(self.cells))].reset_index(drop=True)
        frame.insert(2, "dest_cell", np.tile(np.asarray(self.cell_names(), dtype=object), len(rows)))
        frame["minutes"] = self.minutes.ravel()
        return frame

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> TravelTimeMatrix:
        """Rebuild the dense array from the long table (what serving loads)."""
        metro = str(frame["metro"].iloc[0])
        cells = np.unique(
            np.array([h3.str_to_int(c) for c in frame["origin_cell"].unique()], dtype=np.uint64)
        )
        index = {h3.int_to_str(int(c)): i for i, c in enumerate(cells)}
        minutes = np.full((len(DAYPARTS), len(MODES), len(cells), len(cells)), np.nan, dtype=np.float32)
        minutes[
            frame["daypart"].map({d: i for i, d in enumerate(DAYPARTS)}).to_numpy(),
            frame["mode"].map({m: i for i, m in enumerate(MODES)}).to_numpy(),
            frame["origin_cell"].map(index).to_numpy(),
            frame["dest_cell"].map(index).to_numpy(),
        ] = frame["minutes"].to_numpy()
        return cls(metro=metro, cells=cells, minutes=minutes)


def build_travel_time(metro: str, cells: list[str]) -> TravelTimeMatrix:
    """The matrix for a metro's populated res-7 cells (homes and venues)."""
    ids = np.unique(np.array([h3.str_to_int(c) for c in cells], dtype=np.uint64))
    centers = np.array([h3.cell_to_latlng(h3.int_to_str(int(c))) for c in ids])
    lat, lng = centers[:, 0], centers[:, 1]
    km = haversine_km(lat[:, None], lng[:, None], lat[None, :], lng[None, :])
    km = np.maximum(km, SAME_CELL_KM) * DETOUR_FACTOR
    congestion = METRO_CONGESTION.get(metro, 1.2)
    minutes = np.empty((len(DAYPARTS), len(MODES), len(ids), len(ids)), dtype=np.float32)
    for i, part in enumerate(DAYPARTS):
        peak = congestion if part in ("am_peak", "pm_peak") else 1.0
        minutes[i, 0] = 60.0 * km / (DRIVE_KMH[part] / peak) + 4.0  # + parking
        minutes[i, 1] = 60.0 * km / TRANSIT_KMH + TRANSIT_WAIT_MIN[part]
    return TravelTimeMatrix(metro=metro, cells=ids, minutes=minutes)
