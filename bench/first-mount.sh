#!/bin/bash
# bench/first-mount.sh: how long the first mount over two legs that already hold the same tree
# takes to answer (the metadata comparison), and how long the background scrub that compares
# their contents then takes, with the page cache dropped before each. For reference, the time
# `diff -r` needs to read both trees. Not a test: it prints a table.
#
# Usage (root): MIRRORFS=target/release/mirrorfs bench/first-mount.sh
# Environment: MB=10240 (size of the tree, in MiB, as 1 MiB files, 256 per directory),
#              DIR=/var/tmp/mirrorfs-first-mount (where the legs go; needs 2 x MB free),
#              KEEP=1 keeps the legs for another run.
set -euo pipefail
MIRRORFS=${MIRRORFS:?set MIRRORFS to the mirrorfs binary}
MB=${MB:-10240}
DIR=${DIR:-/var/tmp/mirrorfs-first-mount}
[ "$(id -u)" -eq 0 ] || { echo "first-mount.sh: must run as root (mount, drop_caches)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "first-mount.sh: needs python3" >&2; exit 1; }

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

mkdir -p "$DIR"
if [ ! -f "$DIR/leg0/.complete-$MB" ]; then
    rm -rf "$DIR/leg0" "$DIR/leg1"
    mkdir -p "$DIR/leg0"
    echo "writing a $MB MiB tree into $DIR/leg0 ..."
    python3 - "$DIR/leg0" "$MB" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
block = os.urandom(64 << 20)
for i in range(n):
    d = os.path.join(root, "d%03d" % (i // 256))
    os.makedirs(d, exist_ok=True)
    off = (i * 4099) % (len(block) - (1 << 20))
    with open(os.path.join(d, "f%04d" % i), "wb") as f:
        f.write(block[off:off + (1 << 20)])
PY
    echo "copying it to $DIR/leg1 (cp -a) ..."
    cp -a "$DIR/leg0" "$DIR/leg1"
    touch "$DIR/leg0/.complete-$MB"
    cp -a "$DIR/leg0/.complete-$MB" "$DIR/leg1/"
fi
rm -rf "$DIR/leg0/.mirrorfs" "$DIR/leg1/.mirrorfs"
mkdir -p "$DIR/mnt"
entries=$(find "$DIR/leg0" | wc -l)

drop
t0=$(now)
"$MIRRORFS" "$DIR/leg0:$DIR/leg1" "$DIR/mnt"
t1=$(now)
state=running
while [ "$state" = running ]; do
    sleep 1
    state=$(getfattr --absolute-names -n user.mirrorfs.stats --only-values "$DIR/mnt" |
        python3 -c 'import json,sys; s=json.load(sys.stdin)["scrub"]; print(s["state"] if s else "none")')
done
t2=$(now)
diffs=$(getfattr --absolute-names -n user.mirrorfs.stats --only-values "$DIR/mnt" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["scrub"]["differences"])')
pid=$(getfattr --absolute-names -n user.mirrorfs.pid --only-values "$DIR/mnt")
umount "$DIR/mnt"
while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done # it writes the superblocks on its way out
rm -rf "$DIR/leg0/.mirrorfs" "$DIR/leg1/.mirrorfs"

drop
t3=$(now)
diff -r "$DIR/leg0" "$DIR/leg1" >/dev/null
t4=$(now)

echo
echo "| tree | entries | first mount answers | contents compared (scrub) | diff -r, for reference |"
echo "|---|---:|---:|---:|---:|"
echo "| $MB MiB, 1 MiB files | $entries | $(secs "$t0" "$t1") s | $(secs "$t1" "$t2") s ($state, $diffs differences) | $(secs "$t3" "$t4") s |"
[ "${KEEP:-0}" = 1 ] || rm -rf "$DIR"
