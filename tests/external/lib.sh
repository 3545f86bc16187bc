# shellcheck shell=bash
# tests/external/lib.sh: shared helpers for the external checks of mirrorfs. Source it; do not run it.
#
# It checks nothing by itself; it gives the scripts next to it one way to mount mirrorfs, to
# unmount it (also on any exit, via a trap), and to check that the legs of a mirror are identical.
#
#   mount_mirror NLEGS DIR [OPTS]  create DIR/leg0 .. DIR/leg<NLEGS-1> and DIR/mnt, mount mirrorfs
#                                  there in background mode (OPTS go to `-o`, after the positionals).
#                                  Sets MNT, LEGS (array), MIRROR_DIR, MIRROR_LOG, MIRROR_PID.
#   unmount_mirror                 umount MNT, wait for the daemon to exit; fails if the daemon died,
#                                  panicked, or would not let go of the mount.
#   remount_mirror                 unmount_mirror, then mount the same legs with the same options.
#   compare_legs LEG...            fail unless every LEG is identical to the first one
#                                  (rsync itemized dry run + a sha256 manifest).
#   check_mirror                   sync the mount, compare_legs "${LEGS[@]}", and check that the
#                                  mount shows what leg0 holds; also fails if the daemon is gone.
#   make_workdir NAME              sets WORKDIR to a fresh work directory under $EXT_WORK, which
#                                  the exit trap removes if the script succeeds.
#   quiet LOG CMD...               run CMD with its output in LOG, show its start if it fails.
#   run_step [--here] NAME CMD...  run CMD in a `set -e` subshell, time it, record ok/FAILED;
#                                  print_steps prints the table, steps_failed counts the failures.
#                                  Never call run_step inside `if`/`&&`/`||`: bash would then
#                                  switch off `set -e` inside the step. --here runs CMD in this
#                                  shell, without `set -e` (for mount/unmount, which set globals).
#
# Environment:
#   MIRRORFS     the binary (default: target/debug/mirrorfs under the repository root).
#                MIRRORFS=tmpfs is a self-test of these scripts without mirrorfs: the "mount" is a
#                tmpfs and every "leg" is a bind mount of it (so legs always compare equal).
#   MIRRORFS_DEBUG=1  mount with -d (debug logging).
#   MIRRORFS_FOREGROUND=1  run the daemon with -f in the background of the script instead of
#                letting it daemonize, so that its messages (and panics) go to $MIRROR_LOG.
#   MIRRORFS_NOFILE=N  start the daemon under `prlimit --nofile=N:N` (descriptor pressure).
#   EXT_LEGS     how many legs the scripts' mirrors have (default 2).
#   EXT_WORK     where work directories go (default /tmp; keep it short).
#   EXT_MIN_FREE_MB  how much free space EXT_WORK must have when a work directory is made
#                (default 2048: the fio jobs write about 1 GiB on two legs); less fails at once,
#                with one line, instead of as the suites' own ENOSPC failures.
#   EXT_OUT      where logs go (default: target/external under the repository root).
#   EXT_KEEP=1   keep work directories (legs, mount point) even when the script succeeds.
#   EXT_MOUNT_OPTS  options added to every mount of every script (e.g. passthrough=ro,checksum=off).

EXT_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$EXT_LIB_DIR/../.." && pwd)
MIRRORFS=${MIRRORFS:-$REPO_ROOT/target/debug/mirrorfs}
if [ "$MIRRORFS" != tmpfs ] && [ "${MIRRORFS#/}" = "$MIRRORFS" ]; then
    MIRRORFS=$PWD/$MIRRORFS # make a relative path absolute now; scripts cd around later
fi
EXT_WORK=${EXT_WORK:-/tmp}
EXT_LEGS=${EXT_LEGS:-2}
EXT_OUT=${EXT_OUT:-$REPO_ROOT/target/external}
mkdir -p "$EXT_OUT"

MNT=
LEGS=()
MIRROR_DIR=
MIRROR_OPTS=
MIRROR_LOG=
MIRROR_PID=
_EXT_WORKDIRS=()
_EXT_STEPS=()
_EXT_TMPFS=()

say() { printf '== %s\n' "$*"; }
warn() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() {
    warn "$*"
    exit 1
}

need_root() { [ "$(id -u)" -eq 0 ] || die "must run as root (FUSE mounts with allow_other, pjdfstest's user switches)"; }

need_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || die "'$c' is not installed (see .ci/run for the package list)"
    done
}

