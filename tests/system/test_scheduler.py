"""`make up` for real: the scheduler runs the hourly ingest and the asset chain behind it.

The deployment is started by ``ops/up.sh`` exactly as ``make up`` starts it (Airflow's api-server,
scheduler, dag-processor and triggerer with the LocalExecutor, the MLflow UI, the feed service),
on free loopback ports and a throwaway ``TURNOUT_HOME`` holding a small simulated world whose
history up to its last hour was ingested with the CLI. Then, through the REST API only:

1. an ``ingest`` run for the world's last hour covers that hour (not the wall clock's), succeeds,
   and announces exactly the silver tables the hour changed;
2. those asset events start ``features`` over the same interval, which materializes and
   announces ``gold.features`` up to the hour's end;
3. ingesting the same hour again changes nothing and so announces nothing and starts nothing;
4. ``ops/down.sh`` leaves no process of the deployment behind (checked even when a step fails).

Then a real headless browser (Debian's chromium) opens the Airflow UI of the same deployment: the
DAG list shows the six DAGs and the ``features`` DAG's runs page the asset-triggered run, green.

No tests/dags fixtures here: those configure Airflow inside the test process, and this test
must see the deployment only from outside. Select it with ``pytest -k scheduler``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.system.browser import browser_page, needs_chromium, screenshot
from tests.system.processes import free_port

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".venv" / "bin"


class Deployment:
    """The running stack, seen through its REST API."""

    def __init__(self, home: Path, env: dict[str, str], port: int) -> None:
        self.home, self.env, self.base = home, env, f"http://127.0.0.1:{port}"
        self._token: str | None = None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if self._token is None:
            with urllib.request.urlopen(f"{self.base}/auth/token", timeout=30) as r:
                self._token = json.load(r)["access_token"]
        request = urllib.request.Request(
            f"{self.base}/api/v2{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:  # say what the server said, and what its log says
            log = (self.home / "logs" / "airflow-api.log").read_text(errors="replace").splitlines()
            raise AssertionError(
                f"{method} {path}: {e.code} {e.read()[:2000]!r}\napi-server log:\n" + "\n".join(log[-60:])
            ) from e

    def unpause(self, dag_id: str) -> None:
        self._call("PATCH", f"/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, logical_date: datetime) -> dict[str, Any]:
        return dict(self._call("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": logical_date.isoformat()}))

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self._call("GET", f"/dags/{dag_id}/dagRuns?limit=100")["dag_runs"])

    def wait_for(self, dag_id: str, run_id: str, seconds: float) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            run = next((r for r in self.runs(dag_id) if r["dag_run_id"] == run_id), None)
            if run and run["state"] in ("success", "failed"):
                return run
            time.sleep(5)
        raise AssertionError(f"{dag_id} {run_id} not finished after {seconds} s")

    def asset_events(self, source_run_id: str) -> list[dict[str, Any]]:
        events = self._call("GET", "/assets/events?limit=200")["asset_events"]
        return [e for e in events if e.get("source_run_id") == source_run_id]


def _processes_of(pids: list[int]) -> list[str]:
    """Processes still in any of the deployment's process groups."""
    out = subprocess.run(["ps", "-eo", "pid,pgid,args"], capture_output=True, text=True, check=True).stdout
    left = []
    for line in out.splitlines()[1:]:
        pid, pgid, args = line.split(None, 2)
        if int(pgid) in pids:
            left.append(f"{pid} {args[:100]}")
    return left


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, datetime]]:
    from simulator import SimulationConfig, simulate

    home = tmp_path_factory.mktemp("scheduler") / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TURNOUT_"))}
    port = free_port()
    env.update(
        TURNOUT_HOME=str(home),
        AIRFLOW_PORT=str(port),
        MLFLOW_PORT=str(free_port()),
        FEED_PORT=str(free_port()),
        DOWN_GRACE="30",
    )
    summary = simulate(SimulationConfig(users=100, days=21, seed=7), home / "landing", home / "simulator")
    last_hour_end = datetime.fromisoformat(summary.window_end).astimezone(UTC)
    # History up to the last hour, ingested the way `make demo` does it.
    subprocess.run(
        [BIN / "turnout", "ingest", "--end", (last_hour_end - timedelta(hours=1)).isoformat()],
        env=env,
        check=True,
        capture_output=True,
    )
    up = subprocess.run([REPO / "ops" / "up.sh"], env=env, capture_output=True, text=True, timeout=600)
    pids = [int(p.read_text()) for p in (home / "run").glob("*.pid")]
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        # The API server's reads must not wait on (and 500 over) the scheduler's writes.
        with sqlite3.connect(home / "airflow" / "airflow.db") as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        yield Deployment(home, env, port), last_hour_end
    finally:
        down = subprocess.run(
            [REPO / "ops" / "down.sh"], env=env, capture_output=True, text=True, timeout=120
        )
        left = _processes_of(pids)
        assert not left, f"still running after make down:\n{down.stdout}\n" + "\n".join(left)


