#!/bin/bash
# tests/install/run.sh MODE BUILD_DIR HERE CC CMAKE [FLAGS] — the installed
# package as a user meets it. Installs BUILD_DIR into a prefix chosen now
# (cmake --install --prefix), then moves that prefix elsewhere, so nothing
# may depend on where it was installed, and:
#
#   cmake      builds a fresh project (HERE/CMakeLists.txt.in) in a temp dir
#              with find_package(wakuwaku) + wakuwaku_generate() on
#              HERE/schema.json, linking wakuwaku::wakuwaku, ::wakuwaku_static
#              and the generated library, and runs the three programs;
#   pkgconfig  builds HERE/app.c with `cc $(pkg-config --static --cflags
#              --libs wakuwaku-static)`, checks that it does not need
#              libwakuwaku.so and runs it with no LD_LIBRARY_PATH; builds it
#              with `pkg-config --libs wakuwaku` (shared) too; checks that
#              the prefix pkg-config reports is the moved one and that
#              libwakuwaku.so does not need jansson.
#
# FLAGS go to every compile and link (the sanitizer flags of an ASan build).
#
# With WK_INSTALLED_PREFIX set (scripts/package.sh --check: /usr, where
# the Debian packages were installed), BUILD_DIR is not used: the same
# checks run on what is installed there.
set -euo pipefail
mode=$1 build=$2 here=$3 cc=$4 cmake=$5 flags=${6:-}
tmp=$(mktemp -d /tmp/wk-install-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "install test ($mode): $*" >&2; exit 1; }

if [ -n "${WK_INSTALLED_PREFIX:-}" ]; then
    prefix=$WK_INSTALLED_PREFIX
else
    "$cmake" --install "$build" --prefix "$tmp/installed" >"$tmp/install.log" ||
        { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }
    mv "$tmp/installed" "$tmp/prefix"
    prefix=$tmp/prefix
fi
unset LD_LIBRARY_PATH

# The operator's CLI is installed and runs from the moved prefix.
[ -x "$prefix/bin/wk" ] || fail "bin/wk is not installed"
"$prefix/bin/wk" --version | grep -q "^wk " || fail "the installed bin/wk does not run"
# The license and the manual pages (the Debian packages' own layout is
# scripts/package.sh's to check: copyright files, gzipped pages).
if [ -z "${WK_INSTALLED_PREFIX:-}" ]; then
    for f in share/doc/wakuwaku/LICENSE share/man/man1/wk.1 share/man/man1/wk-codegen.1; do
        [ -f "$prefix/$f" ] || fail "$f is not installed"
    done
fi

case "$mode" in
cmake)
    mkdir "$tmp/user"
    cp "$here/CMakeLists.txt.in" "$tmp/user/CMakeLists.txt"
    cp "$here/app.c" "$here/schema.json" "$tmp/user/"
    "$cmake" -S "$tmp/user" -B "$tmp/user/build" -DCMAKE_PREFIX_PATH="$prefix" \
        -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$flags" \
        -DCMAKE_EXE_LINKER_FLAGS="$flags" >"$tmp/configure.log" 2>&1 ||
        { cat "$tmp/configure.log" >&2; fail "configure failed"; }
    "$cmake" --build "$tmp/user/build" >"$tmp/build.log" 2>&1 ||
        { cat "$tmp/build.log" >&2; fail "build failed"; }
    grep -q "wk-codegen" "$tmp/build.log" || fail "wakuwaku_generate() did not run wk-codegen"
    for app in app_generated app_shared app_static; do
        "$tmp/user/build/$app" || fail "$app failed"
    done
    ;;
pkgconfig)
    pc=$(find "$prefix/lib" "$prefix/share" -name wakuwaku.pc -print -quit 2>/dev/null || true)
    [ -n "$pc" ] || fail "no wakuwaku.pc installed"
    export PKG_CONFIG_PATH=$(dirname "$pc")
    [ -f "$PKG_CONFIG_PATH/wakuwaku-static.pc" ] || fail "no wakuwaku-static.pc installed"
    libdir=$(cd "$(pkg-config --variable=libdir wakuwaku)" && pwd -P)
    [ "$libdir" = "$(cd "$(dirname "$PKG_CONFIG_PATH")" && pwd -P)" ] ||
        fail "pkg-config's libdir $libdir is not in the prefix $prefix"

    # shellcheck disable=SC2046,SC2086 # word splitting is the point
    "$cc" $flags "$here/app.c" $(pkg-config --static --cflags --libs wakuwaku-static) \
        -o "$tmp/app_static"
    if readelf -d "$tmp/app_static" | grep NEEDED | grep -q libwakuwaku; then
        fail "the static build needs libwakuwaku.so"
    fi
    "$tmp/app_static" || fail "the static build failed to run"

    # shellcheck disable=SC2046,SC2086
    "$cc" $flags "$here/app.c" $(pkg-config --cflags --libs wakuwaku) -o "$tmp/app_shared"
    readelf -d "$tmp/app_shared" | grep NEEDED | grep -q libwakuwaku ||
        fail "the shared build does not link libwakuwaku.so"
    LD_LIBRARY_PATH=$libdir "$tmp/app_shared" || fail "the shared build failed to run"

    if readelf -d "$libdir/libwakuwaku.so" | grep NEEDED | grep -q jansson; then
        fail "libwakuwaku.so needs jansson"
    fi

    # The event-loop adapters: installed header-only, compiled by the
    # program with its loop; the library links neither loop.
    if readelf -d "$libdir/libwakuwaku.so" | grep NEEDED | grep -Eq 'libuv|libevent'; then
        fail "libwakuwaku.so needs libuv or libevent"
    fi
    for loop in libuv:uv libevent:event; do
        header=${loop%%:*} fn=${loop#*:}
        [ -f "$prefix/include/wakuwaku/adapters/$header.h" ] ||
            fail "include/wakuwaku/adapters/$header.h is not installed"
        printf '#include <wakuwaku/adapters/%s.h>\n%s\n' "$header" \
            "int main(void) { return wk_async_attach_$fn(NULL, NULL, NULL) == WK_EINVAL ? 0 : 1; }" \
            >"$tmp/adapter_$header.c"
        # shellcheck disable=SC2046,SC2086
        "$cc" $flags -D_DEFAULT_SOURCE "$tmp/adapter_$header.c" \
            $(pkg-config --cflags --libs wakuwaku "$header") -o "$tmp/adapter_$header" ||
            fail "the installed $header.h does not compile"
        LD_LIBRARY_PATH=$libdir "$tmp/adapter_$header" || fail "the $header adapter failed to run"
    done
    ;;
*)
    fail "unknown mode"
    ;;
esac
echo "install test ($mode): ok"
