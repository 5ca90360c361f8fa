"""The hourly ``ingest`` DAG: landing -> bronze -> silver. Wiring only; the work is in pipelines.ingest."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from _common import SILVER_ASSETS, START_DATE, current_window, default_args, fail_without_retry, hourly_utc
from airflow.sdk import dag, task


@dag(
    dag_id="ingest",
    schedule=hourly_utc(),
    start_date=START_DATE,
    catchup=False,
    # Runs MERGE into the same Delta tables, and Delta on a local file system has no safe
    # concurrent commits: one run at a time, in interval order.
    max_active_runs=1,
    # An hourly job that overruns its hour should fail loudly rather than pile up behind itself.
    default_args=default_args(execution_timeout=timedelta(minutes=45)),
    tags=["turnout", "ingest", "bronze", "silver"],
)
def ingest() -> None:
    """
    ### Ingest: landing -> bronze -> silver, one UTC hour per run

    Each run covers the landing files **delivered** in its data interval
    `[data_interval_start, data_interval_end)`: the hour that just ended, UTC.

    1. **bronze**: `pipelines.ingest.run.ingest_bronze` gates every landing batch, quarantines
       unusable rows to `quarantine.landing` and MERGEs typed, deduplicated rows into
       `bronze.<entity>`. Its XCom counts rows read / written / deduplicated / quarantined per table.
    2. **silver**: `pipelines.ingest.run.build_silver` MERGEs the newest version of each key
       delivered in the interval into `silver.<entity>`, then updates the `silver.*` assets
       (`turnout://silver/<table>`) that downstream DAGs schedule on.

    **Failures.** A delivery that breaks its data contract (`DataContractError`) fails the task
    at once, without retries: fix or re-deliver the export, then clear the task. Anything else is
    retried twice, five minutes apart. Re-running an interval is safe: every write is a MERGE
    on a stable id.

    **Re-running an hour:** clear its run (it keeps its interval). A new manual run needs a logical
    date and ingests the hour that *ends* at or before it: `--logical-date 2026-03-01T10:00:00Z`
    covers 09:00-10:00, whereas the scheduled run for that hour has logical date 09:00.
    """

    # multiple_outputs=False: the report is one XCom, not one XCom per top-level key.
    @task(multiple_outputs=False)
    def bronze() -> dict[str, Any]:
        # Imported here, not at module level: a DAG file is parsed every few seconds, and
        # pipelines pulls in Spark and great-expectations once a job runs.
        from conf import load_settings
        from contracts.errors import DataContractError
        from pipelines.ingest.run import ingest_bronze

        window = current_window()
        with fail_without_retry(DataContractError):
            return ingest_bronze(load_settings(), start=window.start, end=window.end, run_id=window.run_id)

    @task(multiple_outputs=False, outlets=list(SILVER_ASSETS))
    def silver() -> dict[str, Any]:
        from conf import load_settings
        from contracts.errors import DataContractError
        from pipelines.ingest.run import build_silver

        window = current_window()
        with fail_without_retry(DataContractError):
            return build_silver(load_settings(), start=window.start, end=window.end, run_id=window.run_id)

    bronze() >> silver()


ingest()
