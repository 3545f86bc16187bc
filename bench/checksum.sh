#!/bin/bash
# bench/checksum.sh: what checksums cost. The same fio jobs through a 2-leg mirror with
# checksum=on and checksum=off, alternated within one run, on two ext4 loop-device legs
# (unthrottled: the daemon's CPU is what a checksum could slow down). Prints MB/s (IOPS for
# the 4 KiB jobs) per job and mode, and the on/off ratio; then the checksum store's size per
# TiB of data, from the stats after the sequential write. Not a test: it prints a table.
#
# Usage (root): MIRRORFS=target/release/mirrorfs bench/checksum.sh
# Environment: MB=1024 (the sequential file, MiB), RUNTIME=15 (seconds per random job),
#              ROUNDS=2, DIR=/var/tmp/mirrorfs-checksum (the leg images: 2 x (MB + 256) MiB).
set -euo pipefail
MIRRORFS=${MIRRORFS:?set MIRRORFS to the mirrorfs binary}
MB=${MB:-1024}
RUNTIME=${RUNTIME:-15}
ROUNDS=${ROUNDS:-2}
DIR=${DIR:-/var/tmp/mirrorfs-checksum}
[ "$(id -u)" -eq 0 ] || { echo "checksum.sh: must run as root (loop devices, drop_caches)" >&2; exit 1; }
for t in fio jq mkfs.ext4 getfattr; do
    command -v $t >/dev/null || { echo "checksum.sh: needs $t (scripts/install-test-deps.sh)" >&2; exit 1; }
done

drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
mkdir -p "$DIR"
cleanup() {
    umount "$DIR/m" 2>/dev/null || true
    for i in 0 1; do umount "$DIR/leg$i" 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
for i in 0 1; do
    rm -f "$DIR/leg$i.img"
    truncate -s $((MB + 256))M "$DIR/leg$i.img"
    mkfs.ext4 -q -F -b 4096 "$DIR/leg$i.img"
    mkdir -p "$DIR/leg$i"
    mount -o loop "$DIR/leg$i.img" "$DIR/leg$i"
done
mkdir -p "$DIR/m"

# fio JOB_NAME ARGS...: one job through the mount; prints its bandwidth in bytes/s and IOPS.
fio_job() {
    local name=$1; shift
    (cd "$DIR" && fio --name="$name" --directory="$DIR/m" --output-format=json "$@") |
        jq -r '[([.jobs[].read.bw_bytes] | add) + ([.jobs[].write.bw_bytes] | add),
                ([.jobs[].read.iops] | add) + ([.jobs[].write.iops] | add)] | @tsv'
}

JOBS="seqwrite seqread randread randwrite"
declare -A sum
store_line=""
for r in $(seq "$ROUNDS"); do
    # Odd rounds on first, even rounds off first: neither mode always follows the other's
    # deletions and writeback.
    modes="on off"
    [ $((r % 2)) -eq 0 ] && modes="off on"
    for mode in $modes; do
        rm -rf "${DIR:?}/leg0/"* "${DIR:?}/leg1/"* "$DIR/leg0/.mirrorfs" "$DIR/leg1/.mirrorfs"
        sync
        fstrim "$DIR/leg0" 2>/dev/null || true
        fstrim "$DIR/leg1" 2>/dev/null || true
        drop
        "$MIRRORFS" "$DIR/leg0:$DIR/leg1" "$DIR/m" -o checksum=$mode,minfreespace=0
        for job in $JOBS; do
            case $job in
                seqwrite) args=(--rw=write --bs=1M --size=${MB}m --ioengine=psync --end_fsync=1 --filename=seq) ;;
                seqread) drop; args=(--rw=read --bs=1M --size=${MB}m --ioengine=libaio --iodepth=4 --direct=1 --filename=seq) ;;
                randread) drop; args=(--rw=randread --bs=4k --size=${MB}m --ioengine=libaio --iodepth=16 --direct=1 --time_based --runtime="$RUNTIME" --filename=seq) ;;
                randwrite) args=(--rw=randwrite --bs=4k --size=${MB}m --ioengine=psync --numjobs=4 --time_based --runtime="$RUNTIME" --end_fsync=1 --filename=seq) ;;
            esac
            read -r bw iops < <(fio_job "$job" "${args[@]}")
            # Each run's figure too: the machine's noise shows in their spread.
            awk -v r="$r" -v m="$mode" -v j="$job" -v bw="$bw" -v io="$iops" \
                'BEGIN { printf "round %d  checksum=%-3s  %-9s %10.1f MB/s %10.0f IOPS\n", r, m, j, bw / 1e6, io }'
            sum[$job,$mode,bw]=$(awk -v a="${sum[$job,$mode,bw]:-0}" -v b="$bw" 'BEGIN { print a + b }')
            sum[$job,$mode,iops]=$(awk -v a="${sum[$job,$mode,iops]:-0}" -v b="$iops" 'BEGIN { print a + b }')
            if [ "$job" = seqwrite ] && [ "$mode" = on ]; then
                sleep 4   # the sweep commits the checksums
                store_line=$(getfattr --absolute-names --only-values -n user.mirrorfs.stats "$DIR/m" |
                    jq -r --arg mb "$MB" '.integrity | "\(.store_bytes) \(.records) \($mb)"')
            fi
        done
        umount "$DIR/m"
        sleep 1
    done
done

printf "%-10s %-6s %12s %12s %8s\n" job unit "checksum=on" "checksum=off" "on/off"
for job in $JOBS; do
    case $job in seq*) unit="MB/s"; key=bw; div=1000000 ;; *) unit="IOPS"; key=iops; div=1 ;; esac
    awk -v j="$job" -v u="$unit" -v on="${sum[$job,on,$key]}" -v off="${sum[$job,off,$key]}" \
        -v r="$ROUNDS" -v d="$div" \
        'BEGIN { printf "%-10s %-6s %12.1f %12.1f %8.2f\n", j, u, on / r / d, off / r / d, (off > 0 ? on / off : 0) }'
done
read -r store records mb <<<"$store_line"
awk -v s="$store" -v rec="$records" -v mb="$mb" 'BEGIN {
    printf "\nchecksum store after writing %d MiB: %d bytes, %d records; %.2f GiB per TiB of data\n",
        mb, s, rec, s / (mb * 1048576) * 1024
}'
