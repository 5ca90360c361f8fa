"""Simulator -> ingestion -> gold features on real Spark + Delta, checked against the manifest.

The simulator says exactly how many records it generated, redelivered and broke; ingestion's
counts must reproduce those numbers, and the gold tables must be built from what landed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from conf import Settings
from contracts.errors import DataContractError
from contracts.landing import ENTITIES
from pipelines.features.jobs import GOLD_KEYS, build_gold
from pipelines.features.travel_time import TravelTimeMatrix, build_travel_time
from pipelines.features.validation import validate_gold
from pipelines.ingest.run import build_silver, ingest_bronze
from simulator import SimulationConfig, SimulationSummary, simulate
from tests.conftest import make_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    from delta.tables import DeltaTable

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
    travel = DeltaTable.forPath(spark, settings.lake.table_path("gold", "travel_time"))
    travel_version = travel.history(1).first()["version"]
    # Spark's explode of each origin's row lines every destination up with its own minutes.
    nyc = TravelTimeMatrix.from_frame(travel.toDF().where("metro = 'nyc'").toPandas())
    expected = build_travel_time("nyc", nyc.cell_names())
    assert len(nyc.cells) > 10 and np.array_equal(nyc.minutes, expected.minutes)
    second = build_gold(settings, None, end, run_id="gold-2")
    assert all(c == {"inserted": 0, "updated": 0, "deleted": 0} for c in second["tables"].values()), second
    # The same cells and model: the travel-time table is not rewritten.
    assert second["travel_time_rows"] == first["travel_time_rows"] > 0
    assert travel.history(1).first()["version"] == travel_version
    assert all(m > 0 for m in first["pseudocounts"].values() if m)


def test_rerunning_a_past_interval_after_later_deliveries_leaves_gold_identical(
    spark: SparkSession, tmp_path: Path
) -> None:
    """What the hourly run for [h0, h1) wrote is what a re-run (or a backfill) of it writes later.

    Between the two runs everything delivered from h1 on is ingested: late lines whose instants
    fall before h1, and newer versions (profile edits) of records the first run saw.
    Gold built as of h1 must still read only what had been delivered by h1.
    """
    from pyspark.sql import functions as F

    from pipelines.features.jobs import KNOWN_AT
    from pipelines.silver import delivered_key
    from tests.system.cluster_pipeline import table_hash

    settings = make_settings(tmp_path / "home")
    # Long enough that attendance (delivered 7 to 17 days after the event) exists by h1.
    config = SimulationConfig(users=300, days=12, seed=11)
    summary = simulate(config, Path(settings.landing.root), settings.home / "simulator")
    h1 = datetime.fromisoformat(summary.window_start.replace("Z", "+00:00")) + timedelta(days=11)
    h0 = h1 - timedelta(hours=1)
    ingest_bronze(settings, None, h1, run_id="live")
    build_silver(settings, None, h1, run_id="live")
    build_gold(settings, h0, h1, run_id="live")
    paths = {t: settings.lake.table_path("gold", t) for t in GOLD_KEYS}
    live = {t: table_hash(spark, p, by_column=True) for t, p in paths.items()}
    assert all(h["rows"] > 0 for h in live.values()), live

    ingest_bronze(settings, h1, None, run_id="later")
    build_silver(settings, h1, None, run_id="later")
    # The later deliveries hold what a re-run could wrongly see: lines about the past that arrived
    # late, and profile edits of users whose earlier version was delivered by h1.
    h1_key, h1_naive = delivered_key(h1), h1.replace(tzinfo=None)
    silver = {t: spark.read.format("delta").load(settings.lake.table_path("silver", t)) for t in KNOWN_AT}
    late = {
        t: df.filter((F.col("_delivered") >= h1_key) & (F.col(KNOWN_AT[t]) < h1_naive)).count()
        for t, df in silver.items()
    }
    assert sum(late.values()) > 0, late
    bronze = spark.read.format("delta").load(settings.lake.table_path("bronze", "users"))
    seen = bronze.filter(F.col("_delivered") < h1_key).select("user_id")
    assert silver["users"].filter(F.col("_delivered") >= h1_key).join(seen, "user_id").count() > 0

    rerun = build_gold(settings, h0, h1, run_id="rerun")
    assert all(c == {"inserted": 0, "updated": 0, "deleted": 0} for c in rerun["tables"].values()), rerun
    again = {t: table_hash(spark, p, by_column=True) for t, p in paths.items()}
    changed = {
        t: sorted(c for c, h in again[t]["columns"].items() if live[t]["columns"].get(c) != h)
        for t in GOLD_KEYS
        if again[t] != live[t]
    }
    assert not changed, changed


@pytest.fixture(scope="module")
def hourly_and_backfill(spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The lake built hour by hour, and by one run over the same range from nothing; per table,
    the hash of its rows (without the run's own columns), and for gold also without ``created``
    and per column.

    The hours hold Europe's fall-back (2026-10-25 01:00Z: London 02:00 BST -> 01:00 GMT, Berlin
    and Paris 03:00 CEST -> 02:00 CET). The hourly runs do what the hourly DAGs do: each ingests
    its hour's delivery into bronze and silver, then MERGEs gold's late-arrival window into what
    the runs before it wrote. The backfill ingests everything delivered by the last hour's end in
    one run and computes every gold row at once.
    """
    import shutil

    from pipelines.ingest.run import QUARANTINE_TABLE, SILVER_TABLES
    from tests.system.cluster_pipeline import table_hash

    live = make_settings(tmp_path_factory.mktemp("hourly"))
    config = SimulationConfig(users=300, days=12, seed=11, start=datetime(2026, 10, 14, tzinfo=UTC))
    simulate(config, Path(live.landing.root), live.home / "simulator")
    backfill = make_settings(tmp_path_factory.mktemp("backfill"))
    shutil.copytree(live.landing.root, backfill.landing.root, dirs_exist_ok=True)
    h0, hours = datetime(2026, 10, 25, 0, tzinfo=UTC), 3
    end = h0 + timedelta(hours=hours)

    def build(settings: Settings, start: datetime | None, stop: datetime, run_id: str) -> None:
        ingest_bronze(settings, start, stop, run_id=run_id)
        build_silver(settings, start, stop, run_id=run_id)
        build_gold(settings, start, stop, run_id=run_id)

    build(live, None, h0, "live-0")
    for i in range(hours):
        build(live, h0 + timedelta(hours=i), h0 + timedelta(hours=i + 1), f"live-{i + 1}")
    build(backfill, None, end, "backfill")

    def hashes(settings: Settings) -> dict[str, Any]:
        paths = {t: settings.lake.table_path("gold", t) for t in GOLD_KEYS}
        lake = {
            f"{layer}.{t}": settings.lake.table_path(layer, t)
            for layer in ("bronze", "silver")
            for t in SILVER_TABLES
        }
        lake["quarantine"] = settings.lake.table_path(*QUARANTINE_TABLE)
        return {
            "gold": {
                t: {
                    "values": table_hash(spark, path, by_column=True, ignore=("created",)),
                    "with_created": table_hash(spark, path)["hash"],
                }
                for t, path in paths.items()
            },
            "ingested": {t: table_hash(spark, path, ignore=("run_id",)) for t, path in lake.items()},
        }

    return {"live": hashes(live), "backfill": hashes(backfill)}


