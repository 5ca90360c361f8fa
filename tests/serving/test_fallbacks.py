"""Each dependency failure, injected: the feed still answers 25 events and names its path."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.feed import FeedRequest, serve_feed
from serving.state import ModelHolder
from serving.synthetic import DictUsers, make_head, make_state

NOW = "2026-11-05T15:00:00Z"
Q = {"user_id": "u00001", "lat": 40.72, "lng": -74.0, "now": NOW}


def _get(state) -> dict:
    r = TestClient(create_app(state)).get("/v1/feed", params=Q)
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["events"]) == 25
    return body


def test_no_model_serves_metro_popularity(world) -> None:
    body = _get(make_state(world, None))
    assert body["served_by"] == "popularity" and body["model_version"] == "popularity"
    assert all(e["score"] is None for e in body["events"])
    # ranked by the precomputed popularity, organizer cap still applied
    pop = dict(zip(world.snapshot.event_id, world.snapshot.popularity, strict=True))
    top = [pop[e["event_id"]] for e in body["events"][:24]]
    assert top[0] == max(top)


def test_nothing_in_reach_is_an_empty_feed_not_a_popularity_fallback(world, heads) -> None:
    """A request in the middle of the Atlantic: no candidate, so nothing was ranked, and the
    answer says so instead of reporting a fallback the model never needed."""
    r = TestClient(create_app(make_state(world, heads))).get(
        "/v1/feed", params={**Q, "lat": 35.0, "lng": -40.0}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["events"] == [] and body["eligible"] == 0
    assert body["served_by"] == "model+no_candidates" and body["model_version"] != "popularity"
    no_model = TestClient(create_app(make_state(world, None))).get(
        "/v1/feed", params={**Q, "lat": 35.0, "lng": -40.0}
    )
    assert no_model.json()["served_by"] == "popularity+no_candidates"


def test_a_model_that_fails_to_score_falls_back_to_popularity(world, heads) -> None:
    state = make_state(world, heads)
    broken = replace(heads[0], columns=[*heads[0].columns, "no_such_column"])
    state.models.offer(broken, heads[1], "broken")
    body = _get(state)
    assert body["served_by"] == "popularity"
    assert state.health["model"].status == "degraded"


def test_user_store_down_uses_the_last_good_row_then_cold_start(world, heads) -> None:
    users = DictUsers(world.users)
    state = make_state(world, heads, user_source=users)
    client = TestClient(create_app(state))
    first = client.get("/v1/feed", params=Q).json()
    users.fail = True
    cached = client.get("/v1/feed", params=Q).json()
    assert cached["served_by"] == "model+cached_user"
    assert [e["event_id"] for e in cached["events"][:24]] == [e["event_id"] for e in first["events"][:24]]
    cold = client.get("/v1/feed", params={**Q, "user_id": "u00003"}).json()
    assert cold["served_by"] == "model+user_store_down" and len(cold["events"]) == 25
    assert client.get("/healthz").json()["components"]["online_store"]["status"] == "down"


def test_a_failed_snapshot_refresh_keeps_the_last_snapshot(world, heads) -> None:
    state = make_state(world, heads)

    def refresh():
        raise ConnectionError("online store unreachable (injected)")

    state.refresh_snapshot_fn = refresh
    assert state.refresh_snapshot() is False
    body = _get(state)
    assert body["served_by"] == "model+last_snapshot"
    assert state.snapshot is world.snapshot
    # a later refresh that works clears it
    state.refresh_snapshot_fn = lambda: world.snapshot
    assert state.refresh_snapshot() is True
    assert _get(state)["served_by"] == "model"


def test_no_index_scans_the_snapshot_and_finds_the_same_candidates(world, heads) -> None:
    with_index = serve_feed(make_state(world, heads), FeedRequest("u00001", _now(world), 40.72, -74.0, "a"))
    scan = serve_feed(
        make_state(world, heads, with_index=False), FeedRequest("u00001", _now(world), 40.72, -74.0, "a")
    )
    assert scan.served_by == "model+index_scan"
    assert scan.candidates == with_index.candidates
    assert [e.event_id for e in scan.events] == [e.event_id for e in with_index.events]


def test_availability_store_down_applies_the_last_known_sold_out_set(world, heads) -> None:
    state = make_state(world, heads)
    sold = str(world.snapshot.event_id[0])
    world.availability.set_capacity([(sold, 1, 1)])
    state.blocked("u00001")  # one good read remembers the sold-out set
    world.availability.close()
    body = _get(state)
    assert body["served_by"] == "model+availability_stale"
    assert sold not in {e["event_id"] for e in body["events"]}


def test_a_model_for_another_feature_schema_is_refused_and_the_last_good_one_kept(heads) -> None:
    holder = ModelHolder({"p_rsvp_v1": "synthetic", "p_attend_v1": "synthetic"})
    assert holder.offer(heads[0], heads[1], "v1")
    other = make_head("rsvp", rounds=5, schema_hash="0123456789abcdef-other")
    assert not holder.offer(other, heads[1], "v2")
    assert holder.current is not None and holder.current.version == "v1"
    assert "trained on schema 0123456789ab" in (holder.last_refusal or "")


def test_a_model_trained_on_another_towers_embeddings_is_refused(heads) -> None:
    holder = ModelHolder({"p_rsvp_v1": "synthetic", "p_attend_v1": "synthetic"}, expected_tower="tower-syn")
    assert holder.offer(heads[0], heads[1], "v1")
    old_tower = replace(heads[0], tower_version="tower-old")
    assert not holder.offer(old_tower, heads[1], "v2")
    assert holder.current is not None and holder.current.version == "v1"
    assert "embeddings of tower tower-old" in (holder.last_refusal or "")
    # The attendance head has no embedding input: its tower does not matter.
    assert holder.offer(heads[0], replace(heads[1], tower_version=None), "v3")


def test_model_refresh_failure_is_reported_and_the_model_kept(world, heads) -> None:
    state = make_state(world, heads)

    def registry_down(holder):
        raise ConnectionError("registry unreachable (injected)")

    state.refresh_models_fn = registry_down
    state.refresh_models()
    assert state.model_version() == "rsvp:v1+attend:v1"
    assert state.health["model"].status == "degraded" and state.health["registry"].status == "down"
    assert _get(state)["served_by"] == "model+registry_down"  # the last good model, and why


def _now(world):
    return world.now


@pytest.mark.parametrize("lat", [0.0, -60.0])
def test_far_from_any_event_the_feed_is_empty_not_an_error(world, heads, lat) -> None:
    r = TestClient(create_app(make_state(world, heads))).get(
        "/v1/feed", params={**Q, "lat": lat, "lng": 10.0}
    )
    assert r.status_code == 200 and r.json()["events"] == [] and r.json()["candidates"] == 0
    assert np.isfinite(r.json()["stages_ms"]["total"])
