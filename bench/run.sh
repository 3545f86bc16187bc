#!/usr/bin/env bash
# The real benchmark rig (issue 4, item 6): two throttled loop devices, read directly, through
# btrfs raid1 (the kernel anchor) and through mirrorfs with every read policy the binary
# accepts, side by side in one run. Root only. See bench/README.md for the knobs and the traps.
#
#   MIRRORFS=/path/to/mirrorfs [BENCH_SIZE=tiny] bench/run.sh
#
# Everything it creates (image files, loop devices, mounts, one blkio cgroup) is torn down on
# exit, on failure and on Ctrl-C. Results: bench/results/<timestamp>/.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "bench: error: $*" >&2; exit 1; }
say() { echo "bench: $*" >&2; }
START_TS=$(date +%s)

# ---------------------------------------------------------------------------------- checks

[ "$(id -u)" -eq 0 ] || die "must run as root (loop devices, mounts, blkio cgroups)"
[ -n "${MIRRORFS:-}" ] || die "set MIRRORFS to the mirrorfs binary (or use make bench / make bench-smoke)"
[ -f "$MIRRORFS" ] && [ -x "$MIRRORFS" ] || die "MIRRORFS=$MIRRORFS is not an executable file"
MIRRORFS=$(readlink -f "$MIRRORFS")

# tool -> Debian package. fio, jq, attr and btrfs-progs are installed with apt-get when missing
# (BENCH_NO_APT=1 to forbid that); anything still missing ends the run with one line.
# getfattr/setfattr (attr) read and reset the mirrorfs statistics around each mirrorfs job.
declare -A PKG=([fio]=fio [jq]=jq [getfattr]=attr [setfattr]=attr [mkfs.btrfs]=btrfs-progs [mkfs.ext4]=e2fsprogs
    [losetup]=mount [mount]=mount [umount]=mount [mountpoint]=util-linux [findmnt]=util-linux
    [pgrep]=procps [cmp]=diffutils [truncate]=coreutils [awk]=gawk)
missing_tools() { local t; for t in "${!PKG[@]}"; do command -v "$t" >/dev/null || echo "$t"; done; }
miss=$(missing_tools | sort | tr '\n' ' ')
if [ -n "$miss" ] && [ -z "${BENCH_NO_APT:-}" ] && command -v apt-get >/dev/null; then
    pkgs=$(for t in $miss; do echo "${PKG[$t]}"; done | sort -u | tr '\n' ' ')
    say "installing $pkgs(missing: $miss)"
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $pkgs >/dev/null 2>&1 ||
        { apt-get update -q >/dev/null 2>&1 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q $pkgs >/dev/null 2>&1; } || true
    miss=$(missing_tools | sort | tr '\n' ' ')
fi
[ -z "$miss" ] || die "missing tools: $miss(apt-get install -y $(for t in $miss; do echo "${PKG[$t]}"; done | sort -u | tr '\n' ' '))"

BLKIO=/sys/fs/cgroup/blkio
[ -w "$BLKIO/blkio.throttle.read_bps_device" ] ||
    die "cgroup v1 blkio throttling not available at $BLKIO (needs CONFIG_BLK_DEV_THROTTLING and the v1 blkio hierarchy)"
[ -c /dev/fuse ] || die "/dev/fuse is missing"
[ -e /dev/loop-control ] || die "no loop device support (/dev/loop-control missing)"
grep -qw btrfs /proc/filesystems || modprobe btrfs 2>/dev/null || true
HAVE_BTRFS=1
grep -qw btrfs /proc/filesystems || HAVE_BTRFS=0

# ---------------------------------------------------------------------------------- knobs

BENCH_SIZE=${BENCH_SIZE:-default}
case $BENCH_SIZE in
    tiny) d_file=64 d_rt=1 d_ramp=0
          d_wl_hybrid="rand32k seq1" d_wl_hdd="seq4 rand4k" ;;
    default|full) d_file=1024 d_rt=10 d_ramp=2
          d_wl_hybrid="rand32k seq1 seq4 rand4k" d_wl_hdd="rand32k seq1 seq4 rand4k" ;;
    *) die "BENCH_SIZE must be tiny or default (got '$BENCH_SIZE')" ;;
