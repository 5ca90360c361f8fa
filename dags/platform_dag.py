"""The hourly ``platform`` DAG: the simulated platform, live against the running feed service.

Wiring only; the work is in ``simulator.platform`` (wired to the deployment by ``cli.platform``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from _common import (
    LANDING_DELIVERED,
    START_DATE,
    current_window,
    default_args,
    hourly_utc,
)
from airflow.sdk import dag, get_current_context, task
from airflow.sdk.exceptions import AirflowSkipException


@dag(
    dag_id="platform",
    schedule=hourly_utc(),
    start_date=START_DATE,
    catchup=False,
    # The platform's state moves forward one hour at a time: never two hours at once.
    max_active_runs=1,
    default_args=default_args(execution_timeout=timedelta(minutes=30), retries=1),
    tags=["turnout", "platform", "simulator", "loop"],
)
def platform() -> None:
    """
    ### Platform: the simulated platform's users, one UTC hour per run, closing the loop

    The stand-in for the real platform (`simulator.platform.play_hours`), for a home simulated
    with `turnout simulate --platform-days N`. For the run's hour `[data_interval_start,
    data_interval_end)`:

    1. delivers what the world brings in it (sign-ups, friendships, new events, cancellations,
       attendance and ratings that fall due) into the landing zone;
    2. asks the **running feed service** (`settings.platform.feed_url`, started by `make up`) for
       each feed request of the hour, at the request's instant; the service logs the impressions;
    3. lets the users respond by the hidden ground truth: RSVPs, and their attendance and ratings,
       delivered 7-17 days later (the label delay of the design);
    4. writes the booking counter the service filters by (sold out, RSVPed), and records what was
       served beside what a ground-truth oracle would have served (`turnout report loop`).

    Then it announces `landing.delivered`, which starts `ingest` for the same hour, and so
    `features` -> `train_rsvp` and `index` behind it: the champion learns from what it served.

    **Backfill** to run simulated hours faster than real time:
    `airflow backfill create --dag-id platform --from-date 2026-11-09T00:00:00+00:00
    --to-date 2026-11-09T05:00:00+00:00` (one hour after another; each waits for nothing but the
    previous hour, so the pipeline behind it catches up hours at a time).

    **Failures.** An hour outside the simulated world (switching the DAG on runs the wall clock's
    hour) is *skipped*: nothing to play, nothing announced. A feed the service
    could not answer counts as failed in the hour's report (the user saw nothing); the hour still
    delivers. An hour is played once: re-running a played hour changes nothing, and an hour that
    crashed midway is played again from the state before it.
    """

    @task(multiple_outputs=False, outlets=[LANDING_DELIVERED])
    def play_hour() -> dict[str, Any]:
        # Imported here, not at module level: a DAG file is parsed every few seconds.
        from cli.platform import play_platform
        from conf import load_settings
        from simulator.platform import OutsideWorld

        window = current_window()
        try:
            report = play_platform(load_settings(), window.start, window.end)
        except OutsideWorld as err:  # e.g. the wall clock's hour, long after the simulated world
            raise AirflowSkipException(f"nothing to play: {err}") from err
        get_current_context()["outlet_events"][LANDING_DELIVERED].extra = {
            "start": window.start.isoformat(),
            "end": window.end.isoformat(),
        }
        return report

    play_hour()


platform()
