"""A real feed from a real (small) world: simulate -> ingest -> gold -> tower -> index -> Feast
materialization -> both heads promoted (the session's ``trained_world``) -> ``load_serving_state``
-> ``serve_feed``.

The hard filters are checked against silver read independently of the serving counter.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conf import Settings
from serving.feed import FeedRequest, serve_feed
from serving.state import ServingState
from tests.integration.training_world import AS_OF, TrainedWorld

# Shares the session's trained world (tests/conftest.py); building it counts against one test.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(2400)]


@dataclass
class Live:
    settings: Settings
    state: ServingState


@pytest.fixture(scope="module")
def live(spark: Any, trained_world: TrainedWorld) -> Live:
    from serving.live import load_serving_state

    settings = trained_world.settings
    return Live(settings, load_serving_state(settings, AS_OF))


def _silver(spark: Any, settings: Settings, name: str) -> pd.DataFrame:
    return spark.read.format("delta").load(settings.lake.table_path("silver", name)).toPandas()


def _busiest_user(state: ServingState) -> str:
    """The user with the most RSVPs to live events (so the already-RSVPed filter has work)."""
    db = state.availability.inner._db  # type: ignore[attr-defined]
    row = db.execute(
        "SELECT user_id FROM rsvps GROUP BY user_id ORDER BY COUNT(*) DESC, user_id LIMIT 1"
    ).fetchone()
    assert row is not None, "no RSVPs to live events in the world"
    return str(row[0])


def eligible_events(
    state: ServingState, user: str, lat: float | None = None, lng: float | None = None
) -> int:
    """Candidates that pass the hard filters for ``user`` (retrieved independently of serve_feed)."""
    from serving.feed import FeedRequest, hard_filter, resolve_location, retrieve

    row, _ = state.users.get(user, AS_OF)
    at_lat, at_lng, _ = resolve_location(FeedRequest(user, AS_OF, lat, lng), row)
    got = retrieve(state, at_lat, at_lng, AS_OF)
    blocked, _ = state.blocked(user)
    keep = hard_filter(state.snapshot, got.rows, AS_OF.timestamp(), blocked.unavailable, blocked.rsvped)
    return int(keep.sum())


def expected_feed_size(
    state: ServingState, user: str, lat: float | None = None, lng: float | None = None
) -> int:
    """A feed is filled: 25 events, or every eligible one where fewer are in range."""
    return min(state.config.feed_size, eligible_events(state, user, lat, lng))


def test_a_real_feed_is_served_by_the_model_and_passes_every_hard_filter(spark: Any, live: Live) -> None:
    state, settings = live.state, live.settings
    assert state.index is not None and state.models.current is not None
    assert len(state.snapshot) > 25
    user = _busiest_user(state)
    result = serve_feed(state, FeedRequest(user, AS_OF, request_id="live-req-1"))

    assert result.served_by == "model", result.served_by
    assert result.model_version.startswith("rsvp:v") and "+attend:v" in result.model_version
    # The champions' trees were compiled at registration and load as native code here, and the
    # p_rsvp head was trained beside the published tower's embeddings.
    scorer = state.models.current.scorer
    assert scorer.backend() == "compiled"
    assert scorer.rsvp is not None and scorer.rsvp.tower_version == state.snapshot.tower_version is not None
    # 24 ranked slots (2 per organizer while others have room, then filled), + slot 25
    assert result.eligible > 0
    assert len(result.events) == expected_feed_size(state, user)
    assert result.location_source == "home"

    now = AS_OF.replace(tzinfo=None)
    events = _silver(spark, settings, "events").set_index("event_id")
    cancelled = set(_silver(spark, settings, "event_cancellations").query("cancelled_at <= @now")["event_id"])
    rsvps = _silver(spark, settings, "rsvps").query("rsvp_at <= @now")
    mine = set(rsvps.loc[rsvps["user_id"] == user, "event_id"])
    assert mine, "the busiest user has RSVPs"
    snaps = _silver(spark, settings, "capacity_snapshots").query("snapshot_at <= @now")
    newest = snaps.sort_values("snapshot_at").groupby("event_id").tail(1).set_index("event_id")
    taken = rsvps.groupby("event_id").size()
    shown = [e.event_id for e in [*result.events, *result.near_you_this_weekend]]
    assert len(set(e.event_id for e in result.events)) == len(result.events)
    for event_id in shown:
        ev = events.loc[event_id]
        assert ev["created_at"] <= now < ev["start_at"], event_id
        assert event_id not in cancelled and event_id not in mine, event_id
        if event_id in newest.index:
            assert int(newest.loc[event_id, "seats_taken"]) < int(newest.loc[event_id, "capacity"]), event_id
        else:
            assert taken.get(event_id, 0) < ev["capacity"], event_id
    for e in result.events:
        assert e.score is not None and 0.0 <= e.score <= 1.0
        assert e.p_rsvp is not None and 0.0 <= e.p_rsvp <= 1.0
        assert e.p_attend_given_rsvp is not None and 0.0 <= e.p_attend_given_rsvp <= 1.0
        assert np.isfinite(e.distance_km) and e.timezone
    assert sum(e.is_exploration for e in result.events) <= 1

    lines = [
        json.loads(line)
        for path in Path(settings.landing.root, "impressions").rglob("part-serving-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    logged = [r for r in lines if r["request_id"] == "live-req-1"]
    assert len(logged) == len(result.events) + len(result.near_you_this_weekend)
    assert {r["model_version"] for r in logged} == {result.model_version}
    assert [r["event_id"] for r in logged if r["surface"] == "home_feed"] == [
        e.event_id for e in result.events
    ]


def test_an_unknown_user_with_gps_gets_the_cold_start_feed(live: Live) -> None:
    state = live.state
    # at the venue of the soonest live event (medians across metros land in no metro)
    first = int(
        np.nanargmin(np.where(state.snapshot.start_ts > AS_OF.timestamp(), state.snapshot.start_ts, np.nan))
    )
    lat, lng = float(state.snapshot.venue_lat[first]), float(state.snapshot.venue_lng[first])
    result = serve_feed(state, FeedRequest("nobody-at-all", AS_OF, lat, lng, request_id="live-req-2"))
    assert result.served_by == "model" and result.location_source == "gps"
    assert result.events and all(e.score is not None for e in result.events)


def test_a_champion_on_another_schema_is_refused(live: Live, monkeypatch: pytest.MonkeyPatch) -> None:
    import serving.live as serving_live

    monkeypatch.setattr(
        serving_live, "schema_hashes", lambda store, services: {s: "0" * 64 for s in services}
    )
    with pytest.raises(serving_live.NotPublished, match="schema"):
        serving_live.load_serving_state(live.settings, AS_OF)


def test_turnout_feed_prints_the_response_as_the_last_line(
    live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from cli.main import app

    monkeypatch.setenv("TURNOUT_HOME", str(live.settings.home))
    monkeypatch.delenv("TURNOUT_PROFILE", raising=False)
    user = _busiest_user(live.state)
    got = CliRunner().invoke(app, ["feed", "--user-id", user, "--now", AS_OF.isoformat(), "--json"])
    assert got.exit_code == 0, got.output
    response = json.loads(got.stdout.strip().splitlines()[-1])
    assert response["user_id"] == user and response["served_by"] == "model"
    assert len(response["events"]) == expected_feed_size(live.state, user) > 0


def test_the_service_follows_a_newly_published_index(live: Live) -> None:
    """The refresher's index step: a new version behind the pointer is loaded and served; the
    pointer is rolled back afterwards (the trained world is shared)."""
    from pipelines.index.run import build_and_publish_index, rollback_index

    state = live.state
    before = state.index_version
    assert state.refresh_index() is False  # nothing new
    published = build_and_publish_index(live.settings, AS_OF)
    try:
        assert state.refresh_index() is True
        assert state.index_version == published["build"]["version"] != before
        assert state.health["index"].status == "ok"
        result = serve_feed(state, FeedRequest(_busiest_user(state), AS_OF, request_id="live-req-index"))
        assert result.served_by == "model" and result.events
    finally:
        rollback_index(live.settings)
        state.refresh_index()
    assert state.index_version == before


def test_turnout_serve_starts_without_a_jvm_and_answers(live: Live) -> None:
    """The real command as a process over the published state: it answers /healthz and a feed, and
    neither it nor anything it started maps a JVM (the same measurement bench_service_startup makes)."""
    import sys
    from pathlib import Path

    from bench.bench_service_startup import one_run

    turnout = str(Path(sys.executable).with_name("turnout"))
    user = _busiest_user(live.state)
    got = one_run(turnout, live.settings.home, AS_OF.isoformat(), user, timeout_s=300)
    assert got["feed_status"] == 200
    assert got["jvm"] is False, got


def test_every_published_user_gets_a_full_feed_from_home_with_slot_25_exploring(live: Live) -> None:
    """Every user of the world's landing files (those ingestion accepted), with or without a
    feature row online: a feed from their home, filled to 25 where 25 are eligible, and an
    exploration pick in the last slot whenever an event is left after the ranked ones."""
    from collections import Counter

    from contracts.landing import ID_PATTERN

    delivered: set[str] = set()
    for path in Path(live.settings.landing.root, "users").rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # the simulator's truncated lines: never a user
                continue
            if isinstance(record, dict) and isinstance(record.get("user_id"), str):
                delivered.add(record["user_id"])
    state = live.state
    users = sorted(u for u in delivered if re.match(ID_PATTERN, u) and state.users.home_of(u) is not None)
    assert len(users) > 0.95 * len({u for u in delivered if not u.startswith("bad-")})
    sizes: Counter[int] = Counter()
    rowless = [
        u for u in users if set(state.users.inner.get(u, AS_OF).values) == {"home_lat", "home_lng", "metro"}
    ]
    assert rowless, "the world should have users whose feature row is not online (outside its TTL)"
    for i, user in enumerate(users):
        result = serve_feed(state, FeedRequest(user, AS_OF, request_id=f"every-user-{i}"))
        assert result.location_source == "home", user
        assert len(result.events) == min(25, result.eligible), (user, len(result.events), result.eligible)
        if result.eligible >= 2:
            assert result.events[-1].is_exploration, user
        sizes[len(result.events)] += 1
    assert sizes[25] > 0, sizes  # a small world: many homes have fewer than 25 events within 40 km
