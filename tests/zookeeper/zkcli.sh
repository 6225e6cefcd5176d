#!/usr/bin/env bash
# zkCli.sh (Debian's zookeeper package, 3.8) against a server that speaks
# ZooKeeper's client protocol: create, get, set, stat, ls, delete, deleteall and config,
# each command's output and exit code compared with what zkCli prints against
# ZooKeeper itself, including its messages for an existing node ("Node already
# exists: /a"), a bad version ("version No is not valid : /a"), a missing node and a
# node with children.
#
#   tests/zookeeper/zkcli.sh HOST:PORT[,HOST:PORT...]
#
# Everything goes under a fresh folder /zkcli-<pid>-<seconds> (deleted at the end), so
# it can run against a server other tests use. Prints one PASS or FAIL line per
# check and then "zkcli: N passed, N failed"; exits 1 if any failed. Each command is
# one zkCli.sh run (a JVM start, under a second); zkCli 3.8 exits 0 after a command
# that succeeded and 1 after one that failed, and both are checked.
set -uo pipefail

server=${1:?usage: $0 HOST:PORT[,HOST:PORT...]}
zkcli=${ZKCLI:-/usr/share/zookeeper/bin/zkCli.sh}
[[ -x $zkcli ]] || { echo "zkcli.sh: no $zkcli (Debian's zookeeper package)" >&2; exit 2; }
root=/zkcli-$$-$SECONDS
passed=0 failed=0

# zkCli's output for one command, without the lines every run prints (the
# connection's progress, SLF4J's notes, blank lines); its exit code in `rc`.
out=""
rc=0
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
cli() {
  timeout 60 "$zkcli" -server "$server" "$@" >"$raw" 2>&1
  rc=$?
  out=$(grep -v -E '^SLF4J|^Connecting to |^WATCHER::$|^WatchedEvent state:SyncConnected type:None path:null$|^$' "$raw")
}

pass() { passed=$((passed + 1)); echo "PASS zkcli $1"; }
fail() {
  failed=$((failed + 1))
  echo "FAIL zkcli $1"
  printf '%s\n' "$2" | sed 's/^/    /'
}

# check NAME RC EXPECTED CMD...: CMD's exit code is RC and its output EXPECTED exactly.
check() {
  local name=$1 want_rc=$2 want=$3
  shift 3
  cli "$@"
  if [[ $rc == "$want_rc" && $out == "$want" ]]; then
    pass "$name"
  else
    fail "$name" "zkCli.sh $* exited $rc (want $want_rc); printed:
$out
want:
$want"
  fi
}

# check_stat NAME RC FIRST_LINE DATA_VERSION NUM_CHILDREN DATA_LENGTH CMD...: the
# output is FIRST_LINE (when not empty) then a Stat in zkCli's layout with these
# values (zxids and times are the server's: only their form is checked).
check_stat() {
  local name=$1 want_rc=$2 first=$3 dv=$4 nc=$5 len=$6
  shift 6
  cli "$@"
  local body=$out problem=""
  if [[ -n $first ]]; then
    [[ ${out%%$'\n'*} == "$first" ]] || problem="first line is not '$first'"
    body=${out#*$'\n'}
  fi
  local pattern
  pattern="^cZxid = 0x[0-9a-f]+
ctime = [A-Z][a-z]{2} [A-Z][a-z]{2} [0-9]{2} [0-9:]{8} [A-Z]+ [0-9]{4}
mZxid = 0x[0-9a-f]+
mtime = [A-Z][a-z]{2} [A-Z][a-z]{2} [0-9]{2} [0-9:]{8} [A-Z]+ [0-9]{4}
pZxid = 0x[0-9a-f]+
cversion = [0-9]+
dataVersion = $dv
aclVersion = 0
ephemeralOwner = 0x0
dataLength = $len
numChildren = $nc\$"
  [[ $body =~ $pattern ]] || problem="${problem:+$problem; }not a Stat with dataVersion $dv, dataLength $len, numChildren $nc"
  if [[ $rc == "$want_rc" && -z $problem ]]; then
    pass "$name"
  else
    fail "$name" "zkCli.sh $* exited $rc (want $want_rc): $problem; printed:
$out"
  fi
}

check "create" 0 "Created $root" create "$root" hello
check "create existing" 1 "Node already exists: $root" create "$root" again
check "create under missing parent" 1 "Node does not exist: $root/x/y" create "$root/x/y" z
check "get" 0 "hello" get "$root"
check_stat "get -s" 0 hello 0 0 5 get -s "$root"
check "set" 0 "" set "$root" world
check "set -v bad version" 1 "version No is not valid : $root" set -v 7 "$root" nope
check "set -v right version" 0 "" set -v 1 "$root" again
check_stat "stat" 0 "" 2 0 5 stat "$root"
check "get after set" 0 "again" get "$root"
check "create child" 0 "Created $root/b" create "$root/b"
check "create child with data" 0 "Created $root/c" create "$root/c" cdata
check "create sequential" 0 "Created $root/s0000000002" create -s "$root/s"
check "ls" 0 "[b, c, s0000000002]" ls "$root"
check_stat "ls -s" 0 "[b, c, s0000000002]" 2 3 5 ls -s "$root"
check "delete non-empty" 1 "Node not empty: $root" delete "$root"

# config (getConfig): the ensemble in ZooKeeper's dynamic config form, each member
# with the client address it was given in the connect string, in that order.
cli config
pattern="^"
i=0
IFS=, read -r -a hosts <<<"$server"
for host in "${hosts[@]}"; do
  i=$((i + 1))
  pattern+="server\\.$i=[0-9.]+:[0-9]+:[0-9]+:participant;${host//./\\.}"$'\n'
done
pattern+="version=0\$"
if [[ $rc == 0 && $out =~ $pattern ]]; then
  pass "config"
else
  fail "config" "zkCli.sh config exited $rc; printed:
$out
want a match of: $pattern"
fi
check "delete -v bad version" 1 "version No is not valid : $root/b" delete -v 9 "$root/b"
check "delete" 0 "" delete "$root/b"
check "delete missing" 1 "Node does not exist: $root/b" delete "$root/b"
check "get missing" 1 "Node does not exist: $root/b" get "$root/b"
check "stat missing" 1 "Node does not exist: $root/b" stat "$root/b"
check "ls after delete" 0 "[c, s0000000002]" ls "$root"
check "create grandchild" 0 "Created $root/c/d" create "$root/c/d" deep
check "ls missing" 1 "Node does not exist: $root/b" ls "$root/b"
check "deleteall missing" 1 "Node does not exist: $root/b" deleteall "$root/b"
check "deleteall" 0 "" deleteall "$root"
check "stat after deleteall" 1 "Node does not exist: $root" stat "$root"

echo "zkcli: $passed passed, $failed failed"
((failed == 0))
