# scripts/deps.sh - sourced by run.sh and test.sh: installs the Debian 12
# packages Atoll needs, only those missing, with apt-get.
ATOLL_BUILD_DEPS="build-essential cmake pkg-config libmicrohttpd-dev libjansson-dev
  libsqlite3-dev libcurl4-openssl-dev libcmocka-dev libopenblas-dev nettle-dev libucx-dev curl sqlite3 ca-certificates
  openssl"

atoll_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Configures and builds into $1 (extra cmake arguments after it).
atoll_build() {
    local dir=$1; shift
    cmake -S "$ATOLL_ROOT" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build "$dir" -j"$(nproc)"
}
