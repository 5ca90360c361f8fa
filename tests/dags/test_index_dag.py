"""The ``index`` and ``content_tower`` DAGs: light to parse, wired as documented, and runnable.

Uses the Airflow fixtures of tests/dags/conftest.py (throwaway AIRFLOW_HOME, migrated SQLite DB,
TURNOUT_HOME for the tasks' settings).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from tests.dags.conftest import DAGS_DIR, AirflowTestEnv

if TYPE_CHECKING:
    from airflow.dag_processing.dagbag import DagBag

HEAVY = ("torch", "pyspark", "h3", "numpy", "pandas", "pipelines", "models", "delta")


def test_parsing_imports_nothing_heavy() -> None:
    """Parse both DAG files in a fresh interpreter and list what got imported."""
    code = (
        "import importlib.util, json, sys\n"
        f"sys.path.insert(0, {str(DAGS_DIR)!r})\n"
        "for name in ('index', 'content_tower'):\n"
        f"    spec = importlib.util.spec_from_file_location(name, {str(DAGS_DIR)!r} + '/' + name + '.py')\n"
        "    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "print(json.dumps(sorted(m.split('.')[0] for m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "airflow" in loaded
    assert not loaded & set(HEAVY), f"parsing imports {sorted(loaded & set(HEAVY))}"


def test_dags_are_wired_as_documented(dagbag: DagBag) -> None:
    assert not {k: v for k, v in dagbag.import_errors.items() if "index" in k or "content_tower" in k}
    index = dagbag.get_dag("index")
    tower = dagbag.get_dag("content_tower")
    assert index is not None and tower is not None
    assert {"turnout", "index"} <= set(index.tags) and {"turnout", "content_tower"} <= set(tower.tags)
    assert index.task_dict["publish"].upstream_task_ids == {"build", "as_of"}
    assert index.task_dict["build"].upstream_task_ids == {"embed", "as_of"}
    for dag in (index, tower):
        assert dag.doc_md and dag.max_active_runs == 1 and not dag.catchup
        assert all(t.retries == 2 for t in dag.tasks)


@contextmanager
def without_retries(dagbag: DagBag, dag_id: str) -> Iterator[Any]:
    """The DAG with retries off for the block: a failing task would otherwise be retried twice,
    five minutes apart, inside ``dag.test()``."""
    dag = dagbag.get_dag(dag_id)
    assert dag is not None
    saved = {t.task_id: t.retries for t in dag.tasks}
    for t in dag.tasks:
        t.retries = 0
    try:
        yield dag
    finally:
        for t in dag.tasks:
            t.retries = saved[t.task_id]


@pytest.mark.integration
def test_weekly_tower_then_an_index_run_end_to_end(  # type: ignore[no-untyped-def]
    airflow_env: AirflowTestEnv, dagbag: DagBag, spark
) -> None:
    from conf import load_settings
    from published.index_store import geo_store, load_live_index
    from published.tower import current_tower_version
    from tests.index_synthetic import make_world, write_silver

    settings = load_settings("local", home=airflow_env.turnout_home)
    write_silver(spark, settings, make_world(seed=3, n_users=250, n_events=500))

    monday = datetime(2026, 10, 12, 4, 0, tzinfo=UTC)  # interval [Oct 5 04:00, Oct 12 04:00)
    with without_retries(dagbag, "content_tower") as dag:
        assert dag.test(logical_date=monday).state == "success"
    tower_version = current_tower_version(settings)
    assert tower_version is not None

    hour = monday + timedelta(hours=2)  # as a gold.features update reaching 06:00 would run it
    with without_retries(dagbag, "index") as dag:
        assert dag.test(run_conf={"as_of": hour.isoformat()}).state == "success"
    live = load_live_index(geo_store(settings), expected_tower_version=tower_version)
    assert live.manifest["built_at"] == hour.isoformat()
    assert len(live.index) > 0 and live.manifest["missing_embeddings"] == 0
    embeddings = spark.read.format("delta").load(settings.lake.table_path("gold", "event_embeddings"))
    assert embeddings.filter(embeddings.tower_version == tower_version).count() > len(live.index)
