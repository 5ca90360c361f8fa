"""A small client of Airflow 3's REST API, for driving a running deployment from outside.

``turnout loop`` plays the simulated platform through the deployment ``make up`` started and
shows each DAG run and task as it goes; the scheduler test drives the same deployment with it.
Only the standard library: the client runs beside Airflow, not inside it.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

# The DAGs that close the loop: the platform's hour, and everything its delivery starts behind it.
LOOP_DAGS = ("platform", "ingest", "features", "train_rsvp", "index")
BUSY = ("queued", "running")


class AirflowError(RuntimeError):
    """The API answered with an error; the message carries the status, the body and the server log."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class AirflowApi:
    base_url: str
    server_log: Path | None = None  # the api-server's log, quoted on errors
    timeout_s: float = 120.0
    _token: str | None = None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if self._token is None:
            with urllib.request.urlopen(f"{self.base_url}/auth/token", timeout=self.timeout_s) as r:
                self._token = json.load(r)["access_token"]
        request = urllib.request.Request(
            f"{self.base_url}/api/v2{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            tail = ""
            if self.server_log is not None and self.server_log.is_file():
                tail = "\napi-server log:\n" + "\n".join(
                    self.server_log.read_text(errors="replace").splitlines()[-60:]
                )
            raise AirflowError(f"{method} {path}: {e.code} {e.read()[:2000]!r}{tail}", e.code) from e

    def health(self) -> dict[str, Any]:
        return dict(self.call("GET", "/monitor/health"))

    def unpause(self, dag_id: str) -> None:
        self.call("PATCH", f"/dags/{dag_id}", {"is_paused": False})

    def pause(self, dag_id: str) -> None:
        self.call("PATCH", f"/dags/{dag_id}", {"is_paused": True})

    def trigger(
        self,
        dag_id: str,
        logical_date: datetime | None,
        conf: dict[str, Any] | None = None,
        run_after: datetime | None = None,
        run_id: str | None = None,
    ) -> dict[str, Any]:
        """A run for the interval ending at ``logical_date``'s tick, or with none (the run's conf
        then says what it covers; several such runs of one DAG can coexist).

        Its ``run_after`` defaults to the logical date, not the wall clock (the API's default):
        among queued runs of a ``max_active_runs=1`` DAG the scheduler starts the earliest
        ``run_after`` first, so a past interval asked for by hand goes before the wall clock's
        run that unpausing the DAG creates.
        """
        body: dict[str, Any] = {
            "logical_date": None if logical_date is None else logical_date.isoformat(),
            "conf": conf or {},
        }
        after = run_after or logical_date
        if after is not None:
            body["run_after"] = after.isoformat()
        if run_id is not None:
            body["dag_run_id"] = run_id
        return dict(self.call("POST", f"/dags/{dag_id}/dagRuns", body))

    def dag_exists(self, dag_id: str) -> bool:
        try:
            self.call("GET", f"/dags/{dag_id}")
        except AirflowError as e:
            if e.status == 404:
                return False
            raise
        return True

    def run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}"))

    def backfill(self, dag_id: str, first_hour: datetime, last_hour: datetime) -> dict[str, Any]:
        """One run per interval whose start lies in [first_hour, last_hour], one at a time."""
        body = {
            "dag_id": dag_id,
            "from_date": first_hour.isoformat(),
            "to_date": last_hour.isoformat(),
            "max_active_runs": 1,
            "reprocess_behavior": "none",
        }
        return dict(self.call("POST", "/backfills", body))

    def backfill_done(self, backfill_id: int) -> bool:
        return self.call("GET", f"/backfills/{backfill_id}")["completed_at"] is not None

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.call("GET", f"/dags/{dag_id}/dagRuns?limit=200&order_by=run_after")["dag_runs"])

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return list(self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"])

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value"
        return self.call("GET", path + "?deserialize=true")["value"]

    def asset_events(self, source_run_id: str) -> list[dict[str, Any]]:
        events = self.call("GET", "/assets/events?limit=500")["asset_events"]
        return [e for e in events if e.get("source_run_id") == source_run_id]

    def assets(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/assets?limit=500")["assets"])

    def latest_asset_event(self, asset_id: int) -> dict[str, Any] | None:
        events = self.call("GET", f"/assets/events?asset_id={asset_id}&order_by=-timestamp&limit=1")
        return dict(events["asset_events"][0]) if events["asset_events"] else None

    def create_asset_event(self, asset_id: int, extra: dict[str, Any]) -> dict[str, Any]:
        return dict(self.call("POST", "/assets/events", {"asset_id": asset_id, "extra": extra}))

    def busy(self, dag_ids: tuple[str, ...] = LOOP_DAGS) -> list[tuple[str, str, str]]:
        return [(d, r["dag_run_id"], r["state"]) for d in dag_ids for r in self.runs(d) if r["state"] in BUSY]


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start:
        return None
    t0 = datetime.fromisoformat(start.replace("Z", "+00:00"))
    t1 = datetime.fromisoformat(end.replace("Z", "+00:00")) if end else datetime.now(t0.tzinfo)
    return (t1 - t0).total_seconds()


def watch(
    api: AirflowApi,
    say: Callable[[str], None],
    done: Callable[[], bool],
    timeout_s: float = 7200.0,
    poll_s: float = 10.0,
    dag_ids: tuple[str, ...] = LOOP_DAGS,
    heartbeat_s: float = 60.0,
    seen: dict[tuple[str, str, str], str] | None = None,
) -> float:
    """Print every DAG run and task of ``dag_ids`` as its state changes (and a running task again
    every ``heartbeat_s``) until ``done()`` holds twice in a row (an asset-triggered run appears a
    scheduler loop after its event). ``seen`` (the states already printed) carries over between
    calls that follow one another. Returns the seconds it took."""
    started = time.monotonic()
    seen = {} if seen is None else seen
    said: dict[tuple[str, str, str], float] = {}
    quiet = 0
    while quiet < 2:
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"still busy after {timeout_s:.0f} s: {api.busy(dag_ids)}")
        for dag_id in dag_ids:
            for run in api.runs(dag_id):
                if run["state"] not in BUSY and seen.get((dag_id, run["dag_run_id"], "")) == run["state"]:
                    continue
                for ti in api.task_instances(dag_id, run["dag_run_id"]):
                    key = (dag_id, run["dag_run_id"], ti["task_id"])
                    again = ti["state"] == "running" and time.monotonic() - said.get(key, 0.0) > heartbeat_s
                    if ti["state"] and (seen.get(key) != ti["state"] or again):
                        seen[key], said[key] = ti["state"], time.monotonic()
                        took = _seconds(ti.get("start_date"), ti.get("end_date"))
                        window = run.get("data_interval_start") or run["run_type"]
                        say(
                            f"{dag_id:<13} {window:<22} {ti['task_id']:<17} {ti['state']:<9}"
                            + (f" {took:6.0f} s" if took is not None else "")
                        )
                seen[(dag_id, run["dag_run_id"], "")] = run["state"]
        quiet = quiet + 1 if done() else 0
        time.sleep(poll_s)
    return time.monotonic() - started


def watch_until_idle(
    api: AirflowApi,
    say: Callable[[str], None],
    backfill_id: int | None = None,
    timeout_s: float = 7200.0,
    poll_s: float = 10.0,
    dag_ids: tuple[str, ...] = LOOP_DAGS,
) -> float:
    """``watch`` until nothing in ``dag_ids`` is queued or running and the backfill, if any, is
    done. Returns the seconds it took."""

    def idle() -> bool:
        return (backfill_id is None or api.backfill_done(backfill_id)) and not api.busy(dag_ids)

    return watch(api, say, idle, timeout_s=timeout_s, poll_s=poll_s, dag_ids=dag_ids)


def release_held_events(
    api: AirflowApi, say: Callable[[str], None], dag_ids: tuple[str, ...] = LOOP_DAGS
) -> list[str]:
    """Start the runs Airflow never started for asset events it recorded; returns those DAGs.

    Airflow 3.3.2 (apache/airflow#56050, open) ignores the asset events that reach a
    ``max_active_runs=1`` DAG while its next run is queued, until some *later* event on its assets
    arrives: measured here, a platform step of four hours left the last two hours' deliveries with
    no ingest run and nothing in the DAG's queued events. So an event is held when it is the
    newest on an asset a DAG is scheduled on and started or joined no run of that DAG. The later
    event is posted here: the held one announced again with the same ``extra`` (the window it
    covered). The run it starts consumes every event since the DAG's last run, the held ones with
    it; another DAG on the same asset sees one more announcement of a window it has processed.
    """
    held: dict[str, dict[str, Any]] = {}
    for asset in api.assets():
        consumers = [d["dag_id"] for d in asset.get("scheduled_dags", []) if d["dag_id"] in dag_ids]
        newest = api.latest_asset_event(int(asset["id"])) if consumers else None
        if newest is None:
            continue
        started = {run["dag_id"] for run in newest.get("created_dagruns", [])}
        for dag_id in consumers:
            if dag_id not in started and str(newest["timestamp"]) > str(
                held.get(dag_id, {}).get("timestamp", "")
            ):
                held[dag_id] = newest
    posted: set[int] = set()
    for dag_id, event in sorted(held.items()):
        if event["asset_id"] not in posted:
            extra = {**(event.get("extra") or {}), "released_by": "turnout loop (apache/airflow#56050)"}
            api.create_asset_event(int(event["asset_id"]), extra)
            posted.add(event["asset_id"])
        say(
            f"{dag_id}: the asset event of {event['timestamp']} started no run (apache/airflow#56050); released"
        )
    return sorted(held)
