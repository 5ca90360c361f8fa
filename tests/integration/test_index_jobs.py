"""The index jobs on real Spark + Delta: tower -> embeddings -> index, published and rolled back."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from contracts.geo import unit_vectors
from pipelines.index.run import (
    build_and_publish_index,
    build_index_version,
    embed_new_events,
    geo_store,
    publish_index_version,
    rollback_index,
    train_content_tower,
)
from published.geo_index import scan_candidates
from published.index_store import load_live_index
from published.tower import tower_store
from published.versioned import IndexValidationError, TowerVersionMismatch
from tests.conftest import make_settings
from tests.index_synthetic import WORLD_START, live_event_frame, make_world, write_silver

pytestmark = pytest.mark.integration

NOW = WORLD_START + timedelta(days=45, hours=6)


def test_tower_embeddings_and_index_from_silver(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = make_settings(tmp_path)
    world = make_world(seed=0, n_users=250, n_events=500)
    write_silver(spark, settings, world)

    # No tower yet: nothing to embed with, and the index records no tower version.
    assert embed_new_events(settings, NOW)["status"] == "skipped"

    tower = train_content_tower(settings, NOW)
    assert tower["status"] == "published" and tower["previous_version"] is None
    assert tower["holdout"]["margin"] > 0.1
    assert tower["similarity"]["organizer_id"]["margin"] > 0.3

    first = embed_new_events(settings, NOW)
    assert first["tower_version"] == tower["version"]
    expected = world.events[
        (world.events["created_at"] <= NOW) & (world.events["start_at"] > NOW - timedelta(days=90))
    ]
    assert first["candidates"] == first["merged"] == len(expected)
    again = embed_new_events(settings, NOW)
    assert again["candidates"] == again["merged"] == 0  # idempotent: a retried task writes nothing

    table = spark.read.format("delta").load(settings.lake.table_path("gold", "event_embeddings"))
    rows = table.collect()
    assert len(rows) == len(expected) and {r["tower_version"] for r in rows} == {tower["version"]}
    one = next(r for r in rows if r["event_id"] == expected["event_id"].iloc[0])
    assert len(one["embedding"]) == 64 and abs(np.linalg.norm(one["embedding"]) - 1) < 1e-4
    # First vector of an event: stamped at its creation; written when the tower (trained at NOW) existed.
    assert one["event_timestamp"] == expected["created_at"].iloc[0].tz_localize(None).to_pydatetime()
    assert one["created"] == NOW.replace(tzinfo=None)

    out = build_and_publish_index(settings, NOW)
    live = live_event_frame(world, NOW)
    assert out["build"]["events"] == len(live) and out["build"]["missing_embeddings"] == 0
    assert out["publish"]["published"] and out["publish"]["tower_version"] == tower["version"]
    served = load_live_index(geo_store(settings), expected_tower_version=tower["version"])
    assert set(served.index.event_ids.tolist()) == set(live["event_id"])  # every live event, once
    ids = live["event_id"].to_numpy().astype(np.str_)
    xyz = unit_vectors(live["lat"].to_numpy(), live["lng"].to_numpy())
    for lat, lng in [(40.75, -73.98), (51.5, -0.1), (37.8, -122.3), (52.6, 13.5), (45.0, 0.0)]:
        got = served.index.query(lat, lng, NOW)
        want = scan_candidates(ids, live["start_us"].to_numpy(), xyz, lat, lng, NOW, served.index.params)
        np.testing.assert_array_equal(got.event_ids, want)

    # A week on, the tower is retrained: until events are embedded with it, no index is published,
    # and a ranker still on the old tower refuses nothing it was not built for.
    week = NOW + timedelta(days=7)
    retrained = train_content_tower(settings, week)
    assert retrained["version"] != tower["version"]
    staged = build_index_version(settings, week)
    assert staged["tower_version"] == retrained["version"] and staged["missing_embeddings"] > 0
    with pytest.raises(IndexValidationError, match="no embedding under tower"):
        publish_index_version(settings, staged["version"], week, size_tolerance=1.0)
    with pytest.raises(TowerVersionMismatch):
        load_live_index(geo_store(settings), expected_tower_version=retrained["version"])
    embed_new_events(settings, week)
    # Two towers' vectors for one event never share an instant (Feast's one row per key and
    # instant); the new tower's are stamped no earlier than its training.
    table = spark.read.format("delta").load(settings.lake.table_path("gold", "event_embeddings"))
    assert table.count() == table.select("event_id", "event_timestamp").distinct().count()
    newer = table.filter(table.tower_version == retrained["version"]).collect()
    assert newer and all(
        r["event_timestamp"] >= week.replace(tzinfo=None)
        for r in newer
        if r["event_id"] in set(expected["event_id"])
    )
    assert all(r["created"] >= r["event_timestamp"] for r in table.collect())
    fresh = build_and_publish_index(settings, week, size_tolerance=1.0)
    assert fresh["publish"]["tower_version"] == retrained["version"]
    assert fresh["publish"]["previous"] == out["build"]["version"]
    assert load_live_index(geo_store(settings), expected_tower_version=retrained["version"])

    # Rollback restores N, which still names the old tower its vectors came from.
    assert rollback_index(settings)["to"] == out["build"]["version"]
    restored = load_live_index(geo_store(settings), expected_tower_version=tower["version"])
    assert restored.version == out["build"]["version"] and len(restored.index) == len(live)

    # A week without a single RSVP (a stale or stopped platform) keeps the published tower.
    stale = world.rsvps["rsvp_at"].max().to_pydatetime() + timedelta(days=8)
    kept = train_content_tower(settings, stale)
    assert kept["status"] == "skipped" and "no RSVP since" in kept["reason"]
    assert kept["version"] == retrained["version"] == tower_store(settings).read_pointer().version
