# Airflow's settings for turnout on one machine; sourced by ops/up.sh, ops/down.sh and by a shell
# that wants the `airflow` CLI to talk to the same deployment:  source ops/airflow-env.sh
# Requires TURNOUT_HOME; AIRFLOW_PORT defaults to 8080. Every value can be overridden by exporting it first.
: "${TURNOUT_HOME:?set TURNOUT_HOME first}"
_TURNOUT_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$TURNOUT_HOME/airflow}"
# The metadata database `make up` started (PostgreSQL under the home), else the embedded SQLite file.
if [[ -z "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-}" && -f "$AIRFLOW_HOME/metadata.url" ]]; then
  AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="$(cat "$AIRFLOW_HOME/metadata.url")"
fi
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite:///$AIRFLOW_HOME/airflow.db}"
if [[ "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" == postgresql* ]]; then
  # psycopg 3 for the sync and the async engine alike (Airflow 3 uses both).
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC:-$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN}"
fi
export AIRFLOW__CORE__DAGS_FOLDER="${AIRFLOW__CORE__DAGS_FOLDER:-$_TURNOUT_REPO/dags}"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
if [[ "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" == sqlite* ]]; then
  # The embedded SQLite file: wait a minute for a writer's lock, not Python's 5 s (see conf/airflow_sqlite.py).
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS:-conf.airflow_sqlite.CONNECT_ARGS}"
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC:-conf.airflow_sqlite.CONNECT_ARGS}"
fi
# LocalExecutor: tasks run as subprocesses of the scheduler. Parallelism 2 on a 2-core machine:
# the default of 32 forks 32 idle workers, and two Spark jobs at once already fill the cores.
# (With SQLite Airflow falls back to one task at a time; on PostgreSQL, `make up`'s default, two run at once.)
export AIRFLOW__CORE__EXECUTOR="${AIRFLOW__CORE__EXECUTOR:-LocalExecutor}"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-2}"
# A failed task (anything but a broken data contract) is retried twice, five minutes apart.
export AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY="${AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY:-300}"
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-True}"
# Workers reach the API server for the Task Execution API; it must name the port actually used.
export AIRFLOW__API__PORT="${AIRFLOW_PORT:-8080}"
export AIRFLOW__API__BASE_URL="${AIRFLOW__API__BASE_URL:-http://127.0.0.1:${AIRFLOW_PORT:-8080}}"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:-http://127.0.0.1:${AIRFLOW_PORT:-8080}/execution/}"
# One person on loopback: the simple auth manager, everyone admin (no login form). For a shared
# deployment set a real auth manager (FAB or Keycloak) and users; see README "Running at scale".
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS:-True}"
# The DAG processor re-reads the folder every 30 s; turnout's DAG files parse in milliseconds.
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="${AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL:-30}"
