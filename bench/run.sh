#!/usr/bin/env bash
# Builds dist binaries (the shipped profile), starts a Concord server on a scratch data folder on
# 127.0.0.1, runs concord-bench against it with the given arguments, and stops the
# server. Example: bench/run.sh --workloads write --clients 1,16,64 --duration-s 10
# (CONCORD_BENCH_TLS=1 bench/run.sh ...: the same over mTLS).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --profile dist -p concord-server -p concord-bench
scratch=$(mktemp -d)
port=${CONCORD_BENCH_PORT:-7191}
# CONCORD_BENCH_TLS=1: mTLS on the client port, with certificates from `concord certs`.
server_tls=() client_tls=() scheme=http
if [ "${CONCORD_BENCH_TLS:-0}" = 1 ]; then
  ./target/dist/concord certs "$scratch/certs" --members 1 --clients admin > /dev/null
  c="$scratch/certs"
  server_tls=(--cert-file "$c/server-1.pem" --key-file "$c/server-1-key.pem" --trusted-ca-file "$c/ca.pem")
  # The bench is the admin (the default `admins`), as the local identity is over plain text.
  client_tls=(--cacert "$c/ca.pem" --cert "$c/admin.pem" --key "$c/admin-key.pem")
  scheme=https
fi
./target/dist/concord --listen 127.0.0.1:$port --data-dir "$scratch/data" "${server_tls[@]}" > "$scratch/out" 2> "$scratch/server.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$scratch"' EXIT
for _ in $(seq 100); do grep -q listening "$scratch/out" && break; sleep 0.1; done
./target/dist/concord-bench --endpoints $scheme://127.0.0.1:$port --server-pids $server "${client_tls[@]}" "$@"
