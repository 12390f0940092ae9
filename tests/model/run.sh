#!/usr/bin/env bash
# tests/model/run.sh -- check the Promela model of the wait protocol
# (tests/model/wait.pml, docs/model.md) with spin.
#
#   run.sh [check]    every model, exhaustively: exits non-zero on any
#                     property violated (or any run cut short)
#   run.sh defects    each known defect put back (-DDEFECT_n) must be
#                     found: exits non-zero unless EACH one is; prints
#                     each counterexample (spin -t, the model's MSC lines)
#   run.sh reach      each event the properties rest on must be reachable
#                     (a witness run per event and kind), so that a model
#                     that stopped doing something cannot pass vacuously
#   run.sh all        the three
#   run.sh probes     informational, not in CI: variants that answer
#                     questions about the rules (docs/model.md, Notes);
#                     prints what each found, exits 0
#
# Options through the environment: MODEL_JOBS (parallel runs, default 2),
# MODEL_MEM (MB per run, default 512), MODEL_OUT (work folder, default a
# temporary one; kept when set).
#
# spin and gcc are required: a missing spin is a failure, not a skip.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-check}
jobs=${MODEL_JOBS:-2}
mem=${MODEL_MEM:-512}

if ! command -v spin >/dev/null 2>&1; then
    echo "model: spin not found (apt-get install spin; scripts/deps.sh installs it)" >&2
    echo "0 passed, 1 failed"
    exit 1
fi
if ! command -v gcc >/dev/null 2>&1; then
    echo "model: gcc not found" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

if [ -n "${MODEL_OUT:-}" ]; then
    out=$MODEL_OUT
    mkdir -p "$out"
else
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi

# The models: name and -D flags.
models=(
    "lock_fair|-DKIND=1 -DFAIR=1"
    "lock|-DKIND=1 -DFAIR=0"
    "fenced_lock|-DKIND=2"
    "rwlock_fair|-DKIND=3 -DFAIR=1"
    "rwlock|-DKIND=3 -DFAIR=0"
    "semaphore|-DKIND=4"
)

# The defects: name, -D flags, and what the violated assertion must match
# (grep -E on pan's "assertion violated" line).
defects=(
    "DEFECT_1|-DKIND=1 -DDEFECT_1|ws\+|hT\["
    "DEFECT_1.fenced|-DKIND=2 -DDEFECT_1|ws\+|hT\["
    "DEFECT_2|-DKIND=1 -DDEFECT_2|ws\+|hT\["
    "DEFECT_2.rwlock|-DKIND=3 -DDEFECT_2|ws\+|hT\["
    "DEFECT_2.semaphore|-DKIND=4 -DNPERM=1 -DDEFECT_2|ws\+|hT\["
    "DEFECT_3|-DKIND=1 -DDEFECT_3|rep\["
    "DEFECT_5|-DKIND=1 -DDEFECT_5|rep\["
    "DEFECT_S|-DKIND=1 -DDEFECT_S|gend\["
)

# Reachability witnesses: event number, kinds (KIND values) it applies
# to, fair only, and what it is.
reach=(
    "1|1 2 3 4|0|a lease handed to a waiter that did not take it up is revoked"
    "2|1 2 3 4|0|a waiter's attempt takes a free item (after an expiry or a wake-up)"
    "3|1 3|1|a fair try is refused while the item is free and a waiter is queued"
    "4|1 2 3 4|0|a pop returns a handed-over notice"
    "5|1 2 3 4|0|an attempt finds the lease already handed to it"
    "7|1 2 3 4|0|a pop of a closed handle takes a notice"
)

# Probes (docs/model.md, Notes): name, -D flags, what it asks.
probes=(
    "no_attempt_unclaimed|-DKIND=1 -DNO_ATTEMPT_UNCLAIMED|a Lock attempt without the unclaimed check (only the plain try revokes)"
    "defect_1_with_R|-DKIND=1 -DDEFECT_1R|DEFECT_1 with the R cap kept"
    "grace_equals_tau|-DKIND=1 -DG=1|G = TAU = 1"
    "belief_from_send|-DKIND=1 -DBELIEF_FROM_SEND|a holder counts its lease from the send of the request that got it"
    "belief_from_send_never_late|-DKIND=1 -DBELIEF_FROM_SEND -DFK=13|the same, with no LATE fault"
)

