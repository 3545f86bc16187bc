#!/bin/bash
# bench/profile.sh BIN [BIN...]: where each mirrorfs binary's daemon spends its CPU, for a tar
# of /usr/include and for random 4 KiB O_DIRECT reads at iodepth 16: the daemon's CPU time per
# request and the top symbols of a `perf record` of it, binary by binary on the same fresh
# legs (two ext4 loop devices with direct I/O, as bench/datapath.sh makes). For comparing
# builds (before and after a change): give the old one first. Not a test: it prints tables.
#
# Requests are counted by the kernel's fuse:fuse_request_send tracepoint (so a binary without
# the stats' transport.requests can be measured too). Needs root, perf (Debian's linux-perf),
# fio, and the kernel's enable_uring switch on for the io_uring transport.
#
# Environment: TRANSPORT=uring (or devfuse), MB=512 (the fio file), RUNTIME=10 (fio seconds),
# TOP=15 (symbols shown), DIR=/var/tmp/mirrorfs-profile (removed at the end unless KEEP=1).
set -euo pipefail
export LC_ALL=C
say() { echo "profile: $*" >&2; }
die() { say "error: $*"; exit 1; }
[ $# -ge 1 ] || die "usage: bench/profile.sh BIN [BIN...]"
[ "$(id -u)" -eq 0 ] || die "must run as root (loop devices, mounts, perf)"
for t in perf fio jq mkfs.ext4 losetup getfattr tar; do
    command -v $t >/dev/null || die "needs $t"
done
TRANSPORT=${TRANSPORT:-uring} MB=${MB:-512} RUNTIME=${RUNTIME:-10} TOP=${TOP:-15}
DIR=${DIR:-/var/tmp/mirrorfs-profile}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
LOOPS=()
MNT=$DIR/mnt
cleanup() {
    mountpoint -q "$MNT" && { umount "$MNT" || umount -l "$MNT"; }
    for m in "$DIR/a" "$DIR/b"; do mountpoint -q "$m" && umount "$m"; done
    for d in "${LOOPS[@]}"; do losetup -d "$d" 2>/dev/null || true; done
    [ "${KEEP:-0}" = 1 ] || rm -rf "$DIR"
}
trap cleanup EXIT
for x in a b; do
    truncate -s $((MB + 1024))M "$DIR/$x.img"
    d=$(losetup --direct-io=on -f --show "$DIR/$x.img")
    LOOPS+=("$d")
    mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$d"
    mkdir -p "$DIR/$x"
    mount -o noatime "$d" "$DIR/$x"
done
mkdir -p "$MNT"
find /usr/include | sort | sed 's|^/||' >"$DIR/tree.rel"
tar -C / --no-recursion -cf "$DIR/tree.tar" -T "$DIR/tree.rel"
NENT=$(wc -l <"$DIR/tree.rel")

# The kernel's count of FUSE requests sent while CMD runs, and CMD's own output.
count_requests() { # OUT CMD...
    local out=$1; shift
    perf stat -x, -e fuse:fuse_request_send -a -o "$out.count" -- "$@" >"$out" 2>&1
    awk -F, '/fuse_request_send/ { print $1 }' "$out.count"
}
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

profile() { # NAME PID CMD...: CPU per request and the top symbols while CMD runs
    local name=$1 pid=$2; shift 2
    local t0 n t1
    t0=$(ticks "$pid")
    perf record -q -g -F 2999 -p "$pid" -o "$DIR/$name.perf" -- sleep 3600 >/dev/null 2>&1 &
    local rec=$!
    sleep 0.5
    n=$(count_requests "$DIR/$name.out" "$@")
    kill -INT $rec; wait $rec 2>/dev/null || true
    t1=$(ticks "$pid")
    awk -v c=$((t1 - t0)) -v n="$n" -v hz="$HZ" -v name="$name" 'BEGIN {
        printf "%s: %d requests, daemon CPU %.2f s, %.1f us per request\n", name, n, c / hz, c * 1e6 / hz / n }'
    perf report -i "$DIR/$name.perf" --no-children --sort sym -g none 2>/dev/null |
        grep -v '^#' | grep -v '^$' | head -n "$TOP" | sed 's/^/    /'
}

i=0
for bin in "$@"; do
    i=$((i + 1))
    bin=$(readlink -f "$bin")
    rm -rf "$DIR/a/m$i" "$DIR/b/m$i"; mkdir -p "$DIR/a/m$i" "$DIR/b/m$i"
    "$bin" "$DIR/a/m$i:$DIR/b/m$i" "$MNT" -o "minfreespace=0,transport=$TRANSPORT"
    pid=$(getfattr --absolute-names --only-values -n user.mirrorfs.pid "$MNT")
    echo
    echo "== $bin ($TRANSPORT)"
    profile "tar-$i" "$pid" tar -C "$MNT" -xf "$DIR/tree.tar"
    sync
    fio --name=prep --directory="$MNT" --rw=write --bs=1M --size="${MB}m" --ioengine=psync \
        --end_fsync=1 --filename=bench.dat >/dev/null
    sync; echo 3 >/proc/sys/vm/drop_caches
    profile "randread-$i" "$pid" fio --name=rr --directory="$MNT" --rw=randread --bs=4k \
        --size="${MB}m" --ioengine=libaio --iodepth=16 --direct=1 --norandommap --time_based \
        --runtime="$RUNTIME" --readonly --filename=bench.dat
    iops=$(sed -n 's/.*read: IOPS=\([^,]*\),.*/\1/p' "$DIR/randread-$i.out" | head -n 1)
    echo "randread: $iops IOPS; tar: $NENT entries"
    umount "$MNT"
    sleep 1
done
