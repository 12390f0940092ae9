#!/bin/sh
# tests/codegen/refresh.sh [BUILD_DIR] — regenerate the golden files
# (golden/*/expected/) with the wk-codegen of BUILD_DIR (default: build/).
# Run it after an intended change of the generator's output, and review
# the diff before committing it: these files are what test_codegen.c
# compares the generator's output with, byte for byte.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
gen="$build/codegen/wk-codegen"
[ -x "$gen" ] || { echo "no $gen: build first (cmake --build $build)" >&2; exit 1; }
for dir in "$here"/golden/*/; do
    mkdir -p "$dir/expected"
    rm -f "$dir"/expected/*.h "$dir"/expected/*.c
    "$gen" "$dir/schema.json" -o "$dir/expected"
    echo "refreshed ${dir#$here/}expected/"
done
