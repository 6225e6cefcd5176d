#!/usr/bin/env bash
# ZooKeeper's own Java clients against a 3-server ensemble: zkCli.sh
# (tests/zookeeper/zkcli.sh), then Curator 5 programs compiled here with javac
# against Debian's jars (src/concord/zk): every recipe's checks (Recipes), the same
# clients working while the leader is killed with kill -9 (Failover), the recipes
# again on the two servers left, and (Concord only) zkCli over TLS with a client
# certificate on a server of its own.
#
#   tests/zookeeper/java/run.sh               # Concord servers with --zookeeper-addr
#   tests/zookeeper/java/run.sh --zookeeper   # ZooKeeper 3.8 itself, to compare
#
# Installs what it needs when missing (Debian's zookeeper, libzookeeper-java and
# libcurator-*-java packages, and a JDK's javac). Builds into
# tests/zookeeper/java/build/ (ignored by git), where each server's data and log
# and each program's log also go (made anew every run). Every process it starts is
# stopped when it exits, however it exits. Only 127.0.0.1 is used.
#
# Environment: CONCORD_BIN, the folder holding `concord` and `concordctl` (default:
# target/debug, which it does not build).
#
# Prints each check's PASS or FAIL line, each part's time, and exits 1 if any part
# failed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cd "$root"

system=concord
case ${1:-} in
  "") ;;
  --zookeeper) system=zookeeper ;;
  *) echo "usage: $0 [--zookeeper]" >&2; exit 2 ;;
esac
bin=${CONCORD_BIN:-$root/target/debug}
build=$here/build
run=$build/run-$system
failed=()

part_started=$SECONDS
part() {  # part NAME: the time since the last part ended
  echo "== $1: $((SECONDS - part_started)) s"
  part_started=$SECONDS
}