esac
FILE_MB=${BENCH_FILE_MB:-$d_file}              # the test file, MiB (seq4 reads it in quarters)
IMG_MB=${BENCH_IMG_MB:-$((FILE_MB * 2 + 320))} # each image file (ext4 leg, then btrfs member)
RUNTIME=${BENCH_RUNTIME:-$d_rt}                # fio runtime per job, s (after the ramp)
RAMP=${BENCH_RAMP:-$d_ramp}                    # fio ramp_time per job, s (not measured)
SCENARIOS=${SCENARIOS:-hybrid hdd}
WL_hybrid=${WORKLOADS_HYBRID:-${WORKLOADS:-$d_wl_hybrid}}
WL_hdd=${WORKLOADS_HDD:-${WORKLOADS:-$d_wl_hdd}}
PARITY_BOTH=${PARITY_BOTH-btrfs pid}           # targets run with both reader-pid parities
FAST_RBPS=${FAST_RBPS:-417000000}              # hybrid fast leg: the seed's SSD (417 MB/s)
FAST_RIOPS=${FAST_RIOPS:-0}                    # 0 = no rule
SLOW_RBPS=${SLOW_RBPS:-52428800}               # hybrid slow leg: the seed's USB stick (50 MiB/s)
SLOW_RIOPS=${SLOW_RIOPS:-1600}
HDD_RBPS=${HDD_RBPS:-150000000}                # equal pair: 150 MB/s + 320 IOPS each
HDD_RIOPS=${HDD_RIOPS:-320}                    # 320, not 200: see README "IOPS rules count bios"
HYBRID_ATTR1=${HYBRID_ATTR1-nonrot}            # mirrorfs leg attributes (LEG=ATTR) per scenario:
HYBRID_ATTR2=${HYBRID_ATTR2-rot}               # mirrorfs reads a loop leg's flag from the disk under the image
HDD_ATTR1=${HDD_ATTR1-rot}
HDD_ATTR2=${HDD_ATTR2-rot}
MIRRORFS_OPTS=${MIRRORFS_OPTS:-}               # extra -o options for every mirrorfs mount
WORKDIR=${BENCH_WORKDIR:-/var/tmp/mirrorfs-bench}
RESULTS_ROOT=${BENCH_RESULTS:-$here/results}

for v in FILE_MB IMG_MB RUNTIME RAMP FAST_RBPS FAST_RIOPS SLOW_RBPS SLOW_RIOPS HDD_RBPS HDD_RIOPS; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number (got '${!v}')"
done
[ "$RUNTIME" -ge 1 ] || die "BENCH_RUNTIME must be at least 1"
[ "$FILE_MB" -ge 16 ] && [ $((FILE_MB % 4)) -eq 0 ] || die "BENCH_FILE_MB must be a multiple of 4, >= 16"
[ "$IMG_MB" -gt "$((FILE_MB + 200))" ] || die "BENCH_IMG_MB too small for a $FILE_MB MiB file"
for s in $SCENARIOS; do
    case $s in hybrid|hdd) ;; *) die "unknown scenario '$s' (known: hybrid hdd)" ;; esac
    wl_var=WL_$s
    for w in ${!wl_var}; do
        case $w in rand32k|seq1|seq4|rand4k) ;; *) die "unknown workload '$w' (known: rand32k seq1 seq4 rand4k)" ;; esac
    done
done

scenario_index() { case $1 in hybrid) echo 0 ;; hdd) echo 1 ;; esac; }
workload_index() { case $1 in rand32k) echo 0 ;; seq1) echo 1 ;; seq4) echo 2 ;; rand4k) echo 3 ;; esac; }

# ---------------------------------------------------------------------------------- state + teardown

RUN_ID=$(date +%Y%m%d-%H%M%S)
OUT=$RESULTS_ROOT/$RUN_ID
WD=$WORKDIR/run.$$
CG=$BLKIO/mirrorfs-bench.$$
LOOPS=()           # loop devices we attached
MOUNTS=()          # mounts we made (not the mirrorfs ones), in order
declare -A DAEMONS=()  # mirrorfs daemon pid -> its mount point
FIO_PID=
FIO_KIDS=
FAILED=0

is_mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/self/mounts; }

alive() {  # pid is running (a zombie child counts as gone)
    local s
    s=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$s" ] && [ "$s" != Z ]
}

stop_daemon() {  # pid: unmount its mount, wait for it to exit, TERM/KILL if it does not
    local pid=$1 mnt=${DAEMONS[$1]:-} i
    [ -n "$mnt" ] && is_mounted "$mnt" && umount "$mnt" 2>/dev/null
    for i in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
        say "mirrorfs (pid $pid) still running 10 s after umount: SIGTERM"
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null || true
    [ -n "$mnt" ] && is_mounted "$mnt" && umount -l "$mnt" 2>/dev/null
    unset "DAEMONS[$pid]"
    return 0
}

stop_fio() {
    [ -n "$FIO_PID" ] || return 0
    # shellcheck disable=SC2086
    kill -TERM $FIO_KIDS "$FIO_PID" 2>/dev/null || true
    wait "$FIO_PID" 2>/dev/null || true
    FIO_PID='' FIO_KIDS=''
}

clear_rules() {  # remove our throttle rules from every device we attached
    local dev mm f
    [ -d "$CG" ] || return 0
    for dev in "${LOOPS[@]}"; do
        mm=$(cat "/sys/block/${dev#/dev/}/dev" 2>/dev/null) || continue
        for f in read_bps_device write_bps_device read_iops_device write_iops_device; do
            echo "$mm 0" >"$CG/blkio.throttle.$f" 2>/dev/null || true
        done
    done
}

