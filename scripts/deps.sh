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

# Valkey 8 (WK_TEST_SERVER=valkey): Debian 12 has it in bookworm-backports,
# whose source is added if apt knows none. Backports are pinned below the
# release (priority 100), so nothing else is upgraded from there.
wk_install_valkey_deps() {
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        local sudo=""
        [ "$(id -u)" -ne 0 ] && sudo="sudo"
        echo "adding the bookworm-backports source (/etc/apt/sources.list.d/bookworm-backports.list)" >&2
        echo "deb http://deb.debian.org/debian bookworm-backports main" |
            $sudo tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
    fi
    wk_install_packages valkey-server valkey-tools
}

# The server the scripts and tests start: redis (WK_TEST_SERVER unset or
# empty) or valkey; prints the binaries' prefix ("$(wk_server_name)-server",
# "…-cli"). Another value fails, as in tests/support.
wk_server_name() {
    case "${WK_TEST_SERVER:-redis}" in
    redis | valkey) echo "${WK_TEST_SERVER:-redis}" ;;
    *)
        echo "WK_TEST_SERVER=$WK_TEST_SERVER: expected redis or valkey" >&2
        return 1
        ;;
    esac
}

# lintian checks the .deb files of scripts/package.sh.
wk_install_package_deps() {
    wk_install_packages lintian dpkg-dev file
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
