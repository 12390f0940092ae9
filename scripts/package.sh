#!/bin/bash
# scripts/package.sh — the Debian packages of wakuwaku (docs/packaging.md):
# builds the library, wk-codegen and wk in build-deb/ for prefix /usr with
# Debian's hardening flags (dpkg-buildflags), and `cpack -G DEB` writes
#
#   build-deb/libwakuwaku0_<version>-1_<arch>.deb         the shared library
#   build-deb/libwakuwaku-codec0_<version>-1_<arch>.deb   the JSON body codec
#   build-deb/libwakuwaku-dev_<version>-1_<arch>.deb      headers, static
#       libraries, pkg-config, CMake package, wk-codegen
#   build-deb/wakuwaku-tools_<version>-1_<arch>.deb       wk, wk(1)
#
# then runs lintian on them (the tags left are explained in
# docs/packaging.md).
#
#   scripts/package.sh            build the .debs, run lintian
#   scripts/package.sh --check    also install them with dpkg -i (removing
#                                 any installed ones first), run the
#                                 consumer tests (tests/install/run.sh)
#                                 against /usr, and remove them again;
#                                 needs root
#   scripts/package.sh --chroot   the same in a clean Debian 12 made by
#                                 debootstrap (minbase) in build-deb/chroot:
#                                 dpkg -i there, apt-get -f install brings
#                                 the Depends, then the consumer tests; needs
#                                 root and the Debian archive (a few minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
check=false chroot_check=false
case "${1:-}" in
"") ;;
--check) check=true ;;
--chroot) chroot_check=true ;;
*)
    echo "usage: scripts/package.sh [--check | --chroot]" >&2
    exit 2
    ;;
esac
source scripts/deps.sh
wk_install_deps
wk_install_package_deps

build=build-deb
# The changelog's date: the last commit's, so that a rebuild of the same
# tree gives the same packages.
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
cflags="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
ldflags=$(dpkg-buildflags --get LDFLAGS)
rm -rf "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr -DWK_DEB=ON \
    -DWK_BUILD_TESTS=OFF -DWK_BUILD_BENCH=OFF -DWK_BUILD_EXAMPLES=OFF \
    -DCMAKE_C_FLAGS="$cflags" -DCMAKE_EXE_LINKER_FLAGS="$ldflags" \
    -DCMAKE_SHARED_LINKER_FLAGS="$ldflags" >/dev/null
cmake --build "$build" -j2
(cd "$build" && cpack -G DEB >cpack.log) || { cat "$build/cpack.log" >&2; exit 1; }
debs=("$build"/*.deb)
for d in "${debs[@]}"; do
    echo "== $d"
    dpkg-deb --field "$d" Package Version Depends
done
echo "== lintian"
# lintian exits non-zero on an error tag (E:); what it says is the report.
lintian --info --display-info "${debs[@]}" || echo "lintian: exit $?" >&2

if $chroot_check; then
    wk_install_packages debootstrap
    root=$build/chroot
    echo "== debootstrap bookworm (minbase) in $root"
    debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$build/debootstrap.log" ||
        { tail -20 "$build/debootstrap.log" >&2; exit 1; }
    mkdir -p "$root/root/wk"
    cp "${debs[@]}" "$root/root/wk/"
    cp -r tests/install "$root/root/wk/install"
    echo "== in the chroot: dpkg -i, apt-get -f install, tests/install against /usr"
    # A compiler, CMake and the event loops the consumer tests use: what a
    # user brings; the packages' own Depends come from apt-get -f.
    chroot "$root" /bin/bash -euo pipefail -c '
        export DEBIAN_FRONTEND=noninteractive
        cd /root/wk
        apt-get update -qq
        dpkg -i ./*.deb >dpkg.log 2>&1 || true   # Depends missing: apt-get -f
        apt-get install -f -y -qq >/dev/null
        apt-get install -y -qq --no-install-recommends gcc libc6-dev cmake make binutils             libuv1-dev libevent-dev >/dev/null
        dpkg -s libwakuwaku0 libwakuwaku-codec0 libwakuwaku-dev wakuwaku-tools |
            grep -E "^(Package|Status|Version):"
        for mode in cmake pkgconfig; do
            WK_INSTALLED_PREFIX=/usr bash install/run.sh "$mode" - install cc cmake
        done
        wk --version
        test -f /usr/share/man/man1/wk.1.gz
        test -f /usr/share/doc/libwakuwaku0/copyright'
    echo "packages: installed and used in a clean Debian 12 ($root; rm -rf it when done)"
    exit 0
fi

$check || exit 0
packages=(libwakuwaku0 libwakuwaku-codec0 libwakuwaku-dev wakuwaku-tools)
echo "== dpkg -i, then tests/install against /usr"
dpkg --purge "${packages[@]}" >/dev/null 2>&1 || true
dpkg -i "${debs[@]}"
trap 'dpkg --purge "${packages[@]}" >/dev/null' EXIT
# What a package's dependencies name must be installed (apt-get -f would
# fetch it; all of it is in wk_install_deps's list).
dpkg --audit
for mode in cmake pkgconfig; do
    WK_INSTALLED_PREFIX=/usr bash tests/install/run.sh "$mode" - tests/install cc cmake
done
wk --version
man -w wk >/dev/null
echo "packages: installed, used and removed"