# ---- processes ------------------------------------------------------------------------
started=()
stop_all() {
  local pid
  for pid in "${started[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${started[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  started=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

# wait_for SECONDS CMD...: until CMD succeeds; 1 if the deadline passed.
wait_for() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

# ---- tools ----------------------------------------------------------------------------
install_missing() {
  local need=()
  [[ -x /usr/share/zookeeper/bin/zkCli.sh ]] || need+=(zookeeper)
  [[ -f /usr/share/java/zookeeper.jar ]] || need+=(libzookeeper-java)
  local p
  for p in client framework recipes; do
    [[ -f /usr/share/java/curator-$p.jar ]] || need+=("libcurator-$p-java")
  done
  [[ -f /usr/share/java/curator-x-discovery.jar ]] || need+=(libcurator-discovery-java)
  command -v javac >/dev/null || need+=(default-jdk-headless)
  ((${#need[@]})) || return 0
  echo "installing ${need[*]}" >&2
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}"
}

j=/usr/share/java
classpath=$build/classes
for jar in curator-client curator-framework curator-recipes curator-x-discovery zookeeper \
  zookeeper-jute guava slf4j-api slf4j-simple jackson-core jackson-databind \
  jackson-annotations netty-handler netty-transport netty-common netty-buffer \
  netty-resolver netty-codec netty-transport-native-epoll netty-transport-native-unix-common; do
  classpath+=:$j/$jar.jar
done

compile() {
  rm -rf "$build/classes"
  mkdir -p "$build/classes"
  javac -Xlint:all,-path -Werror -d "$build/classes" -cp "$classpath" "$here"/src/concord/zk/*.java
}

# java CLASS ARGS...: a program, its log (ZooKeeper's client warnings) in $run; one
# that runs for over 5 minutes (its own waits end sooner) is killed and fails.
java_run() {
  local class=$1
  shift
  timeout --kill-after=10 300 \
    java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$classpath" "concord.zk.$class" "$@" \
    2>>"$run/$class.log"
}

# ---- the ensemble ---------------------------------------------------------------------
# Free ports on 127.0.0.1 (bound and let go, so another process could take one first;
# the start then fails clearly).
free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

pids=() zk_ports=() grpc_ports=()
connect=""

start_concord() {
  local ports i members=""
  [[ -x $bin/concord && -x $bin/concordctl ]] || { echo "no concord/concordctl in $bin" >&2; return 1; }
  read -r -a ports <<<"$(free_ports 9)"
  for i in 1 2 3; do
    grpc_ports[i]=${ports[3 * (i - 1)]}
    zk_ports[i]=${ports[3 * (i - 1) + 2]}
    members+="[[members]]
id = $i
client_addr = \"127.0.0.1:${ports[3 * (i - 1)]}\"
peer_addr = \"127.0.0.1:${ports[3 * (i - 1) + 1]}\"
zookeeper_addr = \"127.0.0.1:${ports[3 * (i - 1) + 2]}\"
role = \"voter\"
"
  done
  for i in 1 2 3; do
    cat >"$run/concord-$i.toml" <<TOML
server_id = $i
client_addr = "127.0.0.1:${grpc_ports[i]}"
peer_addr = "127.0.0.1:${ports[3 * (i - 1) + 1]}"
data_dir = "$run/data-$i"
$members
TOML
    "$bin/concord" --config "$run/concord-$i.toml" --zookeeper-addr "127.0.0.1:${zk_ports[i]}" \
      >"$run/server-$i.out" 2>"$run/server-$i.log" &
    pids[i]=$!
    started+=($!)
  done
  for i in 1 2 3; do
    wait_for 60 grep -q "^zookeeper listening 127.0.0.1:${zk_ports[i]}$" "$run/server-$i.out" || {
      echo "server $i did not print 'zookeeper listening 127.0.0.1:${zk_ports[i]}' in 60 s; its log:" >&2
      tail -20 "$run/server-$i.log" >&2
      return 1
    }
  done
  wait_for 60 leader >/dev/null || { echo "no Concord leader in 60 s" >&2; return 1; }
}

start_zookeeper() {
  local ports i d
  read -r -a ports <<<"$(free_ports 9)"
  for i in 1 2 3; do zk_ports[i]=${ports[3 * (i - 1)]}; done
  for i in 1 2 3; do
    d=$run/zk$i
    mkdir -p "$d/data"
    echo "$i" >"$d/data/myid"
    {
      echo "tickTime=2000"; echo "initLimit=10"; echo "syncLimit=5"
      echo "dataDir=$d/data"; echo "clientPort=${zk_ports[i]}"; echo "clientPortAddress=127.0.0.1"
      echo "admin.enableServer=false"; echo "4lw.commands.whitelist=srvr,ruok"
      local k
      for k in 1 2 3; do
        echo "server.$k=127.0.0.1:${ports[3 * (k - 1) + 1]}:${ports[3 * (k - 1) + 2]}"
      done
    } >"$d/zoo.cfg"
    java -Dzookeeper.log.dir="$d" -cp /etc/zookeeper/conf_example:$j/zookeeper.jar \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" >"$d/log" 2>&1 &
    pids[i]=$!
    started+=($!)
  done
  wait_for 90 leader >/dev/null || { echo "no ZooKeeper leader in 90 s" >&2; return 1; }
}

# srvr's Mode line from the ZooKeeper port of server $1 (empty if it does not answer).
srvr_mode() {
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/${zk_ports[$1]}; echo srvr >&3; cat <&3" 2>/dev/null |
    sed -n 's/^Mode: //p' || true
}

# The server (1..3) that leads: ZooKeeper's srvr, or Concord's Cluster/Status (whose
# leader_serving says it leads an established epoch). Fails if none does.
leader() {
  local i
  for i in 1 2 3; do
    kill -0 "${pids[i]}" 2>/dev/null || continue
    if [[ $system == zookeeper ]]; then
      [[ $(srvr_mode "$i") == leader ]] && { echo "$i"; return 0; }
    elif "$bin/concordctl" --endpoint "http://127.0.0.1:${grpc_ports[i]}" status 2>/dev/null |
      grep '^leader_serving = true' >/dev/null; then
      echo "$i"
      return 0
    fi
  done
  return 1
}

# ---- the parts ------------------------------------------------------------------------
install_missing
part "install"
compile
part "compile"
rm -rf "$run"
mkdir -p "$run"
"start_$system"
connect=127.0.0.1:${zk_ports[1]},127.0.0.1:${zk_ports[2]},127.0.0.1:${zk_ports[3]}
echo "$system ensemble: ZooKeeper clients on $connect, server $(leader) leads"
part "start"

if [[ $system == concord ]]; then
  # Concord's srvr, when it answers, must name the same leader as Cluster/Status.
  modes=""
  for i in 1 2 3; do modes+="$(srvr_mode "$i") "; done
  if [[ -z ${modes// /} ]]; then
    echo "SKIP srvr: no server answers it yet"
  elif [[ $(srvr_mode "$(leader)") == leader && $(grep -o leader <<<"$modes" | wc -l) == 1 ]]; then
    echo "PASS srvr names the leader ($modes)"
  else
    echo "FAIL srvr modes '$modes', but server $(leader) leads"
    failed+=(srvr)
  fi
fi

tests/zookeeper/zkcli.sh "$connect" || failed+=(zkcli)
part "zkcli"

java_run Recipes "$connect" "/curator-before-$$" || failed+=(recipes)
part "recipes"

# The failover: Failover puts a client on the leader and says "KILL NOW" when its
# work runs; the leader is then killed with kill -9 and Failover checks the rest.
first=$(leader)
: >"$run/failover.out"
java_run Failover "$connect" "127.0.0.1:${zk_ports[first]}" >"$run/failover.out" &
failover=$!
started+=($failover)
if wait_for 120 grep -q "^KILL NOW" "$run/failover.out"; then
  now=$(leader || true)
  if [[ $now != "$first" ]]; then
    echo "FAIL failover: the leader moved from $first to '$now' before the kill"
    failed+=(failover)
  fi
  kill -KILL "${pids[first]}"
  wait "${pids[first]}" 2>/dev/null || true
  echo "killed server $first (the leader) with kill -9"
fi
rc=0
wait_for 300 bash -c "! kill -0 $failover 2>/dev/null" || kill -KILL "$failover" 2>/dev/null || true
wait "$failover" || rc=$?
cat "$run/failover.out"
((rc == 0)) || failed+=(failover)
echo "server $(leader || echo none) leads after the failover"
part "failover"

java_run Recipes "$connect" "/curator-after-$$" || failed+=("recipes after the failover")
part "recipes after the failover"

# ZooKeeper's Java client over TLS (secureClientPort's settings: the Netty socket, PEM
# key and trust stores) on one Concord server whose ports serve TLS: the client
# certificate is the identity (whoami), and writes and reads work as in plain text.
# zkCli's main class, run with the Netty jars that Debian's zkCli.sh leaves out.
zkcli_tls() {
  timeout 60 java -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$classpath" \
    -Dzookeeper.client.secure=true \
    -Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty \
    -Dzookeeper.ssl.keyStore.location="$run/tls/admin-combined.pem" \
    -Dzookeeper.ssl.keyStore.type=PEM \
    -Dzookeeper.ssl.trustStore.location="$run/tls/ca.pem" -Dzookeeper.ssl.trustStore.type=PEM \
    org.apache.zookeeper.ZooKeeperMain -server "127.0.0.1:$tls_port" "$@" 2>&1 |
    grep -v -E '^SLF4J|^Connecting to |^WATCHER::$|^WatchedEvent state:SyncConnected type:None path:null$|^$|Exiting JVM with code 0$' ||
    true
}
# check_tls NAME EXPECTED ARGS...: zkCli over TLS prints EXPECTED exactly.
check_tls() {
  local name=$1 want=$2 out
  shift 2
  out=$(zkcli_tls "$@")
  if [[ $out == "$want" ]]; then
    echo "PASS tls $name"
  else
    printf 'FAIL tls %s: printed\n%s\nwant\n%s\n' "$name" "$out" "$want"
    failed+=("tls $name")
  fi
}
if [[ $system == concord ]]; then
  "$bin/concord" certs "$run/tls" --members 1 --clients admin >/dev/null
  cat "$run/tls/admin-key.pem" "$run/tls/admin.pem" >"$run/tls/admin-combined.pem"
  read -r tls_grpc tls_port _ <<<"$(free_ports 3)"
  "$bin/concord" --data-dir "$run/tls-data" --listen "127.0.0.1:$tls_grpc" \
    --zookeeper-addr "127.0.0.1:$tls_port" --cert-file "$run/tls/server-1.pem" \
    --key-file "$run/tls/server-1-key.pem" --trusted-ca-file "$run/tls/ca.pem" \
    >"$run/tls-server.out" 2>"$run/tls-server.log" &
  started+=($!)
  if wait_for 60 grep -qs "^listening" "$run/tls-server.out"; then
    check_tls "create" "Created /tls-$$" create "/tls-$$" over-tls
    check_tls "get" "over-tls" get "/tls-$$"
    check_tls "whoami" $'Auth scheme: User\nx509: admin' whoami
  else
    echo "FAIL tls: the TLS server did not start in 60 s"
    failed+=(tls)
  fi
  part "tls"
fi

if ((${#failed[@]})); then
  printf 'java: failed: %s (logs in %s)\n' "$(IFS=,; echo "${failed[*]}")" "$run"
  exit 1
fi
echo "java: zkCli and every Curator program passed against $system"