cleanup() {
    local rc=$? i pid dev
    set +e
    trap - EXIT INT TERM
    stop_fio
    for pid in "${!DAEMONS[@]}"; do stop_daemon "$pid"; done
    for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
        if is_mounted "${MOUNTS[i]}"; then
            umount "${MOUNTS[i]}" 2>/dev/null || umount -l "${MOUNTS[i]}"
        fi
    done
    if [ -d "$CG" ]; then
        clear_rules
        # only our own processes can be in our cgroup: anything left there is ours to end
        for pid in $(cat "$CG/cgroup.procs" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null; done
        for i in $(seq 1 50); do rmdir "$CG" 2>/dev/null && break; sleep 0.1; done
        [ -d "$CG" ] && echo "bench: warning: could not remove cgroup $CG" >&2
    fi
    for dev in "${LOOPS[@]}"; do losetup -d "$dev" 2>/dev/null || echo "bench: warning: could not detach $dev" >&2; done
    if [ -d "$WD" ] && [ -z "${BENCH_KEEP:-}" ]; then
        rm -f "$WD"/*.img
        rm -rf "$WD/probe"
        rmdir "$WD/mnt"/* "$WD/mnt" 2>/dev/null
        rmdir "$WD" "$WORKDIR" 2>/dev/null
    fi
    [ "$rc" -ne 0 ] && echo "bench: stopped (exit $rc); everything set up was torn down${OUT:+; partial results in $OUT}" >&2
    exit "$rc"
}
# A run that was killed with SIGKILL (or whose shell died) leaves its mounts, loop devices and
# cgroup behind. Tidy those of earlier runs whose process is gone: run.<pid> under WORKDIR,
# cgroup mirrorfs-bench.<pid>. Nothing of a live run is touched.
clean_stale() {
    local d pid m img dev mm f cg rule
    for d in "$WORKDIR"/run.*; do
        [ -d "$d" ] || continue
        pid=${d##*.}
        [[ $pid =~ ^[0-9]+$ ]] && [ "$pid" != $$ ] || continue
        kill -0 "$pid" 2>/dev/null && continue
        say "tidying up after an earlier run that did not finish (pid $pid, $d)"
        for m in $(awk -v p="$d/" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r); do
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done
        for img in "$d"/*.img; do
            [ -f "$img" ] || continue
            for dev in $(losetup -n -O NAME -j "$img" 2>/dev/null); do
                mm=$(cat "/sys/block/${dev#/dev/}/dev" 2>/dev/null) || continue
                for f in "$BLKIO/mirrorfs-bench.$pid"/blkio.throttle.{read,write}_{bps,iops}_device; do
                    [ -f "$f" ] && echo "$mm 0" >"$f" 2>/dev/null
                done
                losetup -d "$dev" 2>/dev/null || true
            done
        done
        rm -rf "$d" 2>/dev/null || true
    done
    for cg in "$BLKIO"/mirrorfs-bench.*; do
        [ -d "$cg" ] || continue
        pid=${cg##*.}
        [[ $pid =~ ^[0-9]+$ ]] && [ "$pid" != $$ ] || continue
        kill -0 "$pid" 2>/dev/null && continue
        [ -z "$(cat "$cg/cgroup.procs" 2>/dev/null)" ] || continue
        for f in "$cg"/blkio.throttle.{read,write}_{bps,iops}_device; do
            while read -r rule _; do [ -n "$rule" ] && echo "$rule 0" >"$f" 2>/dev/null; done <"$f"
        done
        rmdir "$cg" 2>/dev/null || say "warning: could not remove the stale cgroup $cg"
    done
    return 0
}
clean_stale
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

mkdir -p "$OUT/fio" "$OUT/stats" "$OUT/logs" "$WD/mnt" "$WD/probe"

# ---------------------------------------------------------------------------------- mirrorfs helpers

MFS_PID='' MFS_ERR=''
start_mirrorfs() {  # legs mnt opts in_cgroup(0|1) log -> MFS_PID, or return 1 with MFS_ERR
    local legs=$1 mnt=$2 opts=$3 incg=$4 log=$5 pid i
    ( if [ "$incg" = 1 ]; then echo "$BASHPID" >"$CG/cgroup.procs"; fi
      exec "$MIRRORFS" -f -o "$opts" "$legs" "$mnt" ) >"$log" 2>&1 &
    pid=$!
    DAEMONS[$pid]=$mnt
    for i in $(seq 1 200); do
        if mountpoint -q "$mnt"; then MFS_PID=$pid; return 0; fi
        if ! alive "$pid"; then
            wait "$pid" 2>/dev/null || true
            unset "DAEMONS[$pid]"
            MFS_ERR=$(grep -m1 . "$log" || echo "mirrorfs exited without a message")
            return 1
        fi
        sleep 0.1
    done
    stop_daemon "$pid"
    MFS_ERR="the mount did not appear within 20 s"
    return 1
}

# Which read policies does the binary accept? Options are parsed before the legs and the mount
# point are checked, so a refused name says 'read_policy' and an accepted one fails later on the
# missing mount point: nothing is mounted and nothing written.
probe_err() { "$MIRRORFS" -o "read_policy=$1" "$2" "$WD/probe/no-such-mountpoint" 2>&1 >/dev/null | head -n1 || true; }
mkdir -p "$WD/probe/a" "$WD/probe/b"
valid_line=$(probe_err "-no-such-policy-" "$WD/probe/a:$WD/probe/b")
ADVERTISED=$(sed -n 's/.*(valid: \(.*\)).*/\1/p' <<<"$valid_line" | tr ',' '\n' |
    sed -e 's/^ *//' -e 's/ *$//' -e 's/\[[^]]*\]//g' | grep -v -e '^$' -e ':[A-Z]' | tr '\n' ' ' || true)
if [ -n "${POLICIES:-}" ]; then
    CANDIDATES=$POLICIES
elif [ -n "$ADVERTISED" ]; then
    CANDIDATES=$ADVERTISED
else
    say "could not read the policy list from mirrorfs ('$valid_line'); probing the known names"
    CANDIDATES="auto first pid round-robin nonrot queue latency md"
fi
POLICY_LIST=() REFUSED=()
for p in $CANDIDATES; do
    e=$(probe_err "$p" "$WD/probe/a:$WD/probe/b")
    if grep -q "read_policy" <<<"$e"; then
        say "skipping read_policy=$p: the binary refuses it ($e)"
        REFUSED+=("$p")
    else
        POLICY_LIST+=("$p")
    fi
done
[ ${#POLICY_LIST[@]} -gt 0 ] || die "mirrorfs accepts none of the policies: $CANDIDATES"

# Leg attributes (LEG=rot ...): does the binary know them?
ATTRS_OK=1
e=$("$MIRRORFS" "$WD/probe/a=rot:$WD/probe/b=nonrot" "$WD/probe/no-such-mountpoint" 2>&1 >/dev/null | head -n1 || true)
if ! grep -q "mount point" <<<"$e"; then
    ATTRS_OK=0
    say "this mirrorfs does not take leg attributes (LEG=rot): plain leg paths, rotational only from sysfs ($e)"
fi
rm -rf "$WD/probe"

# ---------------------------------------------------------------------------------- devices + cgroup

img_attach() {  # image -> ATTACHED (a loop device with direct I/O), recorded in LOOPS
    local img=$1
    truncate -s "${IMG_MB}M" "$img"
    ATTACHED=$(losetup --direct-io=on -f --show "$img") || die "losetup failed for $img"
    LOOPS+=("$ATTACHED")
    [ "$(cat "/sys/block/${ATTACHED#/dev/}/loop/dio" 2>/dev/null)" = 1 ] ||
        say "warning: $ATTACHED did not get direct I/O (reads of the image may hit the host page cache)"
}
img_attach "$WD/leg1.img"; DEV1=$ATTACHED
img_attach "$WD/leg2.img"; DEV2=$ATTACHED
N1=${DEV1#/dev/} N2=${DEV2#/dev/}
MM1=$(cat "/sys/block/$N1/dev") MM2=$(cat "/sys/block/$N2/dev")

mkdir "$CG" || die "cannot create cgroup $CG"

set_limits() {  # dev bps iops (0 = no rule); reads and writes alike
    local mm v
    mm=$(cat "/sys/block/${1#/dev/}/dev")
    for v in read_bps_device:$2 write_bps_device:$2 read_iops_device:$3 write_iops_device:$3; do
        echo "$mm ${v#*:}" >"$CG/blkio.throttle.${v%%:*}"
    done
}
set_rot() { echo "$2" >"/sys/block/${1#/dev/}/queue/rotational"; }

ATTR1='' ATTR2=''
apply_scenario() {
    case $1 in
        hybrid)
            set_limits "$DEV1" "$FAST_RBPS" "$FAST_RIOPS"; set_rot "$DEV1" 0
            set_limits "$DEV2" "$SLOW_RBPS" "$SLOW_RIOPS"; set_rot "$DEV2" 1
            ATTR1=$HYBRID_ATTR1 ATTR2=$HYBRID_ATTR2 ;;
        hdd)
            set_limits "$DEV1" "$HDD_RBPS" "$HDD_RIOPS"; set_rot "$DEV1" 1
            set_limits "$DEV2" "$HDD_RBPS" "$HDD_RIOPS"; set_rot "$DEV2" 1
            ATTR1=$HDD_ATTR1 ATTR2=$HDD_ATTR2 ;;
    esac
    [ "$ATTRS_OK" = 1 ] || ATTR1='' ATTR2=''
}

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# ---------------------------------------------------------------------------------- fio

# fio arguments for a workload reading FILE (the seeds' jobs; bench-rig.md section 2)
fio_args() {  # workload file name
    local w=$1 f=$2 quarter=$((FILE_MB / 4))
    local a=(--name="$3" --filename="$f" --readonly --ioengine=libaio --direct=1 --time_based
        --runtime="$RUNTIME" --norandommap --invalidate=1 --group_reporting=0)
    [ "$RAMP" -gt 0 ] && a+=(--ramp_time="$RAMP")
    case $w in
        rand32k) a+=(--rw=randread --bs=32k --iodepth=16 --size="${FILE_MB}M") ;;
        seq1)    a+=(--rw=read --bs=1M --iodepth=4 --size="${FILE_MB}M") ;;
        seq4)    a+=(--rw=read --bs=1M --iodepth=4 --numjobs=4 --size="${quarter}M"
                     --offset_increment="${quarter}M") ;;
        rand4k)  a+=(--rw=randread --bs=4k --iodepth=16 --size="${FILE_MB}M") ;;
    esac
    printf '%s\n' "${a[@]}"
}

