"""Ingest and features in whatever profile ``TURNOUT_PROFILE`` names; prints what they wrote.

    TURNOUT_PROFILE=s3-local TURNOUT_HOME=DIR python -m tests.system.lake_pipeline 2026-10-20T00:00Z

Everything delivered to the profile's landing zone -> bronze -> silver (``ingest_interval``) ->
gold as of the instant, its great-expectations suites, ``feast apply`` and materialization
(``update_features``), in one process, as the two DAG tasks run them. The last line of standard
output is a JSON summary: row hashes of every bronze, silver and gold table and of the quarantine,
the ingest counts and the keys materialized. Run once per profile over the same landing lines, the
summaries must be equal whatever storage the lake is on (tests/system/test_s3_lake.py).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

from conf import load_settings
from tests.system.cluster_pipeline import table_hash


def main() -> None:
    from contracts.landing import ENTITIES
    from pipelines.features.jobs import GOLD_KEYS
    from pipelines.features.run import update_features
    from pipelines.ingest.run import QUARANTINE_TABLE, ingest_interval
    from pipelines.spark import get_spark

    settings = load_settings()
    end = datetime.fromisoformat(sys.argv[1])
    ingest = ingest_interval(settings, None, None, run_id="lake")  # every file delivered
    features = update_features(settings, None, end, run_id="lake")
    spark = get_spark(settings)
    path = settings.lake.table_path
    summary: dict[str, Any] = {
        "lake": settings.lake.root,
        "ingest": {"tables": ingest["tables"], "silver": ingest["silver"]},
        "bronze": {t: table_hash(spark, path("bronze", t)) for t in sorted(ENTITIES)},
        "silver": {t: table_hash(spark, path("silver", t)) for t in sorted(ENTITIES)},
        "quarantine": table_hash(spark, path(*QUARANTINE_TABLE)),
        "gold": {t: table_hash(spark, path("gold", t)) for t in sorted(GOLD_KEYS)},
        "validated": sorted(features["validation"]["tables"]),
        "materialized": {
            name: (view["status"], view["rows"]) for name, view in features["materialize"]["views"].items()
        },
    }
    print(json.dumps(summary, sort_keys=True, default=str))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
