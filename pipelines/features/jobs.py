"""Gold feature jobs: read silver, call the pure transforms, MERGE the rows of one interval.

``build_gold(settings, start, end, run_id)`` recomputes every gold table from silver inputs known
before ``end`` and writes the rows whose ``event_timestamp`` falls in
``[start - LATE_ARRIVAL_WINDOW, end)``, so data delivered late still lands in the window it
belongs to. Writes are MERGEs on (keys, event_timestamp): a row whose values did not change keeps
its ``created``, so re-running an interval changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from conf import Settings

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
LATE_ARRIVAL_WINDOW = timedelta(days=3)

GOLD_KEYS: dict[str, tuple[str, ...]] = {
    "user_features": ("user_id",),
    "event_features": ("event_id",),
    "event_dynamics": ("event_id",),
    "organizer_stats": ("organizer_id",),
    "venue_stats": ("venue_id",),
    "series_stats": ("series_id",),
    "market_rates": ("market_key",),
    "social": ("user_id", "event_id"),
}
# When each silver row became known: inputs after the run's end are invisible to it.
KNOWN_AT: dict[str, str] = {
    "users": "updated_at",
    "friendships": "created_at",
    "venues": "created_at",
    "events": "created_at",
    "event_cancellations": "cancelled_at",
    "impressions": "served_at",
    "rsvps": "rsvp_at",
    "attendance": "observed_at",
    "ratings": "rated_at",
    "capacity_snapshots": "snapshot_at",
}
# Public holidays by venue zone's country (days_to_nearest_holiday).
ZONE_COUNTRY = {
    "America/New_York": "US",
    "America/Chicago": "US",
    "America/Los_Angeles": "US",
    "America/Denver": "US",
    "Europe/London": "GB",
    "Europe/Berlin": "DE",
    "Europe/Paris": "FR",
}


def read_silver(spark: SparkSession, settings: Settings, end: datetime | None) -> dict[str, DataFrame]:
    """Every silver input as a run ending at ``end`` sees it: delivered before ``end`` and known by then.

    Also ``user_versions``: every version of every user so delivered and known (bronze's rows), for
    features that need a profile as it stood (``user_features``); and ``event_first_delivered``:
    when each event's first version was delivered (an event's creation row in ``event_dynamics``).

    Delivery decides what the run could have read (``pipelines.silver.as_delivered_by``), so a
    re-run or backfill of a past interval reads what its live run read; ``KNOWN_AT`` hides rows
    whose instant is after ``end``. Without ``end``, everything in silver.
    """
    from pyspark.sql import functions as F

    from pipelines.silver import as_delivered_by, versions_delivered_by

    versions = versions_delivered_by(spark, settings, "users", end)
    first_delivered = (
        versions_delivered_by(spark, settings, "events", end)
        .groupBy("event_id")
        .agg(F.min("_delivered").alias("_delivered"))
    )
    if end is None:
        silver = {n: spark.read.format("delta").load(settings.lake.table_path("silver", n)) for n in KNOWN_AT}
    else:
        before = F.lit(end.astimezone(UTC).replace(tzinfo=None))
        silver = {
            n: as_delivered_by(spark, settings, n, end).filter(F.col(k) < before) for n, k in KNOWN_AT.items()
        }
        versions = versions.filter(F.col(KNOWN_AT["users"]) < before)
    return {**silver, "user_versions": versions, "event_first_delivered": first_delivered}


def venues_with_cells(venues: DataFrame, settings: Settings) -> DataFrame:
    """Venues with their ring cell (res 5) and travel-time cell (res 7), computed on the executors."""
    from pyspark.sql import functions as F

    from pipelines.features.transforms import h3_cell

    lat, lng = F.col("lat"), F.col("lng")
    return venues.select(
        "venue_id",
        "metro",
        "lat",
        "lng",
        "timezone",
        h3_cell(lat, lng, settings.index.h3_resolution).alias("cell5"),
        h3_cell(lat, lng, settings.index.travel_resolution).alias("cell7"),
    )


def holiday_table(spark: SparkSession, venues: DataFrame, years: range) -> DataFrame:
    import holidays

    zones = venues.select("metro", "timezone").distinct().collect()
    rows = []
    for r in zones:
        country = ZONE_COUNTRY.get(r["timezone"])
        if country:
            rows += [(r["metro"], day) for day in holidays.country_holidays(country, years=list(years))]
    return spark.createDataFrame(rows, schema="metro string, day date")


def _merge_window(
    spark: SparkSession,
    path: str,
    rows: DataFrame,
    keys: tuple[str, ...],
    lo: datetime | None,
    hi: datetime | None,
    created: Column,
) -> dict[str, int]:
    """Make the table's rows with event_timestamp in [lo, hi) equal ``rows`` (restricted likewise)."""
    from delta.tables import DeltaTable

    from pipelines.features.transforms import KNOWN_BY

    def in_window(prefix: str) -> str:
        parts = []
        if lo is not None:
            parts.append(f"{prefix}event_timestamp >= TIMESTAMP '{lo:%Y-%m-%d %H:%M:%S}'")
        if hi is not None:
            parts.append(f"{prefix}event_timestamp < TIMESTAMP '{hi:%Y-%m-%d %H:%M:%S}'")
        return " AND ".join(parts) or "true"

    rows = rows.filter(in_window("")).withColumn("created", created).drop(KNOWN_BY)
    table = DeltaTable.createIfNotExists(spark).location(path).addColumns(rows.schema).execute()
    values = [c for c in rows.columns if c not in (*keys, "event_timestamp", "created")]
    on = " AND ".join(f"t.{k} <=> s.{k}" for k in (*keys, "event_timestamp"))
    changed = " OR ".join(f"NOT (t.{c} <=> s.{c})" for c in values) or "false"
    # A run never overwrites or deletes what a run with a later end wrote (``created`` is at most
    # the writing run's end): re-running a past interval after newer ones leaves their rows alone.
    not_newer = "true" if hi is None else f"t.created <= TIMESTAMP '{hi:%Y-%m-%d %H:%M:%S}'"
    metrics = (
        table.alias("t")
        .merge(rows.alias("s"), on)
        .whenMatchedUpdateAll(condition=f"({changed}) AND s.created >= t.created")
        .whenNotMatchedInsertAll()
        .whenNotMatchedBySourceDelete(condition=f"{in_window('t.')} AND {not_newer}")
        .execute()
        .first()
    )
    assert metrics is not None
    return {
        "inserted": int(metrics["num_inserted_rows"]),
        "updated": int(metrics["num_updated_rows"]),
        "deleted": int(metrics["num_deleted_rows"]),
    }


