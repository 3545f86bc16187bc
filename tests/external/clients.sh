#!/bin/bash
# tests/external/clients.sh: real programs at work inside a mirrorfs mount (2 legs, or EXT_LEGS),
# each one followed by a check that the legs are identical and that the mount shows what the legs
# hold:
#   git     clone --no-local of this repository, fsck --full --strict, status clean, repack, fsck
#   tar     extract /usr/include (-p), tar -df (content, mode, owner, mtime, links), re-tar listing
#   rsync   rsync -aHAX /usr/include and a tree with hard links, xattrs, ACLs, a FIFO, a sparse
#           file in; -c -n -i shows nothing; copy back out; -c -n -i again
#   sqlite  journal_mode=wal and =delete: bulk insert, index, update/delete, many small commits,
#           VACUUM, integrity_check = ok, row count; then each leg's copy opened read-only directly
#   cbuild  a small C project (Makefile, 3 sources) built with make -j2 and gcc, run, rebuilt after
#           touching a header (make must see the newer mtime)
# Then: remount, and the git, tar and sqlite data must still check out. Prints a table of timings.
# Usage: tests/external/clients.sh [WORKLOAD...]   (default: git tar rsync sqlite cbuild)
set -uo pipefail
# shellcheck source=tests/external/lib.sh
. "$(dirname "$0")/lib.sh"

need_root
need_cmd git tar rsync sqlite3 gcc make sha256sum setfacl getfacl setfattr getfattr
need_binary
OUT=$EXT_OUT/clients
rm -rf "$OUT"
mkdir -p "$OUT"
SQL_ROWS=${SQL_ROWS:-30000}
SQL_TX=${SQL_TX:-200}

make_workdir cli
W=$WORKDIR
# git gets a global config of its own: nothing from the user's, and safe.directory=*, since in CI
# the checkout may belong to another user than root (`git -c` would not reach upload-pack).
printf '[safe]\n\tdirectory = *\n' >"$W/gitconfig"
export GIT_CONFIG_GLOBAL=$W/gitconfig GIT_CONFIG_NOSYSTEM=1
# tar's input is made once, outside the mount, so the tar step measures only the extract.
tar -C /usr -cf "$W/include.tar" include

git_clone() {
    local src=$REPO_ROOT n
    git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || {
        warn "$src is not a git repository"
        return 1
    }
    quiet "$OUT/git-clone.log" git clone --no-local "$src" "$MNT/git/repo"
    cd "$MNT/git/repo" || return 1
    git fsck --full --strict --no-progress
    [ -z "$(git status --porcelain)" ] || {
        warn "fresh clone is not clean:"
        git status --porcelain | head >&2
        return 1
    }
    n=$(git rev-list --count HEAD 2>/dev/null || echo 0)
    if [ "$n" -gt 1 ]; then
        git checkout -q "HEAD~$((n / 2))"
        git checkout -q -
    fi
    if [ "$n" -gt 0 ]; then
        git repack -adq
        git prune
        git fsck --full --strict --no-progress
        git diff --exit-code HEAD
    fi
    echo "git: cloned $n commits, fsck clean"
}

git_recheck() {
    cd "$MNT/git/repo" || return 1
    git fsck --full --strict --no-progress
    [ -z "$(git status --porcelain)" ]
}

tar_extract() {
    mkdir -p "$MNT/tar"
    quiet "$OUT/tar-x.log" tar -C "$MNT/tar" -xpf "$W/include.tar"
    quiet "$OUT/tar-d.log" tar -C "$MNT/tar" -df "$W/include.tar"
    # The same listing (names, modes, owners, sizes, mtimes, link targets) when re-archived.
    # (sorted: the order of a directory listing is not part of the contract)
    tar -C "$MNT/tar" -cf - include | tar -tvf - | LC_ALL=C sort >"$OUT/tar-mount.lst"
    tar -tvf "$W/include.tar" | LC_ALL=C sort >"$OUT/tar-orig.lst"
    diff "$OUT/tar-orig.lst" "$OUT/tar-mount.lst" | head -n 40 || true
    cmp -s "$OUT/tar-orig.lst" "$OUT/tar-mount.lst"
    echo "tar: $(wc -l <"$OUT/tar-orig.lst") entries extracted and compared"
}

tar_recheck() { quiet "$OUT/tar-d2.log" tar -C "$MNT/tar" -df "$W/include.tar"; }

