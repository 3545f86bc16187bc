#!/usr/bin/env python3
"""The power-cut test's workloads (tests/power_cut.rs), and their checks after the cut.

    power_cut.py run KIND DIR ACKS      runs until killed
    power_cut.py check KIND DIR ACKS    after the power came back; exit 0 when every
                                        acknowledged write is there and right
    power_cut.py check-all MNT ACKSDIR R KIND,KIND...
                                        the checks of rounds 0 to R (MNT/rR/KIND against
                                        ACKSDIR/rR-KIND), one line each: `rR KIND acked=N
                                        checked=N lost=N` (-1 when it could not check)

DIR is on the mirrorfs mount. ACKS is a file outside the disks under test (the host's own
filesystem, which the cut does not touch): a workload appends a line to it only once the
system call that makes its write durable (fsync, fdatasync, a COMMIT in synchronous=FULL, a
git commit with core.fsync=all) has returned success. Whatever was written after the last
line may or may not be there after the cut; whatever the lines name must be.

KIND:
  append   records appended to one file, each fsync'd: the acknowledged records are the
           file's first bytes, exactly.
  rename   a new version written to a temporary file, fsync'd, renamed over the old one, the
           directory fsync'd: the file is one whole version, never a mix or an empty one, and
           not older than the last acknowledged one.
  sqlite   sqlite in WAL mode (synchronous=FULL), one row inserted per transaction: the
           database passes integrity_check and holds every acknowledged row.
  git      `git commit` in a loop (core.fsync=all, then an fsync of the ref's directory):
           fsck finds no error and the history holds every acknowledged commit.
  randwrite  random 4 KiB block writes to a 1 MiB file, an fdatasync after every 8 (fio's
           random writes with --verify and --fsync, with a record of what was acknowledged):
           each block holds one whole version of itself, not older than its last
           acknowledged one.
  stream   1 MiB writes in turn over a 2 MiB file, an fdatasync after every 2 (mirrorfs
           sends writes of 128 KiB and more to the legs with RWF_DONTCACHE): each 4 KiB
           block holds one whole version of its 1 MiB write, not older than the last
           acknowledged one (a write cut halfway may leave some of its blocks new).
  scribble writes, truncates and renames without any fsync, and acknowledges nothing: its
           files read back without an error (and the test's scrub finds the legs identical).

Each check prints one line: `KIND acked=N checked=N lost=N`.
"""

import hashlib
import mmap
import os
import random
import sqlite3
import subprocess
import sys
import time


def payload(tag, n, length):
    """Deterministic bytes for record n of a workload."""
    out = b""
    i = 0
    while len(out) < length:
        out += hashlib.sha256(f"{tag}:{n}:{i}".encode()).hexdigest().encode()
        i += 1
    return out[:length]


PACE = float(os.environ.get("POWER_CUT_PACE_MS", "0")) / 1000.0


def ack(acks_fd, n):
    os.write(acks_fd, f"{n}\n".encode())
    pace()


def pace():
    """With POWER_CUT_PACE_MS set, a random pause of up to that long after each
    acknowledgement: the disks then also spend time with unflushed blocks (a flush is
    the whole disk's, and fsyncs back to back leave almost nothing unflushed)."""
    if PACE:
        time.sleep(random.random() * PACE)