def compute_gold(
    spark: SparkSession, settings: Settings, silver: dict[str, DataFrame], end_day: str
) -> tuple[dict[str, DataFrame], dict[str, float]]:
    """Every gold table as a DataFrame (lazy), plus the fitted pseudocounts."""
    from pyspark.sql import functions as F

    from pipelines.features import transforms as T

    first = silver["users"].agg(F.min("signup_at")).first()
    start_day = (first[0] if first and first[0] else datetime(2000, 1, 1)).strftime("%Y-%m-%d")
    days = T.calendar(start_day, end_day, silver["users"]).cache()
    venues = venues_with_cells(silver["venues"], settings).cache()
    years = range(int(start_day[:4]) - 1, int(end_day[:4]) + 2)
    events = silver["events"]
    event_feats = T.event_features(events, venues, holiday_table(spark, venues, years)).cache()
    user, m_user = T.user_features(
        silver["user_versions"], silver["rsvps"], silver["attendance"], events, silver["venues"], days
    )
    org, m_org = T.entity_outcome_stats(
        silver["attendance"], silver["ratings"], events, "organizer_id", "org", days
    )
    ven, m_ven = T.entity_outcome_stats(
        silver["attendance"], silver["ratings"], events, "venue_id", "venue", days
    )
    market, m_market = T.market_rates(silver["impressions"], silver["rsvps"], event_feats, days)
    gold = {
        "user_features": user,
        "event_features": event_feats,
        "event_dynamics": T.event_dynamics(
            events.drop("_delivered").join(silver["event_first_delivered"], "event_id"),
            silver["rsvps"],
            silver["capacity_snapshots"],
        ),
        "organizer_stats": org,
        "venue_stats": ven.drop("venue_event_count"),
        "series_stats": T.series_stats(silver["attendance"], silver["ratings"], events),
        "market_rates": market,
        "social": T.social_counts(silver["friendships"], silver["rsvps"]),
    }
    return gold, {**m_user, **m_org, **m_ven, **m_market}


