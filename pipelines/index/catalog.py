"""The live catalog serving reads (``published.catalog``), built from silver as of one instant.

One Spark pass per table, filtered to what was known at ``now`` and to the events live then, so
the web process never reads the lake: it opens these files without a JVM.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from conf import Settings
from contracts.instants import naive_utc, to_micros
from pipelines.index.sources import live_events, read_silver
from published.catalog import TABLES, Catalog

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SILVER_INPUTS = (
    "events",
    "venues",
    "event_cancellations",
    "rsvps",
    "capacity_snapshots",
    "friendships",
    "users",
)


def _epoch_s(values: pd.Series) -> pd.Series:
    """Spark's naive-UTC timestamps (session zone UTC) -> epoch seconds as float."""
    import pandas as pd

    stamps = pd.to_datetime(values)
    if stamps.dt.tz is None:
        stamps = stamps.dt.tz_localize("UTC")
    return (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().astype(float)


# The catalog's event columns read as they are (the rest are derived: start_ts, created_ts, RSVPs).
DIRECT_EVENT_COLUMNS = tuple(
    c for c in TABLES["events"] if c not in ("start_ts", "created_ts", "rsvps_so_far")
)
# Columns of each optional silver read, for an empty frame when the table does not exist yet.
_EMPTY = {
    "rsvps": ("user_id", "event_id"),
    "readings": ("event_id", "snap_capacity", "seats_taken"),
    "cancelled": ("event_id",),
    "friendships": ("user_id", "friend_id"),
    "users": ("user_id", "metro", "home_lat", "home_lng"),
}


def build_catalog(spark: SparkSession, settings: Settings, now: datetime) -> Catalog:
    """Every frame of the catalog as of ``now`` (see ``published.catalog`` for the columns).

    Events and venues must exist (``FileNotFoundError`` otherwise); a silver table ingestion has
    not written yet (no cancellation, no friendship so far) is an empty frame.
    """
    import pandas as pd
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    at = F.lit(naive_utc(now))
    silver = {name: read_silver(spark, settings, name) for name in SILVER_INPUTS}
    events_table, venues = silver["events"], silver["venues"]
    if events_table is None or venues is None:
        raise FileNotFoundError(
            "silver.events or silver.venues does not exist yet: nothing to publish for serving"
        )
    cancellations = silver["event_cancellations"]
    live_ids = live_events(events_table, venues, cancellations, to_micros(now)).select("event_id")
    places = venues.select(
        "venue_id", "metro", F.col("lat").alias("venue_lat"), F.col("lng").alias("venue_lng")
    ).dropDuplicates(["venue_id"])
    events = (
        events_table.join(live_ids, "event_id")
        .join(places, "venue_id", "left")
        # The published columns straight from silver; the instants are converted below.
        .select(*DIRECT_EVENT_COLUMNS, "start_at", "created_at")
        .cache()
    )
    live = events.select("event_id")
    newest = Window.partitionBy("event_id").orderBy(F.col("snapshot_at").desc())
    upcoming = events_table.filter(F.col("start_at") > at).select("event_id")

    def rsvps(t: DataFrame) -> DataFrame:
        return (
            t.filter(F.col("rsvp_at") <= at).join(live, "event_id").select("user_id", "event_id").distinct()
        )

    def readings(t: DataFrame) -> DataFrame:
        return (
            t.filter(F.col("snapshot_at") <= at)
            .join(live, "event_id")
            .withColumn("_n", F.row_number().over(newest))
            .filter("_n = 1")
            .select("event_id", F.col("capacity").alias("snap_capacity"), "seats_taken")
        )

    def cancelled(t: DataFrame) -> DataFrame:
        return t.filter(F.col("cancelled_at") <= at).join(upcoming, "event_id").select("event_id").distinct()

    def friendships(t: DataFrame) -> DataFrame:
        # Silver already holds both directions of every friendship.
        return t.filter(F.col("created_at") <= at).select("user_id", "friend_id").distinct()

    def users(t: DataFrame) -> DataFrame:
        return (
            t.filter(F.col("signup_at") <= at)
            .select("user_id", "metro", "home_lat", "home_lng")
            .dropDuplicates(["user_id"])
        )

    def collect(name: str, table: str, query: Callable[[DataFrame], DataFrame]) -> pd.DataFrame:
        source = silver[table]
        return query(source).toPandas() if source is not None else pd.DataFrame(columns=list(_EMPTY[name]))

    rs = collect("rsvps", "rsvps", rsvps)
    snap = collect("readings", "capacity_snapshots", readings)
    gone = collect("cancelled", "event_cancellations", cancelled)
    fr = collect("friendships", "friendships", friendships)
    us = collect("users", "users", users)
    ev = events.toPandas()
    events.unpersist()

    counts = rs.groupby("event_id").size()
    ev["rsvps_so_far"] = ev["event_id"].map(counts).fillna(0).astype("int64")
    ev["start_ts"] = _epoch_s(ev.pop("start_at"))
    ev["created_ts"] = _epoch_s(ev.pop("created_at"))
    ev["capacity"] = ev["capacity"].astype("Int64")
    ev = ev.sort_values("event_id", ignore_index=True)

    merged = ev[["event_id", "capacity", "rsvps_so_far"]].merge(snap, on="event_id", how="left")
    # The newest booking-counter reading wins; an event without one has its RSVPs as seats taken.
    capacity = merged.assign(
        capacity=pd.to_numeric(merged["snap_capacity"]).astype("Int64").fillna(merged["capacity"]),
        seats_taken=pd.to_numeric(merged["seats_taken"]).fillna(merged["rsvps_so_far"]).astype("int64"),
    )[["event_id", "capacity", "seats_taken"]]
    catalog = Catalog(
        as_of=now,
        events=ev,
        rsvps=rs.sort_values(["user_id", "event_id"], ignore_index=True),
        friendships=fr.sort_values(["user_id", "friend_id"], ignore_index=True),
        capacity=capacity,
        cancellations=gone.sort_values("event_id", ignore_index=True),
        users=us.sort_values("user_id", ignore_index=True),
    )
    log.info("catalog as of %s: %s", now.isoformat(), catalog.counts())
    return catalog
