#!/usr/bin/env bash
# `make cluster-down`: stop what ops/cluster-up.sh started; PostgreSQL with a fast shutdown
# first (it waits for clients on SIGTERM), then every process group (ops/down.sh).
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export TURNOUT_HOME="${TURNOUT_HOME:-$REPO/.turnout}"
CLUSTER="$TURNOUT_HOME/cluster"
RUN="$TURNOUT_HOME/run" LOGS="$TURNOUT_HOME/logs"
# shellcheck source=ops/lib.sh
source "$REPO/ops/lib.sh"
stop_postgres "$CLUSTER"
"$REPO/ops/down.sh"
if [[ "${CLUSTER_KEEP_DATA:-0}" != 1 && -f "$CLUSTER/pgdata.path" ]]; then
  rm -rf "$(cat "$CLUSTER/pgdata.path")" "$CLUSTER/pgdata.path"
fi