def read_acks(path):
    """The acknowledged numbers, in order (a line torn by the kill is not an ack)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    out = []
    for line in data.split(b"\n")[:-1]:
        out.append(line.decode())
    return out


# ------------------------------------------------------------------------------ append


def append_record(n):
    body = payload("append", n, 40 + (n * 37) % 3000)
    return f"{n:08d} ".encode() + body + b"\n"


def run_append(d, acks_fd):
    fd = os.open(os.path.join(d, "append.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    dfd = os.open(d, os.O_RDONLY)
    os.fsync(dfd)
    n = 0
    while True:
        os.write(fd, append_record(n))
        os.fsync(fd)
        ack(acks_fd, n)
        n += 1


def check_append(d, acks):
    acked = [int(a) for a in acks]
    want = b"".join(append_record(n) for n in range(len(acked)))
    assert acked == list(range(len(acked))), "acks out of order"
    try:
        with open(os.path.join(d, "append.log"), "rb") as f:
            got = f.read()
    except FileNotFoundError:
        got = b""
    if got[: len(want)] == want:
        return len(acked), 0
    # Count the acknowledged records that are not there whole.
    lost = 0
    pos = 0
    for n in range(len(acked)):
        r = append_record(n)
        if got[pos : pos + len(r)] != r:
            lost += 1
        pos += len(r)
    print(f"append: the file's first {len(want)} bytes differ ({len(got)} bytes there)", file=sys.stderr)
    return len(acked), max(lost, 1)


# ------------------------------------------------------------------------------ rename


def rename_version(g):
    body = payload("rename", g, 100 + (g * 7919) % 60000)
    return f"version {g}\n".encode() + body


def run_rename(d, acks_fd):
    dfd = os.open(d, os.O_RDONLY)
    g = 0
    while True:
        tmp = os.path.join(d, "config.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, rename_version(g))
        os.fsync(fd)
        os.close(fd)
        os.rename(tmp, os.path.join(d, "config"))
        os.fsync(dfd)
        ack(acks_fd, g)
        g += 1


def check_rename(d, acks):
    if not acks:
        return 0, 0
    last = int(acks[-1])
    try:
        with open(os.path.join(d, "config"), "rb") as f:
            got = f.read()
    except FileNotFoundError:
        print("rename: config is missing", file=sys.stderr)
        return len(acks), 1
    head = got.split(b"\n", 1)[0]
    try:
        g = int(head.decode().split(" ")[1])
    except (UnicodeDecodeError, IndexError, ValueError):
        print(f"rename: config is not a version: {got[:40]!r} ({len(got)} bytes)", file=sys.stderr)
        return len(acks), 1
    if got != rename_version(g):
        print(f"rename: config is a torn version {g} ({len(got)} bytes)", file=sys.stderr)
        return len(acks), 1
    if g < last or g > last + 1:
        print(f"rename: config is version {g}, the last acknowledged {last}", file=sys.stderr)
        return len(acks), 1
    return len(acks), 0


# ------------------------------------------------------------------------------ sqlite


def run_sqlite(d, acks_fd):
    db = sqlite3.connect(os.path.join(d, "db.sqlite"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB)")
    n = 0
    while True:
        db.execute("BEGIN")
        db.execute("INSERT INTO t VALUES (?, ?)", (n, payload("sqlite", n, 200 + (n * 131) % 5000)))
        db.execute("COMMIT")
        ack(acks_fd, n)
        n += 1


def check_sqlite(d, acks):
    path = os.path.join(d, "db.sqlite")
    if not acks and not os.path.exists(path):
        return 0, 0
    db = sqlite3.connect(path)
    ok = db.execute("PRAGMA integrity_check").fetchall()
    if ok != [("ok",)]:
        print(f"sqlite: integrity_check: {ok[:5]}", file=sys.stderr)
        return len(acks), max(1, len(acks))
    rows = dict(db.execute("SELECT id, v FROM t").fetchall()) if acks else {}
    lost = 0
    for a in acks:
        n = int(a)
        if rows.get(n) != payload("sqlite", n, 200 + (n * 131) % 5000):
            lost += 1
    if lost:
        print(f"sqlite: {lost} acknowledged rows missing or wrong", file=sys.stderr)
    return len(acks), lost


# ------------------------------------------------------------------------------ git


def git(repo, *args, check=True):
    return subprocess.run(["git", "-C", repo, *args], check=check, capture_output=True, text=True)


def fsync_tree(top):
    for root, dirs, files in os.walk(top):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    for root, dirs, files in os.walk(top, topdown=False):
        fd = os.open(root, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    fd = os.open(os.path.dirname(top), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def run_git(d, acks_fd):
    repo = os.path.join(d, "repo")
    if not os.path.isdir(os.path.join(repo, ".git")):
        os.makedirs(repo, exist_ok=True)
        git(repo, "init", "-q")
    for k, v in [("core.fsync", "all"), ("core.fsyncMethod", "fsync"), ("user.name", "cut"),
                 ("user.email", "cut@example.invalid"), ("gc.auto", "0")]:
        git(repo, "config", k, v)
    # git init and git config write without fsync, even with core.fsync=all set (it is set
    # after them): the repository is made durable here, as one that existed before the cut.
    fsync_tree(repo)
    n = 0
    while True:
        with open(os.path.join(repo, f"f{n % 20}"), "wb") as f:
            f.write(payload("git", n, 500 + (n * 53) % 4000))
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {n}")
        # core.fsync=all fsyncs the files, not the directories: the rename of the branch's
        # new ref over the old one is durable only once its directory is fsynced (git's
        # documentation says so; on a bare ext4 the commit is lost the same way).
        for sub in ("refs/heads", ""):
            fd = os.open(os.path.join(repo, ".git", sub), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        ack(acks_fd, n)
        n += 1


def check_git(d, acks):
    repo = os.path.join(d, "repo")
    if not acks:
        return 0, 0
    fsck = git(repo, "fsck", "--full", "--no-dangling", check=False)
    if fsck.returncode != 0:
        print(f"git: fsck: {fsck.stdout[-500:]} {fsck.stderr[-500:]}", file=sys.stderr)
        return len(acks), len(acks)
    log = git(repo, "log", "--format=%s", check=False)
    have = set(log.stdout.splitlines())
    lost = sum(1 for a in acks if f"commit {a}" not in have)
    if lost:
        print(f"git: {lost} acknowledged commits missing from the history", file=sys.stderr)
    return len(acks), lost


# ------------------------------------------------------------------------------ randwrite

BLOCKS = 256
BLOCK = 4096


def block_version(b, g):
    head = f"block {b} version {g}\n".encode()
    return head + payload("rw", b * 1000003 + g, BLOCK - len(head))


def run_randwrite(d, acks_fd):
    path = os.path.join(d, "blocks")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, BLOCKS * BLOCK)
    os.fsync(fd)
    dfd = os.open(d, os.O_RDONLY)
    os.fsync(dfd)
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    gen = [0] * BLOCKS
    pending = []
    while True:
        b = rng.randrange(BLOCKS)
        gen[b] += 1
        # The version about to be written is logged first: a write that was made but not
        # acknowledged may be there after the cut, and the check must know it.
        os.write(acks_fd, f"w {b} {gen[b]}\n".encode())
        os.pwrite(fd, block_version(b, gen[b]), b * BLOCK)
        pending.append((b, gen[b]))
        if len(pending) == 8:
            os.fdatasync(fd)
            os.write(acks_fd, ("".join(f"a {b} {g}\n" for b, g in pending)).encode())
            pending = []
            pace()


def versions(acks):
    """A block-writing workload's record: the last version written and the last acknowledged
    of each unit (a block, a chunk), and how many acknowledgements there were."""
    written = {}
    acked = {}
    n_acked = 0
    for line in acks:
        parts = line.split()
        if len(parts) != 3:
            continue
        kind, u, g = parts[0], int(parts[1]), int(parts[2])
        if kind == "w":
            written[u] = g
        elif kind == "a":
            acked[u] = max(acked.get(u, 0), g)
            n_acked += 1
    return written, acked, n_acked


def check_blocks(kind, path, acks, blocks, unit_of):
    """Each of the file's `blocks` 4 KiB blocks holds one whole version of itself, between the
    last acknowledged and the last written of its unit (`unit_of(block)`); a unit never
    acknowledged may still be zeros. (acknowledged, lost)."""
    written, acked, n_acked = versions(acks)
    if not os.path.exists(path):
        return n_acked, (1 if n_acked else 0)
    with open(path, "rb") as f:
        data = f.read()
    lost = 0
    for b in range(blocks):
        u = unit_of(b)
        got = data[b * BLOCK : (b + 1) * BLOCK]
        low, high = acked.get(u, 0), written.get(u, 0)
        if low == 0 and got == b"\0" * BLOCK:
            continue
        try:
            g = int(got.split(b"\n", 1)[0].decode().split(" ")[3])
        except (UnicodeDecodeError, IndexError, ValueError):
            g = -1
        if g < 0 or got != block_version(b, g) or g < low or g > high:
            print(f"{kind}: block {b} holds {got[:30]!r}: acknowledged {low}, written {high}",
                  file=sys.stderr)
            lost += 1
    return n_acked, lost


def check_randwrite(d, acks):
    return check_blocks("randwrite", os.path.join(d, "blocks"), acks, BLOCKS, lambda b: b)


# ------------------------------------------------------------------------------ stream

CHUNKS = 2
CHUNK_BLOCKS = 256  # 1 MiB


def chunk_version(c, g):
    return b"".join(block_version(c * CHUNK_BLOCKS + i, g) for i in range(CHUNK_BLOCKS))


def run_stream(d, acks_fd):
    """Large buffered writes: the mount's writeback sends them on as writes of up to 1 MiB,
    which mirrorfs streams to the legs without keeping them in the legs' page caches."""
    path = os.path.join(d, "stream")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, CHUNKS * CHUNK_BLOCKS * BLOCK)
    os.fsync(fd)
    dfd = os.open(d, os.O_RDONLY)
    os.fsync(dfd)
    gen = [0] * CHUNKS
    pending = []
    c = 0
    while True:
        gen[c] += 1
        # Logged before it is made, as randwrite's: the check must know what may be there.
        os.write(acks_fd, f"w {c} {gen[c]}\n".encode())
        os.pwrite(fd, chunk_version(c, gen[c]), c * CHUNK_BLOCKS * BLOCK)
        pending.append((c, gen[c]))
        c = (c + 1) % CHUNKS
        if len(pending) == 2:
            os.fdatasync(fd)
            os.write(acks_fd, ("".join(f"a {x} {g}\n" for x, g in pending)).encode())
            pending = []
            pace()


