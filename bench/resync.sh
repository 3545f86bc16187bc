#!/bin/bash
# Part of the benchmarks (make bench-resync). Root; uses /var/tmp; about 3 minutes at the default size.
# Full resync time of N files / TOTAL bytes through the daemon: mount 2 legs, fill, fail leg1,
# empty it, `mirrorfs leg add --full`, wait for the resync to finish.
set -euo pipefail
B=${MIRRORFS:?set MIRRORFS to the binary}
N=${N:-10000}; MB=${MB:-2048}
D=$(mktemp -d /var/tmp/resync.XXXXXX); mkdir $D/a $D/b $D/m
$B "$D/a:$D/b" $D/m -o minfreespace=0
per=$(( MB * 1024 / N ))   # KiB per file
t0=$(date +%s.%N)
for d in $(seq 0 99); do
  mkdir $D/m/d$d
  for f in $(seq 0 $(( N / 100 - 1 ))); do head -c ${per}K /dev/urandom > $D/m/d$d/f$f; done
done
sync
t1=$(date +%s.%N)
echo "filled $N files, $MB MiB through the mount in $(awk -v a=$t0 -v b=$t1 'BEGIN { print b - a }') s"
$B leg fail $D/m leg1
find $D/b -mindepth 1 -maxdepth 1 ! -name .mirrorfs -exec rm -rf {} +
sync; echo 3 > /proc/sys/vm/drop_caches
t2=$(date +%s.%N)
$B leg add $D/m leg1 --full
while ! $B status $D/m | grep -q "resync finished"; do sleep 0.1; $B status $D/m | grep -q "resync failed" && { $B status $D/m; exit 1; }; done
t3=$(date +%s.%N)
$B status $D/m | grep scan
echo "full resync: $(awk -v a=$t2 -v b=$t3 'BEGIN { print b - a }') s"
diff -r --exclude=.mirrorfs $D/a $D/b >/dev/null && echo "legs identical"
umount $D/m; sleep 2; rm -rf $D
