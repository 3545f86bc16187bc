//! Who may do what on a mirror: only root (or the user who mounted it) changes the mirror
//! through `user.mirrorfs.*`, whatever the modes of the mount's root and
//! `default_permissions` say; and with `no_default_permissions` mode bits still hold, because
//! the daemon acts as each caller on the legs.

#[macro_use]
mod common;

use common::*;
use std::fs;
use std::path::Path;

/// The statistics document as JSON.
fn stats(mnt: &Path) -> serde_json::Value {
    let raw = get_xattr(mnt, "user.mirrorfs.stats").expect("read the stats");
    serde_json::from_slice(&raw).expect("stats are JSON")
}

fn key(mnt: &Path, k: &str) -> String {
    String::from_utf8(get_xattr(mnt, &format!("user.mirrorfs.{k}")).expect(k)).unwrap()
}

/// What must not move when an unprivileged user tries to change the mirror.
fn mirror_state(mnt: &Path) -> Vec<String> {
    let s = stats(mnt);
    let mut v = vec![
        s["state"].to_string(),
        s["read_policy"].to_string(),
        s["legs_online"].to_string(),
        s["scrub"].to_string(),
        key(mnt, "minfreespace"),
        key(mnt, "resync_speed_max"),
        key(mnt, "readahead"),
        key(mnt, "leg_timeout"),
        key(mnt, "fault"),
    ];
    for l in s["legs"].as_array().unwrap() {
        v.push(format!(
            "{} {} {} {}",
            l["name"], l["state"], l["path"], l["read_ops"]
        ));
    }
    v
}