@pytest.mark.integration
@pytest.mark.timeout(2400)
def test_scheduler_runs_an_hour_through_ingest_and_features_and_an_empty_rerun_starts_nothing(
    deployment: tuple[Deployment, datetime],
) -> None:
    stack, hour_end = deployment
    hour_start = hour_end - timedelta(hours=1)
    for dag_id in ("ingest", "features"):
        stack.unpause(dag_id)

    started = time.perf_counter()
    ingest = stack.trigger("ingest", hour_end)
    assert (ingest["data_interval_start"], ingest["data_interval_end"]) == (
        hour_start.isoformat().replace("+00:00", "Z"),
        hour_end.isoformat().replace("+00:00", "Z"),
    )
    done = stack.wait_for("ingest", ingest["dag_run_id"], 900)
    assert done["state"] == "success", done
    announced = sorted(e["uri"] for e in stack.asset_events(ingest["dag_run_id"]))
    assert announced and all(u.startswith("turnout://silver/") for u in announced), announced
    print(
        f"ingest {hour_start:%Y-%m-%dT%H}Z under the scheduler: {time.perf_counter() - started:.0f} s, {announced}"
    )

    # The asset events start `features` over the ingested interval.
    deadline = time.monotonic() + 300
    while not (features := stack.runs("features")) and time.monotonic() < deadline:
        time.sleep(5)
    assert len(features) == 1, features
    done = stack.wait_for("features", features[0]["dag_run_id"], 1500)
    assert done["state"] == "success", done
    gold = stack.asset_events(features[0]["dag_run_id"])
    assert [e["uri"] for e in gold] == ["turnout://gold/features"], gold
    assert gold[0]["extra"]["end"] == hour_end.isoformat()
    print(f"ingest + features under the scheduler: {time.perf_counter() - started:.0f} s")

    # The same hour again: nothing new, so no asset event and no second features run.
    again = stack.trigger("ingest", hour_end + timedelta(microseconds=1))
    done = stack.wait_for("ingest", again["dag_run_id"], 900)
    assert done["state"] == "success", done
    assert stack.asset_events(again["dag_run_id"]) == []
    time.sleep(15)  # a scheduler loop or two, in which a wrongly triggered run would appear
    assert len(stack.runs("features")) == 1


DAG_IDS = ("content_tower", "features", "index", "ingest", "train_attend", "train_rsvp")


@pytest.mark.integration
@needs_chromium
@pytest.mark.timeout(600)
def test_browser_shows_the_dag_list_and_the_asset_triggered_run(
    deployment: tuple[Deployment, datetime], tmp_path: Path
) -> None:
    stack, _ = deployment
    features = stack.runs("features")
    with browser_page() as page:
        page.goto(f"{stack.base}/dags")
        page.get_by_text(f"{len(DAG_IDS)} Dags").wait_for()
        for dag_id in DAG_IDS:
            assert page.locator(f"a[href$='/dags/{dag_id}']").count() >= 1, dag_id  # its card's title
        screenshot(page, "airflow-dags.png", tmp_path)
        if features:  # the scheduler test above ran (not when this test is selected alone)
            page.goto(f"{stack.base}/dags/features/runs")
            row = page.get_by_role("row").filter(has_text=features[0]["dag_run_id"])
            row.wait_for()
            assert "Success" in row.inner_text() and "Asset" in row.inner_text(), row.inner_text()
            screenshot(page, "airflow-features-runs.png", tmp_path)
