#!/bin/bash
# tests/external/fio.sh: data integrity of mirrorfs under fio, on a mirror (2 legs, or EXT_LEGS).
#   1. fio-verify.fio: five verify jobs (sequential, unaligned random, 4 parallel randrw jobs,
#      pvsync2 with fsync, O_DIRECT via libaio); every byte written is read back and checked.
#   2. The mirror pattern: write 128 MiB through the mount (saving fio's verify state), remount,
#      then verify the data with --verify_only on EACH LEG directly, and through the mount.
#   3. Read-only opens (fio randread, dd O_DIRECT): right data; with passthrough=ro, no daemon reads.
#   4. The legs must be identical (mounted, and after unmounting).
#   5. Negative control: one flipped byte on leg1 must be caught by compare_legs and by fio.
set -uo pipefail
# shellcheck source=tests/external/lib.sh
. "$(dirname "$0")/lib.sh"

need_root
need_cmd fio rsync
need_binary
OUT=$EXT_OUT/fio
rm -rf "$OUT"
mkdir -p "$OUT"
cd "$OUT" || exit 1 # fio writes its *-verify.state files to the current directory

# fio_ok LOG ARGS...: run fio; fail on a non-zero exit or any job with err != 0.
fio_ok() {
    local log=$1 rc
    shift
    rc=0
    fio --output-format=normal "$@" >"$log" 2>&1 || rc=$? # (callers may run under set -e)
    if [ $rc -ne 0 ] || grep -qE 'err= *[1-9]' "$log"; then
        warn "fio $* FAILED (exit $rc; log $log):"
        grep -E 'err=|verify|error|fio:' "$log" | head -n 20 >&2
        return 1
    fi
    grep -E '^ *(READ|WRITE):' "$log" | sed 's/^ */    /'
}

verify_jobs() {
    mkdir -p "$MNT/jobs"
    fio_ok "$OUT/verify-jobs.log" --directory="$MNT/jobs" "$EXT_LIB_DIR/fio-verify.fio"
}

PERSIST=(--name=persist --rw=randwrite --bs=4k --size=128m --verify=crc32c --verify_fatal=1)
persist_write() {
    mkdir -p "$MNT/persist"
    fio_ok "$OUT/persist-write.log" "${PERSIST[@]}" --directory="$MNT/persist" --do_verify=0 --verify_state_save=1
}
persist_verify() { # DIR LOGNAME
    fio_ok "$OUT/persist-verify-$2.log" "${PERSIST[@]}" --directory="$1/persist" --verify_only --verify_state_load=1
}
persist_verify_legs() {
    local i rc=0
    for i in "${!LEGS[@]}"; do persist_verify "${LEGS[$i]}" "leg$i" || rc=1; done
    return $rc
}

# Read-only opens of the persist file: fio random reads (O_DIRECT, libaio, iodepth 16,
# --readonly) and whole-file reads (buffered, and O_DIRECT with dd), checked against leg0's copy.
# With passthrough=ro the kernel reads them from a leg by itself: the daemon's read counters must
# not move.
readonly_reads() {
    local f=$MNT/persist/persist.0.0 rc=0 pt before after want
    pt=$(getfattr --absolute-names --only-values -n user.mirrorfs.passthrough "$MNT") || return 1
    sync -f "$MNT"
    echo 3 >/proc/sys/vm/drop_caches
    reads() { getfattr --absolute-names --only-values -n user.mirrorfs.stats "$MNT" | jq '[.legs[].read_ops] | add'; }
    before=$(reads)
    fio_ok "$OUT/readonly.log" --name=ro --filename="$f" --readonly --rw=randread --bs=4k \
        --direct=1 --ioengine=libaio --iodepth=16 --runtime=3 --time_based || rc=1
    want=$(sha256sum <"${LEGS[0]}/persist/persist.0.0")
    [ "$(sha256sum <"$f")" = "$want" ] || { warn "buffered read of $f differs from leg0's copy"; rc=1; }
    [ "$(dd if="$f" bs=1M iflag=direct status=none | sha256sum)" = "$want" ] ||
        { warn "O_DIRECT read of $f differs from leg0's copy"; rc=1; }
    after=$(reads)
    if [ "$pt" = ro ] && [ "$after" != "$before" ]; then
        warn "passthrough=ro, yet the daemon read: read_ops $before -> $after"
        rc=1
    fi
    echo "passthrough=$pt: daemon read_ops $before -> $after"
    return $rc
}

# Flip one byte in leg1's copy; both checks must notice; then put the byte and the mtime back.
negative_control() {
    local f=${LEGS[1]}/persist/persist.0.0 rc=0 b
    [ -f "$f" ] || { warn "no $f"; return 1; }
    cp -p "$f" "$OUT/orig.bin"
    b=$(dd if="$f" bs=1 skip=20480 count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
    if [ "$b" = 0 ]; then printf 'A'; else printf '\0'; fi | dd of="$f" bs=1 seek=20480 conv=notrunc 2>/dev/null
    touch -r "$OUT/orig.bin" "$f"
    if compare_legs "${LEGS[@]}" >/dev/null 2>&1; then
        warn "compare_legs did not notice a flipped byte"
        rc=1
    fi
    if fio "${PERSIST[@]}" --directory="${LEGS[1]}/persist" --verify_only --verify_state_load=1 >"$OUT/negative.log" 2>&1; then
        warn "fio --verify_only did not notice a flipped byte"
        rc=1
    fi
    cp -p "$OUT/orig.bin" "$f"
    rm -f "$OUT/orig.bin"
    compare_legs "${LEGS[@]}" || rc=1
    [ $rc -eq 0 ] && echo "a flipped byte on leg1 was caught by compare_legs and fio"
    return $rc
}

make_workdir fio
W=$WORKDIR
mount_mirror "$EXT_LEGS" "$W" || exit 1
run_step "5 verify jobs (fio-verify.fio)" verify_jobs
run_step "legs identical" check_mirror
run_step "checksums: read back, scrub" check_checksums
run_step "persist: write 128 MiB via mount" persist_write
run_step --here "remount" remount_mirror
run_step "persist: verify_only on each leg" persist_verify_legs
run_step "persist: verify_only via mount" persist_verify "$MNT" mount
run_step "read-only reads (fio, dd O_DIRECT, sha256)" readonly_reads
run_step "legs identical (remounted)" check_mirror
run_step --here "unmount" unmount_mirror
run_step "legs identical (unmounted)" compare_legs "${LEGS[@]}"
if [ "$MIRRORFS" != tmpfs ]; then # in the self-test the legs are one tmpfs: nothing to catch
    run_step "negative control (flipped byte)" negative_control
fi

print_steps
failed=$(steps_failed)
echo "fio: $((${#_EXT_STEPS[@]} - failed)) steps ok, $failed failed (logs: $OUT)"
[ "$failed" -eq 0 ]
