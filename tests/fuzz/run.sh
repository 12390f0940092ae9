#!/bin/bash
# tests/fuzz/run.sh — build the libFuzzer targets with clang (ASan + UBSan)
# and run each for a bounded time on its committed seed corpus.
#
#   tests/fuzz/run.sh [seconds per target, default 60]
#
# New inputs found go to a scratch copy of the corpus (the committed seeds
# stay as they are); a crash leaves its input in build-fuzz/ and fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
out=build-fuzz
mkdir -p "$out"
# version.h comes from CMake's configure step.
cmake -S . -B "$out/cmake" -DWK_BUILD_TESTS=OFF -DWK_BUILD_BENCH=OFF -DWK_BUILD_EXAMPLES=OFF >/dev/null

flags=(-g -O1 -std=c11 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -Iinclude -I"$out/cmake/include" -I.)
lib_sources=(base/*.c core/*.c entity/*.c capability/*.c collection/*.c)
# The registry of entity kinds, collected as the CMake build does it.
cmake -DOUT="$out/wk_kinds.c" -DSOURCES="$(IFS=';'; echo "${lib_sources[*]}")" -P cmake/wk_kinds.cmake
lib_sources+=("$out/wk_kinds.c")
# The test-side registry of kinds (tests/kinds/kinds.h), for fuzz_replies.
kind_rows=(tests/kinds/*.c)
libs=(-lhiredis -lsodium -lssl -lcrypto -ljansson -lpthread -lm)

status=0
for target in tests/fuzz/fuzz_*.c; do
    name=$(basename "$target" .c)
    if [ "$name" = fuzz_schema ]; then
        # The code generator, without its main().
        sources=($(ls codegen/*.c | grep -v codegen/main.c) base/base.c)
        clang "${flags[@]}" -Icodegen -DWK_CODEGEN_VERSION='"fuzz"' -DWK_CODEGEN_VERSION_MAJOR=0 \
            -DWK_CODEGEN_VERSION_NUMBER=0 "$target" "${sources[@]}" -o "$out/$name"
    elif [ "$name" = fuzz_codec ]; then
        # The JSON body codec (its own library) over the core library.
        clang "${flags[@]}" "$target" codec/*.c "${lib_sources[@]}" "${libs[@]}" -o "$out/$name"
    else
        clang "${flags[@]}" "$target" "${kind_rows[@]}" "${lib_sources[@]}" "${libs[@]}" -o "$out/$name"
    fi
    corpus="$out/corpus-$name"
    rm -rf "$corpus"
    mkdir -p "$corpus"
    cp tests/fuzz/corpus/"${name#fuzz_}"/* "$corpus/" 2>/dev/null || true
    echo "=== $name: ${seconds}s"
    if ! (cd "$out" && ./"$name" -max_total_time="$seconds" -print_final_stats=1 \
            -artifact_prefix="./$name-" "corpus-$name" 2>&1 | tee "$name.log" |
            grep -E "^(stat::number_of_executed_units|stat::new_units_added|==.*ERROR|SUMMARY)"); then
        :
    fi
    if grep -qE "ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer)|runtime error:|deadly signal" "$out/$name.log"; then
        echo "$name: FAILED (see $out/$name.log)"
        status=1
    fi
done
exit $status
