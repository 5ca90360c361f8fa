"""The ``features`` DAG: its shape, its window, and whole runs under ``dag.test()``.

``build_gold`` (the Spark feature jobs) is replaced by a stub that writes small contract-valid
gold tables, so these runs exercise the DAG's wiring, validation, apply and materialization on
the real engines without needing a silver lake.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from tests.dags.conftest import AirflowTestEnv

if TYPE_CHECKING:
    from airflow.dag_processing.dagbag import DagBag

pytestmark = pytest.mark.filterwarnings("ignore:.*is an experimental feature:RuntimeWarning")

START = datetime(2026, 3, 4, 11, tzinfo=UTC)
END = START + timedelta(hours=1)
# Every table the feature jobs own; event_embeddings comes from the index stage and may be absent.
TABLES = (
    "user_features",
    "event_features",
    "event_dynamics",
    "organizer_stats",
    "venue_stats",
    "series_stats",
    "market_rates",
    "social",
)


def test_features_dag_shape(dagbag: DagBag) -> None:
    from _common import SILVER_TABLES

    dag = dagbag.dags["features"]
    assert dag.max_active_runs == 1 and not dag.catchup
    order = ["run_window", "build_gold", "validate_gold", "apply_definitions", "materialize"]
    assert sorted(t.task_id for t in dag.tasks) == sorted(order)
    for upstream, downstream in zip(order[1:], order[2:], strict=False):
        assert upstream in dag.get_task(downstream).upstream_task_ids
    for task_id in ("build_gold", "validate_gold", "materialize"):
        assert "run_window" in dag.get_task(task_id).upstream_task_ids
    # Scheduled on any silver table's update, the assets ingestion emits.
    assert type(dag.timetable.asset_condition).__name__ == "AssetAny"
    uris = {a.uri for a in dag.timetable.asset_condition.objects}
    assert uris == {f"turnout://silver/{t}" for t in SILVER_TABLES}


def _event(start: datetime, end: datetime) -> Any:
    run = SimpleNamespace(data_interval_start=start, data_interval_end=end)
    return SimpleNamespace(source_dag_run=run)


def test_resolve_window_paths() -> None:
    import importlib.util

    from tests.dags.conftest import DAGS_DIR

    spec = importlib.util.spec_from_file_location("features_dag_module", DAGS_DIR / "features_dag.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from airflow.sdk.exceptions import AirflowFailException

    events = {"silver.users": [_event(START, END)], "silver.rsvps": [_event(END, END + timedelta(hours=1))]}
    window = module.resolve_window({"triggering_asset_events": events, "run_id": "r1"})
    assert window == {
        "start": START.isoformat(),
        "end": (END + timedelta(hours=1)).isoformat(),
        "run_id": "r1",
    }

    manual = SimpleNamespace(conf={"start": START.isoformat(), "end": END.isoformat()})
    window = module.resolve_window({"triggering_asset_events": {}, "dag_run": manual, "run_id": "m"})
    assert window == {"start": START.isoformat(), "end": END.isoformat(), "run_id": "m"}

    for conf in ({"start": START.isoformat()}, {"start": "2026-03-04T11:00", "end": "2026-03-04T12:00"}):
        with pytest.raises(AirflowFailException):
            module.resolve_window({"dag_run": SimpleNamespace(conf=conf), "run_id": "bad"})


def _stub_build_gold(broken: bool = False) -> Any:
    from conf import Settings
    from pipelines.spark import get_spark
    from tests.integration import gold_tables as G

    def build_gold(settings: Settings, start: datetime, end: datetime, run_id: str) -> dict[str, Any]:
        spark = get_spark(settings)
        spark.conf.set("spark.sql.shuffle.partitions", "1")
        rng = random.Random(1)
        tables: dict[str, list[dict[str, Any]]] = {}
        for table in TABLES:
            keys = [
                {k: f"sf|music|{i}" if k == "market_key" else f"{k[0]}{i}" for k in G.KEYS[table]}
                for i in range(3)
            ]
            tables[table] = [
                G.default_row(table, rng, key, start + timedelta(minutes=10 * i))
                for i, key in enumerate(keys)
            ]
        if broken:
            tables["event_dynamics"][0]["fill_rate"] = 1.7  # not a rate
        G.write_history(spark, settings, tables)
        return {"run_id": run_id, "tables": {t: len(rows) for t, rows in tables.items()}}

    return build_gold


def _states(dagrun: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dagrun.get_task_instances()}


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_features_dag_runs_build_validate_apply_materialize(
    dagbag: DagBag, airflow_env: AirflowTestEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipelines.features.jobs as jobs
    from conf import load_settings
    from pipelines.features.store import materialized_intervals

    monkeypatch.setenv("TURNOUT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(jobs, "build_gold", _stub_build_gold())
    dag = dagbag.dags["features"]
    dagrun = dag.test(run_conf={"start": START.isoformat(), "end": END.isoformat()})
    assert _states(dagrun) == dict.fromkeys(
        ["run_window", "build_gold", "validate_gold", "apply_definitions", "materialize"], "success"
    )
    windows = materialized_intervals(load_settings())
    # Every view over a built table reached the window's end; event_embeddings had no table yet.
    assert {name for name, w in windows.items() if w} == set(TABLES)
    assert all(w[-1][1] == END.isoformat() for name, w in windows.items() if name in TABLES)


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_broken_gold_table_fails_validation_without_retry_and_nothing_is_materialized(
    dagbag: DagBag, airflow_env: AirflowTestEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipelines.features.jobs as jobs

    monkeypatch.setenv("TURNOUT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(jobs, "build_gold", _stub_build_gold(broken=True))
    dagrun = dagbag.dags["features"].test(run_conf={"start": START.isoformat(), "end": END.isoformat()})
    states = _states(dagrun)
    # "failed", not "up_for_retry": a contract failure is not retried (and dag.test would wait for it).
    assert states["validate_gold"] == "failed", states
    assert states["apply_definitions"] == states["materialize"] == "upstream_failed"
    assert not (tmp_path / "home" / "feast" / "online.db").exists()
