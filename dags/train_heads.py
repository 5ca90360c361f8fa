"""The ``train_rsvp`` (hourly) and ``train_attend`` (weekly) DAGs. Wiring only.

The work is in ``pipelines.training.train.train_head``: point-in-time training set -> LightGBM
head -> odds correction + per-segment isotonic calibration -> MLflow run -> registry version as
``challenger`` -> ``champion`` only if every gate passes. A gate that fails is a normal outcome,
not a task failure: the run's XCom and the MLflow version say why the champion stayed.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from _common import (
    GOLD_FEATURES,
    START_DATE,
    default_args,
    fail_without_retry,
    weekly_utc,
)
from _common import resolve_features_end as resolve_as_of
from airflow.sdk import PokeReturnValue, dag, get_current_context, task


def _train(head: str, as_of: str) -> dict[str, Any]:
    # Imported here, not at module level: a DAG file is parsed every few seconds.
    from conf import load_settings
    from pipelines.training.train import train_head

    with fail_without_retry(ValueError, FileNotFoundError):
        return train_head(load_settings(), head, as_of=datetime.fromisoformat(as_of))


@dag(
    dag_id="train_rsvp",
    # Every validated, materialized features run (hourly) retrains the fast head on fresh labels.
    schedule=[GOLD_FEATURES],
    start_date=START_DATE,
    catchup=False,
    # Registry aliases are last-writer-wins: two concurrent promotions could interleave.
    max_active_runs=1,
    default_args=default_args(execution_timeout=timedelta(minutes=50)),
    tags=["turnout", "training", "p_rsvp", "mlflow"],
)
def train_rsvp() -> None:
    """
    ### p_rsvp: hourly retrain on same-day RSVP labels

    Triggered by the `gold.features` asset (each `features` run that validated and materialized),
    as of the instant those features reach; by hand, pass `{"as_of": ISO}` in the run conf.

    1. **as_of**: the training instant (see `resolve_as_of`).
    2. **train**: `pipelines.training.train.train_head(settings, "rsvp", as_of)` builds a new
       version of `lake/training/rsvp` (impressions labelled by an RSVP within a day, plus ~20%
       never-impressed random negatives, odds-corrected), trains, calibrates, evaluates, logs
       the run to MLflow experiment `turnout-p_rsvp` and registers `turnout-p_rsvp`.
       `champion` moves only when every gate passes; the XCom has `promoted` and `reason`.

    **Failures.** Too little data or a missing training input fails without retries.
    """

    @task(multiple_outputs=False)
    def as_of() -> str:
        return resolve_as_of(get_current_context())

    @task(multiple_outputs=False)
    def train(at: str) -> dict[str, Any]:
        return _train("rsvp", at)

    # An XComArg at parse time, the string at run time.
    at: Any = as_of()
    train(at)


@dag(
    dag_id="train_attend",
    schedule=weekly_utc(),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    default_args=default_args(execution_timeout=timedelta(hours=2)),
    tags=["turnout", "training", "p_attend", "mlflow"],
)
def train_attend() -> None:
    """
    ### p_attend_given_rsvp: weekly retrain on labels at least nine days old

    Mondays 04:00 UTC, as of the end of the week that just ended (or `{"as_of": ISO}` in the run
    conf). Waits until the gold features are fresh as of that instant, then trains.

    1. **wait_for_features**: pokes every 10 minutes (for up to 6 hours) until the newest
       `gold.event_dynamics` and `gold.user_features` rows are within 48 h of `as_of`.
    2. **train**: `train_head(settings, "attend", as_of)`: RSVPs made at least nine days before
       `as_of`, labelled by observed attendance, gated on AUC over its own test RSVPs (mature
       labels) against the champion on the same rows. MLflow experiment `turnout-p_attend`, model
       `turnout-p_attend`.

    **Failures.** Features still stale after 6 hours fail the run; so does missing data.
    """

    @task(multiple_outputs=False)
    def as_of() -> str:
        return resolve_as_of(get_current_context())

    @task.sensor(poke_interval=600, timeout=6 * 3600, mode="reschedule")
    def wait_for_features(at: str) -> PokeReturnValue:
        from conf import load_settings
        from pipelines.training.train import features_fresh

        fresh = features_fresh(load_settings(), datetime.fromisoformat(at))
        return PokeReturnValue(is_done=fresh["fresh"], xcom_value=fresh)

    @task(multiple_outputs=False)
    def train(at: str) -> dict[str, Any]:
        return _train("attend", at)

    at: Any = as_of()
    wait_for_features(at) >> train(at)


train_rsvp()
train_attend()
