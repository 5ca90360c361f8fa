"""``gold.event_embeddings``: one content vector per (event, tower version), MERGEd idempotently.

Columns:

* ``event_id``, ``tower_version``: the key. Several tower versions coexist so the ranker trained
  on one version keeps its features while the next is rolled out.
* ``embedding``: array<float> of ``settings.index.embedding_dim`` numbers (unit length).
* ``event_timestamp``: when the vector became known. An event's first vector is stamped with
  the event's ``created_at`` (the content exists from creation on, and the ranker's training
  sets need vectors for past events). A vector from a later tower, for an event that already
  has one, is stamped ``max(created_at, tower_trained_at)``: two versions of one event never
  share an instant (Feast resolves one row per key and instant, and the gold contract checks
  it), and a training row never sees a tower trained after it. The remaining leak is the first
  tower's back-stamped vectors; it is small (the tower maps words, not event ids) and known.
* ``created``: when the row became available to the pipeline: the end of the hour the vector
  became known, but never before the tower existed and never after the run's ``now``
  (``min(now, max(hour_end(event_timestamp), tower_trained_at))``). An hourly run writes its
  ``now``; a backfill reconstructs what the hourly runs would have written, so a training set's
  point-in-time join (which hides rows created after the label) sees vectors from the moment
  the tower could have produced them, not from the backfill's date. Always ``>= event_timestamp``.
* ``source_updated_at``: the event version the vector was computed from; an edited title is
  re-embedded (in place: the pre-edit vector is not kept), an unchanged one never is.
* ``tower_trained_at``: the ``now`` the tower was trained at.

Which events get a vector: every event created by ``now`` that starts after ``now`` minus
``EMBED_LOOKBACK_DAYS`` and has no up-to-date vector under the current tower. That is all
live events (what the index needs) plus the recent past (what the ranker's training sets join),
and after a weekly retrain it re-embeds exactly that set under the new version.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from conf import Settings
from contracts.instants import from_micros, to_micros
from pipelines.index.sources import read_silver, table_exists

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

EMBEDDINGS_TABLE: Final = ("gold", "event_embeddings")
EMBED_LOOKBACK_DAYS: Final = 90


def embeddings_path(settings: Settings) -> str:
    return settings.lake.table_path(*EMBEDDINGS_TABLE)


def _schema(dim: int) -> StructType:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("event_id", T.StringType(), False),
            T.StructField("tower_version", T.StringType(), False),
            T.StructField("embedding", T.ArrayType(T.FloatType(), containsNull=False), False),
            T.StructField("event_timestamp", T.TimestampType(), False),
            T.StructField("created", T.TimestampType(), False),
            T.StructField("source_updated_at", T.TimestampType(), False),
            T.StructField("tower_trained_at", T.TimestampType(), False),
        ]
    )


def read_embeddings(spark: SparkSession, settings: Settings, tower_version: str) -> DataFrame | None:
    """This tower version's rows, or None when the table does not exist yet."""
    from pyspark.sql import functions as F

    path = embeddings_path(settings)
    if not table_exists(spark, path):
        return None
    return spark.read.format("delta").load(path).filter(F.col("tower_version") == tower_version)


def events_to_embed(
    spark: SparkSession, settings: Settings, tower_version: str, now: datetime
) -> pd.DataFrame:
    """Events that need a vector from ``tower_version`` at ``now`` (see the module docstring)."""
    from pyspark.sql import functions as F

    events = read_silver(spark, settings, "events")
    columns = [
        "event_id",
        "title",
        "description",
        "category",
        "created_us",
        "updated_us",
        "has_other_version",
    ]
    if events is None:
        import pandas as pd

        return pd.DataFrame(columns=columns)
    now_us = to_micros(now)
    since_us = now_us - EMBED_LOOKBACK_DAYS * 86_400 * 1_000_000
    todo = events.filter(
        (F.unix_micros("created_at") <= F.lit(now_us)) & (F.unix_micros("start_at") > F.lit(since_us))
    ).select(
        "event_id",
        "title",
        "description",
        "category",
        F.unix_micros("created_at").alias("created_us"),
        F.unix_micros("updated_at").alias("updated_us"),
    )
    path = embeddings_path(settings)
    if table_exists(spark, path):
        rows = spark.read.format("delta").load(path)
        fresh = rows.filter(F.col("tower_version") == tower_version).select(
            "event_id", F.unix_micros("source_updated_at").alias("done_us")
        )
        todo = (
            todo.join(fresh, "event_id", "left")
            .filter(F.col("done_us").isNull() | (F.col("done_us") < F.col("updated_us")))
            .drop("done_us")
        )
        # Whether any other tower already gave the event a vector decides its timestamp.
        earlier = (
            rows.filter(F.col("tower_version") != tower_version)
            .select("event_id")
            .distinct()
            .withColumn("has_other_version", F.lit(True))
        )
        todo = todo.join(earlier, "event_id", "left").fillna(False, subset=["has_other_version"])
    else:
        todo = todo.withColumn("has_other_version", F.lit(False))
    return todo.toPandas()


def merge_embeddings(
    spark: SparkSession,
    settings: Settings,
    events: pd.DataFrame,
    vectors: npt.NDArray[np.float32],
    tower_version: str,
    tower_trained_at: datetime,
    now: datetime,
) -> int:
    """MERGE vectors on (event_id, tower_version); a newer source version replaces an older one.

    ``events`` is what ``events_to_embed`` returned. Re-running with the same input changes
    nothing (the update needs a strictly newer ``source_updated_at``), so a retried task never
    duplicates or rewrites rows.
    """
    from delta.tables import DeltaTable

    if len(events) == 0:
        return 0
    dim = settings.index.embedding_dim
    if vectors.shape != (len(events), dim):
        raise ValueError(f"vectors have shape {vectors.shape}, expected ({len(events)}, {dim})")
    trained_us = to_micros(tower_trained_at)
    created = events["created_us"].to_numpy(dtype=np.int64)
    stamp = np.where(
        events["has_other_version"].to_numpy(dtype=bool), np.maximum(created, trained_us), created
    )
    hour_us = 3_600_000_000
    hour_end = -(-stamp // hour_us) * hour_us
    written = np.minimum(to_micros(now), np.maximum(hour_end, trained_us))
    rows = [
        (
            str(eid),
            tower_version,
            vec.tolist(),
            from_micros(int(ts)),
            from_micros(int(at)),
            from_micros(int(updated)),
            tower_trained_at,
        )
        for eid, ts, at, updated, vec in zip(
            events["event_id"], stamp, written, events["updated_us"], vectors, strict=True
        )
    ]
    schema = _schema(dim)
    source = spark.createDataFrame(rows, schema=schema)
    path = embeddings_path(settings)
    table = (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(schema)
        .partitionedBy("tower_version")
        .execute()
    )
    metrics = (
        table.alias("t")
        .merge(source.alias("s"), "t.event_id = s.event_id AND t.tower_version = s.tower_version")
        .whenMatchedUpdateAll(condition="s.source_updated_at > t.source_updated_at")
        .whenNotMatchedInsertAll()
        .execute()
        .first()
    )
    merged = int(metrics["num_inserted_rows"]) + int(metrics["num_updated_rows"]) if metrics else 0
    log.info("gold.event_embeddings: merged %d rows for tower %s", merged, tower_version)
    return merged