def test_hourly_ingest_across_a_dst_switch_writes_the_bronze_and_silver_one_backfill_writes(
    hourly_and_backfill,
) -> None:  # type: ignore[no-untyped-def]
    """Every row, quarantined ones included, by an order-free hash of all its columns but the run's."""
    live, backfill = hourly_and_backfill["live"]["ingested"], hourly_and_backfill["backfill"]["ingested"]
    assert {t for t in live if live[t] != backfill[t]} == set(), {t: (live[t], backfill[t]) for t in live}
    # Every silver table holds rows by the window's end (users, events, impressions, outcomes ...).
    assert {t for t, h in live.items() if t.startswith("silver.") and not h["rows"]} == set()
    assert live["quarantine"]["rows"] > 0  # the simulator breaks some lines on purpose


def test_hourly_runs_across_a_dst_switch_write_the_values_one_backfill_writes(hourly_and_backfill) -> None:  # type: ignore[no-untyped-def]
    live, backfill = hourly_and_backfill["live"]["gold"], hourly_and_backfill["backfill"]["gold"]
    differ = {
        t: sorted(
            c for c, h in live[t]["values"]["columns"].items() if backfill[t]["values"]["columns"].get(c) != h
        )
        or live[t]["values"]["rows"] - backfill[t]["values"]["rows"]
        for t in GOLD_KEYS
        if live[t]["values"] != backfill[t]["values"]
    }
    assert not differ, differ
    # Eleven days in, outcomes have been delivered: every table has rows to compare.
    assert {t: h["values"]["rows"] for t, h in live.items() if not h["values"]["rows"]} == {}


def test_hourly_runs_across_a_dst_switch_stamp_created_as_one_backfill_does(hourly_and_backfill) -> None:  # type: ignore[no-untyped-def]
    """A row at a fact's own instant (a profile or event version, an event's creation) delivered
    with the next hour's export is stamped by a backfill at the end of that hour, as the hourly run
    that first read it stamped it (``transforms.KNOWN_BY``)."""
    live, backfill = hourly_and_backfill["live"]["gold"], hourly_and_backfill["backfill"]["gold"]
    assert {t for t in GOLD_KEYS if live[t]["with_created"] != backfill[t]["with_created"]} == set()
