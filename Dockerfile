# Palisade's container image: the `palisade` binary (gateway, CLI, health
# probe) on a small Debian-based runtime, as a non-root user.
#
# No registry is needed: the base images are made on this host by
# scripts/make-base-images (a Debian root filesystem loaded with
# `docker import`) and named by build arguments:
#   BASE_IMAGE   the runtime base (palisade-base:bookworm)
#   BUILD_IMAGE  the build stage's Rust toolchain (palisade-rust:bookworm)
#
# Two ways to build (deploy/README.md, "Container image"):
#
#   1. Full multi-stage build from the sources (target `release`, the last
#      stage): compiles the workspace in the build stage (needs crates.io,
#      hence --network host), copies only the binary into the runtime.
#        scripts/make-base-images build
#        docker build --network host --target release -t palisade:latest .
#
#   2. A binary built on the host (target `runtime`, what the tests use:
#      compiling the whole workspace inside Docker on the vfs storage
#      driver is slow and disk hungry): copy it to deploy/docker/prebuilt/
#      (git-ignored) first, or name another directory of the context with
#      --build-arg PALISADE_BINARY_DIR=DIR.
#        cp target/release/palisade deploy/docker/prebuilt/
#        docker build --target runtime -t palisade:latest .
#
# (Docker's legacy builder, the only one here without buildx, builds every
# stage up to the target: `runtime` comes before `build` so that path never
# compiles; `release` builds the `runtime` stage on the way, untagged.)
#
# The image: ENTRYPOINT `palisade`, user `palisade` (uid 10001), data in
# /var/lib/palisade, PKI expected in /etc/palisade/pki (ca.pem,
# node-N.pem, node-N-key.pem, from `palisade cluster init-pki`),
# HEALTHCHECK `palisade health` on 127.0.0.1:7001 (the gRPC health service,
# over TLS trusting $PALISADE_HEALTH_CA, /etc/palisade/pki/ca.pem).

ARG BASE_IMAGE=palisade-base:bookworm
ARG BUILD_IMAGE=palisade-rust:bookworm

# --- the runtime's common part ---------------------------------------------
FROM ${BASE_IMAGE} AS runtime-base
# The container's own replica, for `palisade health` and `docker exec ...
# palisade cluster status`; the CA the health probe trusts.
ENV PALISADE_ENDPOINT=127.0.0.1:7001 \
    PALISADE_HEALTH_CA=/etc/palisade/pki/ca.pem
# Owned by the palisade user, so a fresh named volume mounted there is too:
# the data directory, the Docker driver's fence directory (shared by every
# replica on one host) and the PKI (written by `cluster init-pki`).
RUN mkdir -p /var/lib/palisade /var/lib/palisade-driver /etc/palisade/pki \
 && chown 10001:10001 /var/lib/palisade /var/lib/palisade-driver /etc/palisade/pki \
 && chmod 0700 /var/lib/palisade /var/lib/palisade-driver /etc/palisade/pki
VOLUME ["/var/lib/palisade"]
WORKDIR /var/lib/palisade
# Public API (TLS) and peer port (mutual TLS).
EXPOSE 7001 7101
USER 10001:10001
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["/usr/local/bin/palisade", "health", "--timeout-seconds", "3"]
ENTRYPOINT ["/usr/local/bin/palisade"]
CMD ["--help"]

# --- target `runtime`: a binary built on the host ---------------------------
FROM runtime-base AS runtime
ARG PALISADE_BINARY_DIR=deploy/docker/prebuilt
COPY ${PALISADE_BINARY_DIR}/ /usr/local/bin/

# --- build stage: the workspace compiled from source ------------------------
FROM ${BUILD_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p palisade-cli --bin palisade \
 && cp target/release/palisade /palisade \
 && /palisade --version

# --- target `release` (default): the binary of the build stage --------------
FROM runtime-base AS release
COPY --from=build /palisade /usr/local/bin/palisade
