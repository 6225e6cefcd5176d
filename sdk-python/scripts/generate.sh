#!/usr/bin/env bash
# Regenerates the gRPC stubs of the Python SDK from proto/concord/v1/*.proto with the
# pinned grpcio-tools, into src/concord/_proto/ (or into the folder given as $1, which
# the test run uses to check that the committed stubs are current).
#
# The generated modules import each other as `concord.v1.X_pb2`; that name is not
# ours to take, so the imports are rewritten to be package-relative (`from . import`).
#
#   PYTHON=.venv/bin/python sdk-python/scripts/generate.sh [OUT_DIR]
#
# PYTHON must have grpcio-tools==$GRPCIO_TOOLS_VERSION installed:
#   pip install grpcio-tools==$GRPCIO_TOOLS_VERSION
set -euo pipefail

GRPCIO_TOOLS_VERSION=1.85.1

here="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$here/.." && pwd)"
python="${PYTHON:-python3}"
out="${1:-$here/src/concord/_proto}"

have="$("$python" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true)"
if [ "$have" != "$GRPCIO_TOOLS_VERSION" ]; then
  echo "generate.sh: needs grpcio-tools==$GRPCIO_TOOLS_VERSION in $python (found: ${have:-none})" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$python" -m grpc_tools.protoc \
  -I "$repo/proto" \
  --python_out="$tmp" \
  --pyi_out="$tmp" \
  --grpc_python_out="$tmp" \
  "$repo"/proto/concord/v1/*.proto

mkdir -p "$out"
rm -f "$out"/*_pb2.py "$out"/*_pb2.pyi "$out"/*_pb2_grpc.py
for f in "$tmp"/concord/v1/*; do
  name="$(basename "$f")"
  sed -e 's/^from concord\.v1 import /from . import /' "$f" >"$out/$name"
done
cat >"$out/__init__.py" <<'PY'
"""Generated gRPC stubs of proto/concord/v1 (scripts/generate.sh; do not edit)."""
PY
