"""The ``index`` DAG (behind every features run): embed new events -> build the geo-time index -> validate and publish.

Wiring only; the work is in ``pipelines.index.run``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from _common import (
    EVENT_EMBEDDINGS,
    GEO_INDEX,
    GOLD_FEATURES,
    START_DATE,
    default_args,
    fail_without_retry,
    resolve_features_end,
)
from airflow.sdk import dag, get_current_context, task


@dag(
    dag_id="index",
    # Whenever a features run brought gold and the online store forward (hourly, behind ingest), as
    # of the instant they reach: the served catalog follows the platform hour by hour, backfills too.
    schedule=[GOLD_FEATURES],
    start_date=START_DATE,
    catchup=False,
    # Versions are numbered in build order and published one at a time: one run at a time.
    max_active_runs=1,
    default_args=default_args(execution_timeout=timedelta(minutes=45)),
    tags=["turnout", "index", "embeddings", "geo"],
)
def index() -> None:
    """
    ### Index: content embeddings and the geo-time index, after every features run

    Runs after every `features` run that validated and materialized (the `gold.features` asset:
    hourly), as of the instant those features reach, `now` (by hand: `{"as_of": ISO}` in the run
    conf): every step sees the platform as it was then.

    1. **embed**: `pipelines.index.run.embed_new_events` gives every event without an up-to-date
       vector under the published content tower its 64 numbers, MERGEd into
       `gold.event_embeddings` on (event_id, tower_version). Skipped until a tower exists
       (the weekly `content_tower` DAG trains it).
    2. **build**: `build_index_version` reads the live events (created, not cancelled, not
       started) from silver, buckets them by H3 res-5 cell sorted by start, and stages version
       N+1 beside the live N. Nothing is published.
    3. **publish**: `publish_index_version` checks N+1 (every live event exactly once, no past
       events, size within 50% of N, every event embedded under the recorded tower version,
       that tower still the published one) and switches the pointer in one atomic replace.

    **Failures.** A failed check (`IndexValidationError`, `TowerVersionMismatch`) fails the run
    at once, without retries, and leaves N serving; the next hour builds afresh. Roll back
    with `pipelines.index.run.rollback_index`. Anything else is retried twice.

    **Ordering.** It runs behind `ingest` and `features` for the same hours, so the events, RSVP
    lists and features it publishes are those hours' own.
    """

    @task(multiple_outputs=False)
    def as_of() -> str:
        return resolve_features_end(get_current_context())

    @task(multiple_outputs=False, outlets=[EVENT_EMBEDDINGS])
    def embed(at: str) -> dict[str, Any]:
        # Imported here, not at module level: torch and Spark load only when a task runs.
        from conf import load_settings
        from pipelines.index.run import embed_new_events

        return embed_new_events(load_settings(), now=datetime.fromisoformat(at))

    @task(multiple_outputs=False)
    def build(at: str) -> dict[str, Any]:
        from conf import load_settings
        from pipelines.index.run import IndexValidationError, build_index_version

        with fail_without_retry(IndexValidationError):
            return build_index_version(load_settings(), now=datetime.fromisoformat(at))

    @task(multiple_outputs=False, outlets=[GEO_INDEX])
    def publish(built: dict[str, Any], at: str) -> dict[str, Any]:
        from conf import load_settings
        from pipelines.index.run import IndexValidationError, TowerVersionMismatch, publish_index_version

        with fail_without_retry(IndexValidationError, TowerVersionMismatch):
            return publish_index_version(load_settings(), built["version"], now=datetime.fromisoformat(at))

    # XComArgs at parse time, the values at run time.
    at: Any = as_of()
    built: Any = build(at)
    embed(at) >> built
    publish(built, at)


index()