# Runs fio inside the cgroup. want=even|odd restarts fio until its (single) job process has a
# pid of that parity: btrfs's pid policy and mirrorfs's pid policy route by it.
PARITY=
run_fio() {  # json want njobs fio-args...  -> FIO_RC, PARITY (e/o per job, pid order)
    local json=$1 want=$2 nj=$3 attempt=0 kids par i b
    shift 3
    while :; do
        rm -f "$json"
        ( echo "$BASHPID" >"$CG/cgroup.procs"; exec fio --output-format=json --output="$json" "$@" ) \
            >"$json.log" 2>&1 &
        FIO_PID=$! FIO_KIDS=
        kids=
        for i in $(seq 1 200); do
            kids=$(pgrep -P "$FIO_PID" | sort -n | tr '\n' ' ' || true)
            [ "$(wc -w <<<"$kids")" -ge "$nj" ] && break
            alive "$FIO_PID" || break
            sleep 0.02
        done
        FIO_KIDS=$kids
        par=$(for k in $kids; do if ((k % 2)); then printf o; else printf e; fi; done)
        if [ "$want" != any ] && [ "$nj" = 1 ] && [ -n "$par" ] && [ "$par" != "${want:0:1}" ] &&
            [ "$attempt" -lt 40 ]; then
            stop_fio
            attempt=$((attempt + 1))
            for ((b = 0; b <= RANDOM % 3; b++)); do /bin/true; done  # use up a pid or three
            continue
        fi
        FIO_RC=0
        wait "$FIO_PID" || FIO_RC=$?
        FIO_PID='' FIO_KIDS=''
        PARITY=${par:--}
        return 0
    done
}

