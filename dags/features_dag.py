"""The ``features`` DAG: silver -> gold feature tables -> validation -> Feast apply -> online store.
Wiring only; the work is in pipelines.features.

Not named ``features.py``: Airflow puts this folder on ``sys.path``, where a module ``features``
would shadow (or be shadowed by) the Feast repository package, and mypy refuses the pair.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from _common import (
    GOLD_FEATURES,
    SILVER_ASSETS,
    START_DATE,
    default_args,
    fail_without_retry,
    parse_window,
    resolve_window,
)
from airflow.sdk import AssetAny, dag, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException


@dag(
    dag_id="features",
    # Ingestion updates every silver table it touched; an update of any of them rebuilds gold.
    schedule=AssetAny(*SILVER_ASSETS),
    start_date=START_DATE,
    catchup=False,
    # MERGEs into the same gold Delta tables and advances one online store: one run at a time.
    max_active_runs=1,
    default_args=default_args(execution_timeout=timedelta(minutes=45)),
    tags=["turnout", "features", "gold", "feast"],
)
def features() -> None:
    """
    ### Features: silver -> gold -> Feast, after every silver update (hourly, behind ingest)

    Runs when ingestion updates any `silver.*` asset, over the intervals those ingest runs covered,
    one after another (or, triggered by hand, over `{"start": ISO, "end": ISO}` from the run conf).
    A run that several ingest runs triggered (a backfill catching up) writes gold as the hourly
    runs would have: each interval built in turn, its rows stamped at that interval's end.

    One task, one Spark session (`pipelines.features.run.update_features`), four steps; its XCom
    holds each step's report and seconds:

    1. **gold**: `pipelines.features.jobs.build_gold` recomputes the gold feature tables and
       MERGEs the rows of the window (plus the late-arrival lookback) into `gold.<table>`.
    2. **validate**: `pipelines.features.validation.validate_gold` runs a great-expectations
       suite per gold table (schema, nulls, ranges, `created >= event_timestamp`, freshness) as of
       the window's end, on the rows the window may have written (and the freshness horizon). A
       broken table fails the run here, before anything reaches serving.
    3. **apply**: `feast apply` only when the hash of `features/` differs from the registry's.
    4. **materialize**: each feature view's new window goes to the online store; never a window
       ending before the last one. Then the task updates the `gold.features` asset (extra
       `{"end": ISO}`), which triggers `train_rsvp` and `index`. When no view moved forward (a past
       interval re-run, an interval already materialized) the task is *skipped*: no
       `gold.features` event, no training run on stale features.

    **Failures.** A data-contract failure (`DataContractError`) fails without retries: fix the job
    or the data, then clear the task. Anything else is retried twice. Every step is idempotent.
    """

    @task(multiple_outputs=False)
    def run_window() -> dict[str, Any]:
        return resolve_window(get_current_context())

    @task(multiple_outputs=False, outlets=[GOLD_FEATURES])
    def update_features(window: dict[str, Any]) -> dict[str, Any]:
        # Imported here, not at module level: a DAG file is parsed every few seconds.
        from conf import load_settings
        from contracts.errors import DataContractError
        from pipelines.features.run import update_features

        with fail_without_retry(DataContractError):
            start, end = parse_window(window)
            report = update_features(
                load_settings(),
                start=start,
                end=end,
                run_id=window["run_id"],
                windows=[parse_window({"start": lo, "end": hi}) for lo, hi in window["windows"]],
            )
        views = report["materialize"]["views"]
        if not any(v["status"] == "materialized" for v in views.values()):
            # Nothing new reached the online store (every view up to date, behind or without a
            # gold table): a skipped task emits no asset event, so no training run follows.
            statuses = {name: v["status"] for name, v in views.items()}
            raise AirflowSkipException(f"no feature view materialized up to {window['end']}: {statuses}")
        # Tells the training and index DAGs how far the features they are triggered by reach.
        get_current_context()["outlet_events"][GOLD_FEATURES].extra = {"end": window["end"]}
        return report

    # An XComArg at parse time, the dict at run time.
    window: Any = run_window()
    update_features(window)


features()
