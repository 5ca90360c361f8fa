"""The feed over HTTP: its shape, the organizer cap, slot 25, input validation, health, metrics."""

from __future__ import annotations

from collections import Counter

import pytest
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.synthetic import make_state

NOW = "2026-11-05T15:00:00Z"


@pytest.fixture
def client(world, heads, request_ids) -> TestClient:
    return TestClient(create_app(make_state(world, heads), new_request_id=request_ids))


def test_a_feed_has_25_ranked_events_with_probabilities_and_a_weekend_module(client) -> None:
    r = client.get("/v1/feed", params={"user_id": "u00001", "lat": 40.72, "lng": -74.0, "now": NOW})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["served_by"] == "model" and body["model_version"] == "rsvp:v1+attend:v1"
    assert body["request_id"] == "req00000" and body["location_source"] == "gps"
    events = body["events"]
    assert [e["position"] for e in events] == list(range(1, 26))
    assert len({e["event_id"] for e in events}) == 25
    for e in events[:24]:
        assert 0.0 <= e["score"] <= 1.0
        assert e["score"] == pytest.approx(e["p_rsvp"] * e["p_attend_given_rsvp"])
        assert 0 <= e["distance_km"] <= 40.23 and e["friends_going"] >= 0
    assert max(Counter(e["organizer_id"] for e in events).values()) <= 2
    assert [e["is_exploration"] for e in events] == [False] * 24 + [True]
    assert events[24]["exploration_kind"] in ("random", "cold_organizer")
    weekend = body["near_you_this_weekend"]
    assert 0 < len(weekend) <= 6
    for e in weekend:  # Thursday 2026-11-05 -> the weekend of Sat 7 / Sun 8 in New York
        assert e["starts_at_local"][:10] in ("2026-11-07", "2026-11-08") and e["distance_km"] <= 16.1


def test_an_unknown_user_gets_the_cold_start_path_not_an_error(client) -> None:
    r = client.get("/v1/feed", params={"user_id": "never-seen", "lat": 40.72, "lng": -74.0, "now": NOW})
    assert r.status_code == 200 and len(r.json()["events"]) == 25
    assert r.json()["served_by"] == "model"


def test_without_gps_the_users_home_is_used(client) -> None:
    r = client.get("/v1/feed", params={"user_id": "u00002", "now": NOW})
    assert r.status_code == 200 and r.json()["location_source"] == "home"


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"lat": 91, "lng": 0}, "less than or equal"),
        ({"lat": 0, "lng": -181}, "greater than or equal"),
        ({"lat": "north", "lng": 0}, "valid number"),
        ({"lat": 40.7}, "both lat and lng"),
        ({"lat": 40.7, "lng": -74, "now": "2026-11-05T15:00:00"}, "no UTC offset"),
        ({"lat": 40.7, "lng": -74, "now": "yesterday"}, "not an ISO-8601 instant"),
        ({"user_id": "", "lat": 40.7, "lng": -74}, "should match pattern"),
    ],
)
def test_bad_input_is_a_clear_422(client, params, needle) -> None:
    r = client.get("/v1/feed", params={"user_id": "u00001", "now": NOW, **params})
    assert r.status_code == 422
    assert needle in r.text


def test_an_unknown_user_without_a_location_is_told_to_send_one(client) -> None:
    r = client.get("/v1/feed", params={"user_id": "never-seen", "now": NOW})
    assert r.status_code == 422 and "send lat and lng" in r.json()["detail"]


def _requests_served(client, path: str) -> float:
    prefix = f'turnout_feed_requests_total{{served_by="{path}"}} '
    lines = [line for line in client.get("/metrics").text.splitlines() if line.startswith(prefix)]
    return float(lines[0].removeprefix(prefix)) if lines else 0.0


def test_healthz_reports_each_component_and_metrics_are_prometheus_text(client) -> None:
    # Importing feast switches prometheus_client to multiprocess mode for the whole process
    # (feast/metrics.py sets PROMETHEUS_MULTIPROCESS_DIR), where counters of the same name are
    # shared across registries: compare before and after, not absolute values.
    client.get("/v1/feed", params={"user_id": "u00001", "lat": 40.72, "lng": -74.0, "now": NOW})
    before = _requests_served(client, "model")
    assert before >= 1
    client.get("/v1/feed", params={"user_id": "u00001", "lat": 40.72, "lng": -74.0, "now": NOW})
    assert _requests_served(client, "model") == before + 1
    health = client.get("/healthz").json()
    assert health["status"] == "ok"
    assert set(health["components"]) == {
        "index",
        "catalog",
        "snapshot",
        "model",
        "registry",
        "online_store",
        "availability",
        "impression_log",
    }
    assert health["components"]["model"]["version"] == "rsvp:v1+attend:v1"
    assert health["components"]["model"]["scoring"] == "lightgbm"  # synthetic heads are not compiled
    text = client.get("/metrics").text
    assert "turnout_feed_stage_seconds_bucket" in text and "turnout_snapshot_data_age_seconds" in text
