#!/bin/bash
# bench/datapath.sh: the data path against the disk (issue 12, item 5). Metadata, small-file and
# fio workloads on an ext4 loop-device leg read directly, on mergerfs over one leg directory and
# on mirrorfs (1 leg, 2 legs, 2 legs with write_intent=off), row by row side by side in one run.
# Prints the raw figures, the same table as ratios to the leg, and each FUSE daemon's peak RSS.
# MANY=N adds a section that creates N empty files through a 2-leg mirror and walks them,
# printing the daemon's RSS after each step. Not a test: it prints tables.
#
# Usage (root): MIRRORFS=target/release/mirrorfs bench/datapath.sh
# Environment:
#   MB=1024          the fio file, MiB (the two sparse images: targets x (MB + 256) + 512 MiB each)
#   RUNTIME=10       each fio read job, in fio's units (10 = seconds, 500ms)
#   ROUNDS=1         how many times every row runs (each round: tar, the reads, rm, fio); the
#                    tables give each figure's median over the rounds, the raw table also its
#                    lowest and highest (one shot per row swings by up to 2 x on a shared VM);
#                    each round runs the targets in another order (rotated)
#   ENTRIES=all      how many entries of /usr/include the tree gets (parents first)
#   NFILES=3000      the small-file read: regular files under 64 KiB, in tree order
#   GIT_SRC=         the repository to clone (default: this one), copied bare once under DIR
#   MIRRORFS_OPTS=   extra -o options for every mirrorfs mount
#   SLOW_MBPS=100    the seqwrite_slow row: leg B's writes limited to this many MB/s by a cgroup-v1
#                    blkio rule (a slow disk), the leg and each two-leg mirror against it (0: no row)
#   MANY=0           N > 0: the memory section, N empty files through a 2-leg mirror
#   PASSTHROUGH_HP=  libfuse's example/passthrough_hp (bench/passthrough-hp.sh builds it): the
#                    one-copy reference columns pthp (/dev/fuse) and pthp-uring (io_uring)
#   MANY_OPTS=       its extra mirrorfs options (write_intent=off creates several times faster)
#   ONLY_MANY=1      only the MANY section (no inputs, no other targets, no tables)
#   MANY_TRIM=1      the MANY section also asks the daemon's malloc to give back its free memory
#                    (malloc_trim(0) through gdb) after the kernel forgot the inodes, to tell
#                    memory still in use from memory malloc keeps
#   DIR=/var/tmp/mirrorfs-datapath, removed at the end unless KEEP=1 (keeps images and inputs)
#   BENCH_SIZE=tiny or SMOKE=1: MB=16 RUNTIME=500ms ENTRIES=100 NFILES=100 MANY=0 and a 20-file
#                    repository to clone; every row, in about 40 s
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { echo "datapath: $*" >&2; }
die() { say "error: $*"; exit 1; }

MIRRORFS=${MIRRORFS:?set MIRRORFS to the mirrorfs binary}
MIRRORFS=$(readlink -f "$MIRRORFS")
[ -x "$MIRRORFS" ] || die "MIRRORFS=$MIRRORFS is not executable"
tiny=0
[ "${BENCH_SIZE:-}" = tiny ] || [ "${SMOKE:-0}" = 1 ] && tiny=1
if [ $tiny = 1 ]; then
    MB=${MB:-16} RUNTIME=${RUNTIME:-500ms} ENTRIES=${ENTRIES:-100} NFILES=${NFILES:-100} MANY=0
else
    MB=${MB:-1024} RUNTIME=${RUNTIME:-10} ENTRIES=${ENTRIES:-all} NFILES=${NFILES:-3000} MANY=${MANY:-0}
fi
ONLY_MANY=${ONLY_MANY:-0}
ROUNDS=${ROUNDS:-1}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS=$ROUNDS: a whole number of rounds, 1 or more"
MANY_TRIM=${MANY_TRIM:-0}
[ "$ONLY_MANY" = 0 ] || [ "$MANY" -gt 0 ] || die "ONLY_MANY=1 needs MANY=N"
DIR=${DIR:-/var/tmp/mirrorfs-datapath}
DIR=$(mkdir -p "$DIR" && cd "$DIR" && pwd)
GIT_SRC=${GIT_SRC:-$(git -C "$here" rev-parse --show-toplevel 2>/dev/null || true)}
MIRRORFS_OPTS=${MIRRORFS_OPTS:-}
MANY_OPTS=${MANY_OPTS:-}
SLOW_MBPS=${SLOW_MBPS:-100}
[[ $SLOW_MBPS =~ ^[0-9]+$ ]] || die "SLOW_MBPS=$SLOW_MBPS: a whole number of MB/s (0: no seqwrite_slow row)"
BLKIO=/sys/fs/cgroup/blkio
SLOW_CG=""  # the blkio cgroup whose rule makes leg B slow (set up with the legs)
[ "$(id -u)" -eq 0 ] || die "must run as root (loop devices, mounts, drop_caches)"
[ -c /dev/fuse ] || die "/dev/fuse is missing"
for t in fio jq mergerfs mkfs.ext4 losetup getfattr git tar; do
    command -v $t >/dev/null || die "needs $t (scripts/install-test-deps.sh)"
done
[ "$MANY_TRIM" = 0 ] || command -v gdb >/dev/null || die "MANY_TRIM=1 needs gdb"
[ -n "$GIT_SRC" ] || [ "$ONLY_MANY" = 1 ] || die "GIT_SRC: no git repository to clone (set GIT_SRC=/path/to/repo)"

drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# ------------------------------------------------------------------------------ teardown

