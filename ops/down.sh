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
pids=()
for file in "$RUN"/*.pid; do
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
    pids+=("$pid")
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
echo "turnout down"
