# Shared by ops/up.sh and ops/cluster-up.sh. Needs RUN (pid files) and LOGS (log files) set.

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
