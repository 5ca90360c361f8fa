"""Ingestion jobs: read one interval of landing files, gate, quarantine, MERGE into Delta.

* ``ingest_bronze``: landing files delivered in [start, end) -> typed, validated, deduplicated
  ``bronze.<entity>`` rows; unusable rows -> ``quarantine.landing`` with the reason, the source
  file and the run id. For every table: read = written + deduplicated + quarantined.
* ``build_silver``: bronze rows delivered in [start, end) -> the latest version of each key
  MERGEd into ``silver.<entity>``.

Both are idempotent: re-running an interval (or finishing a run that was killed midway)
rewrites nothing that is already there, because every write is a MERGE on a stable id.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from conf import Settings
from contracts.errors import DataContractError
from contracts.landing import ENTITIES
from pipelines.silver import delivered_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]
QUARANTINE_TABLE = ("quarantine", "landing")
QUARANTINE_ROWS_PER_PARTITION = 1_000_000
# What ``read_landing`` returns for an entity's lines (Spark DDL).
LANDING_LINES = "_raw string, _source_file string NOT NULL, _delivered string"
SILVER_TABLES: tuple[str, ...] = tuple(ENTITIES)


@dataclass
class TableCounts:
    read: int = 0
    written: int = 0
    deduplicated: int = 0
    quarantined: int = 0


@dataclass
class IngestReport:
    run_id: str
    start: str
    end: str
    tables: dict[str, TableCounts] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "start": self.start,
            "end": self.end,
            "tables": {name: asdict(c) for name, c in self.tables.items()},
        }


def _hour_key(t: datetime | None, default: str) -> str:
    return default if t is None else delivered_key(t)


def _hadoop_fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """The Hadoop file system that holds ``path`` (local, HDFS, s3a, ...) and the path on it."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hadoop_path


def _path_exists(spark: SparkSession, path: str) -> bool:
    fs, hadoop_path = _hadoop_fs(spark, path)
    return bool(fs.exists(hadoop_path))


def delivered_partitions(spark: SparkSession, path: str, start_key: str, end_key: str) -> list[str]:
    """The ``delivered=<hour>`` folders under ``path`` with start_key <= hour < end_key.

    One listing of the entity's folder instead of Spark's partition discovery over every
    delivered hour: an hourly run reads one folder per entity, and an entity with none is
    skipped without a Spark job.
    """
    fs, hadoop_path = _hadoop_fs(spark, path)
    if not fs.exists(hadoop_path):
        return []
    found = []
    for status in fs.listStatus(hadoop_path):
        name = status.getPath().getName()
        hour = name.removeprefix("delivered=")
        if status.isDirectory() and name.startswith("delivered=") and start_key <= hour < end_key:
            found.append(f"{path.rstrip('/')}/{name}")  # spelled like basePath, scheme and all
    return sorted(found)


def read_landing(
    spark: SparkSession, root: str, entity: str, start_key: str, end_key: str
) -> DataFrame | None:
    """Lines of one entity's files delivered in [start_key, end_key), or None if there are none."""
    from pyspark.sql import functions as F

    path = f"{root.rstrip('/')}/{entity}"
    folders = delivered_partitions(spark, path, start_key, end_key)
    if not folders:
        return None
    # basePath keeps ``delivered`` as a partition column of the folders read.
    lines = spark.read.option("basePath", path).option("recursiveFileLookup", "false").text(folders)
    # The file's path inside the landing zone, not its absolute URI: a quarantine row's id is
    # derived from it, and a home that was moved or copied must not quarantine the same line again.
    relative = F.regexp_extract(F.input_file_name(), rf"({re.escape(entity)}/delivered=[^/]+/[^/]+)$", 1)
    return lines.select(
        F.col("value").alias("_raw"), relative.alias("_source_file"), F.col("delivered").alias("_delivered")
    )


def _ensure_table(spark: SparkSession, path: str, schema: Any) -> Any:
    from delta.tables import DeltaTable

    return DeltaTable.createIfNotExists(spark).location(path).addColumns(schema).execute()


def _merge_insert_only(spark: SparkSession, path: str, rows: DataFrame, key: str) -> int:
    """Insert rows whose ``key`` is not yet in the table; return how many were inserted."""
    table = _ensure_table(spark, path, rows.schema)
    metrics = (
        table.alias("t").merge(rows.alias("s"), f"t.{key} = s.{key}").whenNotMatchedInsertAll().execute()
    )
    return int(metrics.first()["num_inserted_rows"])


