#!/bin/bash
# tests/external/run-all.sh: runs every external check of mirrorfs, in order: pjdfstest.sh (POSIX
# semantics), fsx.sh and fio.sh (data integrity), clients.sh (git, tar, rsync, sqlite, make/gcc).
# Each one mounts its own mirror and compares its legs. Runs all of them even if one fails, prints
# a summary, and ends with the line "external: N passed, N failed" (N = scripts). Exit status is
# non-zero if any script failed.
# Usage: tests/external/run-all.sh [SCRIPT...]   (default: all four; e.g. `run-all.sh fsx fio`)
# Environment: MIRRORFS (the binary to test) and the others described in lib.sh.
set -uo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$dir/../.." && pwd)
export MIRRORFS=${MIRRORFS:-$repo/target/debug/mirrorfs}
case $MIRRORFS in tmpfs | /*) ;; *) MIRRORFS=$PWD/$MIRRORFS ;; esac
export EXT_OUT=${EXT_OUT:-$repo/target/external}
mkdir -p "$EXT_OUT"

scripts=("$@")
[ ${#scripts[@]} -gt 0 ] || scripts=(pjdfstest fsx fio clients)

echo "external checks of $MIRRORFS ($("$MIRRORFS" --version 2>/dev/null || echo "version unknown")); logs in $EXT_OUT"
passed=0
failed=0
summary=()
for s in "${scripts[@]}"; do
    s=${s%.sh}
    echo
    echo "######## $s.sh ($(date -u +%T) UTC)"
    t0=$(date +%s)
    "$dir/$s.sh" 2>&1 | tee "$EXT_OUT/$s.log"
    rc=${PIPESTATUS[0]}
    t=$(($(date +%s) - t0))
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        summary+=("$(printf '%-12s %-18s %5ss' "$s" ok "$t")")
    else
        failed=$((failed + 1))
        summary+=("$(printf '%-12s %-18s %5ss' "$s" "FAILED (exit $rc)" "$t")")
    fi
    # the closing lines of the script, for the summary
    summary+=("$(grep -E '^(pass [a-z]+:|pjdfstest: |fsx: |fio: |clients: )' "$EXT_OUT/$s.log" | sed 's/^/      /')")
done

echo
echo "######## summary"
for l in "${summary[@]}"; do [ -n "$l" ] && printf '%s\n' "$l"; done
echo "external: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
