"""Reading silver for the index jobs: the "live event" definition, as one Spark transform.

An event is live at ``now`` when it was created at or before ``now``, no cancellation known at
``now`` names it, and it has not started (``start_at > now``). Every instant is compared as
integer microseconds since the epoch (``unix_micros``), so no session or driver time zone can
shift a boundary.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from conf import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def table_exists(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def read_silver(spark: SparkSession, settings: Settings, name: str) -> DataFrame | None:
    """``silver.<name>``, or None when ingestion has never written it (e.g. no cancellations yet)."""
    path = settings.lake.table_path("silver", name)
    if not table_exists(spark, path):
        return None
    return spark.read.format("delta").load(path)


def live_events(
    events: DataFrame, venues: DataFrame, cancellations: DataFrame | None, now_us: int
) -> DataFrame:
    """(event_id, start_us, lat, lng) of every event live at ``now_us``; lat/lng null if unplaceable.

    The venue join is a left join on purpose: an event whose venue row is missing is still live,
    and the caller counts it instead of losing it inside an inner join.
    """
    from pyspark.sql import functions as F

    ev = events.filter(
        (F.unix_micros("created_at") <= F.lit(now_us)) & (F.unix_micros("start_at") > F.lit(now_us))
    )
    if cancellations is not None:
        gone = (
            cancellations.filter(F.unix_micros("cancelled_at") <= F.lit(now_us)).select("event_id").distinct()
        )
        ev = ev.join(gone, "event_id", "left_anti")
    places = venues.select("venue_id", "lat", "lng").dropDuplicates(["venue_id"])
    return ev.join(places, "venue_id", "left").select(
        "event_id", F.unix_micros("start_at").alias("start_us"), "lat", "lng"
    )
