"""Simulator -> ingestion -> gold features on real Spark + Delta, checked against the manifest.

The simulator says exactly how many records it generated, redelivered and broke; ingestion's
counts must reproduce those numbers, and the gold tables must be built from what landed.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from conf import Settings
from contracts.errors import DataContractError
from contracts.landing import ENTITIES
from pipelines.features.jobs import GOLD_KEYS, build_gold
from pipelines.features.validation import validate_gold
from pipelines.ingest.run import build_silver, ingest_bronze
from simulator import SimulationConfig, SimulationSummary, simulate
from tests.conftest import make_settings

pytestmark = pytest.mark.integration

CONFIG = SimulationConfig(users=400, days=6, seed=11)


@pytest.fixture(scope="module")
def world(
    spark, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Settings, SimulationSummary, dict[str, Any]]:  # type: ignore[no-untyped-def]
    settings = make_settings(tmp_path_factory.mktemp("simulated"))
    summary = simulate(CONFIG, Path(settings.landing.root), settings.home / "simulator")
    report = ingest_bronze(settings, None, None, run_id="sim-1")
    build_silver(settings, None, None, run_id="sim-1")
    return settings, summary, report


def test_counts_reproduce_the_simulator_manifest(world) -> None:  # type: ignore[no-untyped-def]
    _, summary, report = world
    for name in ENTITIES:
        made = summary.entities[name]
        got = report["tables"][name]
        assert got["read"] == got["written"] + got["deduplicated"] + got["quarantined"], name
        assert got["read"] == made.lines_written, name
        assert got["quarantined"] == made.malformed_total, name
        assert got["deduplicated"] == made.duplicates, name
        assert got["written"] == made.generated, name


def test_rerun_writes_nothing_and_silver_has_one_row_per_key(spark, world) -> None:  # type: ignore[no-untyped-def]
    settings, summary, _ = world
    again = ingest_bronze(settings, None, None, run_id="sim-2")
    assert all(t["written"] == 0 for t in again["tables"].values())
    build_silver(settings, None, None, run_id="sim-2")
    for name, entity in ENTITIES.items():
        silver = spark.read.format("delta").load(settings.lake.table_path("silver", name))
        keys = ["user_id", "friend_id"] if name == "friendships" else list(entity.key)
        assert silver.count() == silver.select(*keys).distinct().count(), name
    friendships = spark.read.format("delta").load(settings.lake.table_path("silver", "friendships"))
    assert friendships.count() == 2 * summary.entities["friendships"].generated  # both directions


def test_gold_tables_are_built_idempotently(spark, world) -> None:  # type: ignore[no-untyped-def]
    settings, summary, _ = world
    # Everything delivered, including attendance that lands up to 17 days after the window.
    end = datetime.fromisoformat(summary.delivered_last.replace("Z", "+00:00")) + timedelta(hours=1)
    first = build_gold(settings, None, end, run_id="gold-1")
    assert set(first["tables"]) == set(GOLD_KEYS)
    for name, counts in first["tables"].items():
        table = spark.read.format("delta").load(settings.lake.table_path("gold", name))
        assert table.count() == counts["inserted"] > 0, name
        keys = [*GOLD_KEYS[name], "event_timestamp"]
        assert table.count() == table.select(*keys).distinct().count(), name
        latest = table.agg({"event_timestamp": "max"}).first()[0]
        assert latest < end.replace(tzinfo=None), name
    # The simulator creates no events or RSVPs after its window, only late labels: as of `end`
    # the event-side tables are stale and the freshness gate must say so, naming them.
    stale = {"event_features", "event_dynamics", "social"}
    with pytest.raises(DataContractError) as err:
        validate_gold(settings, end)
    assert {t for t in GOLD_KEYS if f"gold.{t}:" in str(err.value)} == stale
    # Everything else is exactly what features/ declares and the gold suites accept.
    fresh = sorted(set(GOLD_KEYS) - stale)
    checked = validate_gold(settings, end, tables=fresh)
    assert sorted(checked["tables"]) == fresh
    assert all(t["success"] for t in checked["tables"].values())
    second = build_gold(settings, None, end, run_id="gold-2")
    assert all(c == {"inserted": 0, "updated": 0, "deleted": 0} for c in second["tables"].values()), second
    assert first["travel_time_rows"] > 0
    assert all(m > 0 for m in first["pseudocounts"].values() if m)
