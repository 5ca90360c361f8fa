"""The whole batch path in whatever profile ``TURNOUT_PROFILE`` names; prints what it produced.

    TURNOUT_PROFILE=cluster-local TURNOUT_HOME=DIR python -m tests.system.cluster_pipeline

Simulate -> ingest -> gold -> tower + embeddings -> feast apply -> both heads trained and promoted ->
index published -> materialize (``tests.integration.training_world.build_trained_world``, the world
the training tests use). The last line of standard output is a JSON summary: row hashes of every
silver, gold and training-set Delta table and each head's model hash (the same model bytes give the
same predictions on the same rows). Run once per profile on the same simulated world, the summaries
must be equal (tests/system/test_cluster.py).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from conf import load_settings
from tests.integration.training_world import AS_OF, build_trained_world

# Columns that name the run or the wall clock, not the data.
RUN_COLUMNS = {"_run_id", "_ingested_at", "quarantined_at"}


def table_hash(
    spark: Any, path: str, by_column: bool = False, ignore: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Row count and an order-free hash of every row (all columns but the run's own and ``ignore``).

    ``by_column`` adds one order-free hash per column, so a difference names its columns.
    """
    from pyspark.sql import functions as F

    frame = spark.read.format("delta").load(path)
    columns = sorted(c for c in frame.columns if c not in RUN_COLUMNS and c not in ignore)
    hashes = {"_row": F.xxhash64(*[F.col(c) for c in columns])}
    if by_column:
        hashes |= {c: F.xxhash64(F.col(c)) for c in columns}
    row = frame.agg(
        F.count("*").alias("_n"), *[F.sum(h.cast("decimal(38,0)")).alias(k) for k, h in hashes.items()]
    ).first()
    out: dict[str, Any] = {"rows": int(row["_n"]), "hash": str(row["_row"])}
    if by_column:
        out["columns"] = {c: str(row[c]) for c in columns}
    return out


def main() -> None:
    from pipelines.spark import get_spark

    settings = load_settings()
    world = build_trained_world(settings)
    spark = get_spark(settings)
    from pipelines.features.jobs import GOLD_KEYS
    from pipelines.ingest.run import SILVER_TABLES

    summary: dict[str, Any] = {
        "profile": settings.profile,
        "spark_master": spark.sparkContext.master,
        "silver": {t: table_hash(spark, settings.lake.table_path("silver", t)) for t in SILVER_TABLES},
        "gold": {
            t: table_hash(spark, settings.lake.table_path("gold", t))
            for t in sorted({*GOLD_KEYS, "event_embeddings"})  # embeddings: the torch tower's output
        },
        "training": {
            h: table_hash(spark, settings.lake.table_path("training", h), by_column=True)
            for h in ("rsvp", "attend")
        },
        "models": {
            "rsvp": world.rsvp["model_sha256"],
            "attend": world.attend["model_sha256"],
        },
        "metrics": {
            "rsvp": world.rsvp["metrics"].get("test_auc"),
            "attend": world.attend["metrics"].get("test_auc"),
        },
        "as_of": AS_OF.isoformat(),
    }
    print(json.dumps(summary, sort_keys=True))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
