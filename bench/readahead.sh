#!/bin/bash
# Part of the benchmarks (make bench-readahead). Root; about 2 minutes with MB=512.
# Issue 13, item 1: one sequential reader on two and three disks. The legs sit on the disk
# model (diskmodel/: the simulator's 7200 rpm HDD, one head, seeks and rotation, through
# FUSE), flagged rotational. Side by side in one run: the model's single disk read directly;
# mirrorfs with readahead=0 (auto routes whole reads: one stream stays on one disk); mirrorfs
# with the extent read-ahead (readahead=128M, the default). One reader (dd, O_DIRECT, 1 MiB)
# and four readers (each its own quarter of the file). Prints MB/s and the ratio to one disk.
set -euo pipefail
B=${MIRRORFS:?set MIRRORFS to the mirrorfs binary}
DM=${DISKMODEL:-$(dirname "$B")/mirrorfs-diskmodel}
MB=${MB:-512}
[ -x "$DM" ] || { echo "bench/readahead.sh: $DM missing: cargo build -p mirrorfs-diskmodel" >&2; exit 1; }
W=$(mktemp -d /var/tmp/readahead.XXXXXX)
cleanup() {
  umount "$W/mnt" 2>/dev/null || true
  for d in "$W"/m*; do umount "$d" 2>/dev/null || true; done
  sleep 0.5; rm -rf "$W"
}
trap cleanup EXIT

models() { # $1 = how many: mounts the disk models on $W/m0.. over $W/s0..
  for ((i = 0; i < $1; i++)); do
    mkdir -p "$W/s$i" "$W/m$i"
    "$DM" --disk hdd "$W/s$i" "$W/m$i" &
  done
  for ((i = 0; i < $1; i++)); do
    for _ in $(seq 50); do mountpoint -q "$W/m$i" && break; sleep 0.1; done
  done
}
unmodel() { # unmounts the models, waiting until each is gone, and removes their directories
  for d in "$W"/m[0-9]*; do
    for _ in $(seq 100); do
      mountpoint -q "$d" || break
      umount "$d" 2>/dev/null || sleep 0.1
    done
  done
  rm -rf "$W"/s[0-9]* "$W"/m[0-9]*
}

one_reader() { # $1 = file: MB/s
  local t0 t1
  t0=$(date +%s.%N); dd if="$1" of=/dev/null bs=1M iflag=direct status=none; t1=$(date +%s.%N)
  awk -v mb="$MB" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", mb * 1.048576 / (b - a) }'
}
four_readers() { # $1 = file: total MB/s, each reader its own quarter
  local t0 t1 q=$((MB / 4))
  t0=$(date +%s.%N)
  for i in 0 1 2 3; do dd if="$1" of=/dev/null bs=1M iflag=direct skip=$((i * q)) count=$q status=none & done
  wait
  t1=$(date +%s.%N)
  awk -v mb="$((q * 4))" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", mb * 1.048576 / (b - a) }'
}
fill() { dd if=/dev/zero of="$1" bs=1M count="$MB" oflag=direct status=none; }

printf "%-44s %9s %9s\n" "setup" "MB/s" "x disk"
row() { printf "%-44s %9s %9s\n" "$1" "$2" "$(awk -v x="$2" -v d="$DISK" 'BEGIN { printf "%.2f", x / d }')"; }

models 1
fill "$W/m0/f"
DISK=$(one_reader "$W/m0/f"); row "one disk (the model, directly), 1 reader" "$DISK"
row "one disk (the model, directly), 4 readers" "$(four_readers "$W/m0/f")"
unmodel

for legs in 2 3; do
  for ra in 0 128M; do
    models $legs
    list=$(for ((i = 0; i < legs; i++)); do printf "%s=rot:" "$W/m$i"; done); list=${list%:}
    mkdir -p "$W/mnt"
    "$B" "$list" "$W/mnt" -o readahead=$ra
    fill "$W/mnt/f"
    echo 3 > /proc/sys/vm/drop_caches
    label="mirrorfs $legs disks, readahead=$ra"
    row "$label, 1 reader" "$(one_reader "$W/mnt/f")"
    echo 3 > /proc/sys/vm/drop_caches
    row "$label, 4 readers" "$(four_readers "$W/mnt/f")"
    getfattr --only-values -n user.mirrorfs.stats "$W/mnt/.mirrorfs" 2>/dev/null \
      | jq -c '{readahead: .readahead | {streams, fetched_MiB: (.fetched_bytes / 1048576 | floor), served_MiB: (.served_bytes / 1048576 | floor)}, leg_read_MiB: [.legs[].read_bytes / 1048576 | floor]}' \
      | sed 's/^/    /'
    umount "$W/mnt"; sleep 0.5
    unmodel
  done
done

# Every policy on three disks (issue 13, item 5): one mount, the file written once, the policy
# set live before each pair of runs. readahead=0 for all but `auto + read-ahead`, so that each
# row is the policy's own routing.
echo
echo "three disks, every policy"
models 3
list=$(for ((i = 0; i < 3; i++)); do printf "%s=rot:" "$W/m$i"; done); list=${list%:}
mkdir -p "$W/mnt"
"$B" "$list" "$W/mnt" -o readahead=0
fill "$W/mnt/f"
for p in first pid round-robin nonrot queue latency md auto "auto + read-ahead"; do
  case $p in
    "auto + read-ahead") "$B" set "$W/mnt" read_policy auto; "$B" set "$W/mnt" readahead 128M ;;
    *) "$B" set "$W/mnt" read_policy "$p" ;;
  esac
  echo 3 > /proc/sys/vm/drop_caches
  r1=$(one_reader "$W/mnt/f")
  echo 3 > /proc/sys/vm/drop_caches
  r4=$(four_readers "$W/mnt/f")
  row "3 disks, $p, 1 reader" "$r1"
  row "3 disks, $p, 4 readers" "$r4"
done
umount "$W/mnt"; sleep 0.5
unmodel