def check_stream(d, acks):
    return check_blocks("stream", os.path.join(d, "stream"), acks, CHUNKS * CHUNK_BLOCKS,
                        lambda b: b // CHUNK_BLOCKS)


# ------------------------------------------------------------------------------ scribble


def run_scribble(d, acks_fd):
    """Writes without any fsync: what the legs' disks hold of it at the cut is whatever their
    writeback pushed out (the test limits the legs' dirty pages, so that it pushes all the
    time) and what each disk kept of that. O_DIRECT, so that each write reaches the daemon
    and the legs at once instead of waiting in the mount's page cache. Nothing is
    acknowledged; the mirror's legs must still come back identical, and every file readable
    without an error."""
    rng = random.Random(int.from_bytes(os.urandom(8), "little"))
    buf = mmap.mmap(-1, 65536)
    n = 0
    while True:
        name = os.path.join(d, f"s{rng.randrange(8)}")
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
        if rng.randrange(16) == 0:
            os.ftruncate(fd, rng.randrange(64) * 65536)
        buf[:] = payload("scribble", n, 65536)
        os.pwrite(fd, buf, rng.randrange(64) * 65536)
        os.close(fd)
        n += 1
        if rng.randrange(64) == 0:
            tmp = os.path.join(d, "t")
            with open(tmp, "wb") as f:
                f.write(payload("scribble-t", n, rng.randrange(1 << 20)))
            os.rename(tmp, os.path.join(d, f"s{rng.randrange(8)}"))


def check_scribble(d, acks):
    """Every file reads to its end without an error (nothing was acknowledged)."""
    lost = 0
    for name in sorted(os.listdir(d)):
        try:
            with open(os.path.join(d, name), "rb") as f:
                while f.read(1 << 20):
                    pass
        except OSError as e:
            print(f"scribble: reading {name}: {e}", file=sys.stderr)
            lost += 1
    return 0, lost


RUN = {"append": run_append, "rename": run_rename, "sqlite": run_sqlite, "git": run_git,
       "randwrite": run_randwrite, "stream": run_stream, "scribble": run_scribble}
CHECK = {"append": check_append, "rename": check_rename, "sqlite": check_sqlite,
         "git": check_git, "randwrite": check_randwrite, "stream": check_stream,
         "scribble": check_scribble}


def check_all(mnt, acks_dir, last_round, kinds):
    """Every round's checks up to last_round, in one process: MNT/r{R}/{KIND} against
    ACKS/r{R}-{KIND}, one line each."""
    for r in range(last_round + 1):
        for kind in kinds:
            try:
                n, lost = CHECK[kind](os.path.join(mnt, f"r{r}", kind),
                                      read_acks(os.path.join(acks_dir, f"r{r}-{kind}")))
            except Exception as e:  # an unreadable file, a broken database: nothing checked
                print(f"r{r} {kind}: {e!r}", file=sys.stderr)
                n, lost = -1, -1
            print(f"r{r} {kind} acked={n} checked={n} lost={lost}", flush=True)


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "check-all":
        check_all(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split(","))
        return
    if len(sys.argv) != 5 or sys.argv[1] not in ("run", "check") or sys.argv[2] not in RUN:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    what, kind, d, acks = sys.argv[1:]
    if what == "run":
        os.makedirs(d, exist_ok=True)
        acks_fd = os.open(acks, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        RUN[kind](d, acks_fd)
    else:
        n, lost = CHECK[kind](d, read_acks(acks))
        print(f"{kind} acked={n} checked={n} lost={lost}")
        sys.exit(1 if lost else 0)


if __name__ == "__main__":
    main()
