"""The ring size is geometry: k=4 res-5 rings cover the 25-mile disc for the worst-placed user.

Checked with the h3 library alone: for user positions anywhere in a res-5 cell (near each
vertex, where the worst-placed user stands, and uniformly inside), walk the boundary of the
40.23 km disc and require every boundary point's res-5 cell to be in the ring. The k-ring is a
simply connected patch containing the user's cell, so a boundary inside it means the disc is.
"""

from __future__ import annotations

import math

import h3
import numpy as np
import pytest

from contracts.geo import EARTH_RADIUS_KM
from published.geo_index import SMALL_CELL_AREA_KM2, GeoParams

RADIUS_KM = 40.23
BEARINGS = np.arange(0.0, 360.0, 0.5)  # 0.35 km apart on the circle: far finer than a 8 km cell
METROS = {
    "nyc": (40.7128, -74.0060),
    "sf": (37.7749, -122.4194),
    "london": (51.5074, -0.1278),
    "berlin": (52.5200, 13.4050),
    "oslo": (59.9139, 10.7522),
    "singapore": (1.3521, 103.8198),
    "sydney": (-33.8688, 151.2093),
    "sao_paulo": (-23.5505, -46.6333),
}


def circle(lat: float, lng: float, radius_km: float) -> tuple[np.ndarray, np.ndarray]:
    """Points at ``radius_km`` from (lat, lng) along every bearing (spherical destination formula)."""
    p1, l1, a = math.radians(lat), math.radians(lng), radius_km / EARTH_RADIUS_KM
    b = np.radians(BEARINGS)
    p2 = np.arcsin(math.sin(p1) * math.cos(a) + math.cos(p1) * math.sin(a) * np.cos(b))
    l2 = l1 + np.arctan2(np.sin(b) * math.sin(a) * math.cos(p1), math.cos(a) - math.sin(p1) * np.sin(p2))
    return np.degrees(p2), (np.degrees(l2) + 540.0) % 360.0 - 180.0


def users_in(cell: str, rng: np.random.Generator, n_random: int = 12) -> list[tuple[float, float]]:
    """Positions inside ``cell``: just inside each vertex (the worst case) plus random ones."""
    lat0, lng0 = h3.cell_to_latlng(cell)
    boundary = h3.cell_to_boundary(cell)
    points = [(lat0 + (la - lat0) * f, lng0 + (lo - lng0) * f) for la, lo in boundary for f in (0.999, 0.98)]
    lats, lngs = [p[0] for p in boundary], [p[1] for p in boundary]
    while len(points) < len(boundary) * 2 + n_random:
        p = (rng.uniform(min(lats), max(lats)), rng.uniform(min(lngs), max(lngs)))
        if h3.latlng_to_cell(*p, 5) == cell:
            points.append(p)
    return [p for p in points if h3.latlng_to_cell(*p, 5) == cell]


def misses(lat: float, lng: float, k: int) -> int:
    """How many points of the disc boundary around (lat, lng) fall outside the k-ring."""
    ring = set(h3.grid_disk(h3.latlng_to_cell(lat, lng, 5), k))
    lats, lngs = circle(lat, lng, RADIUS_KM)
    return sum(h3.latlng_to_cell(a, b, 5) not in ring for a, b in zip(lats, lngs, strict=True))


def sample_cells(rng: np.random.Generator, n: int) -> list[str]:
    """Random res-5 cells anywhere on earth (uniform by area) plus one per metro."""
    cells = [h3.latlng_to_cell(lat, lng, 5) for lat, lng in METROS.values()]
    while len(cells) < n:
        lat, lng = math.degrees(math.asin(rng.uniform(-1, 1))), rng.uniform(-180, 180)
        cells.append(h3.latlng_to_cell(lat, lng, 5))
    return cells


def test_k4_covers_the_disc_from_anywhere_in_a_typical_cell_and_k3_does_not() -> None:
    rng = np.random.default_rng(5)
    cells = [c for c in sample_cells(rng, 40) if h3.cell_area(c, unit="km^2") >= SMALL_CELL_AREA_KM2]
    assert len(cells) >= 30
    average = h3.average_hexagon_area(5, unit="km^2")  # 252.9 km^2
    k3_short = []
    for cell in cells:
        users = users_in(cell, rng)
        for lat, lng in users:
            assert misses(lat, lng, 4) == 0, (
                f"k=4 ring misses part of the disc for a user at {lat, lng} in {cell}"
            )
        short = any(misses(lat, lng, 3) for lat, lng in users)
        k3_short.append(short)
        # k=3 guarantees about 34 km in a cell of average size: a user near a vertex sees the
        # disc leave the ring. (Cells well above average, ~270 km^2 and up, are big enough for
        # k=3; sizing for them would under-fetch everywhere else.)
        if h3.cell_area(cell, unit="km^2") <= average:
            assert short, f"k=3 covered the disc in {cell}, a cell no larger than average"
    assert np.mean(k3_short) > 0.6


def test_small_cells_near_pentagons_need_and_get_one_more_ring() -> None:
    """Cells shrink towards H3's pentagons; there k=4 is short and ``ring_k_for`` widens it."""
    rng = np.random.default_rng(6)
    params = GeoParams()
    dalian = h3.latlng_to_cell(38.9140, 121.6147, 5)  # 70 km from the res-5 pentagon 8530003...
    pentagon = h3.get_pentagons(5)[2]
    cells = [dalian, pentagon, *rng.choice(list(h3.grid_ring(pentagon, 6)), 3, replace=False).tolist()]
    for cell in cells:
        assert h3.cell_area(cell, unit="km^2") < SMALL_CELL_AREA_KM2
        assert params.ring_k_for(cell) == 5
        users = users_in(cell, rng, n_random=4)
        assert any(misses(lat, lng, 4) for lat, lng in users), f"expected k=4 to fall short in {cell}"
        for lat, lng in users:
            assert misses(lat, lng, 5) == 0


@pytest.mark.parametrize("metro", sorted(METROS))
def test_metro_cells_keep_the_61_cell_ring(metro: str) -> None:
    cell = h3.latlng_to_cell(*METROS[metro], 5)
    assert GeoParams().ring_k_for(cell) == 4
    assert len(h3.grid_disk(cell, 4)) == 61
