"""Serving's vectorized crosses equal Feast's on-demand views; the synthetic world has the real
feature services' names (so the benchmark and tests score the real model shape)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from features.views import AFFINITY_FEATURES
from serving import synthetic
from serving.features import UserRow, _category_affinity, request_crosses, zone_offsets_min

feast = pytest.importorskip("feast")


def test_request_crosses_equal_the_feast_view() -> None:
    from features.crosses import request_crosses as view

    now = datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # New York falls back at 06:00 UTC this day
    zones = ("America/New_York", "Europe/London", "Asia/Kolkata", "America/New_York")
    offsets = zone_offsets_min(zones, now.timestamp())
    assert offsets.tolist() == [-240.0, 0.0, 330.0, -240.0]
    venue_lat = np.array([40.75, 51.5, 19.07, 40.0])
    venue_lng = np.array([-73.98, -0.12, 72.88, -75.5])
    start = now.timestamp() + np.array([3600.0, 86400.0 * 3, 7200.0, 50.0])
    inputs = {
        "request_lat": [40.7128] * 4,
        "request_lng": [-74.0060] * 4,
        "request_ts": [now.timestamp()] * 4,
        "request_utc_offset_min": offsets.tolist(),
        "venue_lat": venue_lat.tolist(),
        "venue_lng": venue_lng.tolist(),
        "start_ts": start.tolist(),
    }
    feast_out = view.feature_transformation.transform(inputs)
    ours = request_crosses(40.7128, -74.0060, now.timestamp(), offsets, venue_lat, venue_lng, start)
    for name in ("distance_km", "distance_bucket", "lead_time_hours", "request_hour_of_week"):
        np.testing.assert_array_equal(np.asarray(feast_out[name], dtype=float), ours[name], err_msg=name)


def test_category_affinity_equals_the_feast_view() -> None:
    from features.crosses import category_affinity as view

    world = synthetic.make_world(n_events=40, n_users=3)
    user = world.users["u00001"]
    rows = np.arange(10, dtype=np.int64)
    categories = [world.snapshot.categories[c] for c in world.snapshot.category_code[rows]]
    inputs = {"category": categories, **{a: [user.values[a]] * len(rows) for a in AFFINITY_FEATURES}}
    feast_out = view.feature_transformation.transform(inputs)["category_affinity"]
    np.testing.assert_array_equal(
        _category_affinity(world.snapshot, rows, user), np.asarray(feast_out, float)
    )
    assert np.isnan(_category_affinity(world.snapshot, rows, None)).all()
    assert np.isnan(_category_affinity(world.snapshot, rows, UserRow("x", {}))).all()
