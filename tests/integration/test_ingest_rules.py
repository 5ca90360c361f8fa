"""Ingestion on real Spark + Delta with hand-made landing rows whose fate is known exactly."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from conf import Settings
from contracts.errors import DataContractError
from pipelines.ingest.run import build_silver, ingest_bronze
from tests.conftest import make_settings
from tests.integration.landing_lines import event, write_lines

pytestmark = pytest.mark.integration

HOUR = "2026-11-01T06"


def _table(spark, settings: Settings, layer: str, name: str):  # type: ignore[no-untyped-def]
    return spark.read.format("delta").load(settings.lake.table_path(layer, name))


def test_dst_policy_quarantine_reasons_and_counts(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Most of this batch is bad on purpose; lift the delivery gate so rows are judged one by one.
    settings = make_settings(tmp_path, INGEST__MAX_QUARANTINE_FRACTION="0.9")
    write_lines(
        settings.landing.root,
        "events",
        HOUR,
        [
            # 01:30 happens twice in New York that night: policy takes the first (EDT, UTC-4).
            event("ambiguous", start_local="2026-11-01T01:30:00"),
            event("ambiguous", start_local="2026-11-01T01:30:00"),  # redelivered: deduplicated
            event("plain", start_local="2026-11-03T19:00:00", timezone="Europe/Berlin"),
            # 02:30 never happens in New York on 2026-03-08: no honest instant -> quarantine.
            event("gap", start_local="2026-03-08T02:30:00"),
            event("wrongtype", capacity="many"),
            event("mars", timezone="Mars/Olympus"),
            event("range", duration_minutes=0),
            event("enum", category="séance"),
            event("bare", created_at="2026-10-20T12:00:00"),  # an instant without an offset
            {k: v for k, v in event("missing").items() if k != "venue_id"},
            '{"event_id": "truncated", "title": "cut off in the mid',
            event("u../../etc/passwd"),  # an id is never a path
        ],
    )
    report = ingest_bronze(settings, None, None, run_id="run-1")
    counts = report["tables"]["events"]
    assert counts == {"read": 12, "written": 2, "deduplicated": 1, "quarantined": 9}

    reasons = {r["raw"][:30]: r["reason"] for r in _table(spark, settings, "quarantine", "landing").collect()}
    assert sorted(reasons.values()) == sorted(
        [
            "nonexistent_local_time:start_local",
            "invalid_type:capacity",
            "unknown_zone:timezone",
            "out_of_range:duration_minutes",
            "not_allowed:category",
            "invalid_type:created_at",
            "missing_required:venue_id",
            "unparseable_json",
            "invalid_id:event_id",
        ]
    )
    quarantined = _table(spark, settings, "quarantine", "landing").collect()
    assert {r["run_id"] for r in quarantined} == {"run-1"}
    # Paths inside the landing zone, not absolute: the same line in a moved home is the same row.
    assert {r["source_file"] for r in quarantined} == {f"events/delivered={HOUR}/part-0000.jsonl"}

    build_silver(settings, None, None, run_id="run-1")
    rows = {r["event_id"]: r for r in _table(spark, settings, "silver", "events").collect()}
    assert set(rows) == {"ambiguous", "plain"}
    assert rows["ambiguous"]["start_at"] == datetime(2026, 11, 1, 5, 30)  # UTC, session zone UTC
    assert rows["ambiguous"]["start_was_ambiguous"] is True
    assert rows["plain"]["start_at"] == datetime(2026, 11, 3, 18, 0)  # CET, UTC+1
    assert rows["plain"]["start_was_ambiguous"] is False
    # No bare local time survives past landing.
    assert "start_local" not in _table(spark, settings, "silver", "events").columns


def test_rerun_is_idempotent_and_latest_version_wins(spark, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    write_lines(settings.landing.root, "events", HOUR, [event("e1"), event("e2")])
    # A correction of e1 arrives an hour later, and the old version is redelivered with it.
    write_lines(
        settings.landing.root,
        "events",
        "2026-11-01T07",
        [event("e1", capacity=250, updated_at="2026-10-21T09:00:00Z"), event("e2")],
    )
    first = ingest_bronze(settings, None, None, run_id="a")["tables"]["events"]
    assert first == {"read": 4, "written": 3, "deduplicated": 1, "quarantined": 0}
    build_silver(settings, None, None, run_id="a")
    again = ingest_bronze(settings, None, None, run_id="b")["tables"]["events"]
    assert again == {"read": 4, "written": 0, "deduplicated": 4, "quarantined": 0}
    build_silver(settings, None, None, run_id="b")

    assert _table(spark, settings, "bronze", "events").count() == 3
    silver = {r["event_id"]: r["capacity"] for r in _table(spark, settings, "silver", "events").collect()}
    assert silver == {"e1": 250, "e2": 100}


def test_interval_reads_only_files_delivered_in_it(spark, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    write_lines(settings.landing.root, "events", "2026-11-01T06", [event("six")])
    write_lines(settings.landing.root, "events", "2026-11-01T07", [event("seven")])
    start, end = datetime(2026, 11, 1, 7, tzinfo=UTC), datetime(2026, 11, 1, 8, tzinfo=UTC)
    report = ingest_bronze(settings, start, end, run_id="hourly")
    assert report["tables"]["events"]["read"] == 1
    build_silver(settings, start, end, run_id="hourly")
    assert [r["event_id"] for r in _table(spark, settings, "silver", "events").collect()] == ["seven"]


def test_a_broken_delivery_fails_its_gate_and_writes_nothing(spark, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    write_lines(settings.landing.root, "events", HOUR, [event("ok1"), event("ok2")])
    write_lines(
        settings.landing.root,
        "users",
        HOUR,
        # 18 of 30 lines unusable: far past both the 20% share and the 10-row floor.
        [
            *(['{"user_id": "u1", "metro": '] * 9),
            *(['{"user_id": "u2", "home_lat": 999}'] * 9),
            *(
                {
                    "user_id": f"ok{i}",
                    "metro": "nyc",
                    "home_lat": 40.7,
                    "home_lng": -74.0,
                    "signup_at": "2026-10-01T00:00:00Z",
                    "updated_at": "2026-10-01T00:00:00Z",
                }
                for i in range(12)
            ),
        ],
    )
    with pytest.raises(DataContractError) as err:
        ingest_bronze(settings, None, None, run_id="broken")
    assert "users" in str(err.value) and "_reason" in str(err.value)
    assert "events" not in str(err.value)
    from pathlib import Path

    assert not Path(settings.lake.root).exists(), "a failed gate must not write any table"


class Killed(Exception):
    pass


def test_a_run_killed_midway_and_rerun_leaves_no_duplicates(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    def deliver(settings: Settings) -> None:
        write_lines(
            settings.landing.root,
            "users",
            HOUR,
            [
                {
                    "user_id": f"u{i}",
                    "metro": "nyc",
                    "home_lat": 40.7,
                    "home_lng": -74.0,
                    "signup_at": "2026-10-01T00:00:00Z",
                    "updated_at": "2026-10-01T00:00:00Z",
                }
                for i in range(20)
            ],
        )
        write_lines(settings.landing.root, "events", HOUR, [event(f"e{i}") for i in range(30)])

    killed, clean = make_settings(tmp_path / "killed"), make_settings(tmp_path / "clean")
    deliver(killed)
    deliver(clean)

    def die_before_events(label: str, done: int, total: int) -> None:
        if label == "bronze events":
            raise Killed(label)

    with pytest.raises(Killed):
        ingest_bronze(killed, None, None, run_id="first", progress=die_before_events)
    assert _table(spark, killed, "bronze", "users").count() == 20  # users made it, events did not
    rerun = ingest_bronze(killed, None, None, run_id="second")["tables"]
    assert rerun["users"] == {"read": 20, "written": 0, "deduplicated": 20, "quarantined": 0}
    assert rerun["events"] == {"read": 30, "written": 30, "deduplicated": 0, "quarantined": 0}
    ingest_bronze(clean, None, None, run_id="clean")
    for name in ("users", "events"):
        got = _table(spark, killed, "bronze", name)
        assert got.count() == got.select("_record_id").distinct().count()
        want = {r["_record_id"] for r in _table(spark, clean, "bronze", name).collect()}
        assert {r["_record_id"] for r in got.collect()} == want


def test_ingesting_again_or_from_a_moved_home_adds_no_quarantine_row(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    home = tmp_path / "home"
    settings = make_settings(home, INGEST__MAX_QUARANTINE_FRACTION="0.9")
    write_lines(settings.landing.root, "events", HOUR, [event("ok"), event("wrongtype", capacity="many")])
    ingest_bronze(settings, None, None, run_id="run-1")
    ingest_bronze(settings, None, None, run_id="run-2")
    first = sorted(r["_quarantine_id"] for r in _table(spark, settings, "quarantine", "landing").collect())
    assert len(first) == 1

    moved = make_settings(tmp_path / "moved", INGEST__MAX_QUARANTINE_FRACTION="0.9")
    shutil.copytree(home, moved.home)
    report = ingest_bronze(moved, None, None, run_id="run-3")
    assert report["tables"]["events"]["quarantined"] == 1  # counted again, stored once
    assert (
        sorted(r["_quarantine_id"] for r in _table(spark, moved, "quarantine", "landing").collect()) == first
    )


def test_every_entity_has_its_tables_from_the_first_ingest_on(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Gold reads every silver table, so a world where no event was ever cancelled must still have
    ``silver.event_cancellations``. The first cancellation, later, lands in the table made empty."""
    from contracts.landing import ENTITIES
    from pipelines.ingest.run import ingest_interval

    six, seven, eight = (datetime(2026, 11, 1, h, tzinfo=UTC) for h in (6, 7, 8))
    cancelled = {"event_id": "e1", "cancelled_at": "2026-11-01T07:10:00Z", "reason": "weather"}
    settings, other = make_settings(tmp_path / "home"), make_settings(tmp_path / "other")
    write_lines(settings.landing.root, "events", "2026-11-01T06", [event("e1")])

    first = ingest_interval(settings, six, seven, run_id="first")

    assert first["delivered"] == ["events"]
    for layer in ("bronze", "silver"):
        counts = {name: _table(spark, settings, layer, name).count() for name in ENTITIES}
        assert counts == {name: int(name == "events") for name in ENTITIES}

    write_lines(settings.landing.root, "event_cancellations", "2026-11-01T07", [cancelled])
    second = ingest_interval(settings, seven, eight, run_id="second")

    assert second["silver"]["event_cancellations"] == {"merged": 1, "rows": 1}
    # A table made empty has the schema a first line would have given it.
    write_lines(other.landing.root, "event_cancellations", "2026-11-01T07", [cancelled])
    ingest_interval(other, seven, eight, run_id="other")
    for layer in ("bronze", "silver"):
        made_empty = _table(spark, settings, layer, "event_cancellations").schema
        assert made_empty == _table(spark, other, layer, "event_cancellations").schema


