//! Real programs as clients of a mirrorfs mount: rsync -aHAX, tar, sqlite3 (DELETE and WAL
//! journals), git and fio with verification. After each workload the legs must be identical,
//! and each leg on its own must pass the client's own check (sqlite integrity_check,
//! git fsck, fio --verify_only), since every leg is a plain directory tree.

#[macro_use]
mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

legs_test!(
    rsync_round_trip,
    tar_extract_and_compare,
    sqlite_delete_and_wal,
    git_repository,
    fio_verify_each_leg
);

/// A source tree with the usual variety, outside the legs.
fn make_source_tree(dir: &Path) {
    let s = shq(dir);
    sh_ok(&format!(
        "set -e
        S={s}
        mkdir -p $S/a/b/c $S/empty
        i=1
        while [ $i -le 150 ]; do head -c $((i * 37)) /dev/urandom > $S/a/f$i; i=$((i + 1)); done
        head -c 3000000 /dev/urandom > $S/big
        ln $S/big $S/a/b/biglink
        ln -s ../big $S/a/rel
        ln -s /etc/hostname $S/abs
        mkfifo $S/fifo
        chmod 4755 $S/a/f1; chmod 2750 $S/a/b; chmod 1777 $S/empty; chmod 0600 $S/a/f2
        chown 1000:100 $S/a/f3; chown -h 1234:1234 $S/a/rel
        setfattr -n user.k -v v $S/a/f4
        setfattr -n user.d -v dirval $S/a
        touch -d '2001-02-03 04:05:06.123456789' $S/a/f6
        : > $S/a/b/c/empty_file"
    ));
}

fn rsync_round_trip(n: usize) {
    require_fuse!();
    require_tool!("rsync");
    require_tool!("setfattr");
    let m = TestMirror::new(n).mount();
    let src = m.root().join("src");
    make_source_tree(&src);
    let dst = m.path("dst");
    sh_ok(&format!("rsync -aHAX {}/ {}/", shq(&src), shq(&dst)));
    // A checksum dry run must find nothing to do.
    let out = sh_ok(&format!(
        "rsync -aHAXc -n -i --delete {}/ {}/",
        shq(&src),
        shq(&dst)
    ));
    assert!(
        out.trim().is_empty(),
        "rsync -aHAXc -n -i finds differences between the source and the mount:\n{out}"
    );
    // And back out to a plain directory.
    let back = m.root().join("back");
    sh_ok(&format!("rsync -aHAX {}/ {}/", shq(&dst), shq(&back)));
    let out = sh_ok(&format!(
        "rsync -aHAXc -n -i --delete {}/ {}/",
        shq(&src),
        shq(&back)
    ));
    assert!(out.trim().is_empty(), "copy back differs:\n{out}");
    m.finish();
}

fn tar_extract_and_compare(n: usize) {
    require_fuse!();
    require_tool!("tar");
    require_tool!("setfattr");
    let m = TestMirror::new(n).mount();
    let src = m.root().join("src");
    make_source_tree(&src);
    let tarball = m.root().join("src.tar");
    sh_ok(&format!(
        "tar --xattrs -C {} -cf {} .",
        shq(&src),
        shq(&tarball)
    ));
    std::fs::create_dir(m.path("t")).unwrap();
    sh_ok(&format!(
        "tar --xattrs --xattrs-include='user.*' -C {} -xpf {}",
        shq(m.path("t")),
        shq(&tarball)
    ));
    // --compare checks content, mode, owner, mtime and link targets.
    let out = sh_ok(&format!(
        "tar -C {} -df {} 2>&1",
        shq(m.path("t")),
        shq(&tarball)
    ));
    assert!(out.trim().is_empty(), "tar --compare:\n{out}");
    // Re-archiving from the mount lists the same entries.
    let a = sh_ok(&format!("tar -tvf {} | sort", shq(&tarball)));
    let b = sh_ok(&format!(
        "tar -C {} -cf - . | tar -tvf - | sort",
        shq(m.path("t"))
    ));
    assert_eq!(a, b, "tar listing of the source vs of the mount");
    m.finish();
}

const SQL_WORKLOAD: &str = "PRAGMA synchronous=FULL;
CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<20000)
  INSERT INTO t SELECT x, randomblob(300) FROM c;
CREATE INDEX i ON t(v);
BEGIN; DELETE FROM t WHERE id % 3 = 0; UPDATE t SET v = randomblob(100) WHERE id % 5 = 0; COMMIT;
VACUUM;
PRAGMA integrity_check;
SELECT count(*) FROM t;";

