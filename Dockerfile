# One image, two entrypoints: atolld (default) and atoll-worker.
# Build stage: Debian 12 toolchain and -dev packages.
FROM docker.io/library/debian:bookworm-slim AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        build-essential cmake pkg-config libmicrohttpd-dev libjansson-dev libsqlite3-dev \
        libcurl4-openssl-dev libopenblas-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY common common
COPY scheduler scheduler
COPY server server
COPY workers workers
COPY schema schema
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DATOLL_TESTS=OFF \
    && cmake --build /build -j"$(nproc)"

# Runtime stage: only the shared libraries, the programs and the dashboard.
FROM docker.io/library/debian:bookworm-slim
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        libmicrohttpd12 libjansson4 libsqlite3-0 libcurl4 libopenblas0-pthread curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/atoll --create-home atoll
COPY --from=build /build/bin/atolld /build/bin/atoll-worker /usr/local/bin/
COPY web /usr/share/atoll/web
USER atoll
WORKDIR /var/lib/atoll
ENV ATOLL_LISTEN=0.0.0.0:8080 ATOLL_DB=/var/lib/atoll/atoll.db ATOLL_WEB_DIR=/usr/share/atoll/web
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["atolld"]