def build_travel_times(spark: SparkSession, settings: Settings, silver: dict[str, DataFrame]) -> int:
    """gold.travel_time for every metro's populated res-7 cells; returns its row count.

    The table is a pure function of the cells and the travel model, so it is rewritten only when
    either changed: the write records a fingerprint of the matrices in its commit
    (``userMetadata``), and a run whose matrices have the same fingerprint writes nothing. An
    hourly run that brings no new home or venue cell then skips rewriting ~500k rows.
    """
    import hashlib

    import h3
    import pandas as pd
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from pipelines.features.travel_time import build_travel_time

    homes = silver["users"].select("metro", "home_lat", "home_lng").toPandas()
    places = silver["venues"].select("metro", "lat", "lng").toPandas()
    cells: dict[str, set[str]] = {}
    for metro, lat, lng in zip(homes["metro"], homes["home_lat"], homes["home_lng"], strict=True):
        cells.setdefault(metro, set()).add(h3.latlng_to_cell(lat, lng, settings.index.travel_resolution))
    for metro, lat, lng in zip(places["metro"], places["lat"], places["lng"], strict=True):
        cells.setdefault(metro, set()).add(h3.latlng_to_cell(lat, lng, settings.index.travel_resolution))
    matrices = [build_travel_time(m, sorted(c)) for m, c in sorted(cells.items())]
    if not matrices:
        return 0
    digest = hashlib.sha256()
    for m in matrices:
        digest.update(m.metro.encode())
        digest.update(m.cells.tobytes())
        digest.update(m.minutes.tobytes())
    fingerprint = f"travel_time sha256:{digest.hexdigest()}"
    rows = sum(m.minutes.size for m in matrices)
    path = settings.lake.table_path("gold", "travel_time")
    if DeltaTable.isDeltaTable(spark, path):
        last = DeltaTable.forPath(spark, path).history(1).select("userMetadata").first()
        if last is not None and last[0] == fingerprint:
            log.info("gold.travel_time: cells and model unchanged (%s rows), not rewritten", rows)
            return rows
    # Spark explodes each origin's row of minutes to one row per destination: the driver holds
    # 8n rows of n floats per metro, never the 8n^2-row long table.
    origins = spark.createDataFrame(
        pd.concat([m.to_rows() for m in matrices], ignore_index=True),
        schema="metro string, origin_cell string, daypart string, mode string, minutes array<float>",
    )
    destinations = spark.createDataFrame(
        [(m.metro, i, cell) for m in matrices for i, cell in enumerate(m.cell_names())],
        schema="metro string, position int, dest_cell string",
    )
    (
        origins.select(
            "metro", "origin_cell", "daypart", "mode", F.posexplode("minutes").alias("position", "minutes")
        )
        .join(F.broadcast(destinations), ["metro", "position"])
        .select("metro", "origin_cell", "dest_cell", "daypart", "mode", "minutes")
        .write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .option("userMetadata", fingerprint)
        .save(path)
    )
    return rows


def written_since(start: datetime | None) -> datetime | None:
    """The earliest ``event_timestamp`` a run over [start, ...) MERGEs: its late-arrival lookback."""
    return None if start is None else start - LATE_ARRIVAL_WINDOW


def created_stamp(start: datetime | None, end: datetime | None, known_by: Column | None = None) -> Column:
    """When a row counts as written: never the wall clock, so re-runs write identical rows.

    At the end of the hour its value became known, as hourly runs would have written it (for a row
    at a fact's own instant, the end of the hour that delivered its newest input: ``known_by``), but
    within the run's window: no earlier than the end of the window's first hour (an hourly run
    over [start, start + 1h) writes its late-arrival rows then) and no later than its end. So
    an hourly run stamps every row at its end, and a run over a longer window (a backfill, an
    ingest of a whole history) stamps what the hourly runs over the same hours would have; a
    point-in-time join that hides rows created after the label instant then sees the history as
    it would have been served, instead of nothing.
    """
    from pyspark.sql import functions as F

    stamp = F.date_trunc("hour", F.col("event_timestamp")) + F.expr("INTERVAL 1 HOUR")
    if known_by is not None:
        stamp = F.greatest(stamp, known_by + F.expr("INTERVAL 1 HOUR"))  # greatest skips a null
    if start is not None:
        stamp = F.greatest(stamp, F.lit((start + timedelta(hours=1)).astimezone(UTC).replace(tzinfo=None)))
    if end is not None:
        stamp = F.least(stamp, F.lit(end.astimezone(UTC).replace(tzinfo=None)))
    return stamp.cast("timestamp")


def build_gold(
    settings: Settings,
    start: datetime | None,
    end: datetime | None,
    run_id: str,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Silver -> every gold feature table for [start, end); returns what was written per table."""
    from pyspark.sql import functions as F

    from pipelines.features.transforms import KNOWN_BY
    from pipelines.spark import get_spark

    spark = get_spark(settings)
    silver = read_silver(spark, settings, end)
    end_day = (end or datetime.now(UTC)).strftime("%Y-%m-%d")
    gold, fitted = compute_gold(spark, settings, silver, end_day)
    since = written_since(start)
    lo = since.astimezone(UTC).replace(tzinfo=None) if since else None
    hi = end.astimezone(UTC).replace(tzinfo=None) if end else None
    written: dict[str, dict[str, int]] = {}
    for i, (name, rows) in enumerate(gold.items()):
        if progress:
            progress(f"gold {name}", i, len(gold) + 1)
        written[name] = _merge_window(
            spark,
            settings.lake.table_path("gold", name),
            rows,
            GOLD_KEYS[name],
            lo,
            hi,
            created_stamp(start, end, F.col(KNOWN_BY) if KNOWN_BY in rows.columns else None),
        )
        log.info("gold.%s %s", name, written[name])
    if progress:
        progress("gold travel_time", len(gold), len(gold) + 1)
    travel_rows = build_travel_times(spark, settings, silver)
    return {
        "run_id": run_id,
        "tables": written,
        "travel_time_rows": travel_rows,
        "pseudocounts": fitted,
    }
