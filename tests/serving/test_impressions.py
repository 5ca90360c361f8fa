"""The impression log: landing-schema lines under the landing zone; slot 25's exploration share."""

from __future__ import annotations

import json
import re
from collections import Counter

from fastapi.testclient import TestClient

from contracts.landing import ENTITIES, ID_PATTERN
from serving.app import create_app
from serving.feed import FeedRequest, serve_feed
from serving.impressions import LandingImpressionLog, MemoryImpressionLog
from serving.synthetic import make_state

INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$")
KIND_TYPES = {"string": str, "id": str, "int": int, "bool": bool, "instant": str}


def _valid_landing_line(record: dict) -> None:
    entity = ENTITIES["impressions"]
    assert set(record) == set(entity.field_names)
    for f in entity.fields:
        value = record[f.name]
        if value is None:
            assert not f.required, f.name
            continue
        assert isinstance(value, KIND_TYPES[f.kind]), f.name
        if f.kind == "int":
            assert f.min <= value <= f.max
        if f.kind == "instant":
            assert INSTANT.match(value)
        if f.kind == "id":
            assert re.match(ID_PATTERN, value), (f.name, value)
        if f.allowed is not None:
            assert value in f.allowed, (f.name, value)


def test_each_response_lands_as_impression_lines_ingestion_can_read(
    world, heads, tmp_path, request_ids
) -> None:
    log = LandingImpressionLog(tmp_path / "landing", writer_id="serving-test")
    client = TestClient(create_app(make_state(world, heads, impressions=log), new_request_id=request_ids))
    body = client.get(
        "/v1/feed", params={"user_id": "u00001", "lat": 40.72, "lng": -74.0, "now": "2026-11-05T15:04:05Z"}
    ).json()
    files = list((tmp_path / "landing" / "impressions").glob("delivered=*/part-*.jsonl"))
    assert [f.relative_to(tmp_path / "landing").as_posix() for f in files] == [
        "impressions/delivered=2026-11-05T15/part-serving-test.jsonl"
    ]
    lines = [json.loads(line) for line in files[0].read_text().splitlines()]
    for line in lines:
        _valid_landing_line(line)
    feed = [r for r in lines if r["surface"] == "home_feed"]
    assert [r["event_id"] for r in feed] == [e["event_id"] for e in body["events"]]
    assert {r["request_id"] for r in lines} == {body["request_id"]}
    assert len({r["impression_id"] for r in lines}) == len(lines)
    assert [r["is_exploration"] for r in feed] == [False] * 24 + [True]
    assert feed[24]["exploration_kind"] == body["events"][24]["exploration_kind"]
    weekend = [r for r in lines if r["surface"] == "near_you_this_weekend"]
    assert len(weekend) == len(body["near_you_this_weekend"]) and all(
        not r["is_exploration"] for r in weekend
    )


def test_slot_25_splits_between_random_and_cold_organizers_and_is_one_in_25(world, heads) -> None:
    sink = MemoryImpressionLog()
    state = make_state(world, heads, impressions=sink)
    for i in range(200):
        serve_feed(state, FeedRequest(f"u{i % 40:05d}", world.now, 40.72, -74.0, f"r{i}"))
    feed = [r for r in sink.records if r["surface"] == "home_feed"]
    explored = [r for r in feed if r["is_exploration"]]
    assert len(explored) == 200 and {r["position"] for r in explored} == {25}
    kinds = Counter(r["exploration_kind"] for r in explored)
    assert 70 <= kinds["cold_organizer"] <= 130 and kinds["random"] + kinds["cold_organizer"] == 200
    cold_orgs = set(world.catalog.loc[world.catalog["org_event_count"].isna(), "organizer_id"]) | set(
        world.catalog.loc[world.catalog["org_event_count"] <= 2, "organizer_id"]
    )
    organizer = dict(zip(world.catalog["event_id"], world.catalog["organizer_id"], strict=True))
    assert all(
        organizer[r["event_id"]] in cold_orgs for r in explored if r["exploration_kind"] == "cold_organizer"
    )
    assert len(explored) / len(feed) == 1 / 25