sectors_read() { awk '{print $3}' "/sys/block/$1/stat"; }

RAW=$OUT/rows.raw    # sort keys + csv row, sorted into results.csv at the end
: >"$RAW"
POLICY_TXT=$OUT/policy.txt  # one line per mirrorfs job: what the read policy did, per leg
: >"$POLICY_TXT"

# mirrorfs statistics around one job (the control file of the mount at $MM). Neither a failed
# reset nor a failed read fails the run: a warning, and the job's policy.txt line says so.
STATS_RESET_OK=1
stats_reset() {
    local err
    STATS_RESET_OK=1
    if ! err=$(setfattr -n user.mirrorfs.stats_reset -v 1 "$MM/.mirrorfs" 2>&1); then
        STATS_RESET_OK=0
        say "warning: could not reset the mirrorfs statistics (${err:-setfattr failed}); this job's stats include earlier jobs"
    fi
    return 0
}

# Saves the statistics as stats/<tag>.json and appends a summary line to policy.txt (and stderr).
stats_save() {  # tag scenario workload label
    local tag=$1 sc=$2 w=$3 label=$4 js=$OUT/stats/$1.json err sum line
    if ! err=$(getfattr --only-values -n user.mirrorfs.stats "$MM/.mirrorfs" 2>&1 >"$js.tmp"); then
        rm -f "$js.tmp"
        sum="stats unavailable: $(head -n1 <<<"${err:-getfattr failed}")"
        say "warning: could not read the mirrorfs statistics for $tag ($sum)"
    elif ! sum=$(jq -r '
            def num(f; d; u): if (f | type) == "number" then "\((f / d) | round)\(u)" else "-" end;
            "policy=\(.read_policy // "-")  " + ([.legs[]? |
                "\(.name // "-"): picks=\(.policy_picks // "-") switches=\(.stream_switches // "-")"
                + " split=\(.split_reads // "-") spread=\(.spread_reads // "-")"
                + " seek_us=\(.latency_us.seek // "-") read=\(num(.read_bytes; 1e6; "MB"))"
                + " bw=\(num(.read_bandwidth; 1e6; "MB/s"))"] | join(" | "))' "$js.tmp" 2>&1) ||
            [ -z "$sum" ]; then
        mv -f "$js.tmp" "$js"
        sum="stats unreadable (see stats/$tag.json): $(head -n1 <<<"${sum:-jq printed nothing}")"
        say "warning: the mirrorfs statistics for $tag are not the JSON expected"
    else
        mv -f "$js.tmp" "$js"
    fi
    [ "$STATS_RESET_OK" = 1 ] || sum="$sum  (counters not reset before the job)"
    line=$(printf '%-7s %-8s %-24s %s' "$sc" "$w" "$label" "$sum")
    echo "$line" >>"$POLICY_TXT"
    echo "bench:   $line" >&2
    return 0
}

# One measurement: scenario workload target-label kind policy file target-index want
measure() {
    local sc=$1 w=$2 label=$3 kind=$4 pol=$5 file=$6 ti=$7 want=$8
    local nj=1 tag json a1 a2 b1 b2 out status=ok
    [ "$w" = seq4 ] && nj=4
    tag=$(tr -c 'A-Za-z0-9._-' '_' <<<"$sc-$w-$label" | sed 's/_*$//')
    json=$OUT/fio/$tag.json
    mapfile -t args < <(fio_args "$w" "$file" "$w")
    if [ "$kind" = mirrorfs ]; then stats_reset; fi
    a1=$(sectors_read "$N1") b1=$(sectors_read "$N2")
    run_fio "$json" "$want" "$nj" "${args[@]}"
    a2=$(sectors_read "$N1") b2=$(sectors_read "$N2")
    local mbps=0 iops=0 p99=0 mlat=0 minj=0 meanj=0 errs=0
    if [ "$FIO_RC" -ne 0 ] || ! out=$(jq -r '
            [.jobs[]] as $j | [$j[].read] as $r
            | ([$r[].total_ios] | add) as $n
            | [ (([$r[].bw_bytes] | add) / 1e6),
                ([$r[].iops] | add),
                (([$r[] | .clat_ns.percentile["99.000000"] // 0] | max) / 1e3),
                (([$r[] | .clat_ns.mean * .total_ios] | add) / (if $n > 0 then $n else 1 end) / 1e3),
                (([$r[].bw_bytes] | min) / 1e6),
                (([$r[].bw_bytes] | add) / ($r | length) / 1e6),
                ([$j[].error] | add) ] | @tsv' "$json" 2>/dev/null) || [ -z "$out" ]; then
        status="fio-failed(rc=$FIO_RC):$(grep -m1 -i -e error -e fio: "$json.log" 2>/dev/null | tr ',' ';' | cut -c1-120)"
    else
        read -r mbps iops p99 mlat minj meanj errs <<<"$out"
        [ "$errs" = 0 ] || status="io-error($errs)"
    fi
    [ "$status" = ok ] || FAILED=$((FAILED + 1))
    local d1 d2
    d1=$(( (a2 - a1) * 512 )) d2=$(( (b2 - b1) * 512 ))
    LC_ALL=C printf '%d,%d,%03d,%s,%s,%s,%s,%s,%s,%.1f,%.0f,%.0f,%.0f,%.1f,%.1f,%.1f,%.1f,%s\n' \
        "$(scenario_index "$sc")" "$(workload_index "$w")" "$ti" "$sc" "$w" "$label" "$kind" "$pol" "$PARITY" \
        "$mbps" "$iops" "$p99" "$mlat" "$minj" "$meanj" "$(awk "BEGIN{print $d1/1e6}")" \
        "$(awk "BEGIN{print $d2/1e6}")" "$status" >>"$RAW"
    LC_ALL=C printf 'bench:   %-7s %-8s %-24s %9.1f MB/s %8.0f IOPS  p99 %8.0f us  pid %-4s  dev1/dev2 %6.0f/%-6.0f MB  %s\n' \
        "$sc" "$w" "$label" "$mbps" "$iops" "$p99" "$PARITY" "$(awk "BEGIN{print $d1/1e6}")" \
        "$(awk "BEGIN{print $d2/1e6}")" "$status" >&2
    # what the read policy did during the job (nothing has touched the mount since fio ended)
    if [ "$kind" = mirrorfs ]; then stats_save "$tag" "$sc" "$w" "$label"; fi
}

# every workload of scenario sc on one target; parity-sensitive targets run twice
measure_all() {  # sc label kind pol file ti-base parity-key
    local sc=$1 label=$2 kind=$3 pol=$4 file=$5 ti=$6 pkey=$7 wl_var w both=0
    wl_var=WL_$sc
    for k in $PARITY_BOTH; do [ "$k" = "$pkey" ] && both=1; done
    for w in ${!wl_var}; do
        if [ "$both" = 1 ] && [ "$w" != seq4 ]; then
            measure "$sc" "$w" "$label@even" "$kind" "$pol" "$file" "$ti" even
            measure "$sc" "$w" "$label@odd" "$kind" "$pol" "$file" "$((ti + 1))" odd
        else
            measure "$sc" "$w" "$label" "$kind" "$pol" "$file" "$ti" any
        fi
    done
}

# ---------------------------------------------------------------------------------- run info

{
    echo "run: $RUN_ID  size: $BENCH_SIZE  file: ${FILE_MB} MiB  images: ${IMG_MB} MiB  runtime: ${RUNTIME}s + ramp ${RAMP}s"
    echo "mirrorfs: $MIRRORFS ($("$MIRRORFS" -V 2>&1 | head -n1))"
    echo "kernel: $(uname -r)  cpus: $(nproc)  fio: $(fio --version)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "devices: dev1=$DEV1 ($MM1)  dev2=$DEV2 ($MM2)  cgroup: $CG"
    echo "hybrid: dev1 ${FAST_RBPS} B/s, ${FAST_RIOPS} IOPS, rotational 0; dev2 ${SLOW_RBPS} B/s, ${SLOW_RIOPS} IOPS, rotational 1; leg attrs '${HYBRID_ATTR1}' '${HYBRID_ATTR2}'"
    echo "hdd:    dev1, dev2 ${HDD_RBPS} B/s, ${HDD_RIOPS} IOPS, rotational 1; leg attrs '${HDD_ATTR1}' '${HDD_ATTR2}'  (0 = no rule; writes throttled alike)"
    echo "leg attributes accepted by the binary: $([ "$ATTRS_OK" = 1 ] && echo yes || echo 'no (plain paths used)')"
    echo "policies measured: ${POLICY_LIST[*]}"
    echo "policies refused: ${REFUSED[*]:-none}"
    echo "workloads: hybrid: $WL_hybrid | hdd: $WL_hdd  (scenarios: $SCENARIOS)"
    echo "both pid parities for: ${PARITY_BOTH:-nothing}"
    echo "extra mirrorfs options: ${MIRRORFS_OPTS:-none}"
} >"$OUT/env.txt"
sed 's/^/bench: /' "$OUT/env.txt" >&2

# ---------------------------------------------------------------------------------- phase 1: ext4 legs

say "phase 1: ext4 on $DEV1 and $DEV2, a ${FILE_MB} MiB file written through mirrorfs onto both"
M1=$WD/mnt/leg1 M2=$WD/mnt/leg2 MM=$WD/mnt/mirror MB=$WD/mnt/btrfs
mkdir -p "$M1" "$M2" "$MM" "$MB"
for d in "$DEV1:$M1" "$DEV2:$M2"; do
    mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "${d%%:*}" >"$OUT/logs/mkfs.ext4.log" 2>&1 ||
        die "mkfs.ext4 ${d%%:*} failed (see $OUT/logs/mkfs.ext4.log)"
    mount -o noatime "${d%%:*}" "${d#*:}"
    MOUNTS+=("${d#*:}")
    mkdir "${d#*:}/data"
done
L1=$M1/data L2=$M2/data

# lay the file out through mirrorfs (outside the cgroup: not throttled), so both legs hold it
start_mirrorfs "$L1:$L2" "$MM" "read_policy=${POLICY_LIST[0]}${MIRRORFS_OPTS:+,$MIRRORFS_OPTS}" 0 "$OUT/logs/mirrorfs-layout.log" ||
    die "mirrorfs did not mount for the layout: $MFS_ERR"
fio --name=layout --filename="$MM/bench.dat" --rw=write --bs=1M --size="${FILE_MB}M" --ioengine=psync \
    --direct=1 --fallocate=none --end_fsync=1 >"$OUT/logs/layout-mirrorfs.log" 2>&1 ||
    die "writing the test file through mirrorfs failed (see $OUT/logs/layout-mirrorfs.log)"
stop_daemon "$MFS_PID"
for l in "$L1" "$L2"; do
    [ "$(stat -c %s "$l/bench.dat" 2>/dev/null || echo 0)" -eq $((FILE_MB * 1048576)) ] ||
        die "$l/bench.dat is missing or has the wrong size after the layout"
done
cmp -s "$L1/bench.dat" "$L2/bench.dat" || die "the two legs' copies of bench.dat differ after the layout"
drop_caches

for sc in $SCENARIOS; do
    apply_scenario "$sc"
    drop_caches
    say "[$sc] each leg read directly (ext4 on the loop device, same throttles)"
    measure_all "$sc" "direct:leg1" direct - "$L1/bench.dat" 0 leg1
    measure_all "$sc" "direct:leg2" direct - "$L2/bench.dat" 1 leg2
    pi=0
    for p in "${POLICY_LIST[@]}"; do
        ti=$((10 + 3 * pi))
        pi=$((pi + 1))
        legs="$L1${ATTR1:+=$ATTR1}:$L2${ATTR2:+=$ATTR2}"
        opts="read_policy=$p${MIRRORFS_OPTS:+,$MIRRORFS_OPTS}"
        log=$OUT/logs/mirrorfs-$sc-$(tr -c 'A-Za-z0-9._-' '_' <<<"$p" | sed 's/_*$//').log
        if ! start_mirrorfs "$legs" "$MM" "$opts" 1 "$log"; then
            say "[$sc] skipping read_policy=$p: mirrorfs did not mount ($MFS_ERR)"
            continue
        fi
        grep -q "blkio:/${CG#"$BLKIO"/}\$" "/proc/$MFS_PID/cgroup" ||
            die "the mirrorfs daemon is not in the cgroup $CG"
        say "[$sc] mirrorfs read_policy=$p (daemon pid $MFS_PID in the cgroup; legs $legs)"
        measure_all "$sc" "mirrorfs:$p" mirrorfs "$p" "$MM/bench.dat" "$ti" "$p"
        stop_daemon "$MFS_PID"
    done
done

# ---------------------------------------------------------------------------------- phase 2: btrfs raid1

for m in "$M1" "$M2"; do umount "$m"; done
MOUNTS=()
if [ "$HAVE_BTRFS" = 1 ]; then
    say "phase 2: btrfs raid1 (-d raid1 -m raid1) over the same $DEV1 and $DEV2"
    mkfs.btrfs -f -K -d raid1 -m raid1 "$DEV1" "$DEV2" >"$OUT/logs/mkfs.btrfs.log" 2>&1 ||
        die "mkfs.btrfs failed (see $OUT/logs/mkfs.btrfs.log)"
    mount -o noatime,device="$DEV1",device="$DEV2" "$DEV1" "$MB"
    MOUNTS+=("$MB")
    fio --name=layout --filename="$MB/bench.dat" --rw=write --bs=1M --size="${FILE_MB}M" --ioengine=psync \
        --direct=1 --fallocate=none --end_fsync=1 >"$OUT/logs/layout-btrfs.log" 2>&1 ||
        die "writing the test file on btrfs failed (see $OUT/logs/layout-btrfs.log)"
    pol=
    for d in /sys/fs/btrfs/*/; do
        [ -e "$d/devices/$N1" ] && pol=$(cat "$d/read_policy" 2>/dev/null || true)
    done
    echo "btrfs read_policy: ${pol:-unknown (no read_policy in sysfs)}" >>"$OUT/env.txt"
    say "btrfs read_policy: ${pol:-unknown}"
    drop_caches
    for sc in $SCENARIOS; do
        apply_scenario "$sc"
        drop_caches
        say "[$sc] btrfs raid1 (reader pid parity decides the stripe)"
        measure_all "$sc" "btrfs" btrfs - "$MB/bench.dat" 2 btrfs
    done
    umount "$MB"
    MOUNTS=()
else
    say "phase 2 skipped: this kernel has no btrfs (no anchor rows)"
    echo "btrfs: not available, anchor skipped" >>"$OUT/env.txt"
fi

# ---------------------------------------------------------------------------------- results

CSV=$OUT/results.csv
sort -t, -k1,1n -k2,2n -k3,3n "$RAW" | cut -d, -f4- >"$RAW.sorted"
awk -F, -v OFS=, '
    # ratios: against the fast leg (leg1) read directly, and against the better / worse btrfs row
    NR == FNR {
        k = $1 FS $2
        if ($3 == "direct:leg1" && $15 == "ok") leg1[k] = $7
        if ($4 == "btrfs" && $15 == "ok") {
            if (!(k in bhi) || $7 > bhi[k]) bhi[k] = $7
            if (!(k in blo) || $7 < blo[k]) blo[k] = $7
        }
        next
    }
    FNR == 1 {
        print "scenario,workload,target,kind,policy,pid_parity,MBps,IOPS,p99_us,mean_lat_us,minjob_MBps," \
              "min_over_mean,dev1_MB,dev2_MB,dev1_share_pct,x_leg1,x_btrfs_best,x_btrfs_worst,status"
    }
    {
        k = $1 FS $2
        mom = ($2 == "seq4" && $12 > 0) ? sprintf("%.2f", $11 / $12) : ""
        tot = $13 + $14
        share = tot > 0 ? sprintf("%.0f", 100 * $13 / tot) : ""
        xl = (k in leg1 && leg1[k] > 0 && $15 == "ok") ? sprintf("%.2f", $7 / leg1[k]) : ""
        xbh = (k in bhi && bhi[k] > 0 && $15 == "ok") ? sprintf("%.2f", $7 / bhi[k]) : ""
        xbl = (k in blo && blo[k] > 0 && $15 == "ok") ? sprintf("%.2f", $7 / blo[k]) : ""
        print $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, mom, $13, $14, share, xl, xbh, xbl, $15
    }' "$RAW.sorted" "$RAW.sorted" >"$CSV.tmp"
mv "$CSV.tmp" "$CSV"
rm -f "$RAW" "$RAW.sorted"

awk -F, '
    NR == 1 { next }
    {
        if ($1 != ps || $2 != pw) {
            if (NR > 2) print ""
            printf "%s / %s\n", $1, $2
            printf "  %-22s %9s %8s %9s %8s %5s %4s %6s %7s %7s  %s\n", "target", "MB/s", "IOPS", "p99(us)",
                   "minjob", "min/µ", "pid", "dev1%", "x_leg1", "x_btrfs", "status"
            ps = $1; pw = $2
        }
        xb = $17 == "" ? "" : ($17 == $18 ? $17 : $17 "-" $18)
        printf "  %-22s %9.1f %8.0f %9.0f %8s %5s %4s %6s %7s %7s  %s\n", $3, $7, $8, $9,
               ($2 == "seq4" ? sprintf("%.1f", $11) : ""), $12, $6, $15, $16, xb, ($19 == "ok" ? "" : $19)
    }' "$CSV" >"$OUT/table.txt"

awk -F, -v title="mirrorfs bench $RUN_ID ($BENCH_SIZE, $(hostname -s 2>/dev/null || echo host))" \
    -f "$here/svg.awk" "$CSV" >"$OUT/chart.svg"

echo
echo "mirrorfs bench $RUN_ID — MB/s, IOPS, p99 completion latency; minjob = slowest of the seq4 readers;"
echo "dev1% = share of the bytes read from dev1 (the fast leg in hybrid); x_leg1 = MB/s ÷ leg1 read directly;"
echo "x_btrfs = MB/s ÷ btrfs raid1 (better pid parity - worse pid parity)"
echo
cat "$OUT/table.txt"
echo
elapsed=$(($(date +%s) - START_TS))
echo "results: $OUT (results.csv, table.txt, policy.txt, chart.svg, env.txt, fio/*.json, stats/*.json) — ${elapsed}s"
echo "elapsed: ${elapsed}s" >>"$OUT/env.txt"
[ "$FAILED" -eq 0 ] || die "$FAILED measurement(s) failed (status column; fio logs in $OUT/fio)"
