"""The demo's first build, run by the deployment ``make up`` started: ``turnout demo``.

Every step is a DAG run that Airflow's scheduler runs, asked for over the REST API, in the order a
first deployment needs (each later hour the same DAGs follow one another on their assets alone):

1. ``ingest`` of everything delivered before ``now``, one run; the silver assets it announces
   start ``features`` over the same window (gold, its gates, materialization), which writes
   every row as the hourly runs would have (``jobs.created_stamp``).
2. ``content_tower`` as of ``tower_at`` once silver exists. By hand: its weekly schedule's run is
   the wall clock's last week, in which this history has no RSVP (that run keeps the tower).
3. ``index`` on the ``gold.features`` asset once a tower is published (by hand, as of ``now``, if
   ``features`` finished before the tower did).
4. ``train_rsvp``, then ``train_attend``, by hand as of ``now``, after the index: the first training
   set joins the first index's event vectors. Hourly afterwards ``train_rsvp`` and ``index`` run
   side by side on ``gold.features``, since an index run's new vectors are stamped at its instant
   and that hour's training set cannot see them.

Only the standard library and the REST client: the work itself runs in Airflow's task processes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cli.airflow_api import AirflowApi, watch

DEMO_DAGS = ("ingest", "features", "content_tower", "index", "train_rsvp", "train_attend")
DONE = ("success", "failed")


class DemoStepFailed(RuntimeError):
    """A DAG run of the demo did not succeed; the message names it and where its log is."""


def run_demo(
    api: AirflowApi,
    now: datetime,
    tower_at: datetime,
    say: Callable[[str], None],
    timeout_s: float = 3600.0,
    poll_s: float = 5.0,
) -> dict[str, Any]:
    """Steps 1-4 above; returns each step's run id, state and seconds, and both heads' XComs."""
    started = time.monotonic()
    steps: dict[str, dict[str, Any]] = {}
    printed: dict[tuple[str, str, str], str] = {}

    def left() -> float:
        return max(timeout_s - (time.monotonic() - started), 1.0)

    def follow(dag_id: str, run_id: str) -> dict[str, Any]:
        """Show every run of the demo's DAGs until ``run_id`` is done; raise unless it succeeded."""
        t0 = time.monotonic()
        watch(
            api,
            say,
            lambda: api.run(dag_id, run_id)["state"] in DONE,
            timeout_s=left(),
            poll_s=poll_s,
            dag_ids=DEMO_DAGS,
            seen=printed,
        )
        state = api.run(dag_id, run_id)["state"]
        steps[dag_id] = {"run_id": run_id, "state": state, "seconds": round(time.monotonic() - t0, 1)}
        if state != "success":
            raise DemoStepFailed(
                f"{dag_id} run {run_id} ended {state}: its task log is in the Airflow UI "
                f"and under $TURNOUT_HOME/airflow/logs/dag_id={dag_id}/run_id={run_id}/"
            )
        return steps[dag_id]

    def by_hand(dag_id: str, at: datetime, conf: dict[str, Any]) -> str:
        api.unpause(dag_id)
        # Named for the instant and the moment asked: a later `make demo` on the same home can ask again.
        run_id = f"demo__{at.isoformat()}__{datetime.now(UTC):%Y%m%dT%H%M%S}"
        api.trigger(dag_id, None, conf, run_after=at, run_id=run_id)
        say(f"triggered {dag_id} {run_id} {conf}")
        return run_id

    while missing := [d for d in DEMO_DAGS if not api.dag_exists(d)]:  # the dag-processor's first parse
        if time.monotonic() - started > 300:
            raise DemoStepFailed(f"Airflow has not parsed {missing} after 300 s: see $TURNOUT_HOME/logs/")
        time.sleep(2)
    window = {"end": now.isoformat()}  # everything delivered before it: the first load
    as_of = {"as_of": now.isoformat()}
    api.unpause("features")  # before ingest announces silver: a paused DAG's asset events are dropped
    asked = datetime.now(UTC)
    follow("ingest", by_hand("ingest", now, window))
    delivered = api.xcom("ingest", steps["ingest"]["run_id"], "ingest_interval")["delivered"]
    if not delivered:
        raise DemoStepFailed(
            "ingest found nothing new to load: this home is built (`make down clean` starts over)"
        )

    follow("content_tower", by_hand("content_tower", tower_at, {"as_of": tower_at.isoformat()}))
    steps["content_tower"]["xcom"] = api.xcom("content_tower", steps["content_tower"]["run_id"], "train")

    api.unpause("index")  # from here gold.features starts it
    unpaused = datetime.now(UTC)
    follow("features", _newest_run(api, "features", asked))
    announced = [
        e for e in api.asset_events(steps["features"]["run_id"]) if e["uri"] == "turnout://gold/features"
    ]
    if not announced:
        raise DemoStepFailed(
            "the features run announced no gold.features: see its XCom (nothing moved forward?)"
        )
    if _instant(announced[0]["timestamp"]) > unpaused:
        follow("index", _newest_run(api, "index", unpaused))
    else:  # features finished before the tower: its event reached a paused index DAG
        follow("index", by_hand("index", now, as_of))

    # One head after the other: side by side on 2 cores they took 352 s, in turn 169 + 104 s
    # (README, `make demo`): Spark, LightGBM and the calibration each want both cores.
    follow("train_rsvp", by_hand("train_rsvp", now, as_of))
    follow("train_attend", by_hand("train_attend", now, as_of))
    heads = {
        head: api.xcom(f"train_{head}", steps[f"train_{head}"]["run_id"], "train")
        for head in ("rsvp", "attend")
    }
    return {"steps": steps, "heads": heads, "seconds": round(time.monotonic() - started, 1)}


def _newest_run(api: AirflowApi, dag_id: str, since: datetime, wait_s: float = 120.0) -> str:
    """The run id of ``dag_id``'s newest run queued after ``since``, waiting for the scheduler to
    create it (an asset-triggered run appears a scheduler loop after its event)."""
    deadline = time.monotonic() + wait_s
    while True:
        runs = [r for r in api.runs(dag_id) if r["queued_at"] and _instant(r["queued_at"]) >= since]
        if runs:
            return str(runs[-1]["dag_run_id"])
        if time.monotonic() > deadline:
            raise DemoStepFailed(f"no {dag_id} run started within {wait_s:.0f} s of its asset's event")
        time.sleep(2)


def _instant(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))
