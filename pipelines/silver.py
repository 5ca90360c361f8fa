"""The silver layer's one rule, shared by the job that writes it and the jobs that read it.

Silver holds the newest version of each key, and each row keeps ``_delivered``: the landing hour
its version arrived in. ``as_delivered_by`` reads a table as it stood once everything delivered
before an instant had been ingested. An hourly gold run reads silver that way, so re-running or
backfilling a past interval after later hours were ingested computes what the live run did.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from conf import Settings
from contracts.landing import ENTITIES, LandingEntity

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def delivered_key(t: datetime) -> str:
    """The ``delivered=`` hour (``YYYY-MM-DDTHH``, UTC) that ``t`` falls in; keys sort as instants."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H")


def latest_versions(bronze: DataFrame, entity: LandingEntity) -> DataFrame:
    """The newest version of each key, as silver keeps it."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    newest = Window.partitionBy(*entity.key).orderBy(
        F.col(entity.version_field).desc(), F.col("_record_id").desc()
    )
    return bronze.withColumn("_n", F.row_number().over(newest)).filter("_n = 1").drop("_n")


def symmetric_friendships(friendships: DataFrame) -> DataFrame:
    """Friendships are delivered once per pair; silver holds both directions for joins."""
    from pyspark.sql import functions as F

    columns = ("created_at", "_record_id", "_delivered")
    flipped = friendships.select(
        F.col("friend_id").alias("user_id"), F.col("user_id").alias("friend_id"), *columns
    )
    return friendships.select("user_id", "friend_id", *columns).unionByName(flipped)


def silver_rows(bronze: DataFrame, entity: LandingEntity) -> DataFrame:
    """Bronze rows -> silver rows: the newest version per key, bronze's bookkeeping dropped."""
    latest = latest_versions(bronze, entity)
    columns = [c for c in latest.columns if not c.startswith("_") or c in ("_record_id", "_delivered")]
    latest = latest.select(*columns)
    return symmetric_friendships(latest) if entity.name == "friendships" else latest


def as_delivered_by(spark: SparkSession, settings: Settings, name: str, end: datetime) -> DataFrame:
    """``silver.<name>`` as it stood when every hour delivered before ``end`` had been ingested.

    A silver row delivered at or after ``end`` is replaced by its key's newest version among the
    bronze rows delivered before ``end`` (none: the key did not exist yet). When nothing that late
    is in silver (an hourly run, right after its ingest) this is silver itself, read once.
    """
    from pyspark.sql import functions as F

    silver = spark.read.format("delta").load(settings.lake.table_path("silver", name))
    delivered = F.col("_delivered") < F.lit(delivered_key(end))
    later = silver.filter(~delivered)
    if later.isEmpty():
        return silver
    entity = ENTITIES[name]
    keys = list(entity.key)
    bronze = spark.read.format("delta").load(settings.lake.table_path("bronze", name)).filter(delivered)
    earlier = silver_rows(bronze.join(later.select(*keys).distinct(), keys, "left_semi"), entity)
    return silver.filter(delivered).unionByName(earlier)


def versions_delivered_by(
    spark: SparkSession, settings: Settings, name: str, end: datetime | None
) -> DataFrame:
    """Every version of every key in ``bronze.<name>`` delivered before ``end`` (all without ``end``).

    Silver keeps only the newest version; a job that needs each key's state as it stood at an
    earlier instant (a user's profile before they moved) reads the versions here.
    """
    from pyspark.sql import functions as F

    bronze = spark.read.format("delta").load(settings.lake.table_path("bronze", name))
    return bronze if end is None else bronze.filter(F.col("_delivered") < F.lit(delivered_key(end)))
