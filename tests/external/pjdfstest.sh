#!/bin/bash
# tests/external/pjdfstest.sh: POSIX semantics of mirrorfs, checked with pjdfstest (the Rust port,
# 0.2.2) on a mirror (2 legs, or EXT_LEGS), as the test-suite research (§1.5) set it up:
#   pass "root":   every test as root (allow_remount=false), then the 13 `erofs` tests alone with
#                  allow_remount=true and a `mount` shim that runs `mount -i` (no mount.fuse helper);
#                  the two runs are merged into one result per test.
#   pass "nobody": every test as user nobody, inside a mode-1777 directory on the mount.
#   passes "root-ndp", "nobody-ndp": the same (root without the erofs tests) on a second mirror
#                  mounted with no_default_permissions: the daemon, not the kernel, must refuse
#                  what mode bits forbid (the root pass's tests switch to nobody and daemon).
# Each pass ends with "pjdfstest: N passed, N failed, N skipped", where N failed counts only the
# failures NOT listed in pjdfstest-known-failures.txt. Exit status is non-zero if any pass has such
# a failure or does not finish, or if the legs differ afterwards.
# Usage: tests/external/pjdfstest.sh [PATTERN...]   (patterns are pjdfstest's name substrings)
set -uo pipefail
# shellcheck source=tests/external/lib.sh
. "$(dirname "$0")/lib.sh"

need_root
need_cmd pjdfstest rsync su
need_binary
PJD=$(command -v pjdfstest)
KNOWN=$EXT_LIB_DIR/pjdfstest-known-failures.txt
OUT=$EXT_OUT/pjdfstest
rm -rf "$OUT"
mkdir -p "$OUT"

make_workdir pjd
W=$WORKDIR
chmod 755 "$W" # user nobody must reach the mount and the config below
mkdir -p "$W/cfg" "$W/sec" "$W/sec-nobody"
chmod 1777 "$W/sec-nobody"

# The config of §1.2: every opt-in feature that exists on Linux, a short naptime (timestamps have
# ns granularity here), the two dummy users that Debian already has.
write_config() { # FILE ALLOW_REMOUNT
    cat >"$1" <<TOML
[features]
posix_fallocate = {}
utime_now = {}
utimensat = {}
rename_ctime = {}
[settings]
naptime = 0.01
allow_remount = $2
[dummy_auth]
entries = [["nobody", "nogroup"], ["daemon", "daemon"]]
TOML
    chmod 644 "$1"
}
write_config "$W/cfg/main.toml" false
write_config "$W/cfg/erofs.toml" true
# pjdfstest remounts with `mount -o remount,ro MNT`; for a FUSE mount mount(8) would call the
# mount.fuse helper, which tries a new mount and fails. `mount -i` skips helpers.
mkdir -p "$W/cfg/bin"
printf '#!/bin/sh\nexec /bin/mount -i "$@"\n' >"$W/cfg/bin/mount"
chmod 755 "$W/cfg/bin/mount"

grep -v '^#' "$KNOWN" | awk 'NF {print $1}' | sort -u >"$OUT/known.txt"

# run_pjd LOG [as-nobody] ARGS...: one pjdfstest invocation; fails if it did not reach its summary.
run_pjd() {
    local log=$1 who=$2 rc
    shift 2
    if [ "$who" = nobody ]; then
        su -s /bin/sh nobody -c "cd / && RUST_BACKTRACE=0 NO_COLOR=1 $PJD $*" >"$log" 2>&1
    else
        (cd / && RUST_BACKTRACE=0 NO_COLOR=1 "$PJD" "$@") >"$log" 2>&1
    fi
    rc=$?
    sed -i 's/\x1b\[[0-9;]*m//g' "$log"
    if ! grep -q '^Summary: ' "$log"; then
        warn "pjdfstest did not finish (exit $rc); the end of $log:"
        tail -n 20 "$log" >&2
        return 1
    fi
    grep '^Summary: ' "$log"
}

