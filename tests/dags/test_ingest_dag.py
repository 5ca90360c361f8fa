"""Run the ``ingest`` DAG with ``dag.test()``: its wiring with stand-in jobs, then for real on Spark."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from _common import fail_without_retry

from tests.dags.conftest import AirflowTestEnv

if TYPE_CHECKING:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models.dagrun import DagRun
    from airflow.sdk import DAG

# The hourly interval timetable maps a manual run at logical date T to [T - 1h, T).
HOUR_END = datetime(2026, 3, 1, 10, tzinfo=UTC)
HOUR_START = HOUR_END - timedelta(hours=1)


def _states(run: DagRun) -> dict[str, tuple[str | None, int]]:
    return {ti.task_id: (ti.state, ti.try_number) for ti in run.get_task_instances()}


def _asset_uris_updated_by(run: DagRun) -> list[str]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(AssetModel.uri)
            .join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
            .where(AssetEvent.source_run_id == run.run_id)
        )
        return sorted(rows)


def _timed_test(dag: DAG, **kwargs: Any) -> DagRun:
    started = time.perf_counter()
    run = dag.test(**kwargs)
    print(f"dag.test({dag.dag_id}) took {time.perf_counter() - started:.1f} s")
    return run


# --- wiring, with the pipelines jobs replaced by recorders (no Spark; a few seconds) ---------


def test_ingest_passes_one_utc_hour_and_run_id_and_announces_only_delivered_tables(
    dagbag: DagBag, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipelines.ingest.run as ingest_run

    calls: list[tuple[datetime, datetime, str]] = []

    def job(settings: Any, start: datetime, end: datetime, run_id: str) -> dict[str, Any]:
        calls.append((start, end, run_id))
        return {"tables": {"users": {"read": 3, "written": 3}}, "delivered": ["users", "rsvps"]}

    monkeypatch.setattr(ingest_run, "ingest_interval", job)

    run = _timed_test(dagbag.dags["ingest"], logical_date=HOUR_END)

    assert run.state == "success", _states(run)
    assert (run.data_interval_start, run.data_interval_end) == (HOUR_START, HOUR_END)
    assert calls == [(HOUR_START, HOUR_END, run.run_id)]
    ti = next(ti for ti in run.get_task_instances() if ti.task_id == "ingest_interval")
    assert ti.xcom_pull(task_ids="ingest_interval")["delivered"] == ["users", "rsvps"]
    assert _asset_uris_updated_by(run) == ["turnout://silver/rsvps", "turnout://silver/users"]


def test_an_hour_with_nothing_delivered_announces_nothing(
    dagbag: DagBag, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipelines.ingest.run as ingest_run

    monkeypatch.setattr(ingest_run, "ingest_interval", lambda *_, **__: {"tables": {}, "delivered": []})

    run = _timed_test(dagbag.dags["ingest"], logical_date=HOUR_END + timedelta(hours=2))

    assert run.state == "success", _states(run)
    assert _asset_uris_updated_by(run) == []


@pytest.fixture
def ingest_without_retry_delay(dagbag: DagBag, monkeypatch: pytest.MonkeyPatch) -> DAG:
    """The ingest DAG with a zero retry delay, for tests that expect a task to fail on try 1.

    Should a regression make the failure retryable, the test then fails in seconds (try 3)
    instead of idling in dag.test() through two five-minute retry delays.
    """
    dag = dagbag.dags["ingest"]
    for task in dag.tasks:
        monkeypatch.setattr(task, "retry_delay", timedelta(0))
    return dag


def test_ingest_fails_at_once_on_a_data_contract_error(
    ingest_without_retry_delay: DAG, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipelines.ingest.run as ingest_run

    def broken_delivery(*_: Any, **__: Any) -> dict[str, Any]:
        raise ingest_run.DataContractError("events: 61% of rows unusable")

    monkeypatch.setattr(ingest_run, "ingest_interval", broken_delivery)

    run = _timed_test(ingest_without_retry_delay, logical_date=HOUR_END + timedelta(hours=1))

    assert run.state == "failed"
    assert _states(run) == {"ingest_interval": ("failed", 1)}
    assert _asset_uris_updated_by(run) == []


def test_ingest_refuses_a_run_without_a_data_interval(
    ingest_without_retry_delay: DAG, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run with no logical date has no interval; the job must not run (None would mean "all").
    import pipelines.ingest.run as ingest_run

    calls: list[dict[str, Any]] = []

    def job(*_: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return {}

    monkeypatch.setattr(ingest_run, "ingest_interval", job)

    run = _timed_test(ingest_without_retry_delay, logical_date=None)

    assert (run.data_interval_start, run.data_interval_end) == (None, None)
    assert _states(run) == {"ingest_interval": ("failed", 1)}
    assert calls == []


# --- the wrapping helper itself, on a DAG that exists only in this module --------------------


class _Breach(Exception):
    """Stands in for a data-contract error."""


class _Blip(Exception):
    """Stands in for a transient fault."""


def _contract_probe_dag() -> DAG:
    from airflow.sdk import dag, task

    @dag(
        dag_id="contract_probe",
        schedule=None,
        start_date=datetime(2026, 1, 1, tzinfo=UTC),
        default_args={"retries": 2, "retry_delay": timedelta(0)},
        tags=["test"],
    )
    def contract_probe() -> None:
        @task
        def breach() -> None:
            with fail_without_retry(_Breach):
                raise _Breach("the delivery is broken")

        @task
        def blip() -> None:
            with fail_without_retry(_Breach):
                raise _Blip("storage hiccup")

        breach()
        blip()

    return contract_probe()


def test_fail_without_retry_skips_retries_for_listed_errors_only(
    register_dag: Callable[[DAG], None],
) -> None:
    probe = _contract_probe_dag()
    register_dag(probe)

    run = _timed_test(probe, logical_date=datetime(2026, 3, 1, tzinfo=UTC))

    assert run.state == "failed"
    # The listed error fails on its first try; any other error still gets all its retries.
    assert _states(run) == {"breach": ("failed", 1), "blip": ("failed", 3)}


# --- for real: simulator -> landing -> dag.test() -> bronze/silver Delta on Spark ------------


def _delivered_hours(landing_root: Path) -> dict[datetime, set[str]]:
    """Which entities have data in each delivered hour (layout: <entity>/delivered=<hour>/...)."""
    hours: dict[datetime, set[str]] = {}
    for part in landing_root.glob("*/delivered=*"):
        if any(f.stat().st_size for f in part.iterdir() if f.is_file()):
            hour = datetime.strptime(part.name.removeprefix("delivered="), "%Y-%m-%dT%H").replace(tzinfo=UTC)
            hours.setdefault(hour, set()).add(part.parent.name)
    return hours


@pytest.mark.integration
def test_ingest_dag_builds_silver_from_simulated_landing(dagbag: DagBag, airflow_env: AirflowTestEnv) -> None:
    from conf import load_settings
    from pipelines.spark import get_spark
    from simulator.config import SimulationConfig
    from simulator.run import simulate

    settings = load_settings()  # TURNOUT_HOME is the session's throwaway home (conftest)
    assert settings.home == airflow_env.turnout_home.resolve()
    landing = Path(settings.landing.root)
    simulate(
        SimulationConfig(users=300, days=3, seed=7, start=datetime(2026, 3, 2, tzinfo=UTC)),
        landing,
        settings.home / "truth",
    )
    hours = _delivered_hours(landing)
    assert hours, f"the simulator delivered nothing under {landing}"
    # The hour with the most entities (the first snapshot, typically): one run exercises most tables.
    hour = max(hours, key=lambda h: (len(hours[h]), -h.timestamp()))
    delivered = hours[hour]

    run = _timed_test(dagbag.dags["ingest"], logical_date=hour + timedelta(hours=1))

    assert run.state == "success", _states(run)
    assert (run.data_interval_start, run.data_interval_end) == (hour, hour + timedelta(hours=1))
    spark = get_spark(settings)
    rows = {
        table: spark.read.format("delta").load(settings.lake.table_path("silver", table)).count()
        for table in sorted(delivered)
    }
    print(f"ingested {hour:%Y-%m-%dT%H}Z; silver rows: {rows}")
    assert all(n > 0 for n in rows.values()), rows
    ti = next(ti for ti in run.get_task_instances() if ti.task_id == "ingest_interval")
    report = ti.xcom_pull(task_ids="ingest_interval")
    assert set(report["delivered"]) == delivered, report
    assert _asset_uris_updated_by(run) == sorted(f"turnout://silver/{t}" for t in delivered)
