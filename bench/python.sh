#!/usr/bin/env bash
# The Python SDK's sync client (concord.Client) beside kazoo against ZooKeeper, on this
# machine, each against one server with default durability (fsync on).
#
#   bench/python.sh            5 s per point after 1 s of warm-up
#   bench/python.sh --short    1 s per point after 1 s of warm-up
#   env: CONCORD_BIN uses a prebuilt server instead of building the release one;
#        PYTHON picks the interpreter for the venv (default python3);
#        KEEP_SCRATCH=1 keeps the scratch folder (data, logs, results.jsonl).
#
# Makes a venv in bench/out/python-venv (gitignored) with `pip install ./sdk-python kazoo`,
# installs ZooKeeper from Debian's packages when missing, starts one Concord server and
# one ZooKeeper server on 127.0.0.1 (free ports, scratch data folders), runs
# bench/python_bench.py with each client (get and set of a 100-byte node, 1 and 8 threads
# sharing one client), prints ops/s and the ratio concord / kazoo, and stops every
# process it started (also on failure or Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

duration=5 warmup=1
while [ $# -gt 0 ]; do
  case $1 in
    --short) duration=1 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

scratch=$(mktemp -d /tmp/concord-python-bench.XXXXXX)
results=$scratch/results.jsonl
started=()   # every pid this script started, and only those

stop_pids() {  # TERM, wait up to 10 s, then KILL; only pids we started
  local p
  for p in "$@"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 100); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.1
  done
  for p in "$@"; do kill -9 "$p" 2>/dev/null || true; done
}
cleanup() {
  local rc=$?
  [ ${#started[@]} -gt 0 ] && stop_pids "${started[@]}"
  if [ "${KEEP_SCRATCH:-0}" = 1 ] || [ $rc != 0 ]; then
    echo "scratch kept in $scratch" >&2
  else
    rm -rf "$scratch"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

wait_for() {  # wait_for SECONDS CMD...: retry CMD until it succeeds
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -ge $deadline ] && { echo "timed out: $*" >&2; return 1; }
    sleep 0.2
  done
}
free_port() {
  /usr/bin/env python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---- tools ---------------------------------------------------------------------------
if [ ! -f /usr/share/java/zookeeper.jar ]; then
  echo "installing zookeeper" >&2
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y zookeeper
fi
if [ -z "${CONCORD_BIN:-}" ]; then
  cargo build --release --bin concord
  CONCORD_BIN=$root/target/release/concord
fi
venv=$root/bench/out/python-venv
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$root/bench/out"
  "${PYTHON:-python3}" -m venv "$venv"
fi
# Reinstalled every run, so the measured SDK is this checkout's.
"$venv/bin/pip" install --quiet --upgrade ./sdk-python kazoo
py=$venv/bin/python

# ---- servers -------------------------------------------------------------------------
concord_port=$(free_port)
mkdir -p "$scratch/concord"
"$CONCORD_BIN" --listen 127.0.0.1:$concord_port --data-dir "$scratch/concord/data" \
  > "$scratch/concord/out" 2> "$scratch/concord/log" &
started+=($!)
wait_for 60 grep -q listening "$scratch/concord/out"

zk_port=$(free_port)
zk=$scratch/zk
mkdir -p "$zk/data"
{
  echo "tickTime=2000"; echo "dataDir=$zk/data"; echo "clientPort=$zk_port"
  echo "clientPortAddress=127.0.0.1"; echo "admin.enableServer=false"
  echo "4lw.commands.whitelist=srvr,ruok"; echo "maxClientCnxns=0"
} > "$zk/zoo.cfg"
java -Dzookeeper.log.dir="$zk" -cp /etc/zookeeper/conf_example:/usr/share/java/zookeeper.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$zk/zoo.cfg" > "$zk/log" 2>&1 &
started+=($!)
zk_serving() {
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$zk_port; echo srvr >&3; cat <&3" 2>/dev/null \
    | grep -q '^Mode: '
}
wait_for 90 zk_serving

# ---- runs ----------------------------------------------------------------------------
echo "== concord.Client against concord on 127.0.0.1:$concord_port" >&2
"$py" bench/python_bench.py run --system concord --hosts 127.0.0.1:$concord_port \
  --out "$results" --duration-s $duration --warmup-s $warmup
echo "== kazoo against zookeeper on 127.0.0.1:$zk_port" >&2
"$py" bench/python_bench.py run --system kazoo --hosts 127.0.0.1:$zk_port \
  --out "$results" --duration-s $duration --warmup-s $warmup
echo
"$py" bench/python_bench.py report "$results"
echo
echo "python $("$py" -c 'import platform; print(platform.python_version())')," \
  "concord-client $("$py" -c 'import importlib.metadata as m; print(m.version("concord-client"))')," \
  "kazoo $("$py" -c 'import importlib.metadata as m; print(m.version("kazoo"))')," \
  "zookeeper $(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo '?')"