def _bronze_versions(parsed: DataFrame, name: str, run_id: str) -> DataFrame:
    """Parsed landing lines -> the bronze rows to insert: valid, one per version, with bookkeeping."""
    from pyspark.sql import functions as F

    from pipelines.ingest.transforms import dedupe_versions, split_valid

    return (
        dedupe_versions(split_valid(parsed)[0], ENTITIES[name])
        .drop("_raw", "_reason")
        .withColumns({"_run_id": F.lit(run_id), "_ingested_at": F.current_timestamp()})
    )


def _quarantine_rows(bad: DataFrame, entity: str, run_id: str) -> DataFrame:
    from pyspark.sql import functions as F

    return bad.select(
        F.sha2(F.concat_ws("\u241f", F.lit(entity), "_source_file", "_raw"), 256).alias("_quarantine_id"),
        F.lit(entity).alias("entity"),
        F.col("_reason").alias("reason"),
        F.col("_raw").alias("raw"),
        F.col("_source_file").alias("source_file"),
        F.col("_delivered").alias("delivered"),
        F.lit(run_id).alias("run_id"),
        F.current_timestamp().alias("quarantined_at"),
    )


def ingest_bronze(
    settings: Settings,
    start: datetime | None,
    end: datetime | None,
    run_id: str,
    progress: Progress | None = None,
    entities: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Landing files delivered in [start, end) -> bronze Delta tables + quarantine.

    The whole delivery is gated first, in one pass (``expectations.batch_summary``); if the gate
    fails nothing is written and ``DataContractError`` names every failing entity and check.
    Entities with no file in the interval are not touched. Returns ``IngestReport.to_dict()``.
    """
    from functools import reduce

    from pyspark import StorageLevel

    from pipelines.ingest.expectations import USABLE, batch_summary, validate_summary
    from pipelines.ingest.transforms import parse_landing, split_valid
    from pipelines.spark import get_spark

    spark = get_spark(settings)
    start_key, end_key = _hour_key(start, "0000-00-00T00"), _hour_key(end, "9999-99-99T99")
    names = list(entities or ENTITIES)
    report = IngestReport(run_id=run_id, start=start_key, end=end_key)

    if progress:
        progress("read and gate the delivery", 0, 1)
    parsed: dict[str, DataFrame] = {}
    for name in names:
        raw = read_landing(spark, settings.landing.root, name, start_key, end_key)
        if raw is not None:
            parsed[name] = parse_landing(raw, ENTITIES[name]).persist(StorageLevel.MEMORY_AND_DISK)
    summary = batch_summary(parsed, ENTITIES) if parsed else None
    rows = {} if summary is None else dict(zip(summary["entity"], summary["rows"], strict=False))
    for name in [n for n in parsed if not rows.get(n)]:  # files, but no line in the interval
        parsed.pop(name).unpersist()
    if summary is not None and parsed:
        if progress:
            progress("gate", 0, 1)
        cfg = settings.ingest
        gate = validate_summary(summary, cfg.max_quarantine_fraction, cfg.min_quarantined_to_fail)
        if not gate.success:
            for df in parsed.values():
                df.unpersist()
            raise DataContractError(
                f"ingest {start_key}..{end_key}: {len(gate.failures)} landing check(s) failed their gate, "
                "nothing was written:\n  " + "\n  ".join(gate.failures)
            )
    if progress:
        progress("bronze tables", 0, 1)
    unusable: dict[str, int] = {}
    if summary is not None:
        usable = summary[summary["check"] == USABLE]
        unusable = dict(zip(usable["entity"].astype(str), usable["failing"].astype(int), strict=True))

    # Every entity has its bronze table from the first delivery on, empty until its first line, so
    # readers find one for each entity even in a world where, say, no event was ever cancelled.
    for name in names if parsed else []:
        path = settings.lake.table_path("bronze", name)
        if name not in parsed and not _path_exists(spark, path):
            empty = spark.createDataFrame([], LANDING_LINES)
            _ensure_table(
                spark, path, _bronze_versions(parse_landing(empty, ENTITIES[name]), name, run_id).schema
            )

    # One quarantine write for the whole delivery.
    bad_rows = [
        _quarantine_rows(split_valid(df)[1], name, run_id) for name, df in parsed.items() if unusable[name]
    ]
    if bad_rows:
        if progress:
            progress("quarantine", 0, 1)
        # Few rows (the gate caps their share) spread over every partition of every entity's lines:
        # the 1x history's ~5,900 over 193 partitions took their MERGE 7-8 s, in one 2-3 s.
        quarantine = reduce(lambda a, b: a.unionByName(b), bad_rows).coalesce(
            math.ceil(sum(unusable.values()) / QUARANTINE_ROWS_PER_PARTITION)
        )
        _merge_insert_only(spark, settings.lake.table_path(*QUARANTINE_TABLE), quarantine, "_quarantine_id")
    for i, (name, frame) in enumerate(parsed.items()):
        if progress:
            progress(f"bronze {name}", i, len(parsed))
        counts = TableCounts(read=int(rows[name]), quarantined=unusable[name])
        counts.written = _merge_insert_only(
            spark,
            settings.lake.table_path("bronze", name),
            _bronze_versions(frame, name, run_id),
            "_record_id",
        )
        counts.deduplicated = counts.read - counts.quarantined - counts.written
        frame.unpersist()
        report.tables[name] = counts
        log.info("bronze.%s %s", name, asdict(counts))
    if progress:
        progress("bronze done", 1, 1)
    return report.to_dict()


def build_silver(
    settings: Settings,
    start: datetime | None,
    end: datetime | None,
    run_id: str,
    progress: Progress | None = None,
    entities: Iterable[str] | None = None,
) -> dict[str, Any]:
    """Bronze rows delivered in [start, end) -> newest version per key MERGEd into silver.

    Returns ``{"tables": {name: {"merged": n, "rows": total}}}``.
    """
    from pyspark.sql import functions as F

    from pipelines.silver import silver_rows
    from pipelines.spark import get_spark

    spark = get_spark(settings)
    start_key, end_key = _hour_key(start, "0000-00-00T00"), _hour_key(end, "9999-99-99T99")
    names = [n for n in (entities or ENTITIES) if _path_exists(spark, settings.lake.table_path("bronze", n))]
    # Like bronze, every entity's silver table exists from the first build on, empty or not.
    for name in ENTITIES:
        bronze_path, path = settings.lake.table_path("bronze", name), settings.lake.table_path("silver", name)
        if not _path_exists(spark, path) and _path_exists(spark, bronze_path):
            bronze = spark.read.format("delta").load(bronze_path)
            _ensure_table(spark, path, silver_rows(bronze, ENTITIES[name]).schema)
    out: dict[str, dict[str, int]] = {}
    for i, name in enumerate(names):
        if progress:
            progress(f"silver {name}", i, len(names))
        entity = ENTITIES[name]
        bronze = spark.read.format("delta").load(settings.lake.table_path("bronze", name))
        bronze = bronze.filter((F.col("_delivered") >= start_key) & (F.col("_delivered") < end_key))
        rows = silver_rows(bronze, entity)
        key = ("user_id", "friend_id") if name == "friendships" else entity.key
        table = _ensure_table(spark, settings.lake.table_path("silver", name), rows.schema)
        on = " AND ".join(f"t.{k} <=> s.{k}" for k in key)
        v = entity.version_field if name != "friendships" else "created_at"
        newer = f"s.{v} > t.{v} OR (s.{v} = t.{v} AND s._record_id > t._record_id)"
        metrics = (
            table.alias("t")
            .merge(rows.alias("s"), on)
            .whenMatchedUpdateAll(condition=newer)
            .whenNotMatchedInsertAll()
            .execute()
            .first()
        )
        merged = int(metrics["num_inserted_rows"]) + int(metrics["num_updated_rows"])
        total = spark.read.format("delta").load(settings.lake.table_path("silver", name)).count()
        out[name] = {"merged": merged, "rows": total}
        log.info("silver.%s merged %d (now %d rows)", name, merged, total)
    return {"run_id": run_id, "start": start_key, "end": end_key, "tables": out}


def ingest_interval(
    settings: Settings,
    start: datetime | None,
    end: datetime | None,
    run_id: str,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Landing delivered in [start, end) -> bronze -> silver, in one Spark session.

    Silver is rebuilt only for the entities that had lines in the interval (an empty hour writes
    nothing). Returns the bronze report with ``silver`` (per table ``merged`` and ``rows``) and
    ``delivered``: the silver tables the interval changed (the assets to announce downstream).
    """
    bronze = ingest_bronze(settings, start, end, run_id, progress=progress)
    touched = [name for name, counts in bronze["tables"].items() if counts["read"]]
    silver = (
        build_silver(settings, start, end, run_id, progress=progress, entities=touched) if touched else None
    )
    tables = silver["tables"] if silver else {}
    return {
        **bronze,
        "silver": tables,
        "delivered": sorted(
            name for name, t in tables.items() if t["merged"] or bronze["tables"][name]["written"]
        ),
    }