# report NAME INCOMPLETE LOG...: merge the logs (a later log's result for a test wins), print the
# failures that are not known, and the closing line. INCOMPLETE=1: a run did not reach its summary,
# which counts as one more failure. Returns non-zero if there is a new failure.
report() {
    local name=$1 incomplete=$2 d=$OUT/$1 pass skip new known_failed
    shift 2
    mkdir -p "$d"
    cat "$@" >"$d/all.log"
    grep -E '^[A-Za-z_:0-9]+ +(ok|FAILED|skipped|failed as expected|PASSED UNEXPECTEDLY)$' "$d/all.log" |
        awk '{n=$1; $1=""; sub(/^ +/, ""); st[n]=$0} END {for (n in st) print n, st[n]}' |
        sort >"$d/results.txt"
    pass=$(grep -c ' ok$' "$d/results.txt")
    skip=$(grep -c ' skipped$' "$d/results.txt")
    grep -E ' (FAILED|PASSED UNEXPECTEDLY)$' "$d/results.txt" | awk '{print $1}' | sort >"$d/failed.txt"
    comm -23 "$d/failed.txt" "$OUT/known.txt" >"$d/new-failures.txt"
    comm -12 "$d/failed.txt" "$OUT/known.txt" >"$d/known-failed.txt"
    if [ "$incomplete" = 1 ]; then
        echo "(pjdfstest did not finish)" >>"$d/new-failures.txt"
    fi
    new=$(wc -l <"$d/new-failures.txt")
    known_failed=$(wc -l <"$d/known-failed.txt")
    # The failure messages of the new failures (the indented lines after "NAME   FAILED").
    while read -r t; do
        echo "NEW FAILURE ($name): $t"
        awk -v t="$t" '$1 == t && $2 == "FAILED" {p=1; next} p && /^[A-Za-z_:0-9]+ +[a-zA-Z ]+$/ {p=0} p && NF {print "    " $0}' \
            "$d/all.log" | head -n 8
    done <"$d/new-failures.txt"
    [ "$known_failed" -gt 0 ] && echo "known failures that failed ($name): $(tr '\n' ' ' <"$d/known-failed.txt")"
    echo "pass $name:"
    echo "pjdfstest: $pass passed, $new failed, $skip skipped"
    [ "$new" -eq 0 ]
}

rc=0
mount_mirror "$EXT_LEGS" "$W" || exit 1

# ---- pass root: everything, then erofs alone
say "pjdfstest as root, all tests"
run_pjd "$OUT/root-main.log" root -c "$W/cfg/main.toml" -p "$MNT" -s "$W/sec" "$@"
main_ok=$?
say "pjdfstest as root, erofs tests with allow_remount=true"
if [ $# -eq 0 ]; then
    PATH="$W/cfg/bin:$PATH" run_pjd "$OUT/root-erofs.log" root -c "$W/cfg/erofs.toml" -p "$MNT" erofs
    erofs_ok=$?
else
    : >"$OUT/root-erofs.log"
    erofs_ok=0
fi
incomplete=0
if [ $main_ok -ne 0 ] || [ $erofs_ok -ne 0 ]; then incomplete=1; fi
report root $incomplete "$OUT/root-main.log" "$OUT/root-erofs.log" || rc=1
if ! daemon_alive || ! stat "$MNT" >/dev/null 2>&1; then
    warn "the mount died during the root pass"
    exit 1
fi
if findmnt -n -o OPTIONS "$MNT" | grep -qE '(^|,)ro(,|$)'; then
    warn "the mount is still read-only after the erofs tests; remounting rw"
    /bin/mount -i -o remount,rw "$MNT" || true
    rc=1
fi

# ---- pass nobody: everything, in a directory nobody may write
say "pjdfstest as nobody, all tests"
mkdir -p "$MNT/nobody"
chmod 1777 "$MNT/nobody"
if ! su -s /bin/sh nobody -c "test -x $PJD"; then
    warn "user nobody cannot run $PJD (install it with cargo install --root /usr/local)"
    rc=1
else
    incomplete=0
    run_pjd "$OUT/nobody.log" nobody -c "$W/cfg/main.toml" -p "$MNT/nobody" -s "$W/sec-nobody" "$@" || incomplete=1
    report nobody $incomplete "$OUT/nobody.log" || rc=1
fi

# pjdfstest removes what it created; what is left (the 1777 directory) must be the same on every leg.
say "comparing the legs"
check_mirror || rc=1
unmount_mirror || rc=1
compare_legs "${LEGS[@]}" || rc=1

# ---- passes root-ndp and nobody-ndp: everything again, as root (whose tests switch to the
# dummy users for every permission check) and as nobody, on a mirror mounted with
# no_default_permissions, where the kernel checks nothing and the daemon must refuse what the
# kernel would (it acts as each caller on the legs).
make_workdir pjd-ndp
W2=$WORKDIR
chmod 755 "$W2"
mkdir -p "$W2/sec" "$W2/sec-nobody"
chmod 1777 "$W2/sec-nobody"
if mount_mirror "$EXT_LEGS" "$W2" no_default_permissions; then
    say "pjdfstest as root, -o no_default_permissions"
    incomplete=0
    run_pjd "$OUT/root-ndp.log" root -c "$W/cfg/main.toml" -p "$MNT" -s "$W2/sec" "$@" || incomplete=1
    report root-ndp $incomplete "$OUT/root-ndp.log" || rc=1
    say "pjdfstest as nobody, -o no_default_permissions"
    mkdir -p "$MNT/nobody"
    chmod 1777 "$MNT/nobody"
    incomplete=0
    run_pjd "$OUT/nobody-ndp.log" nobody -c "$W/cfg/main.toml" -p "$MNT/nobody" -s "$W2/sec-nobody" "$@" || incomplete=1
    report nobody-ndp $incomplete "$OUT/nobody-ndp.log" || rc=1
    say "comparing the legs"
    check_mirror || rc=1
    unmount_mirror || rc=1
    compare_legs "${LEGS[@]}" || rc=1
else
    rc=1
fi
echo "logs: $OUT"
exit $rc
