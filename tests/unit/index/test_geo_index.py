"""The geo-time index answers exactly what a brute-force scan of every live event answers."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import h3
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.geo import haversine_km, unit_vectors
from contracts.instants import to_micros
from published.geo_index import GeoIndex, GeoParams, build_geo_index, check_structure, scan_candidates
from tests.index_synthetic import random_events

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
# (lat, lng, spread in degrees): a dense metro, two ordinary ones, one near an H3 pentagon.
CENTERS = [(40.71, -74.00, 0.25), (51.51, -0.13, 0.3), (37.77, -122.42, 0.3), (38.91, 121.61, 0.3)]


def oracle(events: pd.DataFrame, lat: float, lng: float, now: datetime, params: GeoParams) -> np.ndarray:
    ids = events["event_id"].to_numpy().astype(np.str_)
    xyz = unit_vectors(events["lat"].to_numpy(), events["lng"].to_numpy())
    return scan_candidates(ids, events["start_us"].to_numpy(), xyz, lat, lng, now, params)


@pytest.fixture(scope="module")
def world() -> tuple[pd.DataFrame, GeoIndex]:
    events = random_events(40_000, CENTERS, NOW, days=40, seed=1)
    return events, build_geo_index(events, NOW, GeoParams())


def user_positions(rng: np.random.Generator, n: int) -> list[tuple[float, float]]:
    out = []
    for _ in range(n):
        lat, lng, spread = CENTERS[int(rng.integers(len(CENTERS)))]
        out.append((lat + rng.normal(0, spread * 1.5), lng + rng.normal(0, spread * 1.5)))
    return out


def test_candidates_equal_a_brute_force_scan(world: tuple[pd.DataFrame, GeoIndex]) -> None:
    events, index = world
    rng = np.random.default_rng(2)
    nonempty = 0
    for lat, lng in user_positions(rng, 60):
        now = NOW + timedelta(hours=float(rng.uniform(0, 48)))
        got = index.query(lat, lng, now)
        want = oracle(events, lat, lng, now, index.params)
        assert not got.truncated
        np.testing.assert_array_equal(got.event_ids, want)
        nonempty += len(want) > 0
    assert nonempty > 40


def test_the_predicate_is_haversine(world: tuple[pd.DataFrame, GeoIndex]) -> None:
    """Independently of the chord shortcut: every candidate is within 40.23 km by haversine,
    and every event in the window within it (away from float ties at the edge) is a candidate."""
    events, index = world
    lat, lng = 40.95, -74.3
    got = index.query(lat, lng, NOW)
    d = haversine_km(lat, lng, events["lat"].to_numpy(), events["lng"].to_numpy())
    end = to_micros(NOW + timedelta(days=21))
    window = (events["start_us"] > to_micros(NOW)) & (events["start_us"] <= end)
    clearly_in = set(events.loc[window & (d < 40.23 - 1e-6), "event_id"])
    clearly_out = set(events.loc[d > 40.23 + 1e-6, "event_id"])
    ids = set(got.event_ids.tolist())
    assert clearly_in <= ids and not (ids & clearly_out)
    np.testing.assert_allclose(
        got.distance_km, haversine_km(lat, lng, index.lat[got.positions], index.lng[got.positions]), atol=1e-6
    )
    assert got.distance_km.max() <= 40.23 + 1e-9


def test_truncation_keeps_the_soonest(world: tuple[pd.DataFrame, GeoIndex]) -> None:
    events, index = world
    capped = dataclasses.replace(index, params=dataclasses.replace(index.params, max_candidates=500))
    lat, lng = 40.71, -74.0
    got = capped.query(lat, lng, NOW)
    full = index.query(lat, lng, NOW)
    assert got.truncated and len(got) == 500 and got.in_radius == len(full) > 500
    # The kept ones are a prefix of the full in-radius list in (start, event_id) order.
    np.testing.assert_array_equal(got.event_ids, full.event_ids[:500])
    assert got.start_us.max() <= full.start_us[500:].min()
    assert (np.diff(got.start_us) >= 0).all()
    np.testing.assert_array_equal(got.event_ids, oracle(events, lat, lng, NOW, capped.params))


def test_window_edges_are_exact() -> None:
    lat, lng = 48.85, 2.35
    now_us = to_micros(NOW)
    day = 86_400_000_000
    starts = {
        "at-build": now_us + 1,
        "before-query": now_us + 3_600_000_000,  # started by the time of the query below
        "at-query": now_us + 7_200_000_000,  # start == query time: already started, excluded
        "just-after-query": now_us + 7_200_000_001,
        "horizon-edge": now_us + 7_200_000_000 + 21 * day,  # start == now + 21 days: included
        "past-horizon": now_us + 7_200_000_001 + 21 * day,
    }
    events = pd.DataFrame(
        {"event_id": list(starts), "start_us": list(starts.values()), "lat": lat, "lng": lng}
    )
    index = build_geo_index(events, NOW, GeoParams())
    got = index.query(lat, lng, NOW + timedelta(hours=2))
    assert got.event_ids.tolist() == ["just-after-query", "horizon-edge"]


def test_an_undersized_ring_silently_loses_events() -> None:
    """A user near their cell's vertex, events 36-40 km away: k=3 returns fewer, raising nothing."""
    cell = h3.latlng_to_cell(40.71, -74.0, 5)
    center, vertex = h3.cell_to_latlng(cell), h3.cell_to_boundary(cell)[0]
    lat, lng = (center[0] + (vertex[0] - center[0]) * 0.98, center[1] + (vertex[1] - center[1]) * 0.98)
    rng = np.random.default_rng(3)
    bearing, dist = rng.uniform(0, 2 * np.pi, 3000), rng.uniform(36, 40.2, 3000) / 111.2
    events = pd.DataFrame(
        {
            "event_id": [f"ring{i}" for i in range(3000)],
            "start_us": to_micros(NOW) + 3_600_000_000,
            "lat": lat + dist * np.cos(bearing),
            "lng": lng + dist * np.sin(bearing) / np.cos(np.radians(lat)),
        }
    )
    index = build_geo_index(events, NOW, GeoParams())
    full, small = index.query(lat, lng, NOW), index.query(lat, lng, NOW, ring_k=3)
    np.testing.assert_array_equal(full.event_ids, oracle(events, lat, lng, NOW, index.params))
    assert full.ring_cells == 61
    assert len(small) < len(full)


