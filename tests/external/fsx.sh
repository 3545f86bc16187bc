#!/bin/bash
# tests/external/fsx.sh: data integrity of mirrorfs under fsx (crates.io fsx 0.3.2) with every
# operation enabled (fsx.toml: read/write, shared mmap read/write, msync invalidate, truncate,
# fsync, fdatasync, posix_fallocate, punch hole, sendfile, fadvise, copy_file_range), on a mirrorfs
# mount (2 legs, or EXT_LEGS): several seeds one after the other, each on its own file, then two
# fsx at once on two files. fsx checks every read against its own model of the file. Afterwards
# the legs must be identical (with the mount up, and again after a remount).
# Environment: FSX_OPS (ops per run, default 20000), FSX_SEEDS (default "1 2 3 4"),
#              FSX_PAR_SEEDS (the parallel pair, default "101 102").
set -uo pipefail
# shellcheck source=tests/external/lib.sh
. "$(dirname "$0")/lib.sh"

need_root
need_cmd fsx rsync
need_binary
OPS=${FSX_OPS:-20000}
SEEDS=${FSX_SEEDS:-1 2 3 4}
PAR_SEEDS=${FSX_PAR_SEEDS:-101 102}
CFG=$EXT_LIB_DIR/fsx.toml
OUT=$EXT_OUT/fsx
rm -rf "$OUT"
mkdir -p "$OUT"

# fsx_run SEED FILE: one fsx run; its log and (on failure) its .fsxlog/.fsxgood go to $OUT.
fsx_run() {
    local seed=$1 f=$2 log=$OUT/seed$1.log
    mkdir -p "$OUT/seed$seed"
    if NO_COLOR=1 RUST_BACKTRACE=0 fsx -f "$CFG" -N "$OPS" -S "$seed" -P "$OUT/seed$seed" "$f" >"$log" 2>&1 &&
        grep -q 'All operations completed A-OK' "$log"; then
        echo "fsx seed $seed: $OPS ops A-OK"
        return 0
    fi
    warn "fsx seed $seed on $f FAILED (log $log); reproduce: fsx -f $CFG -N $OPS -S $seed FILE"
    tail -n 40 "$log" >&2
    return 1
}

fsx_parallel() {
    local s pids=() rc=0 p
    for s in $PAR_SEEDS; do
        fsx_run "$s" "$MNT/fsx/par$s" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}

make_workdir fsx
W=$WORKDIR
mount_mirror "$EXT_LEGS" "$W" || exit 1
mkdir -p "$MNT/fsx"
for s in $SEEDS; do
    run_step "fsx seed $s ($OPS ops)" fsx_run "$s" "$MNT/fsx/seed$s"
done
run_step "fsx parallel seeds ${PAR_SEEDS// /+}" fsx_parallel
run_step "legs identical (mounted)" check_mirror
run_step "checksums: read back, scrub" check_checksums
run_step --here "remount" remount_mirror
run_step "legs identical (remounted)" check_mirror
run_step --here "unmount" unmount_mirror
run_step "legs identical (unmounted)" compare_legs "${LEGS[@]}"

print_steps
failed=$(steps_failed)
echo "fsx: $((${#_EXT_STEPS[@]} - failed)) steps ok, $failed failed (logs: $OUT)"
[ "$failed" -eq 0 ]