LOOPS=()     # loop devices attached by this run
FUSE=()      # FUSE mount points mounted by this run
declare -A PID=()   # FUSE mount point -> daemon pid
fuse_down() { # MOUNTPOINT: unmount, and wait up to 10 s for its daemon (SIGTERM after)
    local m=$1 pid=${PID[$1]:-}
    mountpoint -q "$m" && { umount "$m" 2>/dev/null || umount -l "$m" || true; }
    [ -n "$pid" ] || return 0
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    say "warning: daemon $pid of $m still running 10 s after the unmount; SIGTERM"
    kill "$pid" 2>/dev/null || true
}
cleanup() {
    local m dev
    for m in "${FUSE[@]}"; do fuse_down "$m"; done
    slow_down
    for m in "$DIR/legA" "$DIR/legB"; do mountpoint -q "$m" && umount "$m"; done
    for dev in "${LOOPS[@]}"; do losetup -d "$dev" 2>/dev/null || say "warning: could not detach $dev"; done
    [ "${KEEP:-0}" = 1 ] && return
    rm -f "$DIR/a.img" "$DIR/b.img" "$DIR"/tree.{all,list,rel,tar} "$DIR/small.list" "$DIR/out"
    rm -rf "$DIR/src.git" "$DIR/tiny.git"
    # rmdir, not rm -rf: a mount point whose unmount failed keeps what it serves.
    rmdir "$DIR"/mnt/* "$DIR/mnt" "$DIR/legA" "$DIR/legB" "$DIR" 2>/dev/null || true
}
# The seqwrite_slow row's cgroup: a rule belongs to the device and outlives the loop device's
# detach (the number is reused), so it is set back to 0 before the cgroup goes.
slow_down() {
    [ -n "$SLOW_CG" ] && [ -d "$SLOW_CG" ] || return 0
    local p
    for p in $(cat "$SLOW_CG/cgroup.procs" 2>/dev/null); do echo "$p" >"$BLKIO/cgroup.procs" 2>/dev/null || true; done
    echo "$SLOW_DEV 0" >"$SLOW_CG/blkio.throttle.write_bps_device" 2>/dev/null || true
    rmdir "$SLOW_CG" 2>/dev/null || say "warning: could not remove the cgroup $SLOW_CG"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# What an earlier run killed outright left: mounts under DIR, loop devices on its images.
awk -v d="$DIR/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
    say "unmounting $m, left by an earlier run"; umount "$m" || umount -l "$m"
done
for img in "$DIR/a.img" "$DIR/b.img"; do
    [ -e "$img" ] || continue
    for dev in $(losetup -n -O NAME -j "$img"); do say "detaching $dev, left by an earlier run"; losetup -d "$dev"; done
done

# ------------------------------------------------------------------------------ inputs

if [ "$ONLY_MANY" = 0 ]; then
# The tree: /usr/include (or its first ENTRIES entries, parents first) as a tar file, and the
# small files to read (regular files under 64 KiB, the first NFILES in tree order).
find /usr/include | sort >"$DIR/tree.all"
if [ "$ENTRIES" = all ]; then cp "$DIR/tree.all" "$DIR/tree.list"; else head -n "$ENTRIES" "$DIR/tree.all" >"$DIR/tree.list"; fi
sed 's|^/||' "$DIR/tree.list" >"$DIR/tree.rel"
tar -C / --no-recursion -cf "$DIR/tree.tar" -T "$DIR/tree.rel"
NENT=$(wc -l <"$DIR/tree.rel")
(cd / && xargs -d '\n' stat -c '%s:%F:%n' <"$DIR/tree.rel") |
    awk -F: -v n="$NFILES" '$2 == "regular file" && $1 < 65536 && k < n { k++; print substr($0, length($1 $2) + 3) }' >"$DIR/small.list"
NSMALL=$(wc -l <"$DIR/small.list")
# A bare copy of a real repository, made once: every target clones it with --no-hardlinks. The
# tiny size clones a repository of 20 of the small files instead (a create costs a sync per leg
# with the intent log: the real checkout alone would take most of a minute).
rm -rf "$DIR/src.git" "$DIR/tiny.git"
if [ $tiny = 1 ]; then
    git init -q "$DIR/tiny.git"
    head -n 20 "$DIR/small.list" | (cd / && xargs -d '\n' cp --parents -t "$DIR/tiny.git")
    git -C "$DIR/tiny.git" add -A
    git -C "$DIR/tiny.git" -c user.name=bench -c user.email=bench@localhost commit -q -m "20 headers"
    GIT_SRC=$DIR/tiny.git
fi
git clone -q --bare "$GIT_SRC" "$DIR/src.git"
rm -rf "$DIR/tiny.git"
NGIT=$(git -C "$DIR/src.git" ls-tree -r HEAD | wc -l)

TARGETS=(leg mergerfs mirrorfs-1 mirrorfs-2 mirrorfs-2-nointent)
# Every mirrorfs column over /dev/fuse, and mirrorfs-2-uring beside mirrorfs-2 over io_uring when
# the kernel's switch is on (make bench-datapath runs under scripts/with-uring.sh Y).
declare -A OPTS=([mirrorfs-1]="transport=devfuse" [mirrorfs-2]="transport=devfuse" [mirrorfs-2-nointent]="write_intent=off,transport=devfuse")
if [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ]; then
    TARGETS+=(mirrorfs-2-uring)
    OPTS[mirrorfs-2-uring]="transport=uring"
    URING_NOTE=""
else
    URING_NOTE="no mirrorfs-2-uring column: the kernel's enable_uring switch is off (run under scripts/with-uring.sh Y)"
fi

# passthrough=ro (item 4) is a column once the binary accepts it (with checksum=off, which it needs). Options are parsed before the
# mount point is checked: a refused option names itself, an accepted one fails on the missing
# mount point only.
mkdir -p "$DIR/probe0" "$DIR/probe1"
probe=$("$MIRRORFS" "$DIR/probe0:$DIR/probe1" "$DIR/probe-no-such-mountpoint" -o passthrough=ro,checksum=off 2>&1 || true)
if grep -q passthrough <<<"$probe"; then
    PT_NOTE="no mirrorfs passthrough=ro column: the binary does not accept the option ($(head -n 1 <<<"$probe"))"
else
    TARGETS+=(mirrorfs-2-ptro)
    OPTS[mirrorfs-2-ptro]="passthrough=ro,checksum=off,transport=devfuse"
    PT_NOTE=""
fi
rmdir "$DIR/probe0" "$DIR/probe1"
# libfuse's own example server as the one-copy reference (PASSTHROUGH_HP: a passthrough_hp
# binary, bench/passthrough-hp.sh builds one from a libfuse source tree): one leg,
# --nopassthrough, over /dev/fuse and, when the switch is on, over io_uring.
PTHP_NOTE=""
if [ -n "${PASSTHROUGH_HP:-}" ]; then
    [ -x "$PASSTHROUGH_HP" ] || die "PASSTHROUGH_HP=$PASSTHROUGH_HP is not executable"
    TARGETS+=(pthp)
    if [ -z "$URING_NOTE" ]; then TARGETS+=(pthp-uring); fi
else
    PTHP_NOTE="no passthrough_hp columns: set PASSTHROUGH_HP to libfuse's example/passthrough_hp (bench/passthrough-hp.sh LIBFUSE_SRC builds it; CI cannot fetch libfuse)"
fi
else
    TARGETS=() PT_NOTE="" URING_NOTE="" PTHP_NOTE="" NENT=0 NSMALL=0 NGIT=0
fi

# ------------------------------------------------------------------------------ legs

# Two ext4 filesystems on loop devices with direct I/O (reads bypass the guest's cache of the
# image files, so a cold pass reaches the disk), fresh for this run. Every target gets its own
# directory on them: leg A holds the leg target, mergerfs's branch and every mirrorfs's first
# leg; leg B the second legs.
IMG_MB=$((${#TARGETS[@]} * (MB + 256) + MB + 512)) # + MB: the seqwrite2 file on each leg
inodes=$((IMG_MB * 64 + MANY + MANY / 500 + 10000)) # ext4's default (one per 16 KiB) plus MANY
if [ "$MANY" -gt 0 ]; then IMG_MB=$((IMG_MB + MANY / 1000 + 256)); fi
for x in a b; do
    rm -f "$DIR/$x.img"
    truncate -s ${IMG_MB}M "$DIR/$x.img"
    dev=$(losetup --direct-io=on -f --show "$DIR/$x.img")
    LOOPS+=("$dev")
    # A loop device's writeback limits outlive its detach: undo any a test left on this one.
    bdi=/sys/class/bdi/$(basename "$(readlink "/sys/block/${dev#/dev/}/bdi")")
    if [ "$(cat "$bdi/strict_limit")" != 0 ] || [ "$(cat "$bdi/max_ratio")" != 100 ]; then
        say "$dev had writeback limits (strict_limit $(cat "$bdi/strict_limit"), max_bytes $(cat "$bdi/max_bytes")): set back to the defaults"
        echo 0 >"$bdi/strict_limit"; echo 100 >"$bdi/max_ratio"
    fi
    mkfs.ext4 -q -F -N "$inodes" -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$dev"
done
mkdir -p "$DIR/legA" "$DIR/legB" "$DIR/mnt"
mount -o noatime "${LOOPS[0]}" "$DIR/legA"
mount -o noatime "${LOOPS[1]}" "$DIR/legB"
SLOW_NOTE=""
if [ "$SLOW_MBPS" = 0 ]; then
    SLOW_NOTE="no seqwrite_slow row: SLOW_MBPS=0"
elif [ ! -w "$BLKIO/blkio.throttle.write_bps_device" ]; then
    SLOW_NOTE="no seqwrite_slow row: no cgroup-v1 blkio throttling at $BLKIO"
else
    SLOW_DEV=$(lsblk -dno MAJ:MIN "${LOOPS[1]}" | tr -d ' ')
    SLOW_CG=$BLKIO/mirrorfs-datapath.$$
    mkdir "$SLOW_CG"
    echo "$SLOW_DEV $((SLOW_MBPS * 1000000))" >"$SLOW_CG/blkio.throttle.write_bps_device"
fi

# ------------------------------------------------------------------------------ targets

declare -A PATH_OF=()  # target -> the directory the workloads run in
mf_opts() { # extra options -> the -o argument of a mirrorfs mount
    local o="minfreespace=0"
    [ -n "$1" ] && o="$o,$1"
    [ -n "$MIRRORFS_OPTS" ] && o="$o,$MIRRORFS_OPTS"
    echo "$o"
}
daemon_pid() { # MOUNTPOINT EXE-NAME: the FUSE daemon serving it
    local m=$1 exe=$2 p a
    if [ "$exe" = mirrorfs ] && p=$(getfattr --absolute-names --only-values -n user.mirrorfs.pid "$m" 2>/dev/null); then
        echo "$p"; return
    fi
    for p in /proc/[0-9]*; do
        [[ $(readlink "$p/exe" 2>/dev/null) == *"$exe"* ]] || continue
        while IFS= read -r -d '' a; do
            [ "$a" = "$m" ] && { echo "${p#/proc/}"; return; }
        done <"$p/cmdline"
    done
}


for t in "${TARGETS[@]}"; do
    case $t in
        leg)
            mkdir -p "$DIR/legA/leg"; PATH_OF[$t]=$DIR/legA/leg ;;
        mergerfs)
            mkdir -p "$DIR/legA/mergerfs" "$DIR/mnt/$t"
            mergerfs -o cache.files=partial,minfreespace=0 "$DIR/legA/mergerfs" "$DIR/mnt/$t"
            FUSE+=("$DIR/mnt/$t"); PID[$DIR/mnt/$t]=$(daemon_pid "$DIR/mnt/$t" mergerfs)
            PATH_OF[$t]=$DIR/mnt/$t ;;
        pthp|pthp-uring)
            mkdir -p "$DIR/legA/$t" "$DIR/mnt/$t"
            extra=()
            [ "$t" = pthp-uring ] && extra=(-o io_uring -o io_uring_q_depth=16)
            "$PASSTHROUGH_HP" --nopassthrough "${extra[@]}" "$DIR/legA/$t" "$DIR/mnt/$t"
            FUSE+=("$DIR/mnt/$t"); PID[$DIR/mnt/$t]=$(daemon_pid "$DIR/mnt/$t" passthrough_hp)
            PATH_OF[$t]=$DIR/mnt/$t ;;
        mirrorfs-1)
            mkdir -p "$DIR/legA/$t" "$DIR/mnt/$t"
            "$MIRRORFS" "$DIR/legA/$t" "$DIR/mnt/$t" -o "$(mf_opts "${OPTS[$t]}")"
            FUSE+=("$DIR/mnt/$t"); PID[$DIR/mnt/$t]=$(daemon_pid "$DIR/mnt/$t" mirrorfs)
            PATH_OF[$t]=$DIR/mnt/$t ;;
        *)
            mkdir -p "$DIR/legA/$t" "$DIR/legB/$t" "$DIR/mnt/$t"
            "$MIRRORFS" "$DIR/legA/$t:$DIR/legB/$t" "$DIR/mnt/$t" -o "$(mf_opts "${OPTS[$t]}")"
            FUSE+=("$DIR/mnt/$t"); PID[$DIR/mnt/$t]=$(daemon_pid "$DIR/mnt/$t" mirrorfs)
            PATH_OF[$t]=$DIR/mnt/$t ;;
    esac
done
for m in "${FUSE[@]}"; do [ -n "${PID[$m]}" ] || die "no daemon pid found for $m"; done

# ------------------------------------------------------------------------------ measuring

declare -A VAL=()  # row,target -> figure ("fail" when the workload failed)
FAILS=()
ROWS=()
declare -A LABEL=() UNIT=()
row() { ROWS+=("$1"); LABEL[$1]=$2; UNIT[$1]=$3; }
row tar        "tar extract of /usr/include ($NENT entries)" "entries/s"
row find_cold  "find -printf, cold"                          "entries/s"
row find_warm  "find -printf, warm"                          "entries/s"
row find_again "find -printf, warm again"                    "entries/s"
row ls_cold    "ls -lR, cold"                                "entries/s"
row ls_warm    "ls -lR x3, warm"                             "entries/s"
row read_cold  "read $NSMALL small files, cold"              "files/s"
row read_warm  "read $NSMALL small files, warm"              "files/s"
row read_again "read $NSMALL small files, warm again"        "files/s"
row clone      "git clone --no-hardlinks ($NGIT files)"      "s"
row gst_cold   "git status, cold"                            "s"
row gst_warm   "git status, warm"                            "s"
row rm         "rm -rf of the tree"                          "entries/s"
row seqwrite   "seq 1 MiB write ${MB} MiB + fsync"           "MB/s"
row seqwrite2  "the same on both legs at once, slower copy"  "MB/s"
[ -n "$SLOW_NOTE" ] || row seqwrite_slow "the same, leg B's writes at $SLOW_MBPS MB/s (leg: B)" "MB/s"
row seqread    "seq 1 MiB read, O_DIRECT, iodepth 4"         "MB/s"
row randread   "rand 4 KiB read, O_DIRECT, iodepth 16"       "IOPS"

ELAPSED=0
timed() { # CMD...: runs it, ELAPSED = its wall time in seconds; returns its status
    local s=$EPOCHREALTIME rc=0
    "$@" >/dev/null 2>"$DIR/out" || rc=$?
    ELAPSED=$(awk -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
    return $rc
}
fail() { # ROW TARGET
    VAL[$1,$2]=fail
    FAILS+=("$1 on $2: $(head -c 300 "$DIR/out" | tr '\n' ' ')")
    say "FAILED: ${FAILS[-1]}"
}
rate() { # ROW TARGET COUNT: VAL = COUNT / ELAPSED
    VAL[$1,$2]=$(awk -v n="$3" -v t="$ELAPSED" 'BEGIN { printf "%.0f", n / t }')
}
secs() { VAL[$1,$2]=$(awk -v t="$ELAPSED" 'BEGIN { printf "%.3f", t }'); }
lsx3() { ls -lR "$1" >/dev/null && ls -lR "$1" >/dev/null && ls -lR "$1" >/dev/null; }
readall() { (cd "$1" && xargs -d '\n' cat <"$DIR/small.list" >/dev/null); }
gitst() { git -C "$1" status >/dev/null; }
fio_job() { # ROW TARGET FIO-ARGS...: VAL = MB/s (10^6 B/s) or IOPS
    local r=$1 t=$2 out; shift 2
    if out=$(cd "$DIR" && fio --name="$r" --directory="${PATH_OF[$t]}" --output-format=json "$@" 2>"$DIR/out"); then
        case $r in
            randread) VAL[$r,$t]=$(jq -r '[.jobs[].read.iops] | add | floor' <<<"$out") ;;
            *) VAL[$r,$t]=$(jq -r '[.jobs[] | .read.bw_bytes + .write.bw_bytes] | add / 1e5 | floor / 10' <<<"$out") ;;
        esac
    else
        echo "$out" >>"$DIR/out"; fail "$r" "$t"
    fi
}
# Each row runs on every target before the next row starts: the machine's load moves in
# minutes, so the targets of one row see the same load. And each round starts the row at
# another target (ORDER, set per round), so that no target is always the one that runs after
# the others' writes: in one run in a fixed order, the sequential write's last two targets
# got 0.42-0.51 x the leg in every round whatever their transport (mirrorfs over io_uring,
# and over /dev/fuse with passthrough), while the two transports side by side alone wrote
# 485-560 (io_uring) and 408-467 MB/s (/dev/fuse).
ORDER=("${TARGETS[@]}")
order_for_round() { # ROUND: ORDER is TARGETS rotated, by as far apart as ROUNDS allow
    local n=${#TARGETS[@]} k
    k=$(( (($1 - 1) * n / ROUNDS) % n ))
    ORDER=("${TARGETS[@]:k}" "${TARGETS[@]:0:k}")
}
# The daemon's CPU time per request answered, for the mirrorfs targets (their statistics count
# the requests, transport.requests): CPU[STEP,TARGET] in microseconds.
declare -A CPU=()
CLK_TCK=$(getconf CLK_TCK)
daemon_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
daemon_requests() {
    getfattr --absolute-names --only-values -n user.mirrorfs.stats "$1" 2>/dev/null | jq -r '.transport.requests // 0' 2>/dev/null || echo 0
}
each_counted() { # STEP: each "do_STEP", with each mirrorfs daemon's CPU per request meanwhile
    local step=$1 t p c0 r0 c1 r1
    for t in "${ORDER[@]}"; do
        p=${PATH_OF[$t]}
        if [[ $t == mirrorfs* ]]; then
            c0=$(daemon_ticks "${PID[$p]}"); r0=$(daemon_requests "$p")
        fi
        "do_$step" "$t" "$p"
        if [[ $t == mirrorfs* ]] && [ -n "${LABEL[$step]+x}" ] && [ -z "${VAL[$step,$t]+x}" ]; then
            :  # a row this target does not run (seqwrite_slow on one leg): no figure
        elif [[ $t == mirrorfs* ]]; then
            c1=$(daemon_ticks "${PID[$p]}"); r1=$(daemon_requests "$p")
            CPU[$step,$t]=$(awk -v c=$((c1 - c0)) -v r=$((r1 - r0)) -v hz="$CLK_TCK" \
                'BEGIN { if (r > 0) printf "%.1f", c * 1e6 / hz / r; else print "-" }')
        fi
    done
}
do_tar() { cat "$DIR/tree.tar" >/dev/null; if timed tar -C "$2" -xf "$DIR/tree.tar"; then rate tar "$1" "$NENT"; else fail tar "$1"; fi; sync; }
do_find() {
    drop
    if timed find "$2/usr/include" -printf '%p %s %m %T@\n'; then rate find_cold "$1" "$NENT"; else fail find_cold "$1"; fi
    if timed find "$2/usr/include" -printf '%p %s %m %T@\n'; then rate find_warm "$1" "$NENT"; else fail find_warm "$1"; fi
    if timed find "$2/usr/include" -printf '%p %s %m %T@\n'; then rate find_again "$1" "$NENT"; else fail find_again "$1"; fi
}
do_ls() {
    drop
    if timed ls -lR "$2/usr/include"; then rate ls_cold "$1" "$NENT"; else fail ls_cold "$1"; fi
    if timed lsx3 "$2/usr/include"; then rate ls_warm "$1" $((3 * NENT)); else fail ls_warm "$1"; fi
}
do_read() {
    drop
    if timed readall "$2"; then rate read_cold "$1" "$NSMALL"; else fail read_cold "$1"; fi
    if timed readall "$2"; then rate read_warm "$1" "$NSMALL"; else fail read_warm "$1"; fi
    if timed readall "$2"; then rate read_again "$1" "$NSMALL"; else fail read_again "$1"; fi
}
do_git() {
    find "$DIR/src.git" -type f -exec cat {} + >/dev/null # the source warm, for every target
    if timed git clone -q --no-hardlinks "$DIR/src.git" "$2/repo"; then secs clone "$1"; else fail clone "$1"; fi
    sync; drop
    if timed gitst "$2/repo"; then secs gst_cold "$1"; else fail gst_cold "$1"; fi
    if timed gitst "$2/repo"; then secs gst_warm "$1"; else fail gst_warm "$1"; fi
}
do_rm() { if timed rm -rf "$2/usr"; then rate rm "$1" "$NENT"; else fail rm "$1"; fi; rm -rf "$2/repo"; sync; }
SEQWRITE=(--rw=write --bs=1M --size="${MB}m" --ioengine=psync --end_fsync=1 --filename=bench.dat)
# The write is timed as it always was, without a drop_caches before it (with one, the leg's own
# figure fell from 636-1,574 to 440-518 MB/s in one run, while mirrorfs's did not: this rig's
# buffered writes measure the guest's page cache as much as the disk). The both-legs reference
# runs after a drop_caches: without one, its two jobs grew the cache by 1 GiB and took 217-230.
do_seqwrite() {
    rm -f "$2/bench.dat"; fio_job seqwrite "$1" "${SEQWRITE[@]}"
    [ "$1" = leg ] || return 0
    # What the two legs take when both are written at once, as a mirror must write them: two fio
    # jobs, one a leg, side by side; the figure is the slower job's. Legs that share a disk (the
    # loop images here) or the CPUs share them here too.
    local out
    mkdir -p "$DIR/legA/both" "$DIR/legB/both"; drop
    if out=$(cd "$DIR" && fio --output-format=json --name=a --directory="$DIR/legA/both" "${SEQWRITE[@]}" \
        --name=b --directory="$DIR/legB/both" "${SEQWRITE[@]}" 2>"$DIR/out"); then
        VAL[seqwrite2,leg]=$(jq -r '[.jobs[].write.bw_bytes] | min / 1e5 | floor / 10' <<<"$out")
    else
        echo "$out" >>"$DIR/out"; fail seqwrite2 leg
    fi
    rm -rf "$DIR/legA/both" "$DIR/legB/both"
}
# The write bound by a slow disk: leg B's writes limited by the cgroup's rule. The leg target is
# fio on leg B itself, in the cgroup; a two-leg mirror's daemon joins the cgroup for the job (the
# rule binds whoever submits the write to leg B: the fsync's write-back runs in the daemon's
# threads), so the row reads "x the slowest leg". Other targets have no leg B.
do_seqwrite_slow() {
    [ -z "$SLOW_NOTE" ] || return 0
    local t=$1 dir out rc=0 p
    case $t in
        leg) dir=$DIR/legB/slow; mkdir -p "$dir" ;;
        mirrorfs-2*) dir=$2 ;;
        *) return 0 ;;
    esac
    rm -f "$dir/slow.dat"; drop
    # Every FUSE daemon joins the cgroup for the job, not only the one measured: the targets
    # share leg B's filesystem, and a syncfs there from outside the cgroup (a mirrorfs daemon
    # calls syncfs on its legs; which call did it here was not traced) writes back every dirty
    # page there, the job's too, outside the limit. With only the measured daemon in it, the
    # leg's job got 98, 169 and 841 MB/s in the three rounds of one run (the rounds where it
    # ran after the mirrors); alone, with a `sync -f` of leg B twice a second from outside the
    # cgroup, 878 and 96 MB/s in two tries (97-98 without).
    for p in "${PID[@]}"; do echo "$p" >"$SLOW_CG/cgroup.procs"; done
    out=$(cd "$DIR" && echo "$BASHPID" >"$SLOW_CG/cgroup.procs" &&
        exec fio --output-format=json --name=seqwrite_slow --directory="$dir" "${SEQWRITE[@]/%bench.dat/slow.dat}" 2>"$DIR/out") || rc=$?
    for p in "${PID[@]}"; do echo "$p" >"$BLKIO/cgroup.procs"; done
    if [ $rc = 0 ]; then
        VAL[seqwrite_slow,$t]=$(jq -r '[.jobs[].write.bw_bytes] | add / 1e5 | floor / 10' <<<"$out")
    else
        echo "$out" >>"$DIR/out"; fail seqwrite_slow "$t"
    fi
    rm -f "$dir/slow.dat"
    [ "$t" != leg ] || rmdir "$dir"
}
do_seqread() {
    drop
    fio_job seqread "$1" --rw=read --bs=1M --size="${MB}m" --ioengine=libaio --iodepth=4 --direct=1 \
        --time_based --runtime="$RUNTIME" --readonly --filename=bench.dat
}
do_randread() {
    drop
    fio_job randread "$1" --rw=randread --bs=4k --size="${MB}m" --ioengine=libaio --iodepth=16 --direct=1 \
        --norandommap --time_based --runtime="$RUNTIME" --readonly --filename=bench.dat
}

START=$EPOCHSECONDS
if [ "$ONLY_MANY" = 0 ]; then
say "targets: ${TARGETS[*]}; tree $NENT entries, $NSMALL small files, git $NGIT files, fio $MB MiB, fio reads $RUNTIME"
[ -z "$PT_NOTE" ] || say "$PT_NOTE"
[ -z "$PTHP_NOTE" ] || say "$PTHP_NOTE"
# Each round's figures are kept (ALL, CPUS: space-separated, one per round) and the tables
# show their medians.
declare -A ALL=() CPUS=()
for round in $(seq "$ROUNDS"); do
    order_for_round "$round"
    say "round $round/$ROUNDS: ${ORDER[*]}"
    for step in tar find ls read git rm seqwrite seqwrite_slow seqread randread; do
        s=$EPOCHSECONDS
        each_counted "$step"
        say "round $round/$ROUNDS, $step: $((EPOCHSECONDS - s)) s"
    done
    for k in "${!VAL[@]}"; do ALL[$k]+="${VAL[$k]} "; done
    for k in "${!CPU[@]}"; do CPUS[$k]+="${CPU[$k]} "; done
    VAL=() CPU=()
done
median() { # FIGURES...: the median of the numeric ones ("fail" when none is), and "LOW-HIGH"
    tr ' ' '\n' <<<"$*" | awk '/^[0-9.]+$/ { v[n++] = $1 } END {
        if (n == 0) { print "fail -"; exit }
        for (i = 1; i < n; i++) for (j = i; j > 0 && v[j-1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
        m = (n % 2) ? v[(n-1)/2] : (v[n/2-1] + v[n/2]) / 2
        print m, v[0] "-" v[n-1] }'
}
declare -A SPREAD=()
for k in "${!ALL[@]}"; do read -r VAL[$k] SPREAD[$k] < <(median ${ALL[$k]}); done
for k in "${!CPUS[@]}"; do read -r CPU[$k] _ < <(median ${CPUS[$k]}); done

# Peak RSS of every FUSE daemon over the whole run, before it is unmounted.
declare -A HWM=()
for t in "${TARGETS[@]}"; do
    [ "$t" = leg ] && continue
    HWM[$t]=$(awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/${PID[${PATH_OF[$t]}]}/status" 2>/dev/null || echo "?")
done
for m in "${FUSE[@]}"; do fuse_down "$m"; done

# ------------------------------------------------------------------------------ tables

header() {
    printf "| %-46s | %-9s |" workload unit
    for t in "${TARGETS[@]}"; do printf " %19s |" "$t"; done
    printf "\n|%s|%s|" "$(printf -- '-%.0s' $(seq 48))" "$(printf -- '-%.0s' $(seq 11))"
    for _ in "${TARGETS[@]}"; do printf "%s:|" "$(printf -- '-%.0s' $(seq 20))"; done
    echo
}
fmt() { # a figure: thousands separated when it is a whole number
    case $1 in
        fail|n/a|"") echo "${1:-n/a}" ;;
        *.*) echo "$1" ;;
        *) sed ':a;s/\B[0-9]\{3\}\>/,&/;ta' <<<"$1" ;;
    esac
}
echo
echo "## Raw figures ($(date '+%F %T'), $(uname -r), $(nproc) cores; tree $NENT entries, fio file $MB MiB, fio reads ${RUNTIME}$([[ $RUNTIME == *[0-9] ]] && echo " s")$([ "$ROUNDS" -gt 1 ] && echo "; the median of $ROUNDS rounds"))"
echo
header
for r in "${ROWS[@]}"; do
    printf "| %-46s | %-9s |" "${LABEL[$r]}" "${UNIT[$r]}"
    for t in "${TARGETS[@]}"; do printf " %19s |" "$(fmt "${VAL[$r,$t]:-}")"; done
    echo
done
printf "| %-46s | %-9s |" "daemon peak RSS (VmHWM, whole run)" "MiB"
for t in "${TARGETS[@]}"; do printf " %19s |" "${HWM[$t]:--}"; done
echo
if [ "$ROUNDS" -gt 1 ]; then
    echo
    echo "## Lowest and highest of the $ROUNDS rounds"
    echo
    header
    for r in "${ROWS[@]}"; do
        printf "| %-46s | %-9s |" "${LABEL[$r]}" "${UNIT[$r]}"
        for t in "${TARGETS[@]}"; do printf " %19s |" "${SPREAD[$r,$t]:--}"; done
        echo
    done
fi
echo
echo "## Ratio to the leg read directly (higher is faster; for the seconds rows: leg time / target time)"
echo
header
for r in "${ROWS[@]}"; do
    printf "| %-46s | %-9s |" "${LABEL[$r]}" "x leg"
    for t in "${TARGETS[@]}"; do
        printf " %19s |" "$(awk -v v="${VAL[$r,$t]:-}" -v l="${VAL[$r,leg]:-}" -v s="${UNIT[$r]}" 'BEGIN {
            if (v !~ /^[0-9.]+$/ || l !~ /^[0-9.]+$/ || v == 0 || l == 0) { print "-"; exit }
            printf "%.2f", (s == "s" ? l / v : v / l) }')"
    done
    echo
done
echo
echo "## The two-leg mirrors' sequential write against both legs written at once (seqwrite / the leg's seqwrite2)"
echo
echo "| target | x both legs at once |"
echo "|---|---:|"
for t in "${TARGETS[@]}"; do
    [[ $t == mirrorfs-2* ]] || continue
    echo "| $t | $(awk -v v="${VAL[seqwrite,$t]:-}" -v l="${VAL[seqwrite2,leg]:-}" 'BEGIN {
        if (v !~ /^[0-9.]+$/ || l !~ /^[0-9.]+$/ || v == 0 || l == 0) { print "-"; exit }
        printf "%.2f", v / l }') |"
done
echo
echo "## Each mirrorfs daemon's CPU time per request it answered (microseconds; user + system, all its threads)"
echo
printf "| %-10s |" step
for t in "${TARGETS[@]}"; do [[ $t == mirrorfs* ]] && printf " %19s |" "$t"; done
printf "\n|%s|" "$(printf -- '-%.0s' $(seq 12))"
for t in "${TARGETS[@]}"; do [[ $t == mirrorfs* ]] && printf "%s:|" "$(printf -- '-%.0s' $(seq 20))"; done
echo
for step in tar find ls read git rm seqwrite seqwrite_slow seqread randread; do
    printf "| %-10s |" "$step"
    for t in "${TARGETS[@]}"; do [[ $t == mirrorfs* ]] && printf " %19s |" "${CPU[$step,$t]:--}"; done
    echo
done
echo
echo "leg: ext4 on a loop device (direct I/O) used directly; mergerfs $(mergerfs --version 2>/dev/null | sed -n 's/.*version: //p;q')" \
    "over one leg directory, -o cache.files=partial; mirrorfs-1: one leg; mirrorfs-2: two legs, defaults;" \
    "mirrorfs-2-nointent: write_intent=off (checksum=off follows). Every mirrorfs: -o $(mf_opts "")."
if [ -z "$PT_NOTE" ]; then
    echo "mirrorfs-2-ptro: two legs, passthrough=ro,checksum=off (read-only opens read by the kernel from one leg)."
else
    echo "$PT_NOTE"
fi
if [ -z "$PTHP_NOTE" ]; then
    echo "pthp: libfuse's example/passthrough_hp ($PASSTHROUGH_HP) over one leg directory, --nopassthrough (every read and write through the daemon), over /dev/fuse; pthp-uring: the same with -o io_uring -o io_uring_q_depth=16."
else
    echo "$PTHP_NOTE"
fi
if [ -z "$URING_NOTE" ]; then
    echo "mirrorfs-2-uring: two legs, defaults, over FUSE over io_uring (transport=uring); the other mirrorfs columns are over /dev/fuse (transport=devfuse)."
else
    echo "$URING_NOTE"
fi
echo "cold: after sync and drop_caches; warm: right after the cold pass; warm again: the pass after that. A FUSE" \
    "file system's first pass after a cold one asks the daemon for each directory's or file's attributes once more:" \
    "the kernel marks the atime stale after every read it sent on (fuse_invalidate_atime). tar and git clone are timed without a final sync." \
    "rm -rf runs on a cold tree: the git step before it ends with a drop_caches, so every entry is looked up anew," \
    "on each leg of a mirror."
echo "seqwrite2 (leg only): the same write to a directory on each leg at once, two fio jobs side by side; the slower" \
    "job's figure. It is what a two-leg mirror must do; the two loop images here share one disk and the machine's CPUs." \
    "seqwrite2 runs after a drop_caches, seqwrite (as in every earlier run) without one."
if [ -z "$SLOW_NOTE" ]; then
    echo "seqwrite_slow: the seqwrite job after a drop_caches, with leg B's writes limited to $SLOW_MBPS MB/s by a cgroup-v1" \
        "blkio rule: the leg column is fio on leg B in that cgroup, each two-leg mirror's column fio through it; every FUSE" \
        "daemon is in the cgroup during each job (they share leg B's filesystem); its x-leg ratio is the mirror against its slowest leg. Buffered writes reach the disk in the" \
        "final fsync's write-back, which runs in the caller's cgroup (the flusher threads are not limited)."
else
    echo "$SLOW_NOTE"
fi
fi # ONLY_MANY

# ------------------------------------------------------------------------------ MANY

# MANY=N: N empty files (N/1000 directories, at most 1000) created through a fresh 2-leg mirror
# (MANY_OPTS: its extra options, e.g. write_intent=off, which creates several times faster), then
# walked; the daemon's RSS after each step. A daemon whose memory follows the number of
# entries it has seen, and not what the kernel still holds, grows without bound.
if [ "$MANY" -gt 0 ]; then
    m=$DIR/mnt/many
    mkdir -p "$DIR/legA/many" "$DIR/legB/many" "$m"
    "$MIRRORFS" "$DIR/legA/many:$DIR/legB/many" "$m" -o "$(mf_opts "$MANY_OPTS")"
    FUSE+=("$m"); PID[$m]=$(daemon_pid "$m" mirrorfs)
    pid=${PID[$m]}
    rss() { awk '/^VmRSS:/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status"; }
    hwm() { awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status"; }
    # The daemon's own count of the inodes the kernel holds and of the identities it remembers
    # ("-" from a daemon whose statistics do not have them).
    counts() {
        getfattr --absolute-names --only-values -n user.mirrorfs.stats "$m" 2>/dev/null |
            jq -r '"\(.daemon.live_inodes // "-") | \(.daemon.known_identities // "-")"' 2>/dev/null || echo "- | -"
    }
    line() { echo "| $1 | $2 | $(rss) | $(hwm) | $(counts) |"; }
    ndirs=$((MANY / 1000)); [ $ndirs -ge 1 ] || ndirs=1; [ $ndirs -le 1000 ] || ndirs=1000
    per=$(((MANY + ndirs - 1) / ndirs))
    echo
    echo "## Daemon memory over $((ndirs * per)) empty files ($ndirs directories of $per), mirrorfs-2, -o $(mf_opts "$MANY_OPTS")"
    echo
    echo "| step | entries/s | VmRSS MiB | VmHWM MiB | live inodes | known identities |"
    echo "|---|---:|---:|---:|---:|---:|"
    line mounted ""
    made=0; chunk=$(((ndirs + 9) / 10)); s=$EPOCHREALTIME
    for ((d = 0; d < ndirs; d++)); do
        mkdir "$m/d$d"
        (cd "$m/d$d" && seq -f 'f%.0f' 1 "$per" | xargs touch)
        made=$((made + per + 1))
        if [ $(((d + 1) % chunk)) -eq 0 ] || [ $((d + 1)) -eq $ndirs ]; then
            r=$(awk -v n=$made -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.0f", n / (b - a) }')
            line "created $made" "$r"
        fi
    done
    sync
    for pass in 1 2; do
        timed find "$m" -printf '%p %s\n' || die "find over the MANY tree failed"
        line "find #$pass (warm)" "$(awk -v n=$made -v t="$ELAPSED" 'BEGIN { printf "%.0f", n / t }')"
    done
    drop; sleep 2
    line "drop_caches (kernel forgets the inodes)" ""
    timed find "$m" -printf '%p %s\n' || die "find over the MANY tree failed"
    line "find #3 (cold)" "$(awk -v n=$made -v t="$ELAPSED" 'BEGIN { printf "%.0f", n / t }')"
    drop; sleep 2
    line "drop_caches again" ""
    if [ "$MANY_TRIM" = 1 ]; then
        gdb -q -batch -p "$pid" -ex 'call (int) malloc_trim(0)' >/dev/null 2>&1 || say "warning: malloc_trim through gdb failed"
        line "malloc_trim(0) through gdb" ""
    fi
    fuse_down "$m"
fi

echo
echo "elapsed: $((EPOCHSECONDS - START)) s"
if [ ${#FAILS[@]} -gt 0 ]; then
    echo "failed measurements:"; printf '  %s\n' "${FAILS[@]}"
    exit 1
fi
