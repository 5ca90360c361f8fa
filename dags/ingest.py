"""The hourly ``ingest`` DAG: landing -> bronze -> silver. Wiring only; the work is in pipelines.ingest."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from _common import (
    LANDING_DELIVERED,
    SILVER_DELIVERED,
    START_DATE,
    default_args,
    fail_without_retry,
    hourly_utc,
    parse_window,
    resolve_window,
    silver_asset,
)
from airflow.sdk import AssetOrTimeSchedule, dag, get_current_context, task


@dag(
    dag_id="ingest",
    # Every hour on the clock (a real platform delivers by the hour), and at once when the simulated
    # platform announces an hour it delivered (the `platform` DAG, backfilled faster than real time).
    schedule=AssetOrTimeSchedule(timetable=hourly_utc(), assets=LANDING_DELIVERED),
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
    `[data_interval_start, data_interval_end)`: the hour that just ended, UTC. A run started by
    the `landing.delivered` asset (the simulated platform's `platform` DAG) covers the hours the
    platform runs behind it delivered; one started by hand may pass `{"start": ISO, "end": ISO}`, or
    `{"end": ISO}` alone for everything delivered before it (the first load of a history).

    One task, one Spark session (`pipelines.ingest.run.ingest_interval`):

    1. **bronze**: gates the whole delivery in one pass, quarantines unusable rows to
       `quarantine.landing` and MERGEs typed, deduplicated rows into `bronze.<entity>`.
    2. **silver**: MERGEs the newest version of each key delivered in the interval into
       `silver.<entity>`, for the entities that had lines in it.
    3. Announces `turnout://silver/<table>` (the assets downstream DAGs schedule on) only for the
       tables the interval changed, through the `silver.delivered` alias: an hour in which nothing
       was delivered writes nothing and triggers nothing. The XCom holds the counts per table.

    **Failures.** A delivery that breaks its data contract (`DataContractError`) fails the task
    at once, without retries: fix or re-deliver the export, then clear the task. Anything else is
    retried twice, five minutes apart. Re-running an interval is safe: every write is a MERGE
    on a stable id.

    **Re-running an hour:** clear its run (it keeps its interval). **Running past hours:**
    `airflow backfill create --dag-id ingest --from-date 2026-03-01T09:00:00+00:00
    --to-date 2026-03-01T12:00:00+00:00` (the scheduler runs one hour after another), or
    `POST /api/v2/dags/ingest/dagRuns` with `{"logical_date": "2026-03-01T10:00:00Z"}`, which covers
    09:00-10:00. (`airflow dags trigger --logical-date` ran the wall clock's hour on Airflow 3.3.2.)
    """

    # multiple_outputs=False: the report is one XCom, not one XCom per top-level key.
    @task(multiple_outputs=False, outlets=[SILVER_DELIVERED])
    def ingest_interval() -> dict[str, Any]:
        # Imported here, not at module level: a DAG file is parsed every few seconds, and
        # pipelines pulls in Spark and great-expectations once a job runs.
        from conf import load_settings
        from contracts.errors import DataContractError
        from pipelines.ingest.run import ingest_interval

        context = get_current_context()
        window = resolve_window(context)
        start, end = parse_window(window)
        with fail_without_retry(DataContractError):
            report = ingest_interval(load_settings(), start=start, end=end, run_id=window["run_id"])
        events = context["outlet_events"][SILVER_DELIVERED]
        for table in report["delivered"]:
            events.add(silver_asset(table), extra={"start": window["start"], "end": window["end"]})
        return report

    ingest_interval()


ingest()
