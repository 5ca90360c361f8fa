"""Every DAG file parses, follows the house policies, and stays light at parse time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING, Any

from tests.dags.conftest import DAGS_DIR, AirflowTestEnv

if TYPE_CHECKING:
    from airflow.dag_processing.dagbag import DagBag

DAG_FILES = sorted(DAGS_DIR.glob("*.py"))
# DAG files whose DAGs the policy tests below must find; a file that silently stopped defining
# its DAG would otherwise pass every per-DAG check by vanishing from the bag.
EXPECTED_DAG_IDS = {"platform", "ingest", "features", "index", "content_tower", "train_rsvp", "train_attend"}

# Imported by jobs, never by a DAG file at parse time: the DAG processor re-imports every file
# every few seconds, and any of these adds seconds and hundreds of MB to each parse. Our own
# packages are on the list because they import the engines (architecture: dags -> pipelines,
# inside tasks only).
HEAVY_MODULES = (
    "pyspark",
    "delta",
    "lightgbm",
    "torch",
    "mlflow",
    "feast",
    "great_expectations",
    "pandas",
    "sklearn",
    "pipelines",
    "features",
    "models",
    "serving",
)
# Generous next to the ~0.05 s a thin DAG file takes here, tight next to Airflow's 30 s
# dagbag_import_timeout: a file near this budget is doing work at parse time.
PARSE_BUDGET_S = 2.0


def test_dags_folder_has_dag_files() -> None:
    assert DAG_FILES, f"no DAG files in {DAGS_DIR}"


def test_dagbag_has_no_import_errors(dagbag: DagBag) -> None:
    assert dagbag.import_errors == {}, "\n\n".join(f"{f}:\n{e}" for f, e in dagbag.import_errors.items())
    assert set(dagbag.dag_ids) >= EXPECTED_DAG_IDS, f"missing DAGs: {EXPECTED_DAG_IDS - set(dagbag.dag_ids)}"


def _dags(dagbag: DagBag) -> list[Any]:
    return [dagbag.dags[dag_id] for dag_id in sorted(dagbag.dag_ids)]


def test_every_dag_follows_house_policies(dagbag: DagBag) -> None:
    problems: list[str] = []
    for dag in _dags(dagbag):
        if not dag.tags:
            problems.append(f"{dag.dag_id}: no tags")
        if not (dag.doc_md or "").strip():
            problems.append(f"{dag.dag_id}: no doc_md (give the DAG function a docstring)")
        if dag.catchup:
            problems.append(f"{dag.dag_id}: catchup=True (backfill explicitly instead)")
        for task in dag.tasks:
            if (task.retries or 0) < 1:
                problems.append(f"{dag.dag_id}.{task.task_id}: retries={task.retries}")
    assert not problems, "\n".join(problems)


def test_time_scheduled_dags_have_real_data_intervals(dagbag: DagBag) -> None:
    # Airflow 3 turns a bare cron string into a trigger timetable whose runs have an empty data
    # interval; our jobs read and write exactly their interval, so they would process nothing.
    from airflow.sdk import CronTriggerTimetable, DeltaTriggerTimetable, MultipleCronTriggerTimetable

    trigger_only = (CronTriggerTimetable, DeltaTriggerTimetable, MultipleCronTriggerTimetable)
    offenders = [
        f"{dag.dag_id}: {type(dag.timetable).__name__}"
        for dag in _dags(dagbag)
        if isinstance(dag.timetable, trigger_only)
    ]
    assert not offenders, f"use an interval timetable (e.g. _common.hourly_utc()): {offenders}"


_PARSE_PROBE = textwrap.dedent(
    """
    import importlib.util, json, sys, time

    dags_dir, files, heavy = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    sys.path.append(dags_dir)  # as the DAG processor does for the bundle root

    def loaded():
        return sorted(m for m in heavy if m in sys.modules)

    # The DAG processor has the SDK loaded before it parses a file; so does this probe, so the
    # times below are what each file itself costs.
    from airflow.sdk import Asset, CronDataIntervalTimetable, dag, get_current_context, task

    report = {"baseline": loaded(), "files": {}}
    for i, path in enumerate(files):
        spec = importlib.util.spec_from_file_location(f"dag_probe_{i}", path)
        module = importlib.util.module_from_spec(spec)
        started = time.perf_counter()
        spec.loader.exec_module(module)
        report["files"][path] = {"seconds": time.perf_counter() - started, "heavy": loaded()}
    print(json.dumps(report))
    """
)


def test_dag_files_import_no_heavy_modules(airflow_env: AirflowTestEnv) -> None:
    """Import each DAG file in a fresh interpreter and look at what it dragged into sys.modules."""
    files = [str(p) for p in DAG_FILES]
    result = subprocess.run(
        [sys.executable, "-c", _PARSE_PROBE, str(DAGS_DIR), json.dumps(files), json.dumps(HEAVY_MODULES)],
        env=dict(os.environ),  # carries the throwaway AIRFLOW_HOME chosen by conftest
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["baseline"] == [], f"airflow.sdk itself loaded {report['baseline']}"

    heavy = {path: r["heavy"] for path, r in report["files"].items() if r["heavy"]}
    times = {path: round(r["seconds"], 3) for path, r in report["files"].items()}
    slow = {path: seconds for path, seconds in times.items() if seconds > PARSE_BUDGET_S}
    # Files are imported in order, so the first offender listed is the one that imported it.
    assert not heavy, f"DAG files import heavy modules at parse time: {heavy}"
    assert not slow, f"DAG files over the {PARSE_BUDGET_S} s parse budget: {slow}"
    for path, seconds in times.items():
        print(f"parse {os.path.basename(path)}: {seconds * 1000:.0f} ms")


def test_silver_assets_match_the_ingest_tables() -> None:
    # dags/_common.py keeps its own list (DAG files may not import pipelines at parse time);
    # this keeps it equal to the tables ingestion actually writes.
    from _common import SILVER_ASSETS, SILVER_TABLES

    from pipelines.ingest.run import SILVER_TABLES as INGESTED

    assert tuple(SILVER_TABLES) == tuple(INGESTED)
    assert [a.uri for a in SILVER_ASSETS] == [f"turnout://silver/{t}" for t in INGESTED]


def test_ingest_dag_shape(dagbag: DagBag) -> None:
    from _common import SILVER_DELIVERED

    dag = dagbag.dags["ingest"]
    assert dag.max_active_runs == 1
    assert [t.task_id for t in dag.tasks] == ["ingest_interval"]
    # One alias, resolved at run time to the silver assets the interval changed.
    assert dag.get_task("ingest_interval").outlets == [SILVER_DELIVERED]


def test_no_dag_file_shadows_a_module() -> None:
    """Airflow puts the dags folder on ``sys.path``: a ``platform.py`` there replaces the stdlib's
    ``platform`` for every import after it (importlib_metadata's, at parse time, failed so)."""
    top_level = set(sys.stdlib_module_names) | {
        "features",
        "models",
        "pipelines",
        "serving",
        "simulator",
        "cli",
    }
    assert not [f.name for f in DAG_FILES if f.stem in top_level]
