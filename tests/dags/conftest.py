"""Airflow for the DAG tests: a throwaway home and SQLite metadata DB, migrated once per session.

Airflow reads its configuration once, when ``airflow`` is first imported, so the environment
below is set when pytest imports this conftest: before it collects any test module under
``tests/dags`` (whose imports pull in Airflow). Every variable is set unconditionally so a
developer's own ``AIRFLOW_HOME`` / metadata DB can never be touched by a test run.

Layout of the throwaway ``TURNOUT_HOME`` (removed when the test process exits)::

    <tmp>/turnout-dag-tests-XXXX/        TURNOUT_HOME: lake, landing, spark-warehouse, ...
    <tmp>/turnout-dag-tests-XXXX/airflow AIRFLOW_HOME: airflow.cfg, airflow.db, logs
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import DAG

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
DAGS_DIR = REPO_ROOT / "dags"

if "airflow.configuration" in sys.modules:
    # Too late: Airflow already read some other home/DB. Failing beats writing to the wrong DB.
    raise RuntimeError(
        "airflow was configured before tests/dags/conftest.py ran; do not import airflow from a "
        "conftest or plugin that loads earlier (the DAG tests must choose Airflow's home first)"
    )

TURNOUT_HOME = Path(tempfile.mkdtemp(prefix="turnout-dag-tests-"))
AIRFLOW_HOME = TURNOUT_HOME / "airflow"
AIRFLOW_HOME.mkdir()
atexit.register(shutil.rmtree, TURNOUT_HOME, ignore_errors=True)

AIRFLOW_ENV: dict[str, str] = {
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_DIR),
    # With examples on, Airflow adds an "example_dags" bundle that dag.test() parses and syncs too.
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    # dag.test() sleeps through a retry's delay (the deployment's is five minutes): a test that
    # meets a retry it did not expect fails within seconds on its try number, not after ten minutes.
    "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "2",
}
os.environ.update(AIRFLOW_ENV)

# Airflow puts the dags bundle root on sys.path when it parses or runs a DAG; the test modules
# import the shared helpers (``_common``) the same way the DAG files do.
if str(DAGS_DIR) not in sys.path:
    sys.path.append(str(DAGS_DIR))


@dataclass(frozen=True)
class AirflowTestEnv:
    turnout_home: Path
    airflow_home: Path
    dags_dir: Path
    migrate_seconds: float


@pytest.fixture(scope="session")
def airflow_env() -> Iterator[AirflowTestEnv]:
    """A migrated metadata DB, and ``TURNOUT_HOME`` pointing the tasks' settings at the tmp home.

    Tasks under ``dag.test()`` run in this process and call ``conf.load_settings()``, which reads
    ``TURNOUT_HOME`` at run time. Location overrides a developer may have exported are removed
    for the session so a test can never write into a real lake or landing area.
    """
    from airflow.utils import db

    started = time.perf_counter()
    # What `airflow db migrate` runs: on an empty DB it creates the schema from the ORM and
    # stamps the Alembic head (about 2 s here) instead of replaying every migration.
    db.upgradedb()
    migrate_seconds = time.perf_counter() - started
    log.info("airflow metadata DB migrated in %.1f s", migrate_seconds)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TURNOUT_HOME", str(TURNOUT_HOME))
        mp.setenv("TURNOUT_PROFILE", "local")
        for name in list(os.environ):
            if name.startswith(("TURNOUT__LAKE__", "TURNOUT__LANDING__")):
                mp.delenv(name)
        yield AirflowTestEnv(TURNOUT_HOME, AIRFLOW_HOME, DAGS_DIR, migrate_seconds)


@pytest.fixture(scope="session")
def dagbag(airflow_env: AirflowTestEnv) -> DagBag:
    """The dags folder parsed the way the DAG processor parses a bundle."""
    from airflow.dag_processing.dagbag import BundleDagBag

    dags_dir = airflow_env.dags_dir
    return BundleDagBag(dag_folder=dags_dir, bundle_path=dags_dir, bundle_name="dags-folder")


@pytest.fixture(scope="session")
def register_dag(airflow_env: AirflowTestEnv) -> Callable[[DAG], None]:
    """Serialize a DAG that lives outside the dags folder (e.g. in a test module) into the DB.

    ``dag.test()`` only syncs the configured bundles to the DB, then refuses a DAG it did not
    find there ("Cannot create DagRun ... because the dag is not serialized", apache/airflow
    #56657, #60860), so a DAG defined in a test module has to be written explicitly.
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    def register(dag: DAG) -> None:
        # The DAG row references its bundle: make sure the bundle row exists first.
        DagBundlesManager().sync_bundles_to_db()
        bag = DagBag(dag_folder=airflow_env.dags_dir, collect_dags=False)
        bag.bag_dag(dag)
        sync_bag_to_db(bag, "dags-folder", None)

    return register
