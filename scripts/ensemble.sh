#!/usr/bin/env bash
# Runs a Concord ensemble on 127.0.0.1, for trying replication out and for benchmarks.
#
#   scripts/ensemble.sh start [N]   # N voters (default 3); returns once one leads
#   scripts/ensemble.sh status      # each server's role, leader and zxid
#   scripts/ensemble.sh stop        # SIGTERM to every server it started, then waits
#
# Server i (1..N) takes clients on BASE_PORT + 10*(i-1) and peers on the port after
# it: 7181/7182, 7191/7192, 7201/7202 by default. Everything it writes (configs,
# data folders, logs, pid files) goes under ENSEMBLE_DIR.
#
# Environment:
#   ENSEMBLE_DIR  where configs, data and logs go (default: ./ensemble)
#   BASE_PORT     the first client port (default: 7181)
#   CONCORD_BIN   folder holding the `concord` and `concordctl` binaries (default:
#                 target/release, built with cargo if missing)
#   TICK_MS       the servers' tick (default: the server's own, 100 ms)
set -euo pipefail

cd "$(dirname "$0")/.."
dir=${ENSEMBLE_DIR:-ensemble}
base=${BASE_PORT:-7181}
bin=${CONCORD_BIN:-target/release}

die() { echo "ensemble.sh: $*" >&2; exit 1; }

binaries() {
  if [[ ! -x $bin/concord || ! -x $bin/concordctl ]]; then
    [[ -z ${CONCORD_BIN:-} ]] || die "no concord/concordctl in $bin"
    cargo build --release --bin concord --bin concordctl
  fi
}

client_port() { echo $((base + 10 * ($1 - 1))); }

start() {
  local n=${1:-3}
  [[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || die "N must be a positive number, not '$n'"
  if compgen -G "$dir/*.pid" >/dev/null; then
    die "$dir already holds pid files: run '$0 stop' first"
  fi
  binaries
  mkdir -p "$dir"
  local members="" i
  for ((i = 1; i <= n; i++)); do
    members+="[[members]]
id = $i
client_addr = \"127.0.0.1:$(client_port "$i")\"
peer_addr = \"127.0.0.1:$(($(client_port "$i") + 1))\"
role = \"voter\"
"
  done
  for ((i = 1; i <= n; i++)); do
    cat >"$dir/concord-$i.toml" <<EOF
server_id = $i
client_addr = "127.0.0.1:$(client_port "$i")"
peer_addr = "127.0.0.1:$(($(client_port "$i") + 1))"
data_dir = "$dir/data-$i"
${TICK_MS:+tick_ms = $TICK_MS}
$members
EOF
    "$bin/concord" --config "$dir/concord-$i.toml" >"$dir/server-$i.out" 2>"$dir/server-$i.log" &
    echo $! >"$dir/server-$i.pid"
  done
  # Wait (bounded) until a server reports that it leads an established epoch. (grep
  # without -q reads all of the output, so concordctl never writes into a closed pipe.)
  local deadline=$((SECONDS + 30))
  while ((SECONDS < deadline)); do
    for ((i = 1; i <= n; i++)); do
      if "$bin/concordctl" --endpoint "http://127.0.0.1:$(client_port "$i")" status 2>/dev/null |
        grep "^leader_serving = true" >/dev/null; then
        echo "ensemble of $n on 127.0.0.1: server $i leads; clients on ports $(client_port 1) to $(client_port "$n")"
        return 0
      fi
    done
    sleep 0.2
  done
  die "no leader within 30 s; see $dir/server-*.log"
}

status() {
  binaries
  local pidfile i
  for pidfile in "$dir"/server-*.pid; do
    [[ -e $pidfile ]] || die "nothing started in $dir"
    i=${pidfile##*/server-}
    i=${i%.pid}
    echo "server $i (pid $(cat "$pidfile")):"
    "$bin/concordctl" --endpoint "http://127.0.0.1:$(client_port "$i")" status || echo "  not answering"
  done
}

stop() {
  local pidfile pid
  for pidfile in "$dir"/server-*.pid; do
    [[ -e $pidfile ]] || continue
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    # A server drains for up to a few seconds; then it is killed.
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

case ${1:-} in
  start) start "${2:-3}" ;;
  status) status ;;
  stop) stop ;;
  *) die "usage: $0 start [N] | status | stop" ;;
esac
