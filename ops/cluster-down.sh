#!/usr/bin/env bash
# `make cluster-down`: stop what ops/cluster-up.sh started; PostgreSQL with a fast shutdown
# first (it waits for clients on SIGTERM), then every process group (ops/down.sh).
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export TURNOUT_HOME="${TURNOUT_HOME:-$REPO/.turnout}"
CLUSTER="$TURNOUT_HOME/cluster"
PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
PGDATA="$CLUSTER/pgdata"
[[ -f "$CLUSTER/pgdata.path" ]] && PGDATA="$(cat "$CLUSTER/pgdata.path")"
if [[ -f "$PGDATA/postmaster.pid" ]]; then
  if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PGDATA" stop -m fast >/dev/null
  else "$PG_BIN/pg_ctl" -D "$PGDATA" stop -m fast >/dev/null; fi
  echo "  postgres stopped"
fi
"$REPO/ops/down.sh"
if [[ "${CLUSTER_KEEP_DATA:-0}" != 1 && -f "$CLUSTER/pgdata.path" ]]; then
  rm -rf "$(cat "$CLUSTER/pgdata.path")" "$CLUSTER/pgdata.path"
fi
