#!/bin/bash
# Part of the benchmarks (make bench-remote). Root; about 1 minute.
# Issue 13: a leg with LATENCY_US (default 20000) of added latency (the disk model's
# --latency-us: a remote leg) beside a local directory. fio random 4 KiB O_DIRECT reads,
# iodepth 16, RUNTIME s, through mirrorfs on both legs and on the local leg alone (-o degraded),
# side by side. Prints IOPS, the ratio, and the share of reads the slow leg served.
set -euo pipefail
B=${MIRRORFS:?set MIRRORFS to the mirrorfs binary}
DM=${DISKMODEL:-$(dirname "$B")/mirrorfs-diskmodel}
LAT=${LATENCY_US:-20000}
RUNTIME=${RUNTIME:-10}
[ -x "$DM" ] || { echo "bench/remote.sh: $DM missing: cargo build -p mirrorfs-diskmodel" >&2; exit 1; }
W=$(mktemp -d /var/tmp/remote.XXXXXX)
cleanup() { umount "$W/mnt" 2>/dev/null || true; sleep 0.5; umount "$W/m1" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT
mkdir -p "$W/local" "$W/s1" "$W/m1" "$W/mnt"
"$DM" --latency-us "$LAT" "$W/s1" "$W/m1" &
for _ in $(seq 50); do mountpoint -q "$W/m1" && break; sleep 0.1; done
randread() {
  echo 3 > /proc/sys/vm/drop_caches
  fio --name=r --filename="$W/mnt/f" --rw=randread --bs=4k --direct=1 --ioengine=libaio \
    --iodepth=16 --runtime="$RUNTIME" --time_based --output-format=json 2>/dev/null | jq '.jobs[0].read.iops'
}
"$B" "$W/local:$W/m1" "$W/mnt"
dd if=/dev/urandom of="$W/mnt/f" bs=1M count=64 status=none
before=$(getfattr --only-values -n user.mirrorfs.stats "$W/mnt/.mirrorfs" 2>/dev/null | jq -c '[.legs[].read_ops]')
both=$(randread)
after=$(getfattr --only-values -n user.mirrorfs.stats "$W/mnt/.mirrorfs" 2>/dev/null | jq -c '[.legs[].read_ops]')
umount "$W/mnt"; sleep 0.5
"$B" "$W/local" "$W/mnt" -o degraded 2>/dev/null
alone=$(randread)
umount "$W/mnt"
share=$(jq -n --argjson b "$before" --argjson a "$after" '(($a[1] - $b[1]) / (($a[0] - $b[0]) + ($a[1] - $b[1])) * 100)')
printf "%-46s %10s\n" "setup" "IOPS"
printf "%-46s %10.0f\n" "mirrorfs, local leg alone (degraded)" "$alone"
printf "%-46s %10.0f\n" "mirrorfs, local + ${LAT} us leg" "$both"
awk -v a="$alone" -v b="$both" -v s="$share" 'BEGIN { printf "ratio %.2f x the local leg alone; the slow leg served %.2f %% of the reads\n", b / a, s }'
