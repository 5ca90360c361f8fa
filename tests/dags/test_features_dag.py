"""The ``features`` DAG: its shape, its window, and whole runs under ``dag.test()``.

The happy path runs for real: a tiny simulated world (100 users x 21 days: enough for attendance,
and so organizer, venue and series rows, to arrive before the window ends) is ingested to silver,
then the DAG's one task builds gold with the Spark jobs, validates it, applies ``features/`` and
materializes to the SQLite online store. The broken-table path replaces ``build_gold`` with a stand-in that
writes one out-of-range value, because the real jobs cannot be made to break their contract.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from conf import Settings
from pipelines.features.jobs import GOLD_KEYS
from tests.dags.conftest import AirflowTestEnv

if TYPE_CHECKING:
    from airflow.dag_processing.dagbag import DagBag

pytestmark = pytest.mark.filterwarnings("ignore:.*is an experimental feature:RuntimeWarning")

START = datetime(2026, 3, 4, 11, tzinfo=UTC)
END = START + timedelta(hours=1)


def test_features_dag_shape(dagbag: DagBag) -> None:
    from _common import SILVER_TABLES

    dag = dagbag.dags["features"]
    assert dag.max_active_runs == 1 and not dag.catchup
    assert sorted(t.task_id for t in dag.tasks) == ["run_window", "update_features"]
    assert dag.get_task("update_features").upstream_task_ids == {"run_window"}
    # Scheduled on any silver table's update, the assets ingestion emits.
    assert type(dag.timetable.asset_condition).__name__ == "AssetAny"
    uris = {a.uri for a in dag.timetable.asset_condition.objects}
    assert uris == {f"turnout://silver/{t}" for t in SILVER_TABLES}


def _event(start: datetime, end: datetime, extra: dict[str, str] | None = None) -> Any:
    run = SimpleNamespace(data_interval_start=start, data_interval_end=end)
    return SimpleNamespace(source_dag_run=run, extra=extra)


def test_resolve_window_paths() -> None:
    import importlib.util

    from tests.dags.conftest import DAGS_DIR

    spec = importlib.util.spec_from_file_location("features_dag_module", DAGS_DIR / "features_dag.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from airflow.sdk.exceptions import AirflowFailException

    # Two ingest runs batched into one features run (each announced two tables): the union, and
    # each run's window once, in order, for gold to be built as the hourly runs would have.
    later = END + timedelta(hours=1)
    events = {
        "silver.users": [_event(END, later), _event(START, END)],
        "silver.rsvps": [_event(START, END), _event(END, later)],
    }
    window = module.resolve_window({"triggering_asset_events": events, "run_id": "r1"})
    assert window == {
        "start": START.isoformat(),
        "end": later.isoformat(),
        "run_id": "r1",
        "windows": [[START.isoformat(), END.isoformat()], [END.isoformat(), later.isoformat()]],
    }

    # An asset-triggered producer (ingest behind the platform) has a wall-clock data interval of its
    # own: the window it actually covered travels in the event's extra, and wins.
    wall = datetime(2026, 12, 1, 10, tzinfo=UTC)
    covered = {"start": START.isoformat(), "end": END.isoformat()}
    window = module.resolve_window(
        {"triggering_asset_events": {"silver.users": [_event(wall, wall, covered)]}, "run_id": "r2"}
    )
    assert window == {**covered, "run_id": "r2", "windows": [[covered["start"], covered["end"]]]}

    manual = SimpleNamespace(conf={"start": START.isoformat(), "end": END.isoformat()})
    window = module.resolve_window({"triggering_asset_events": {}, "dag_run": manual, "run_id": "m"})
    assert window == {
        "start": START.isoformat(),
        "end": END.isoformat(),
        "run_id": "m",
        "windows": [[START.isoformat(), END.isoformat()]],
    }

    # The first load of a history: everything delivered before `end`, by hand and behind it.
    first = {"end": END.isoformat()}
    window = module.resolve_window({"dag_run": SimpleNamespace(conf=first), "run_id": "f"})
    assert window == {
        "start": None,
        "end": END.isoformat(),
        "run_id": "f",
        "windows": [[None, END.isoformat()]],
    }
    assert module.parse_window(window) == (None, END)
    behind = {
        "silver.users": [_event(wall, wall, {"start": None, "end": END.isoformat()}), _event(END, later)]
    }
    window = module.resolve_window({"triggering_asset_events": behind, "run_id": "f2"})
    assert window == {
        "start": None,
        "end": later.isoformat(),
        "run_id": "f2",
        "windows": [[None, END.isoformat()], [END.isoformat(), later.isoformat()]],
    }

    for conf in ({"start": START.isoformat()}, {"start": "2026-03-04T11:00", "end": "2026-03-04T12:00"}):
        with pytest.raises(AirflowFailException):
            module.resolve_window({"dag_run": SimpleNamespace(conf=conf), "run_id": "bad"})


def _broken_build_gold() -> Any:
    """A stand-in for ``build_gold``: small contract-valid gold tables with one rate above 1."""
    from pipelines.spark import get_spark
    from tests.integration import gold_tables as G

    def build_gold(
        settings: Settings, start: datetime, end: datetime, run_id: str, progress: Any = None
    ) -> dict[str, Any]:
        spark = get_spark(settings)
        rng = random.Random(1)
        tables: dict[str, list[dict[str, Any]]] = {}
        for table in GOLD_KEYS:
            keys = [
                {k: f"sf|music|{i}" if k == "market_key" else f"{k[0]}{i}" for k in G.KEYS[table]}
                for i in range(3)
            ]
            tables[table] = [
                G.default_row(table, rng, key, start + timedelta(minutes=10 * i))
                for i, key in enumerate(keys)
            ]
        tables["event_dynamics"][0]["fill_rate"] = 1.7  # not a rate
        G.write_history(spark, settings, tables)
        written = {t: {"inserted": len(rows), "updated": 0, "deleted": 0} for t, rows in tables.items()}
        return {"run_id": run_id, "tables": written}  # build_gold's report, as far as callers read it

    return build_gold


def _states(dagrun: Any) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dagrun.get_task_instances()}


def _returned(dagrun: Any, task_id: str) -> Any:
    ti = next(ti for ti in dagrun.get_task_instances() if ti.task_id == task_id)
    return ti.xcom_pull(task_ids=task_id)


@pytest.fixture
def simulated_silver(
    airflow_env: AirflowTestEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Settings, datetime, datetime]:
    """A tiny simulated world ingested to silver in a fresh home: (settings, window start, end).

    The window is the simulated one, so its end is the history's "now" (what ``make demo``
    passes as ``DEMO_NOW``): every gold table is fresh as of it.
    """
    from conf import load_settings
    from pipelines.features.jobs import KNOWN_AT
    from pipelines.ingest.run import build_silver, ingest_bronze
    from simulator import SimulationConfig, simulate

    monkeypatch.setenv("TURNOUT_HOME", str(tmp_path / "home"))
    settings = load_settings()  # what the DAG's tasks load
    summary = simulate(
        SimulationConfig(users=100, days=21, seed=7), Path(settings.landing.root), settings.home / "simulator"
    )
    # Only the silver tables the gold jobs read.
    ingest_bronze(settings, None, None, run_id="sim", entities=KNOWN_AT)
    build_silver(settings, None, None, run_id="sim", entities=KNOWN_AT)
    start, end = (
        datetime.fromisoformat(t).astimezone(UTC) for t in (summary.window_start, summary.window_end)
    )
    return settings, start, end


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_features_dag_builds_validates_and_materializes_a_simulated_world(
    dagbag: DagBag, simulated_silver: tuple[Settings, datetime, datetime]
) -> None:
    from pipelines.features.materialize import materialized_intervals
    from pipelines.spark import get_spark
    from published.feature_store import open_online_store

    settings, start, end = simulated_silver
    started = time.perf_counter()
    dagrun = dagbag.dags["features"].test(run_conf={"start": start.isoformat(), "end": end.isoformat()})
    print(f"dag.test(features) took {time.perf_counter() - started:.1f} s")
    assert _states(dagrun) == dict.fromkeys(["run_window", "update_features"], "success")
    report = _returned(dagrun, "update_features")
    print(f"update_features seconds per step: {report['seconds']}")

    # gold: the real jobs wrote every gold table, each with rows, as Delta.
    built = report["gold"]
    assert set(built["tables"]) == set(GOLD_KEYS)
    spark = get_spark(settings)
    gold = {t: spark.read.format("delta").load(settings.lake.table_path("gold", t)) for t in GOLD_KEYS}
    counts = {t: frame.count() for t, frame in gold.items()}
    print(f"gold rows: {counts}")
    assert all(counts[t] == built["tables"][t]["inserted"] > 0 for t in GOLD_KEYS), (counts, built)

    # validate: every gold table's suite ran on those rows and passed.
    validated = report["validation"]
    assert validated["end"] == end.isoformat()
    assert {t: (r["success"], r["rows"] > 0) for t, r in validated["tables"].items()} == dict.fromkeys(
        GOLD_KEYS, (True, True)
    )
    assert validated["missing"] == ["event_embeddings"]  # the index stage never ran here

    # materialize: every view over a built table wrote keys and reached the window's end ...
    online = report["materialize"]
    written = {v: r["rows"] for v, r in online["views"].items() if r["status"] == "materialized"}
    assert set(written) == set(GOLD_KEYS) and all(n > 0 for n in written.values()), online["views"]
    windows = materialized_intervals(settings)
    assert all(windows[v][-1][1] == end.isoformat() for v in GOLD_KEYS), windows
    assert not windows["event_embeddings"]

    # ... and the online store serves each user's newest gold value.
    newest = (
        gold["user_features"]
        .orderBy("event_timestamp", ascending=False)
        .dropDuplicates(["user_id"])
        .select("user_id", "history_depth", "attend_rate_shrunk")
        .collect()
    )
    served = (
        open_online_store(settings)
        .get_online_features(
            features=["user_features:history_depth", "user_features:attend_rate_shrunk"],
            entity_rows=[{"user_id": r["user_id"]} for r in newest],
        )
        .to_dict()
    )
    assert served["history_depth"] == [r["history_depth"] for r in newest]
    assert served["attend_rate_shrunk"] == pytest.approx([r["attend_rate_shrunk"] for r in newest])


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_broken_gold_table_fails_validation_without_retry_and_nothing_is_materialized(
    dagbag: DagBag, airflow_env: AirflowTestEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pipelines.features.jobs as jobs

    monkeypatch.setenv("TURNOUT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(jobs, "build_gold", _broken_build_gold())
    dagrun = dagbag.dags["features"].test(run_conf={"start": START.isoformat(), "end": END.isoformat()})
    states = _states(dagrun)
    # Failed on its first try: a contract failure is not retried. (Any other error would be, and
    # end "failed" too once its retries ran out: the try number tells them apart.)
    assert states["update_features"] == "failed", states
    ti = dagrun.get_task_instance("update_features")
    assert ti.try_number == 1, f"update_features was retried ({ti.try_number} tries)"
    assert not (tmp_path / "home" / "feast" / "online.db").exists()
