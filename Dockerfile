# Atoll: one image, two entrypoints: atolld (the default) and atoll-worker
# (`--entrypoint atoll-worker`). Multi-stage: the build stage holds the
# Debian 12 toolchain and -dev packages; the runtime stage holds only the
# shared libraries, the two programs and the dashboard, and runs as a
# non-root user. See docs/operations.md.
#
# Build (docker or podman; podman needs --format docker to keep HEALTHCHECK):
#   podman build --format docker -t localhost/atoll:latest .
# BASE may name any Debian 12 image; tests/container/run.sh makes one locally
# with debootstrap when no registry is reachable.
ARG BASE=docker.io/library/debian:bookworm-slim

# ---------------------------------------------------------------- build
FROM ${BASE} AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config libmicrohttpd-dev libjansson-dev libsqlite3-dev \
        libcurl4-openssl-dev libopenblas-dev nettle-dev libucx-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# .dockerignore keeps build trees, tests, docs and .git out of the context.
COPY . .
# JOBS bounds the compiler's parallelism (shared build machines).
ARG JOBS=2
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATOLL_TESTS=OFF \
    && cmake --build /build -j"${JOBS}" \
    && strip /build/bin/atolld /build/bin/atoll-worker

# ---------------------------------------------------------------- runtime
FROM ${BASE}
# curl is for HEALTHCHECK (and fetching GET /v1/admin/backup); sqlite3 (the
# CLI) to check such a copy (see docs/operations.md).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libmicrohttpd12 libjansson4 libsqlite3-0 libcurl4 libopenblas0-pthread libucx0 \
        curl ca-certificates sqlite3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 atoll \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/atoll --no-create-home \
        --shell /usr/sbin/nologin atoll \
    && install -d -o atoll -g atoll -m 0750 /var/lib/atoll
COPY --from=build /build/bin/atolld /build/bin/atoll-worker /usr/local/bin/
COPY web /usr/share/atoll/web
# Both programs read every flag from ATOLL_* variables (the command line
# wins). Mount a volume at /var/lib/atoll for atolld's SQLite database (+ -wal,
# -shm): the directory is owned by the atoll user, so a fresh named volume
# copies that ownership and is writable. No VOLUME instruction on purpose:
# it would give every worker container an anonymous volume that outlives it.
ENV ATOLL_LISTEN=0.0.0.0:8080 \
    ATOLL_DB=/var/lib/atoll/atoll.db \
    ATOLL_WEB_DIR=/usr/share/atoll/web
USER atoll:atoll
WORKDIR /var/lib/atoll
# 8080: REST API + dashboard (atolld). 7070: a worker's data plane, where
# ATOLL_DATA_LISTEN puts it (the compose file does).
EXPOSE 8080 7070
# Checks atolld on the port ATOLL_LISTEN names. Worker containers have no
# HTTP endpoint: run them with --no-healthcheck (compose: test: ["NONE"]).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD curl -fsS -o /dev/null "http://127.0.0.1:${ATOLL_LISTEN##*:}/healthz" || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["atolld"]
