"""Generated gRPC stubs of proto/concord/v1 (scripts/generate.sh; do not edit)."""
