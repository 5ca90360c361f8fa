#!/usr/bin/env bash
# `make up`: the turnout deployment on this machine, every piece a real server.
#
#   Airflow 3   api-server (UI + REST), scheduler (LocalExecutor), dag-processor, triggerer
#   MLflow      tracking server + UI over the home's registry (the same sqlite file the jobs use)
#   turnout     the feed service (`turnout serve`), following new champions and index versions
#
# State: $TURNOUT_HOME (airflow/ holds Airflow's home and metadata DB). Each server runs in a
# process group of its own, with its pid in $TURNOUT_HOME/run/<name>.pid and its log in
# $TURNOUT_HOME/logs/<name>.log; `make down` (ops/down.sh) stops each whole group, workers
# included. Ports: AIRFLOW_PORT (8080), MLFLOW_PORT (5000), FEED_PORT (8765).
# UP_SERVICES (default "airflow mlflow feed") picks which of the three groups start.
# FEED_NOW pins the feed service's clock (e.g. 2026-11-09T00:00Z); otherwise it is FEED_CLOCK: `published`
# (default: the newest published catalog's instant, which the simulated platform's hours move forward;
# the platform sends its own `now`) or `wall`. The platform's tasks ask the feed service on FEED_PORT.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${BIN:-$REPO/.venv/bin}"
export TURNOUT_HOME="${TURNOUT_HOME:-$REPO/.turnout}"
AIRFLOW_PORT="${AIRFLOW_PORT:-8080}"
MLFLOW_PORT="${MLFLOW_PORT:-5000}"
FEED_PORT="${FEED_PORT:-8765}"
RUN="$TURNOUT_HOME/run"
LOGS="$TURNOUT_HOME/logs"
mkdir -p "$RUN" "$LOGS" "$TURNOUT_HOME/airflow"
export TURNOUT__PLATFORM__FEED_URL="${TURNOUT__PLATFORM__FEED_URL:-http://127.0.0.1:$FEED_PORT}"

# shellcheck source=ops/lib.sh
source "$REPO/ops/lib.sh"
free_port() { "$BIN/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# Airflow's metadata: Debian's PostgreSQL under the home, unless a database was named. With the
# embedded SQLite file a write that meets another writer's lock waits, then fails: measured here,
# a backfill created while the scheduler started the first runs left two tasks stuck "running" for
# good (their state updates timed out on the lock). PostgreSQL also lets tasks run side by side.
AIRFLOW_STATE="$TURNOUT_HOME/airflow"
if [[ -z "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-}" && "${AIRFLOW_DB:-postgres}" == postgres ]]; then
  if [[ -x "$(pg_bin)/postgres" ]]; then
    PG_STATE="$AIRFLOW_STATE/pg"
    mkdir -p "$PG_STATE"
    [[ -f "$PG_STATE/port" ]] || free_port >"$PG_STATE/port"
    start_postgres "$PG_STATE" "$(cat "$PG_STATE/port")" airflow
    echo "postgresql+psycopg://turnout@127.0.0.1:$(cat "$PG_STATE/port")/airflow" >"$AIRFLOW_STATE/metadata.url"
  else
    echo "  PostgreSQL is not installed: Airflow's metadata in SQLite (apt-get install postgresql for tasks side by side)"
    rm -f "$AIRFLOW_STATE/metadata.url"
  fi
fi

# shellcheck source=ops/airflow-env.sh
source "$REPO/ops/airflow-env.sh"

# Airflow's per-process log servers default to 8793/8794, which other services on a shared
# machine often hold: give them free ports.
export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT="${AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT:-$(free_port)}"
export AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT="${AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT:-$(free_port)}"

wait_http() { # name, url, seconds
  local deadline=$((SECONDS + $3))
  until curl -fsS -o /dev/null "$2" 2>/dev/null; do
    if ((SECONDS > deadline)); then
      echo "$1 did not answer $2 within $3 s; last log lines:" >&2
      tail -n 20 "$LOGS/$1.log" >&2
      exit 1
    fi
    sleep 1
  done
  echo "  $1 answers at $2"
}

SERVICES=" ${UP_SERVICES:-airflow mlflow feed} "
echo "turnout up: TURNOUT_HOME=$TURNOUT_HOME (${SERVICES# })"
if [[ "$SERVICES" == *" airflow "* ]]; then
  "$BIN/airflow" db migrate >>"$LOGS/airflow-db.log" 2>&1
  if [[ "$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" == sqlite:///* ]]; then
    # Write-ahead logging (kept in the file): the API server's reads no longer wait on the
    # scheduler's writes, which with the default journal surface as 500s in the UI and REST API.
    "$BIN/python" -c 'import sqlite3, sys; print("  airflow.db journal:", sqlite3.connect(sys.argv[1]).execute("PRAGMA journal_mode=WAL").fetchone()[0])' \
      "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN#sqlite:///}"
  fi
  start airflow-api "$BIN/airflow" api-server --port "$AIRFLOW_PORT"
  start airflow-scheduler "$BIN/airflow" scheduler
  start airflow-dag-processor "$BIN/airflow" dag-processor
  start airflow-triggerer "$BIN/airflow" triggerer
fi
if [[ "$SERVICES" == *" mlflow "* ]]; then
  mkdir -p "$TURNOUT_HOME/mlflow"
  start mlflow "$BIN/turnout" mlflow-ui --port "$MLFLOW_PORT"
fi
if [[ "$SERVICES" == *" feed "* ]]; then
  feed_args=(serve --port "$FEED_PORT")
  [[ -n "${FEED_NOW:-}" ]] && feed_args+=(--now "$FEED_NOW")
  # Unless pinned, the service's clock is the published state's: the demo's last day, then each
  # hour the simulated platform plays (`make loop`).
  [[ -z "${FEED_NOW:-}" ]] && feed_args+=(--clock "${FEED_CLOCK:-published}")
  if [[ -z "${FEED_NOW:-}" && "${FEED_CLOCK:-published}" == published ]]; then
    # That clock moves when the index DAG publishes: look for a new catalog every 30 s, not every
    # 15 minutes (the settings' default), so the platform's next hours are answered as of it.
    export TURNOUT__SERVING__SNAPSHOT_REFRESH_SECONDS="${TURNOUT__SERVING__SNAPSHOT_REFRESH_SECONDS:-30}"
  fi
  start feed "$BIN/turnout" "${feed_args[@]}"
fi

echo
if [[ "$SERVICES" == *" airflow "* ]]; then
  wait_http airflow-api "http://127.0.0.1:$AIRFLOW_PORT/api/v2/monitor/health" 180
  echo "  Airflow UI  http://127.0.0.1:$AIRFLOW_PORT   (DAGs start paused: unpause or trigger them there)"
fi
if [[ "$SERVICES" == *" mlflow "* ]]; then
  wait_http mlflow "http://127.0.0.1:$MLFLOW_PORT/health" 120
  echo "  MLflow UI   http://127.0.0.1:$MLFLOW_PORT"
fi
if [[ "$SERVICES" == *" feed "* ]]; then
  echo "  Feed        http://127.0.0.1:$FEED_PORT/v1/feed?user_id=u0000001   (/healthz while it loads)"
fi
echo "  Stop all:   make down"