def test_near_a_pentagon_the_ring_widens_and_stays_exact(world: tuple[pd.DataFrame, GeoIndex]) -> None:
    events, index = world
    rng = np.random.default_rng(4)
    for _ in range(10):
        lat, lng = 38.91 + rng.normal(0, 0.3), 121.61 + rng.normal(0, 0.3)
        got = index.query(lat, lng, NOW)
        assert got.ring_k == 5 and got.ring_cells > 61
        np.testing.assert_array_equal(got.event_ids, oracle(events, lat, lng, NOW, index.params))


def test_near_a_pentagon_k4_would_lose_the_edge_of_the_disc() -> None:
    """Dalian's res-5 cells are small (H3 pentagon nearby): from near a vertex, events 39.5-40.2 km
    away in some directions lie outside the 4-ring. The widened ring keeps them."""
    cell = h3.latlng_to_cell(38.9140, 121.6147, 5)
    center = h3.cell_to_latlng(cell)
    losses = 0
    for vertex in h3.cell_to_boundary(cell):
        lat = center[0] + (vertex[0] - center[0]) * 0.98
        lng = center[1] + (vertex[1] - center[1]) * 0.98
        bearing = np.radians(np.arange(0, 360, 1.0))
        dist = np.linspace(39.5, 40.2, 360) / 111.2
        events = pd.DataFrame(
            {
                "event_id": [f"edge{i:03d}" for i in range(360)],
                "start_us": to_micros(NOW) + 3_600_000_000,
                "lat": lat + dist * np.cos(bearing),
                "lng": lng + dist * np.sin(bearing) / np.cos(np.radians(lat)),
            }
        )
        index = build_geo_index(events, NOW, GeoParams())
        full = index.query(lat, lng, NOW)
        np.testing.assert_array_equal(full.event_ids, oracle(events, lat, lng, NOW, index.params))
        losses += len(full) - len(index.query(lat, lng, NOW, ring_k=4))
    assert losses > 0


@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(0, 3_000),
    cap=st.integers(1, 400),
    dlat=st.floats(-0.6, 0.6),
    dlng=st.floats(-0.6, 0.6),
    hours=st.floats(0, 500),
)
def test_any_world_any_user_matches_the_scan(
    seed: int, n: int, cap: int, dlat: float, dlng: float, hours: float
) -> None:
    params = GeoParams(max_candidates=cap)
    events = random_events(n, [(52.52, 13.40, 0.3)], NOW, days=30, seed=seed)
    index = build_geo_index(events, NOW, params)
    assert check_structure(index).ok
    now = NOW + timedelta(hours=hours)
    got = index.query(52.52 + dlat, 13.40 + dlng, now)
    np.testing.assert_array_equal(got.event_ids, oracle(events, 52.52 + dlat, 13.40 + dlng, now, params))


def test_build_refuses_what_would_break_the_index() -> None:
    good = random_events(10, [(52.52, 13.40, 0.1)], NOW, days=5, seed=0)
    with pytest.raises(ValueError, match="duplicate"):
        build_geo_index(pd.concat([good, good.iloc[:1]]), NOW, GeoParams())
    past = good.assign(start_us=good["start_us"].where(good.index != 3, to_micros(NOW)))
    with pytest.raises(ValueError, match="already started"):
        build_geo_index(past, NOW, GeoParams())
    with pytest.raises(ValueError, match="no location"):
        build_geo_index(good.assign(lat=good["lat"].where(good.index != 2, np.nan)), NOW, GeoParams())


def test_structure_check_catches_corruption(world: tuple[pd.DataFrame, GeoIndex]) -> None:
    _, index = world
    assert check_structure(index).ok
    start = index.start_us.copy()
    lo = int(index.offsets[int(np.argmax(np.diff(index.offsets)))])  # the biggest cell
    start[lo], start[lo + 1] = start[lo + 1] + 1, start[lo]
    assert any("sorted" in p for p in check_structure(dataclasses.replace(index, start_us=start)).problems)
    ids = index.event_ids.copy()
    ids[5] = ids[6]
    assert any(
        "more than once" in p for p in check_structure(dataclasses.replace(index, event_ids=ids)).problems
    )
    later = to_micros(NOW + timedelta(days=2))
    assert any("start at or before" in p for p in check_structure(index, now_us=later).problems)
    lat = index.lat.copy()
    lat[0] += 1.0
    assert any("cell other than" in p for p in check_structure(dataclasses.replace(index, lat=lat)).problems)


def test_instants_are_normalized_to_plain_utc_datetimes() -> None:
    import pendulum

    from contracts.instants import as_utc

    t = pendulum.datetime(2026, 11, 1, 7, 30, 0, tz="America/New_York")
    u = as_utc(t)
    assert type(u) is datetime and u == t and u.tzinfo is UTC
    with pytest.raises(ValueError, match="naive"):
        as_utc(datetime(2026, 11, 1))