# A small tree with what /usr/include lacks: hard links, xattrs, ACLs (also a default ACL),
# a FIFO, a sparse file, odd modes and owners, a dangling symlink.
make_extra_tree() {
    local x=$1
    mkdir -p "$x/dir/sub"
    echo "linked" >"$x/dir/a"
    ln "$x/dir/a" "$x/dir/sub/a-link"
    ln "$x/dir/a" "$x/a-link2"
    echo "xattrs" >"$x/xattr-file"
    setfattr -n user.colour -v blue "$x/xattr-file"
    setfattr -n user.empty "$x/xattr-file"
    echo "acl" >"$x/acl-file"
    setfacl -m u:nobody:rw,g:daemon:r "$x/acl-file"
    setfacl -d -m u:nobody:rwx "$x/dir/sub"
    mkfifo "$x/fifo"
    dd if=/dev/urandom of="$x/sparse" bs=4k count=1 seek=2560 2>/dev/null
    echo "suid" >"$x/modes"
    chmod 4751 "$x/modes"
    chown nobody:daemon "$x/modes"
    ln -s does/not/exist "$x/dangling"
}

# rsync_check SRC DST WHAT: `rsync -c -n -i` must list nothing.
rsync_check() {
    local d
    d=$(rsync -aHAXc -n -i --delete "$1/" "$2/") || return 1
    [ -z "$d" ] && return 0
    warn "rsync -aHAXc -n -i $3 lists differences:"
    head -n 20 <<<"$d" >&2
    return 1
}

rsync_round_trip() {
    make_extra_tree "$W/extra"
    mkdir -p "$MNT/rsync"
    quiet "$OUT/rsync-in.log" rsync -aHAX /usr/include/ "$MNT/rsync/include/"
    quiet "$OUT/rsync-in-extra.log" rsync -aHAX "$W/extra/" "$MNT/rsync/extra/"
    rsync_check /usr/include "$MNT/rsync/include" "/usr/include -> mount"
    rsync_check "$W/extra" "$MNT/rsync/extra" "extra tree -> mount"
    quiet "$OUT/rsync-out.log" rsync -aHAX "$MNT/rsync/" "$W/back/"
    rsync_check /usr/include "$W/back/include" "/usr/include -> copy back from the mount"
    rsync_check "$W/extra" "$W/back/extra" "extra tree -> copy back from the mount"
    [ "$(getfacl -cp "$MNT/rsync/extra/acl-file")" = "$(getfacl -cp "$W/extra/acl-file")" ]
    [ "$(getfattr --absolute-names -n user.colour --only-values "$MNT/rsync/extra/xattr-file")" = blue ]
    [ "$(stat -c %h "$MNT/rsync/extra/dir/a")" = 3 ]
    rm -rf "$W/back"
    echo "rsync: in and out again, no differences (incl. hard links, xattrs, ACLs, fifo, sparse)"
}

# sqlite_run MODE: a database in journal_mode MODE, synchronous=FULL.
sqlite_run() {
    local mode=$1 db=$MNT/sqlite/$1.db want got i
    mkdir -p "$MNT/sqlite"
    rm -f "$db" "$db-wal" "$db-shm" "$db-journal"
    {
        echo "PRAGMA journal_mode=$mode;"
        echo "PRAGMA synchronous=FULL;"
        echo "CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB);"
        echo "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < $SQL_ROWS)"
        echo "  INSERT INTO t SELECT x, hex(randomblob(8)), randomblob(200 + abs(random() % 400)) FROM c;"
        echo "CREATE INDEX tk ON t(k);"
        echo "BEGIN; DELETE FROM t WHERE id % 3 = 0; UPDATE t SET v = randomblob(300) WHERE id % 5 = 0; COMMIT;"
        # many small transactions: each commit writes and syncs the journal / WAL
        for ((i = 1; i <= SQL_TX; i++)); do
            echo "INSERT INTO t(k, v) VALUES (hex(randomblob(8)), randomblob($((i * 37 % 3000))));"
        done
        echo "VACUUM;"
    } | sqlite3 -bail "$db" >/dev/null
    want=$((SQL_ROWS - SQL_ROWS / 3 + SQL_TX))
    got=$(sqlite3 "$db" "PRAGMA integrity_check; SELECT count(*) FROM t; PRAGMA journal_mode;" | tr '\n' ' ')
    [ "$got" = "ok $want $mode " ] || {
        warn "sqlite $mode: expected 'ok $want $mode', got '$got'"
        return 1
    }
    echo "sqlite $mode: integrity ok, $want rows"
}

