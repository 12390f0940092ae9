#!/bin/bash
# tests/cxx/run.sh COMPILER SOURCE OUT -- FLAGS…
# Compiles and links SOURCE with the C++ compiler (the flags give the
# standard, the warnings, the include dirs and the libraries), then runs it.
set -eu
cxx=$1 src=$2 out=$3
shift 4
"$cxx" "$src" -o "$out" "$@"
"$out"