def test_a_corrected_event_keeps_its_creation_row_from_its_first_delivery(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An event created at 06:10 and delivered with the 07:00 export, its title corrected at 09:10:
    one run over the whole history stamps its all-zero ``event_dynamics`` creation row at 08:00,
    as the hourly run that first read it did, and its ``event_features`` row (the latest version's
    attributes) at 11:00, after the correction's delivery: no earlier than an hourly run had it."""
    from pipelines.features.jobs import build_gold
    from pipelines.ingest.run import ingest_interval

    settings = make_settings(tmp_path / "home")
    root = settings.landing.root
    user = {
        "user_id": "u1",
        "metro": "nyc",
        "home_lat": 40.7,
        "home_lng": -74.0,
        "signup_at": "2026-11-01T06:00:00Z",
        "updated_at": "2026-11-01T06:00:00Z",
    }
    venue = {
        "venue_id": "v1",
        "name": "Hall",
        "metro": "nyc",
        "lat": 40.71,
        "lng": -74.0,
        "timezone": "America/New_York",
        "created_at": "2026-11-01T06:00:00Z",
    }
    write_lines(root, "users", "2026-11-01T06", [user])
    write_lines(root, "venues", "2026-11-01T06", [venue])
    created = {"created_at": "2026-11-01T06:10:00Z", "updated_at": "2026-11-01T06:10:00Z"}
    write_lines(root, "events", "2026-11-01T07", [event("e1", **created)])
    corrected = {**created, "title": "Event e1, new title", "updated_at": "2026-11-01T09:10:00Z"}
    write_lines(root, "events", "2026-11-01T10", [event("e1", **corrected)])
    ingest_interval(settings, None, None, run_id="all")

    build_gold(settings, None, datetime(2026, 11, 1, 12, tzinfo=UTC), run_id="backfill")

    def created_of(table: str) -> list[datetime]:
        return [r["created"] for r in _table(spark, settings, "gold", table).collect()]

    assert created_of("event_dynamics") == [datetime(2026, 11, 1, 8)]
    assert created_of("event_features") == [datetime(2026, 11, 1, 11)]