# build DIR FLAGS: spin -a and gcc in DIR
build() {
    local dir=$1 flags=$2
    mkdir -p "$dir"
    cp "$here/wait.pml" "$dir/wait.pml"
    (cd "$dir" && spin -a $flags wait.pml >spin.log 2>&1 &&
        gcc -O0 -w -DSAFETY -DNOREDUCE -DCOLLAPSE -DMEMLIM="$mem" -o pan pan.c >gcc.log 2>&1)
}

# run DIR: exhaustive search; pan's output in DIR/pan.out
run_pan() {
    local dir=$1
    local t0 t1
    t0=$(date +%s%N)
    (cd "$dir" && ./pan -m300000 -w22 -E >pan.out 2>&1)
    t1=$(date +%s%N)
    echo "$(((t1 - t0) / 1000000)) ms" >"$dir/time.out"
}

summary() { # DIR: states, time, memory
    local dir=$1
    local states t m
    states=$(awk '/states, stored$/ {print $1; exit}' "$dir/pan.out")
    m=$(awk '/total actual memory usage/ {print $1; exit}' "$dir/pan.out")
    t=$(cat "$dir/time.out" 2>/dev/null | tail -1)
    echo "${states:-?} states, ${t:-?}, ${m:-?} MB"
}

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "PASS $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }

# A run is clean when pan searched everything and found no error.
clean() {
    local f=$1/pan.out
    grep -q "errors: 0" "$f" &&
        ! grep -qE "max search depth too small|out of memory|aborting|pan: reached -DMEMLIM" "$f"
}

one_check() { # name flags
    local name=$1 flags=$2 dir=$out/check/$1
    if ! build "$dir" "$flags"; then
        echo "build failed: $(cat "$dir"/spin.log "$dir"/gcc.log 2>/dev/null | head -20)" >"$dir/result"
        return
    fi
    run_pan "$dir"
    if clean "$dir"; then
        echo "ok $(summary "$dir")" >"$dir/result"
    else
        echo "error: $(grep -E 'assertion violated|errors:|depth too small|memory|invalid end' "$dir/pan.out" | head -3 | tr '\n' ' ')" >"$dir/result"
        (cd "$dir" && [ -f wait.pml.trail ] && spin -t $flags wait.pml 2>&1 | grep 'MSC:' | sed 's/^ *MSC: /    /' >trail.txt)
    fi
}

one_defect() { # name flags pattern
    local name=$1 flags=$2 pat=$3 dir=$out/defects/$1
    if ! build "$dir" "$flags"; then
        echo "build failed" >"$dir/result"
        return
    fi
    run_pan "$dir"
    local line
    line=$(grep -m1 'assertion violated' "$dir/pan.out")
    if [ -n "$line" ] && echo "$line" | grep -qE "$pat" && [ -f "$dir/wait.pml.trail" ]; then
        (cd "$dir" && spin -t $flags wait.pml 2>&1 | grep 'MSC:' | sed 's/^ *MSC: /    /' >trail.txt)
        echo "found: ${line#pan:1: }" >"$dir/result"
    elif [ -n "$line" ]; then
        echo "a violation, not the expected one: ${line#pan:1: }" >"$dir/result"
    else
        echo "NOT FOUND ($(summary "$dir"))" >"$dir/result"
    fi
}

one_reach() { # tag flags
    local tag=$1 flags=$2 dir=$out/reach/$1
    if ! build "$dir" "$flags"; then
        echo "build failed" >"$dir/result"
        return
    fi
    run_pan "$dir"
    if grep -qE "assertion violated \(([0-9])!=\1\)" "$dir/pan.out"; then
        echo "reached" >"$dir/result"
    else
        echo "NOT REACHED: $(grep -m1 -E 'assertion violated|errors:' "$dir/pan.out")" >"$dir/result"
    fi
}

# Run the queued commands MODEL_JOBS at a time.
queue=()
drain() {
    local running=0 c
    for c in "${queue[@]}"; do
        eval "$c" &
        running=$((running + 1))
        if [ "$running" -ge "$jobs" ]; then
            wait -n
            running=$((running - 1))
        fi
    done
    wait
    queue=()
}

