# syntax=docker/dockerfile:1
# The Concord server image: `concord` and `concordctl`, built in a Rust stage and
# copied into a small Debian stage that runs them as an unprivileged user.
#
#   docker build -t concord:dev .
#   docker run --rm -p 7181:7181 concord:dev --listen 0.0.0.0:7181 --insecure
#
# protoc comes from the protoc-bin-vendored crate (proto/build.rs), so the builder
# needs nothing beyond the Rust image. See docs/operations.md, "Container image".

ARG RUST_VERSION=1.88
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS builder
WORKDIR /src
# Every workspace member's manifest is needed for `--locked`, so the whole
# workspace is copied (.dockerignore keeps target/ and local data out).
COPY Cargo.toml Cargo.lock clippy.toml ./
COPY proto ./proto
COPY direct ./direct
COPY server ./server
COPY sdk-rust ./sdk-rust
COPY concordctl ./concordctl
COPY tests ./tests
COPY bench ./bench
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked --bin concord --bin concordctl \
    && mkdir -p /out \
    && cp target/dist/concord target/dist/concordctl /out/

FROM debian:${DEBIAN_RELEASE}-slim
# ca-certificates: for clients of the image's concordctl that trust public CAs. A
# shell stays in the image: the Kubernetes manifests derive the server id from the
# pod's ordinal with it (deploy/k8s/statefulset.yaml).
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 concord \
    && useradd --system --uid 10001 --gid concord --home-dir /var/lib/concord \
       --no-create-home --shell /usr/sbin/nologin concord \
    && mkdir -p /var/lib/concord \
    && chown concord:concord /var/lib/concord
COPY --from=builder /out/concord /out/concordctl /usr/local/bin/
USER 10001:10001
WORKDIR /var/lib/concord
VOLUME ["/var/lib/concord"]
# client gRPC, peers (Zab and forwarding), metrics (/metrics, /healthz, /readyz),
# health (/healthz and /readyz only, plain text: --health-addr), ZooKeeper's own
# clients (--zookeeper-addr)
EXPOSE 7181 7182 7183 7184 2181
ENTRYPOINT ["concord"]
CMD ["--data-dir", "/var/lib/concord"]
