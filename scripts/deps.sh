#!/bin/bash
# scripts/deps.sh — install the Debian 12 packages wakuwaku needs, if any
# is missing. Sourced by demo.sh and test.sh; needs root (or sudo) only
# when something must be installed.
wk_install_deps() {
    wk_install_packages build-essential cmake pkg-config libhiredis-dev libsodium-dev \
        libjansson-dev libcriterion-dev redis-server redis-tools b3sum valgrind \
        libssl-dev openssl libsqlite3-dev libuv1-dev libevent-dev spin
}

# The fuzz targets need clang with libFuzzer (tests/fuzz/run.sh).
wk_install_fuzz_deps() {
    wk_install_packages clang libclang-rt-14-dev
}

wk_install_packages() {
    local pkgs=("$@")
    local missing=()
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "installing: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq >/dev/null
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
