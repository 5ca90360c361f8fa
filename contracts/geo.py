"""Geo maths every layer shares: one Earth radius, one haversine, one set of distance bands.

The retrieval predicate (``published.geo_index``) uses the chord form below, the features and
the simulator the haversine; both are the same great-circle distance on the same sphere.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

# Mean earth radius (IUGG). H3 uses 6371.007180918475 km; the difference (0.0005 %) is far below
# the slack the ring size leaves (47.6 km guaranteed vs 40.23 km asked).
EARTH_RADIUS_KM: Final = 6371.0088
KM_PER_MILE: Final = 1.609344
# Where the relative RSVP rate kinks (design: "Distance decays, but not by any law"): band i covers
# [EDGES[i-1], EDGES[i]) miles, band 5 is 40+.
DISTANCE_BAND_EDGES_MILES: Final[tuple[float, ...]] = (2.0, 5.0, 10.0, 20.0, 40.0)
DISTANCE_BAND_EDGES_KM: Final = np.asarray(DISTANCE_BAND_EDGES_MILES) * KM_PER_MILE


def haversine_km(lat1: npt.ArrayLike, lng1: npt.ArrayLike, lat2: npt.ArrayLike, lng2: npt.ArrayLike) -> F64:
    """Great-circle distance in km between points in degrees (broadcasts; NaN in, NaN out)."""
    p1, l1 = np.radians(np.asarray(lat1, dtype=np.float64)), np.radians(np.asarray(lng1, dtype=np.float64))
    p2, l2 = np.radians(np.asarray(lat2, dtype=np.float64)), np.radians(np.asarray(lng2, dtype=np.float64))
    h = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin((l2 - l1) / 2) ** 2
    out: F64 = 2 * EARTH_RADIUS_KM * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))
    return out


def distance_band(km: npt.ArrayLike) -> I64:
    """Band 0..5 for 0-2 / 2-5 / 5-10 / 10-20 / 20-40 / 40+ miles (NaN lands in band 5: mask it)."""
    out: I64 = np.searchsorted(DISTANCE_BAND_EDGES_KM, np.asarray(km, dtype=np.float64), side="right")
    return out.astype(np.int64)


def unit_vectors(lat: npt.ArrayLike, lng: npt.ArrayLike) -> F64:
    """(N, 3) unit vectors for latitude/longitude in degrees."""
    la = np.radians(np.asarray(lat, dtype=np.float64))
    lo = np.radians(np.asarray(lng, dtype=np.float64))
    cos_la = np.cos(la)
    return np.stack([cos_la * np.cos(lo), cos_la * np.sin(lo), np.sin(la)], axis=1)


def chord_sq(xyz: F64, point: F64) -> F64:
    """Squared chord between each row of ``xyz`` and one unit vector: three multiply-adds per row."""
    dx = xyz[:, 0] - point[0]
    dy = xyz[:, 1] - point[1]
    dz = xyz[:, 2] - point[2]
    out: F64 = dx * dx + dy * dy + dz * dz
    return out


def chord_sq_limit(radius_km: float) -> float:
    """Squared chord length of a ``radius_km`` arc on the unit sphere: ``chord_sq <= this`` is
    exactly ``haversine <= radius_km`` (monotone in the central angle), with no trigonometry."""
    return (2.0 * math.sin(radius_km / (2.0 * EARTH_RADIUS_KM))) ** 2


def chord_sq_to_km(c2: F64) -> F64:
    """Great-circle distance in km from a squared chord on the unit sphere."""
    half = np.sqrt(np.clip(c2, 0.0, 4.0)) / 2.0
    out: F64 = 2.0 * EARTH_RADIUS_KM * np.arcsin(np.clip(half, 0.0, 1.0))
    return out