fn sqlite_delete_and_wal(n: usize) {
    require_fuse!();
    require_tool!("sqlite3");
    let mut m = TestMirror::new(n).mount();
    for mode in ["delete", "wal"] {
        let db = m.path(&format!("{mode}.db"));
        let out = sh_ok(&format!(
            "sqlite3 {} \"PRAGMA journal_mode={mode};\n{SQL_WORKLOAD}\"",
            shq(&db)
        ));
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            vec![mode, "ok", "13334"],
            "sqlite3 with journal_mode={mode} on the mount"
        );
    }
    m.check_and_unmount();
    // Every leg on its own holds a sound database.
    for leg in m.legs() {
        for mode in ["delete", "wal"] {
            let db = leg.join(format!("{mode}.db"));
            let out = sh_ok(&format!(
                "sqlite3 {} 'PRAGMA integrity_check; SELECT count(*) FROM t;'",
                shq(&db)
            ));
            assert_eq!(
                out.lines().collect::<Vec<_>>(),
                vec!["ok", "13334"],
                "sqlite3 check of {}",
                db.display()
            );
        }
    }
}

fn git_repository(n: usize) {
    require_fuse!();
    require_tool!("git");
    let mut m = TestMirror::new(n).mount();
    let repo = m.path("repo");
    let out = sh_ok(&format!(
        "set -e
        git init -q {r}
        cd {r}
        git config user.email test@example.org
        git config user.name test
        i=1
        while [ $i -le 100 ]; do echo \"file $i\" > f$i; i=$((i + 1)); done
        mkdir -p d/e && cp /etc/services d/e/services
        git add -A && git commit -qm one
        i=1
        while [ $i -le 50 ]; do echo change >> f$i; i=$((i + 1)); done
        git rm -q f99 && git mv f98 d/moved
        git commit -qam two
        git repack -adq && git prune
        git fsck --full --strict 2>&1
        git status --porcelain
        git log --oneline | wc -l",
        r = shq(&repo)
    ));
    assert_eq!(
        out.trim(),
        "2",
        "git on the mount: fsck/status/log output:\n{out}"
    );
    m.check_and_unmount();
    for leg in m.legs() {
        let r = shq(leg.join("repo"));
        let out = sh_ok(&format!(
            "git -c safe.directory='*' -C {r} fsck --full --strict 2>&1 && \
             git -c safe.directory='*' -C {r} status --porcelain && \
             git -c safe.directory='*' -C {r} log --oneline | wc -l"
        ));
        assert_eq!(out.trim(), "2", "git on {}: {out}", leg.display());
    }
}

const FIO_JOB: &str = "[global]
directory=${FIODIR}
size=16m
verify=crc32c
verify_fatal=1
stonewall
[seq-write]
rw=write
bsrange=1k-256k
ioengine=psync
[rand-write-unaligned]
rw=randwrite
bsrange=512-64k
bs_unaligned=1
ioengine=psync
[pvsync2-fsync]
rw=randwrite
bs=16k
ioengine=pvsync2
fsync=8
[direct]
rw=randwrite
bs=4k
ioengine=libaio
iodepth=16
direct=1
";

fn run_fio(job: &Path, dir: &Path, extra: &[&str], cwd: &Path) -> std::process::Output {
    let mut cmd = Command::new("fio");
    cmd.args(extra).arg(job).env("FIODIR", dir).current_dir(cwd);
    run_timeout(&mut cmd, Duration::from_secs(300))
}

fn fio_verify_each_leg(n: usize) {
    require_fuse!();
    require_tool!("fio");
    let mut m = TestMirror::new(n).mount();
    let job = m.root().join("verify.fio");
    std::fs::write(&job, FIO_JOB).unwrap();
    let cwd = m.root().join("fio-cwd");
    std::fs::create_dir(&cwd).unwrap();
    std::fs::create_dir(m.path("fio")).unwrap();
    let out = run_fio(&job, &m.path("fio"), &[], &cwd);
    assert!(
        out.status.success(),
        "fio with verify on the mount failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    m.check_and_unmount();
    for leg in m.legs() {
        let out = run_fio(&job, &leg.join("fio"), &["--verify_only"], &cwd);
        assert!(
            out.status.success(),
            "fio --verify_only on {} failed ({}):\n{}\n{}",
            leg.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