need_binary() {
    [ "$MIRRORFS" = tmpfs ] && return 0
    [ -x "$MIRRORFS" ] || die "mirrorfs binary '$MIRRORFS' not found: run 'cargo build' or set MIRRORFS"
}

# (not in $(...): the directory must be registered in this shell, for the exit trap)
make_workdir() {
    local free
    free=$(df -Pm "$EXT_WORK" 2>/dev/null | awk 'NR == 2 { print $4 }')
    [ -n "$free" ] || die "cannot tell how much space is free under $EXT_WORK"
    [ "$free" -ge "${EXT_MIN_FREE_MB:-2048}" ] ||
        die "only $free MiB free under $EXT_WORK; the external checks need ${EXT_MIN_FREE_MB:-2048} MiB (set EXT_WORK elsewhere, or free some space)"
    WORKDIR=$(mktemp -d "$EXT_WORK/mfs-$1.XXXXXX") || die "cannot create a work directory under $EXT_WORK"
    _EXT_WORKDIRS+=("$WORKDIR")
}

# ---------------------------------------------------------------- mounting

mount_mirror() {
    [ $# -ge 2 ] || die "usage: mount_mirror NLEGS DIR [OPTS]"
    local n=$1 i
    [ -n "$MNT" ] && die "mount_mirror: $MNT is still mounted"
    mkdir -p "$2"
    MIRROR_DIR=$(cd "$2" && pwd)
    MIRROR_OPTS=${3:-}
    LEGS=()
    for ((i = 0; i < n; i++)); do
        mkdir -p "$MIRROR_DIR/leg$i"
        LEGS+=("$MIRROR_DIR/leg$i")
    done
    MNT=$MIRROR_DIR/mnt
    mkdir -p "$MNT"
    MIRROR_LOG=$MIRROR_DIR/mirrorfs.log
    _mount_again
}

_mount_again() {
    local legspec args=() leg p
    if [ "$MIRRORFS" = tmpfs ]; then
        # One tmpfs at DIR/store (kept until the exit trap, so data survives a remount), bind
        # mounted onto the mount point and onto every leg.
        if ! mountpoint -q "$MIRROR_DIR/store"; then
            mkdir -p "$MIRROR_DIR/store"
            mount -t tmpfs -o size=8g,mode=755 ext-selftest "$MIRROR_DIR/store" || die "tmpfs self-test mount failed"
            _EXT_TMPFS+=("$MIRROR_DIR/store")
        fi
        for leg in "$MNT" "${LEGS[@]}"; do
            mount --bind "$MIRROR_DIR/store" "$leg" || die "bind mount on $leg failed"
        done
        MIRROR_PID=
        return 0
    fi
    legspec=$(IFS=:; printf '%s' "${LEGS[*]}")
    local run=("$MIRRORFS")
    if [ -n "${MIRRORFS_NOFILE:-}" ]; then # descriptor pressure: a low RLIMIT_NOFILE for the daemon
        run=(prlimit --nofile="$MIRRORFS_NOFILE:$MIRRORFS_NOFILE" "$MIRRORFS")
    fi
    [ "${MIRRORFS_DEBUG:-0}" = 1 ] && args+=(-d)
    args+=("$legspec" "$MNT")
    local opts=$MIRROR_OPTS
    # EXT_MOUNT_OPTS: options for every mount of every script (run-all.sh's second pass)
    [ -n "${EXT_MOUNT_OPTS:-}" ] && opts=${opts:+$opts,}$EXT_MOUNT_OPTS
    [ -n "$opts" ] && args+=(-o "$opts")
    printf '\n### %s: %s %s\n' "$(date -u +%T)" "${run[*]}" "${args[*]}" >>"$MIRROR_LOG"
    if [ "${MIRRORFS_FOREGROUND:-0}" = 1 ]; then
        # Debug aid: run with -f in the background of this shell, so that everything the daemon
        # prints (with MIRRORFS_DEBUG=1: debug logs; panics) lands in MIRROR_LOG.
        "${run[@]}" -f "${args[@]}" >>"$MIRROR_LOG" 2>&1 &
        MIRROR_PID=$!
        for ((p = 0; p < 300; p++)); do
            mountpoint -q "$MNT" && break
            kill -0 "$MIRROR_PID" 2>/dev/null || break
            sleep 0.1
        done
        if ! mountpoint -q "$MNT"; then
            tail -n 20 "$MIRROR_LOG" >&2
            kill "$MIRROR_PID" 2>/dev/null
            MNT_FAILED=$MNT
            MNT=
            die "mirrorfs -f did not mount $MNT_FAILED (log: $MIRROR_LOG)"
        fi
    else
        # Background mode (the default): the command returns once the mount answers. Once
        # daemonized, mirrorfs logs to the system log; what it prints before goes to MIRROR_LOG.
        if ! "${run[@]}" "${args[@]}" >>"$MIRROR_LOG" 2>&1; then
            tail -n 20 "$MIRROR_LOG" >&2
            MNT_FAILED=$MNT
            MNT=
            die "mounting mirrorfs on $MNT_FAILED failed (log: $MIRROR_LOG)"
        fi
        if ! mountpoint -q "$MNT"; then
            MNT_FAILED=$MNT
            MNT=
            die "mirrorfs exited 0 but $MNT_FAILED is not a mount point (log: $MIRROR_LOG)"
        fi
        # Find the daemon: a process running our binary with MNT as an argument.
        MIRROR_PID=
        for p in /proc/[0-9]*; do
            [ "$(readlink "$p/exe" 2>/dev/null)" = "$(readlink -f "$MIRRORFS")" ] || continue
            if tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qxF -- "$MNT"; then
                MIRROR_PID=${p#/proc/}
                break
            fi
        done
        [ -n "$MIRROR_PID" ] || warn "could not find the mirrorfs daemon's pid (checks for its death are off)"
    fi
    say "mounted mirrorfs at $MNT (legs: ${LEGS[*]}; opts: ${MIRROR_OPTS:-none}; pid ${MIRROR_PID:-?})"
}

daemon_alive() { [ -z "$MIRROR_PID" ] || kill -0 "$MIRROR_PID" 2>/dev/null; }

# Fails if the daemon's log shows a Rust panic.
_check_panics() {
    [ -n "$MIRROR_LOG" ] && [ -f "$MIRROR_LOG" ] || return 0
    if grep -q 'panicked at' "$MIRROR_LOG"; then
        warn "mirrorfs panicked (log: $MIRROR_LOG):"
        grep -A3 'panicked at' "$MIRROR_LOG" | head -n 20 >&2
        return 1
    fi
}

unmount_mirror() {
    local rc=0 i leg
    [ -n "$MNT" ] || return 0
    if [ "$MIRRORFS" = tmpfs ]; then
        for leg in "${LEGS[@]}"; do umount "$leg" || rc=1; done
        umount "$MNT" || rc=1
        MNT=
        return $rc
    fi
    if ! daemon_alive; then
        warn "the mirrorfs daemon (pid $MIRROR_PID) died while mounted (log: $MIRROR_LOG)"
        tail -n 20 "$MIRROR_LOG" >&2
        rc=1
    fi
    # EBUSY right after a workload is normal for a moment (a process still exiting); retry.
    for ((i = 0; i < 20; i++)); do
        mountpoint -q "$MNT" || break
        umount "$MNT" 2>/dev/null && break
        sleep 0.5
    done
    if mountpoint -q "$MNT"; then
        warn "umount $MNT keeps failing; lazy unmount. Users of the mount:"
        fuser -vm "$MNT" >&2 || true
        umount -l "$MNT" || true
        rc=1
    fi
    # umount returns before the daemon has finished; the legs are only final once it exited.
    if [ -n "$MIRROR_PID" ]; then
        for ((i = 0; i < 600; i++)); do
            kill -0 "$MIRROR_PID" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$MIRROR_PID" 2>/dev/null; then
            warn "the mirrorfs daemon (pid $MIRROR_PID) still runs 60 s after umount; sending SIGTERM"
            kill -TERM "$MIRROR_PID" 2>/dev/null || true
            rc=1
        elif [ "${MIRRORFS_FOREGROUND:-0}" = 1 ]; then
            wait "$MIRROR_PID"
            i=$?
            [ $i -eq 0 ] || {
                warn "mirrorfs -f exited with status $i after umount (log: $MIRROR_LOG)"
                rc=1
            }
        fi
    fi
    _check_panics || rc=1
    MNT=
    MIRROR_PID=
    return $rc
}

remount_mirror() {
    local mnt=$MNT
    unmount_mirror || return 1
    MNT=$mnt
    _mount_again
}

# ---------------------------------------------------------------- comparing legs

# One line per entry: type, mode, owner, size (not for directories: their size depends on the
# history of the directory on that leg's fs), path, symlink target; then sha256 of every regular
# file. Leaves out a leg's /.mirrorfs (the superblock) and a root /lost+found.
tree_manifest() {
    (
        set -o pipefail
        cd "$1" || exit 1
        rc=0
        find . -mindepth 1 \( -path ./.mirrorfs -o -path ./lost+found \) -prune -o \
            \( -type d -printf 'd %#m %U:%G - %p\n' \) -o -printf '%y %#m %U:%G %s %p %l\n' |
            LC_ALL=C sort || rc=1
        find . \( -path ./.mirrorfs -o -path ./lost+found \) -prune -o -type f -print0 |
            LC_ALL=C sort -z | xargs -0 -r sha256sum || rc=1
        [ "$rc" -eq 0 ] || echo "tree_manifest: errors while reading $1" >&2
        exit "$rc"
    )
}

compare_legs() {
    [ $# -ge 2 ] || die "usage: compare_legs LEG LEG..."
    local a=$1 b out rc=0 tmp
    shift
    tmp=$(mktemp -d)
    tree_manifest "$a" >"$tmp/a" || rc=1
    for b in "$@"; do
        # -c compares contents; -H hard links, -A ACLs, -X xattrs, -a modes/owners/mtimes/devices.
        # --omit-dir-times: a directory's mtime is set by each leg's own filesystem whenever an
        # entry is added or removed, at a slightly different moment on each leg, and mirrorfs does
        # not copy directory mtimes between legs (the mount shows one leg's), so they are not part
        # of what must be identical. File and symlink mtimes are compared.
        if ! out=$(rsync -aHAXc -n -i --delete --omit-dir-times \
            --exclude=/.mirrorfs --exclude=/lost+found "$a/" "$b/" 2>&1); then
            warn "rsync failed comparing $a and $b: $out"
            rc=1
        elif [ -n "$out" ]; then
            warn "legs differ: $a vs $b (rsync -n -i, what would change on $b):"
            head -n 40 <<<"$out" >&2
            [ "$(printf '%s\n' "$out" | wc -l)" -gt 40 ] && warn "... $(printf '%s\n' "$out" | wc -l) lines in all"
            rc=1
        fi
        tree_manifest "$b" >"$tmp/b" || rc=1
        if ! out=$(diff "$tmp/a" "$tmp/b"); then
            warn "manifests differ: $a vs $b (< first, > second):"
            head -n 40 <<<"$out" >&2
            rc=1
        fi
    done
    [ $rc -eq 0 ] && say "legs identical ($(grep -c '^[^ ]* 0' "$tmp/a") entries): $a $*"
    if [ $rc -ne 0 ]; then # the legs' superblocks say whether mirrorfs dropped a leg
        for b in "$a" "$@"; do
            [ -f "$b/.mirrorfs/superblock.json" ] &&
                warn "superblock of $b: $(tr -d ' \n' <"$b/.mirrorfs/superblock.json" | cut -c1-300)"
        done
    fi
    rm -rf "$tmp"
    return $rc
}

# Checks the current mount: daemon alive, every leg identical, the mount shows leg0's tree.
check_mirror() {
    local rc=0 tmp
    [ -n "$MNT" ] || die "check_mirror: nothing mounted"
    if ! daemon_alive || ! stat "$MNT" >/dev/null 2>&1; then
        warn "the mirrorfs mount at $MNT is dead (daemon pid ${MIRROR_PID:-?}; log $MIRROR_LOG)"
        tail -n 20 "$MIRROR_LOG" >&2
        return 1
    fi
    # Push dirty page-cache data down to mirrorfs, so that the legs hold everything written.
    sync -f "$MNT" || { warn "syncfs on $MNT failed"; rc=1; }
    compare_legs "${LEGS[@]}" || rc=1
    tmp=$(mktemp -d)
    tree_manifest "$MNT" >"$tmp/mnt" || rc=1
    tree_manifest "${LEGS[0]}" >"$tmp/leg0" || rc=1
    if ! diff "$tmp/leg0" "$tmp/mnt" >"$tmp/diff"; then
        warn "the mount does not show what ${LEGS[0]} holds (< leg0, > mount):"
        head -n 40 "$tmp/diff" >&2
        rc=1
    fi
    rm -rf "$tmp"
    _check_panics || rc=1
    return $rc
}

# Checks the checksums of the current mount: every file read back through the mount with the
# page cache dropped (the daemon verifies each block it reads), then a scrub, which verifies
# every block of every leg: no checksum error, no damaged file, no difference. A wrong
# checksum from any write path (mmap, truncate, punch hole, copy_file_range...) fails here.
# With MIRRORFS=tmpfs (the scripts' self-test) there is nothing to check. On a mount with
# checksum=off (EXT_MOUNT_OPTS) the stats must say so, and the read back and the scrub's
# comparison of the legs still run.
check_checksums() {
    [ "$MIRRORFS" != tmpfs ] || return 0
    local rc=0 st doc i on
    on=$(getfattr --absolute-names --only-values -n user.mirrorfs.checksum "$MNT") || return 1
    sync -f "$MNT" || rc=1
    echo 3 >/proc/sys/vm/drop_caches
    if ! find "$MNT" -type f -print0 | xargs -0 -r cat >/dev/null; then
        warn "reading every file back through $MNT failed"
        rc=1
    fi
    st=$(getfattr --absolute-names --only-values -n user.mirrorfs.stats "$MNT") || return 1
    if [ "$on" = off ]; then
        echo "checksum=off on this mount: files read back and legs compared by a scrub only"
        if [ "$(jq '.integrity == null' <<<"$st")" != true ]; then
            warn "checksum=off, yet the stats have an integrity section: $(jq -c .integrity <<<"$st")"
            rc=1
        fi
    elif [ "$(jq '.integrity != null' <<<"$st")" != true ] ||
        [ "$(jq '[.legs[].checksum_errors] | add' <<<"$st")" != 0 ] ||
        [ "$(jq '.integrity.damaged | length' <<<"$st")" != 0 ]; then
        warn "checksums after reading everything back: $(jq -c '{ck: [.legs[].checksum_errors], integrity}' <<<"$st")"
        rc=1
    fi
    "$MIRRORFS" scrub start "$MNT" || return 1
    for i in $(seq 1200); do
        doc=$(getfattr --absolute-names --only-values -n user.mirrorfs.scrub "$MNT")
        [ "$(jq -r .state <<<"$doc")" = running ] || break
        sleep 0.5
    done
    if [ "$(jq -r .state <<<"$doc")" != finished ] || [ "$(jq .differences <<<"$doc")" != 0 ]; then
        warn "scrub after the run: $(jq -c . <<<"$doc" | cut -c1-600)"
        rc=1
    fi
    return $rc
}

# quiet LOG CMD...: run CMD with its output in LOG; on failure print the first 20 lines of it.
quiet() {
    local log=$1 rc
    shift
    rc=0
    "$@" >"$log" 2>&1 || rc=$? # (steps run under set -e)
    if [ $rc -ne 0 ]; then
        warn "$* failed (exit $rc); the first lines of its $(wc -l <"$log") lines of output ($log):"
        head -n 20 "$log" >&2
    fi
    return $rc
}

# ---------------------------------------------------------------- steps and the summary table

run_step() {
    local name t0 t1 rc here=0
    if [ "$1" = --here ]; then
        here=1
        shift
    fi
    name=$1
    shift
    say "step $name"
    t0=$(date +%s.%N)
    if [ $here = 1 ]; then
        "$@"
        rc=$?
    else
        (
            set -e
            "$@"
        )
        rc=$?
    fi
    t1=$(date +%s.%N)
    t1=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
    if [ $rc -eq 0 ]; then
        _EXT_STEPS+=("$name|ok|$t1")
    else
        _EXT_STEPS+=("$name|FAILED (exit $rc)|$t1")
        warn "step $name FAILED (exit $rc)"
    fi
    return 0
}

print_steps() {
    local s
    printf '%-34s %-16s %8s\n' step result seconds
    for s in "${_EXT_STEPS[@]}"; do
        IFS='|' read -r n r t <<<"$s"
        printf '%-34s %-16s %8s\n' "$n" "$r" "$t"
    done
}

steps_failed() {
    local s n=0
    for s in "${_EXT_STEPS[@]}"; do
        case $s in *'|ok|'*) ;; *) n=$((n + 1)) ;; esac
    done
    echo $n
}

# ---------------------------------------------------------------- exit trap

_ext_exit() {
    local rc=$? d
    trap - EXIT
    set +e
    if [ -n "$MNT" ]; then
        unmount_mirror || rc=1
    fi
    for d in "${_EXT_TMPFS[@]}"; do umount "$d" || rc=1; done
    for d in "${_EXT_WORKDIRS[@]}"; do
        if grep -qsF " $d/" /proc/self/mounts; then
            warn "something is still mounted under $d; leaving it in place"
        elif [ $rc -eq 0 ] && [ "${EXT_KEEP:-0}" != 1 ]; then
            rm -rf "$d"
        else
            warn "kept $d"
        fi
    done
    exit $rc
}
trap _ext_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
