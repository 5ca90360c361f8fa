"""The weekly ``content_tower`` DAG: retrain the torch content tower. Wiring only.

The work is in ``pipelines.index.run.train_content_tower``; the hourly ``index`` DAG embeds
events with whichever tower is published when it runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from _common import CONTENT_TOWER, START_DATE, default_args, fail_without_retry, weekly_utc
from _common import resolve_features_end as resolve_as_of
from airflow.sdk import dag, get_current_context, task


@dag(
    dag_id="content_tower",
    # Mondays 04:00 UTC, covering the week that just ended (see _common.weekly_utc).
    schedule=weekly_utc(),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    default_args=default_args(execution_timeout=timedelta(hours=2)),
    tags=["turnout", "index", "content_tower", "torch"],
)
def content_tower() -> None:
    """
    ### Content tower: weekly retrain on co-RSVPs

    `pipelines.index.run.train_content_tower` reads the last 180 days of `silver.rsvps` known at
    the end of the data interval (by hand: `{"as_of": ISO}` in the run conf), pairs events one user RSVPed within 30 days, and trains the
    title + description + category tower with an in-batch contrastive loss. The newest 10% of
    pairs are held out; the tower is published (one atomic pointer update, the previous one kept)
    only if it puts those pairs closer than random pairs. The summary in XCom carries the
    held-out margin and same-series / organizer / category similarity against random pairs.
    A week without a single RSVP (a stale or stopped platform) keeps the published tower
    (`status: skipped` in the XCom).

    **Failures.** A tower that fails its held-out check (`TowerQualityError`) fails the run
    without retries; the previous tower stays published. The next hourly `index` run embeds
    every live event with a newly published tower before it builds the index.
    """

    @task(multiple_outputs=False, outlets=[CONTENT_TOWER])
    def train() -> dict[str, Any]:
        from conf import load_settings
        from pipelines.index.run import train_content_tower
        from pipelines.index.tower import TowerQualityError

        with fail_without_retry(TowerQualityError):
            at = datetime.fromisoformat(resolve_as_of(get_current_context()))
            return train_content_tower(load_settings(), now=at)

    train()


content_tower()