/// Every write of a control key as `nobody` is refused and changes nothing; reading works.
fn control_writes_need_root(options: &[&str]) {
    require_fuse!();
    require_tool!("setfattr");
    require_tool!("getfattr");
    let mut t = TestMirror::new(2).option("fault_injection");
    for o in options {
        t = t.option(o);
    }
    let m = t.mount();
    let checks_itself = options.contains(&"no_default_permissions");
    // The common case that made this dangerous: a share whose root belongs to its user.
    chown(m.mnt(), NOBODY, NOGROUP).unwrap();
    fs::write(m.path("f"), b"some data").unwrap();
    assert_eq!(fs::read(m.path("f")).unwrap(), b"some data");
    // A directory nobody owns, that `leg replace` must never fill.
    let theirs = m.root().join("nobodys");
    fs::create_dir(&theirs).unwrap();
    chown(&theirs, NOBODY, NOGROUP).unwrap();
    let before = mirror_state(m.mnt());

    let replace = format!("replace leg1 {}", theirs.display());
    let writes: &[(&str, &str)] = &[
        ("read_policy", "first"),
        ("minfreespace", "1G"),
        ("resync_speed_max", "1M"),
        ("readahead", "0"),
        ("leg_timeout", "1"),
        ("stats_reset", "1"),
        ("scrub", "start"),
        ("scrub", "cancel"),
        ("leg", "fail leg1"),
        ("leg", "remove leg1"),
        ("leg", "add leg1"),
        ("leg", &replace),
        ("fault", "leg=leg1 op=read errno=EIO"),
        ("fault", "clear"),
        ("attr_timeout", "5"),
        ("cache", "off"),
        ("passthrough", "ro"),
        ("selinux_xattr", "pass"),
        ("no_such_key", "x"),
    ];
    let control = m.path(".mirrorfs");
    for target in [m.mnt(), control.as_path()] {
        // The kernel checks write permission on the control file itself (root's, 0644) before
        // the daemon is asked, when it checks modes at all.
        let want = if target == control && !checks_itself {
            "Permission denied"
        } else {
            "Operation not permitted"
        };
        for (k, v) in writes {
            let out = sh_as(
                NOBODY,
                NOGROUP,
                0o022,
                &format!(
                    "setfattr -n user.mirrorfs.{k} -v {} {}",
                    shq(v),
                    shq(target)
                ),
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && err.contains(want),
                "nobody set user.mirrorfs.{k}={v} on {}: {} {err}",
                target.display(),
                out.status
            );
        }
        let out = sh_as(
            NOBODY,
            NOGROUP,
            0o022,
            &format!("setfattr -x user.mirrorfs.read_policy {}", shq(target)),
        );
        assert!(!out.status.success(), "nobody removed a control key");
    }
    // The command-line tool says why.
    let out = sh_as(
        NOBODY,
        NOGROUP,
        0o022,
        &format!(
            "{} set {} read_policy first",
            shq(mirrorfs_bin()),
            shq(m.mnt())
        ),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("only root"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // `mirrorfs status --clear` (stats_reset: counters, damaged and diverged lists) likewise.
    let out = sh_as(
        NOBODY,
        NOGROUP,
        0o022,
        &format!("{} status --clear {}", shq(mirrorfs_bin()), shq(m.mnt())),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("only root"), "{err}");

    assert_eq!(mirror_state(m.mnt()), before, "the mirror changed");
    assert!(
        dir_names(&theirs).is_empty(),
        "nobody's directory was filled"
    );

    // Reading stays open to everyone.
    let out = sh_as_ok(
        NOBODY,
        NOGROUP,
        0o022,
        &format!(
            "getfattr -n user.mirrorfs.stats --only-values {} && {} status {}",
            shq(m.mnt()),
            shq(mirrorfs_bin()),
            shq(m.mnt())
        ),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ONLINE"));

    // Root still may.
    set_xattr(m.mnt(), "user.mirrorfs.read_policy", b"first", 0).unwrap();
    assert_eq!(key(m.mnt(), "read_policy"), "first");
    chown(m.mnt(), 0, 0).unwrap();
    m.finish();
}

#[test]
fn control_writes_need_root_with_default_permissions() {
    control_writes_need_root(&[]);
}

#[test]
fn control_writes_need_root_with_no_default_permissions() {
    control_writes_need_root(&["no_default_permissions"]);
}

/// With `no_default_permissions` the kernel checks nothing; every access below must still be
/// refused as the kernel would refuse it on a local filesystem, including through names the
/// kernel has cached from root's own accesses, and nothing on the legs may change.
#[test]
fn mode_bits_hold_without_default_permissions() {
    require_fuse!();
    require_tool!("setfattr");
    let m = TestMirror::new(2).option("no_default_permissions").mount();
    let q = |rel: &str| shq(m.path(rel));
    sh_ok(&format!(
        "cd {mnt} && echo secret > secret && chmod 600 secret && \
         mkdir private && chmod 700 private && echo inside > private/file && \
         chmod 644 private/file && echo open > open && chmod 644 open && \
         mkdir shut && chmod 000 shut && setfattr -n user.k -v v secret && \
         mkdir listonly && echo x > listonly/f && chmod 444 listonly && \
         cp /bin/true prog && chmod 711 prog && mkdir pub && chmod 1777 pub && \
         echo x > suid && chmod 4755 suid",
        mnt = shq(m.mnt())
    ));
    // Root looks at everything first, so that the kernel holds every name.
    sh_ok(&format!(
        "cat {} {} {} >/dev/null && ls -l {} {} {} >/dev/null",
        q("secret"),
        q("private/file"),
        q("open"),
        q("private"),
        q("shut"),
        q("listonly")
    ));
    let snapshot = snapshot_tree(m.leg(0));

    let refused: &[(&str, String)] = &[
        ("read a 0600 file", format!("cat {}", q("secret"))),
        ("write a 0600 file", format!("echo x >> {}", q("secret"))),
        (
            "truncate a 0600 file",
            format!("truncate -s 0 {}", q("secret")),
        ),
        ("truncate on open", format!(": > {}", q("open"))),
        ("write a 0644 file", format!("echo x >> {}", q("open"))),
        ("list a 0700 dir", format!("ls {}", q("private"))),
        (
            "reach into a 0700 dir",
            format!("cat {}", q("private/file")),
        ),
        ("stat in a 0700 dir", format!("stat {}", q("private/file"))),
        ("list a 000 dir", format!("ls {}", q("shut"))),
        ("stat in a 0444 dir", format!("stat {}", q("listonly/f"))),
        ("create in root's dir", format!("touch {}", q("new"))),
        ("mkdir in root's dir", format!("mkdir {}", q("newdir"))),
        ("unlink root's file", format!("rm -f {}", q("open"))),
        (
            "rename root's file",
            format!("mv {} {}", q("open"), q("moved")),
        ),
        ("rmdir root's dir", format!("rmdir {}", q("shut"))),
        ("chmod root's file", format!("chmod 666 {}", q("open"))),
        ("chown root's file", format!("chown 65534 {}", q("open"))),
        (
            "take setuid off root's file",
            format!("chmod u-s {}", q("suid")),
        ),
        (
            "set root's file's times",
            format!("touch -d 2001-01-01 {}", q("open")),
        ),
        ("touch a 0644 file", format!("touch {}", q("open"))),
        (
            "link into a 0700 dir",
            format!("ln {} {}", q("open"), q("private/l")),
        ),
        (
            "read root's xattr",
            format!("getfattr -n user.k {}", q("secret")),
        ),
        (
            "set root's xattr",
            format!("setfattr -n user.k -v w {}", q("open")),
        ),
        (
            "remove root's xattr",
            format!("setfattr -x user.k {}", q("secret")),
        ),
        ("access W_OK", format!("test -w {}", q("open"))),
        ("access R_OK", format!("test -r {}", q("secret"))),
        ("cd into a 0700 dir", format!("cd {}", q("private"))),
    ];
    for (what, script) in refused {
        let out = sh_as(NOBODY, NOGROUP, 0o022, script);
        assert!(
            !out.status.success(),
            "nobody could {what} through a no_default_permissions mount: {script}\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    if fs::read_to_string("/proc/sys/fs/protected_hardlinks").is_ok_and(|v| v.trim() == "1") {
        let out = sh_as(
            NOBODY,
            NOGROUP,
            0o022,
            &format!("ln {} {}", q("secret"), q("pub/l")),
        );
        assert!(!out.status.success(), "nobody hard-linked root's 0600 file");
    }
    assert_snapshot_eq(
        &snapshot,
        &snapshot_tree(m.leg(0)),
        "leg0 after the refused accesses",
    );

    // What nobody may do still works: read a 0644 file, list a 0444 dir, run a 0711 program
    // (execute without read), and work in a directory of its own.
    sh_as_ok(
        NOBODY,
        NOGROUP,
        0o022,
        &format!(
            "cat {} && ls {} && test -x {} && {} && test -r {}",
            q("open"),
            q("listonly"),
            q("prog"),
            q("prog"),
            q("open")
        ),
    );
    sh_as_ok(
        NOBODY,
        NOGROUP,
        0o022,
        &format!(
            "cd {} && echo mine > f && chmod 600 f && cat f && mkdir d && mv f d/g && \
             touch d/g && ln d/g h && setfattr -n user.x -v 1 h && rm h d/g && rmdir d",
            q("pub")
        ),
    );
    m.finish();
}
