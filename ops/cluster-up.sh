#!/usr/bin/env bash
# `make cluster-up`: conf/cluster-local.yaml's servers on loopback, each from a real distribution.
#
#   PostgreSQL (Debian)   :55432  databases `mlflow` and `airflow`
#   Spark standalone      master :7177 (UI :8190), two workers with 1 core each (UI :8191, :8192)
#   Redis (Debian)        :6391   Feast online store (db 0) and the capacity counter (db 1)
#   MLflow server         :5500   backend PostgreSQL, artifacts served over HTTP
#   Airflow               `make up` with its metadata on PostgreSQL (LocalExecutor), AIRFLOW_PORT 8280
#
# Each runs in a process group of its own (pid in $TURNOUT_HOME/run, log in $TURNOUT_HOME/logs);
# `make cluster-down` (ops/cluster-down.sh) stops them all.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
BIN="${BIN:-$REPO/.venv/bin}"
export TURNOUT_HOME="${TURNOUT_HOME:-$REPO/.turnout}"
RUN="$TURNOUT_HOME/run"
LOGS="$TURNOUT_HOME/logs"
CLUSTER="$TURNOUT_HOME/cluster"
mkdir -p "$RUN" "$LOGS" "$CLUSTER"
PG_PORT=55432 SPARK_PORT=7177 REDIS_PORT=6391 MLFLOW_PORT=5500

# shellcheck source=ops/lib.sh
source "$REPO/ops/lib.sh"
wait_for() { # name, seconds, command...
  local name="$1" deadline=$((SECONDS + $2)); shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then echo "$name not ready after $((SECONDS)) s:" >&2; tail -n 20 "$LOGS/$name.log" >&2; exit 1; fi
    sleep 1
  done
  echo "  $name ready"
}

echo "turnout cluster-up: TURNOUT_HOME=$TURNOUT_HOME"
# --- PostgreSQL ---------------------------------------------------------------------------
start_postgres "$CLUSTER" "$PG_PORT" mlflow airflow

# --- Redis --------------------------------------------------------------------------------
mkdir -p "$CLUSTER/redis"
start redis redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no --dir "$CLUSTER/redis"
wait_for redis 30 redis-cli -p "$REDIS_PORT" ping

# --- Spark standalone: the master and two workers, from the scripts inside pyspark ----------
SPARK_HOME="$("$BIN/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR="$LOGS"
start spark-master "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
  --host 127.0.0.1 --port "$SPARK_PORT" --webui-port 8190
for i in 1 2; do
  mkdir -p "$CLUSTER/spark-worker-$i"
  start "spark-worker-$i" "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
    --host 127.0.0.1 --cores 1 --memory 2g --webui-port "819$i" --work-dir "$CLUSTER/spark-worker-$i" \
    "spark://127.0.0.1:$SPARK_PORT"
done
alive_workers() { curl -fsS http://127.0.0.1:8190/json/ | "$BIN/python" -c 'import json,sys; w=json.load(sys.stdin)["workers"]; sys.exit(sum(x["state"]=="ALIVE" for x in w) < 2)'; }
wait_for spark-master 120 alive_workers

# --- MLflow tracking server on PostgreSQL, artifacts over HTTP -------------------------------
mkdir -p "$CLUSTER/mlflow-artifacts"
start mlflow-server "$BIN/mlflow" server --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 1 \
  --backend-store-uri "postgresql+psycopg://turnout@127.0.0.1:$PG_PORT/mlflow" \
  --serve-artifacts --artifacts-destination "$CLUSTER/mlflow-artifacts"
wait_for mlflow-server 180 curl -fsS "http://127.0.0.1:$MLFLOW_PORT/health"

# --- Airflow on PostgreSQL (LocalExecutor), the same ops/up.sh --------------------------------
if [[ "${CLUSTER_AIRFLOW:-1}" == 1 ]]; then
  # One driver, psycopg 3, for the sync and the async engine (Airflow 3 uses both).
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="postgresql+psycopg://turnout@127.0.0.1:$PG_PORT/airflow"
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC="$AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
  export TURNOUT_PROFILE=cluster-local AIRFLOW_PORT="${AIRFLOW_PORT:-8280}" UP_SERVICES="airflow"
  "$REPO/ops/up.sh"
fi
echo
echo "  Spark master UI  http://127.0.0.1:8190   MLflow UI  http://127.0.0.1:$MLFLOW_PORT"
echo "  TURNOUT_PROFILE=cluster-local turnout ...   runs every job on these servers"
echo "  Stop all:        make cluster-down"