do_check() {
    echo "== model check: every model, exhaustively (B = R + G + TAU = 5 ticks, T = 10)"
    local m name flags
    for m in "${models[@]}"; do
        name=${m%%|*}
        flags=${m#*|}
        queue+=("one_check '$name' '$flags'")
    done
    drain
    for m in "${models[@]}"; do
        name=${m%%|*}
        local r
        r=$(cat "$out/check/$name/result" 2>/dev/null || echo "no result")
        case $r in
            ok*) pass "model.$name: ${r#ok }" ;;
            *)
                fail "model.$name: $r"
                [ -s "$out/check/$name/trail.txt" ] && cat "$out/check/$name/trail.txt"
                ;;
        esac
    done
}

do_defects() {
    echo "== defects: each must be found"
    local d name rest flags pat
    for d in "${defects[@]}"; do
        name=${d%%|*}
        rest=${d#*|}
        flags=${rest%%|*}
        pat=${rest#*|}
        queue+=("one_defect '$name' '$flags' '$pat'")
    done
    drain
    for d in "${defects[@]}"; do
        name=${d%%|*}
        local r
        r=$(cat "$out/defects/$name/result" 2>/dev/null || echo "no result")
        case $r in
            found*)
                pass "defect.$name: $r ($(wc -l <"$out/defects/$name/trail.txt") steps in the trail)"
                sed 's/^/    /' "$out/defects/$name/trail.txt" | tail -n 25
                ;;
            *) fail "defect.$name: $r" ;;
        esac
    done
}

do_reach() {
    echo "== reachability: each event the properties rest on happens in some run"
    local r n kinds fair what k tag
    for r in "${reach[@]}"; do
        IFS='|' read -r n kinds fair what <<<"$r"
        for k in $kinds; do
            tag="e$n.k$k"
            if [ "$fair" = 1 ]; then
                queue+=("one_reach '$tag' '-DKIND=$k -DFAIR=1 -DREACH=$n'")
            else
                queue+=("one_reach '$tag' '-DKIND=$k -DREACH=$n'")
            fi
        done
    done
    drain
    for r in "${reach[@]}"; do
        IFS='|' read -r n kinds fair what <<<"$r"
        for k in $kinds; do
            tag="e$n.k$k"
            local res
            res=$(cat "$out/reach/$tag/result" 2>/dev/null || echo "no result")
            case $res in
                reached) pass "reach.$tag: $what (KIND=$k)" ;;
                *) fail "reach.$tag: $what (KIND=$k): $res" ;;
            esac
        done
    done
}

one_probe() { # name flags
    local name=$1 flags=$2 dir=$out/probes/$1
    if ! build "$dir" "$flags"; then
        echo "build failed" >"$dir/result"
        return
    fi
    run_pan "$dir"
    local line
    line=$(grep -m1 'assertion violated' "$dir/pan.out")
    if [ -n "$line" ]; then
        (cd "$dir" && [ -f wait.pml.trail ] && spin -t $flags wait.pml 2>&1 | grep 'MSC:' | sed 's/^ *MSC: /    /' >trail.txt)
        echo "violated: ${line#pan:1: }" >"$dir/result"
    elif clean "$dir"; then
        echo "holds ($(summary "$dir"))" >"$dir/result"
    else
        echo "incomplete: $(grep -m1 -E 'errors:|memory' "$dir/pan.out")" >"$dir/result"
    fi
}

do_probes() {
    echo "== probes (informational)"
    local p name rest flags what
    for p in "${probes[@]}"; do
        IFS='|' read -r name flags what <<<"$p"
        queue+=("one_probe '$name' '$flags'")
    done
    drain
    for p in "${probes[@]}"; do
        IFS='|' read -r name flags what <<<"$p"
        echo "probe.$name ($what): $(cat "$out/probes/$name/result" 2>/dev/null || echo 'no result')"
        [ -s "$out/probes/$name/trail.txt" ] && sed 's/^/    /' "$out/probes/$name/trail.txt" | tail -n 25
    done
}

start=$(date +%s)
case $mode in
    check) do_check ;;
    defects) do_defects ;;
    reach) do_reach ;;
    all) do_check; do_defects; do_reach ;;
    probes) do_probes; echo "model (probes): $(($(date +%s) - start)) s"; exit 0 ;;
    *)
        echo "usage: $0 [check|defects|reach|all|probes]" >&2
        exit 2
        ;;
esac
echo "model ($mode): $(($(date +%s) - start)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
