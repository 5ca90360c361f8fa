"""`make spark-classes`: a class-data archive (CDS) of the classes a Spark + Delta job loads.

Every DAG task is its own process and starts its own driver JVM, which loads and verifies the
same thousands of classes of Spark, Delta and Scala from jars each time. HotSpot can instead map
classes it dumped from an earlier run (``-XX:ArchiveClassesAtExit`` then
``-XX:SharedArchiveFile``; JDK 17 has no auto-archive): a cold process's session start and first
steps ~7 s faster (``bench/bench_spark_start.py``). This module runs that earlier run: one session
with the archive flag, a small workload touching what the pipeline uses (JSON/VARIANT parsing,
Delta writes and MERGEs, joins, windows, aggregations, Arrow to pandas), then a clean JVM exit,
which writes the archive; it then checks that a JVM loads it and records its size.

The archive belongs to one JVM and one classpath (``pipelines.spark.class_archive`` names it by
their digest), so a changed jar or JDK simply finds none and starts as before. A driver maps it
only while its size is the one checked (``pipelines.spark.usable_class_archive``).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from conf import Settings, load_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def _workload(spark: SparkSession, scratch: Path) -> None:
    """What an interval's jobs do, on a few rows: enough to load the classes they need."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    lines = scratch / "landing"
    lines.mkdir()
    (lines / "part.jsonl").write_text(
        "".join(f'{{"id": "k{i}", "n": {i}, "ts": "2026-01-01T00:{i % 60:02d}:00Z"}}\n' for i in range(200))
    )
    parsed = (
        spark.read.text(str(lines))
        .withColumn("_file", F.input_file_name())
        .select(F.try_parse_json("value").alias("v"), "_file")
        .select(
            F.variant_get("v", "$.id", "string").alias("id"),
            F.try_variant_get("v", "$.n", "bigint").alias("n"),
            F.schema_of_variant(F.variant_get("v", "$.n", "variant")).alias("n_type"),
            F.to_timestamp(F.variant_get("v", "$.ts", "string")).alias("ts"),
        )
    )
    table = str(scratch / "delta")
    parsed.withColumn("day", F.to_date("ts")).write.format("delta").partitionBy("day").save(table)
    update = parsed.where(F.col("n") % 3 == 0).withColumn("n", F.col("n") + 1)
    for _ in range(2):
        (
            DeltaTable.forPath(spark, table)
            .alias("t")
            .merge(update.withColumn("day", F.to_date("ts")).alias("s"), "t.id = s.id")
            .whenMatchedUpdateAll(condition="s.n > t.n")
            .whenNotMatchedInsertAll()
            .whenNotMatchedBySourceDelete(condition="t.n > 190")
            .execute()
        )
    rows = spark.read.format("delta").load(table)
    ranked = rows.withColumn("r", F.row_number().over(Window.partitionBy("n_type").orderBy(F.desc("ts"))))
    joined = ranked.join(rows.groupBy("day").agg(F.count("*").alias("c"), F.max("n").alias("m")), "day")
    joined.where("r <= 5").toPandas()
    spark.createDataFrame(joined.limit(10).toPandas()).collect()
    DeltaTable.forPath(spark, table).history(5).collect()


def build(settings: Settings) -> Path | None:
    """Dump the archive for this JVM and classpath unless it exists; its path (None: no archive
    configured). The dump runs in this process's driver, which must not have started yet."""
    from pyspark import SparkContext

    from pipelines.spark import class_archive, get_spark, java, usable_class_archive

    target = class_archive(settings)
    if target is None or usable_class_archive(settings) is not None:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.stem}.{os.getpid()}.partial")
    started = time.perf_counter()
    # The dump's notes on classes it cannot archive (old bytecode, unlinked) are not errors.
    spark = get_spark(settings, "turnout-spark-classes", f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds*=off")
    with tempfile.TemporaryDirectory(prefix="turnout-classes-") as scratch:
        _workload(spark, Path(scratch))
        spark.stop()
    # HotSpot writes the archive as the JVM exits; the JVM exits when its stdin closes.
    gateway = SparkContext._gateway
    assert gateway is not None
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=600)
    if not partial.exists():
        raise RuntimeError(f"the driver JVM exited without writing {partial}")
    # A JVM that cannot map the archive crashes rather than starting without it: check it here,
    # and record the size checked, which every driver compares before mapping it.
    check = subprocess.run(
        [str(java()), f"-XX:SharedArchiveFile={partial}", "-version"], capture_output=True, text=True
    )
    if check.returncode != 0:
        partial.unlink()
        raise RuntimeError(
            f"the dumped class archive does not load:\n{check.stdout[-2000:]}{check.stderr[-2000:]}"
        )
    size = partial.stat().st_size
    partial.replace(target)
    target.with_name(target.name + ".size").write_text(f"{size}\n")
    log.info(
        "class archive %s: %.0f MB in %.0f s",
        target,
        target.stat().st_size / 1e6,
        time.perf_counter() - started,
    )
    return target


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.spark_classes",
        description=(
            "Dump a class-data archive of what a Spark + Delta job loads, for the JVM and jars of "
            "the profile's settings (spark.class_archive_dir). Driver JVMs that find it start "
            "faster. Does nothing if a checked one exists."
        ),
    )
    parser.add_argument(
        "--profile", default=None, help="settings profile (default: $TURNOUT_PROFILE or local)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    # The home only names the driver's log and scratch folders here; the archive lives beside the jars.
    with tempfile.TemporaryDirectory(prefix="turnout-classes-home-") as home:
        target = build(load_settings(args.profile, home=home))
    print(target if target is not None else "this profile keeps no class archive (spark.class_archive_dir)")


if __name__ == "__main__":
    main()
