#!/usr/bin/env bash
# `make down`: stop everything `make up` started. Each server was started in a process group of
# its own, so the whole group goes (Airflow's task workers and Spark JVMs included): SIGTERM,
# then SIGKILL for whatever is still there after DOWN_GRACE seconds (default 20).
set -uo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export TURNOUT_HOME="${TURNOUT_HOME:-$REPO/.turnout}"
RUN="$TURNOUT_HOME/run"
GRACE="${DOWN_GRACE:-20}"
shopt -s nullglob

groups_under() { # pgid: it and the process groups of all its descendants (an Airflow task
  # supervisor starts a session of its own, so a running task is not in the scheduler's group)
  ps -eo pid=,ppid=,pgid= | awk -v root="$1" '
    { parent[$1] = $2; group[$1] = $3 }
    END {
      for (p in group) if (group[p] == root) keep[p] = 1
      do { added = 0
        for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; added = 1 }
      } while (added)
      for (p in keep) print group[p]
    }' | sort -u
}

RUN="$TURNOUT_HOME/run" LOGS="$TURNOUT_HOME/logs"
# shellcheck source=ops/lib.sh
source "$REPO/ops/lib.sh"
pids=()
for file in "$RUN"/*.pid; do
  [[ "$(basename "$file")" == postgres.pid ]] && continue  # last, with a fast shutdown (below)
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    for group in $(groups_under "$pid"); do
      kill -TERM -- "-$group" 2>/dev/null
      pids+=("$group")
    done
    echo "  stopping $(basename "$file" .pid) (process group $pid)"
  fi
  rm -f "$file"
done
deadline=$((SECONDS + GRACE))
for pid in "${pids[@]}"; do
  while pgrep -g "$pid" >/dev/null 2>&1 && ((SECONDS < deadline)); do sleep 0.5; done
  if pgrep -g "$pid" >/dev/null 2>&1; then
    echo "  process group $pid still running after ${GRACE} s: SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null
  fi
done
# `make up`'s PostgreSQL (Airflow's metadata), once its clients are gone; `make cluster-down` stops
# its own before calling this script.
stop_postgres "$TURNOUT_HOME/airflow/pg"
if [[ -f "$RUN/postgres.pid" ]]; then
  pid="$(cat "$RUN/postgres.pid")"
  kill -0 "$pid" 2>/dev/null && { kill -TERM -- "-$pid" 2>/dev/null; sleep 2; kill -KILL -- "-$pid" 2>/dev/null; }
  rm -f "$RUN/postgres.pid"
fi
echo "turnout down"
