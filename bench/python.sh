#!/usr/bin/env bash
# The Python SDK's sync client (concord.Client) beside kazoo against ZooKeeper, on this
# machine, each against one server with default durability (fsync on).
#
#   bench/python.sh            5 s per point after 1 s of warm-up
#   bench/python.sh --short    1 s per point after 1 s of warm-up
#   env: CONCORD_BIN uses a prebuilt server instead of building the dist one;
#        PYTHON picks the interpreter for the venv (default python3);
#        KEEP_SCRATCH=1 keeps the scratch folder (data, logs, results.jsonl).
#
# Makes a venv in bench/out/python-venv (gitignored) with `pip install ./sdk-python kazoo`,
# installs ZooKeeper from Debian's packages when missing, starts one Concord server and
# one ZooKeeper server on 127.0.0.1 (bench/lib.sh; scratch data folders), runs
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
# stop_pids, the EXIT trap, wait_for, start_concord, start_zookeeper
. bench/lib.sh

# ---- tools ---------------------------------------------------------------------------
if [ ! -f /usr/share/java/zookeeper.jar ]; then
  echo "installing zookeeper" >&2
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y zookeeper
fi
if [ -z "${CONCORD_BIN:-}" ]; then
  cargo build --profile dist --bin concord
  CONCORD_BIN=$root/target/dist/concord
fi
venv=$root/bench/out/python-venv
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$root/bench/out"
  "${PYTHON:-python3}" -m venv "$venv"
fi
# Reinstalled every run, so the measured SDK is this checkout's.
"$venv/bin/pip" install --quiet --upgrade ./sdk-python kazoo
py=$venv/bin/python

# ---- servers (one each, on bench/lib.sh's ports) ---------------------------------------
start_concord "$scratch/concord" 1
concord_hosts=${endpoints#http://}
start_zookeeper "$scratch/zk" 1
zk_hosts=$endpoints

# ---- runs ----------------------------------------------------------------------------
echo "== concord.Client against concord on $concord_hosts" >&2
"$py" bench/python_bench.py run --system concord --hosts "$concord_hosts" \
  --out "$results" --duration-s $duration --warmup-s $warmup
echo "== kazoo against zookeeper on $zk_hosts" >&2
"$py" bench/python_bench.py run --system kazoo --hosts "$zk_hosts" \
  --out "$results" --duration-s $duration --warmup-s $warmup
echo
"$py" bench/python_bench.py report "$results"
echo
echo "python $("$py" -c 'import platform; print(platform.python_version())')," \
  "concord-client $("$py" -c 'import importlib.metadata as m; print(m.version("concord-client"))')," \
  "kazoo $("$py" -c 'import importlib.metadata as m; print(m.version("kazoo"))')," \
  "zookeeper $(dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo '?')"
