# Shared by ops/up.sh, ops/cluster-up.sh and ops/down.sh. Needs RUN (pid files) and LOGS (log files) set.

start() { # name, command...: run it detached in a session (process group) of its own
  local name="$1"; shift
  if [[ -f "$RUN/$name.pid" ]] && kill -0 "$(cat "$RUN/$name.pid")" 2>/dev/null; then
    echo "  $name already running (pid $(cat "$RUN/$name.pid"))"
    return
  fi
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/$name.pid"
  echo "  $name started (pid $!, log $LOGS/$name.log)"
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

# PostgreSQL refuses to run as root, so as root its data directory is a folder owned by the
# `postgres` user (outside the home, which root owns) and it runs as that user.
pg_data() { # folder under which the home keeps its PostgreSQL: the data directory's path
  local state="$1"
  if [[ "$(id -u)" == 0 ]]; then
    [[ -f "$state/pgdata.path" ]] || mktemp -d /tmp/turnout-pg-XXXXXX >"$state/pgdata.path"
    cat "$state/pgdata.path"
  else
    echo "$state/pgdata"
  fi
}

start_postgres() { # state folder, port, databases...: Debian's PostgreSQL on loopback, trust auth
  local state="$1" port="$2"; shift 2
  local bin data; bin="$(pg_bin)"
  [[ -x "$bin/postgres" ]] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; return 1; }
  mkdir -p "$state"
  data="$(pg_data "$state")"
  local as_pg=()
  if [[ "$(id -u)" == 0 ]]; then as_pg=(runuser -u postgres --); chown postgres "$data"; else mkdir -p "$data"; fi
  if [[ ! -f "$data/PG_VERSION" ]]; then
    "${as_pg[@]}" "$bin/initdb" -D "$data" -U turnout --auth=trust >>"$LOGS/postgres.log" 2>&1
  fi
  start postgres "${as_pg[@]}" "$bin/postgres" -D "$data" -p "$port" -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories="$data"
  local deadline=$((SECONDS + 60))
  until "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; do
    if ((SECONDS > deadline)); then echo "postgres not ready after 60 s:" >&2; tail -n 20 "$LOGS/postgres.log" >&2; return 1; fi
    sleep 1
  done
  echo "  postgres ready on 127.0.0.1:$port"
  local db
  for db in "$@"; do
    "$bin/psql" -h 127.0.0.1 -p "$port" -U turnout -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$db'" | grep -q 1 \
      || "$bin/createdb" -h 127.0.0.1 -p "$port" -U turnout "$db"
  done
}

stop_postgres() { # state folder: a fast shutdown (on SIGTERM it would wait for its clients)
  local state="$1" bin data; bin="$(pg_bin)"
  data="$state/pgdata"
  [[ -f "$state/pgdata.path" ]] && data="$(cat "$state/pgdata.path")"
  [[ -f "$data/postmaster.pid" ]] || return 0
  if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$bin/pg_ctl" -D "$data" stop -m fast >/dev/null
  else "$bin/pg_ctl" -D "$data" stop -m fast >/dev/null; fi
  echo "  postgres stopped"
}