# Each leg's copy of the databases, opened read-only and immutable, straight from the leg.
sqlite_legs() {
    local leg db r rc=0
    for leg in "${LEGS[@]}"; do
        for db in "$leg"/sqlite/*.db; do
            r=$(sqlite3 "file:$db?immutable=1" "PRAGMA integrity_check; SELECT count(*) FROM t;" | tr '\n' ' ')
            echo "  $db: $r"
            case $r in "ok $((SQL_ROWS - SQL_ROWS / 3 + SQL_TX)) ") ;; *) rc=1 ;; esac
        done
    done
    return $rc
}

sqlite_recheck() {
    local db
    for db in "$MNT"/sqlite/*.db; do
        [ "$(sqlite3 "$db" 'PRAGMA integrity_check;')" = ok ] || return 1
    done
}

c_build() {
    local d=$MNT/cproj
    mkdir -p "$d"
    cat >"$d/util.h" <<'EOF'
#define GREETING "hello from mirrorfs"
unsigned long checksum(const char *s);
EOF
    cat >"$d/util.c" <<'EOF'
#include "util.h"
unsigned long checksum(const char *s) { unsigned long h = 5381; while (*s) h = h * 33 + (unsigned char)*s++; return h; }
EOF
    cat >"$d/main.c" <<'EOF'
#include <stdio.h>
#include "util.h"
int count(int n);
int main(void) { printf("%s %lu %d\n", GREETING, checksum(GREETING), count(10)); return 0; }
EOF
    cat >"$d/count.c" <<'EOF'
int count(int n) { int s = 0; for (int i = 1; i <= n; i++) s += i; return s; }
EOF
    # (the recipe lines below start with a tab)
    cat >"$d/Makefile" <<'EOF'
CFLAGS = -O2 -Wall -Werror
hello: main.o util.o count.o
	$(CC) -o $@ $^
%.o: %.c util.h
	$(CC) $(CFLAGS) -c -o $@ $<
clean:
	rm -f hello *.o
EOF
    # the reference: the same project built outside the mount
    rm -rf "$W/cproj-ref"
    cp -r "$d" "$W/cproj-ref"
    make -s -C "$W/cproj-ref" -j2
    make -s -C "$d" -j2
    [ "$("$d/hello")" = "$("$W/cproj-ref/hello")" ] || {
        warn "wrong output: '$("$d/hello")', outside the mount: '$("$W/cproj-ref/hello")'"
        return 1
    }
    cmp "$d/hello" "$W/cproj-ref/hello" || warn "note: the binary differs from the one built outside the mount"
    make -s -C "$d" -q hello # up to date: exit 0
    sleep 0.01
    touch "$d/util.h"
    if make -s -C "$d" -q hello; then
        warn "make does not see that util.h changed"
        return 1
    fi
    make -s -C "$d" -j2
    make -s -C "$d" clean
    make -s -C "$d" -j2
    "$d/hello" >/dev/null
    echo "cbuild: built, ran, rebuilt"
}

# which workloads (default: all)
WANT=" ${*:-git tar rsync sqlite cbuild} "
want() { [[ $WANT == *" $1 "* ]]; }

mount_mirror "$EXT_LEGS" "$W" || exit 1
if want git; then
    run_step "git clone + fsck" git_clone
    run_step "  legs identical" check_mirror
fi
if want tar; then
    run_step "tar extract + tar -df" tar_extract
    run_step "  legs identical" check_mirror
fi
if want rsync; then
    run_step "rsync -aHAX round trip" rsync_round_trip
    run_step "  legs identical" check_mirror
fi
if want sqlite; then
    run_step "sqlite wal" sqlite_run wal
    run_step "sqlite delete" sqlite_run delete
    run_step "  legs identical" check_mirror
    run_step "  sqlite on each leg" sqlite_legs
fi
if want cbuild; then
    run_step "C project (make, gcc)" c_build
    run_step "  legs identical" check_mirror
fi
run_step "checksums: read back, scrub" check_checksums
run_step --here "remount" remount_mirror
if want git; then run_step "git fsck after remount" git_recheck; fi
if want tar; then run_step "tar -df after remount" tar_recheck; fi
if want sqlite; then run_step "sqlite check after remount" sqlite_recheck; fi
run_step "  legs identical" check_mirror
run_step --here "unmount" unmount_mirror
run_step "  legs identical (unmounted)" compare_legs "${LEGS[@]}"

print_steps
failed=$(steps_failed)
echo "clients: $((${#_EXT_STEPS[@]} - failed)) steps ok, $failed failed (logs: $OUT)"
[ "$failed" -eq 0 ]
