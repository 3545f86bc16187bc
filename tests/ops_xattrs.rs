//! Extended attributes (`user.*`) through a mirrorfs mount, on files and directories: the
//! values must be the same on every leg, and errors must be the kernel's.

#[macro_use]
mod common;

use common::*;
use std::fs;

legs_test!(
    user_xattrs_on_files,
    user_xattrs_on_dirs,
    xattrs_follow_renames_and_links
);

fn user_names(p: &std::path::Path) -> Vec<String> {
    list_xattr(p)
        .unwrap_or_else(|e| panic!("listxattr {}: {e}", p.display()))
        .into_iter()
        .filter(|n| n.starts_with("user."))
        .collect()
}

#[track_caller]
fn assert_xattr_on_legs(m: &Mounted, rel: &str, name: &str, want: Option<&[u8]>) {
    for p in m.leg_paths(rel) {
        match (get_xattr(&p, name), want) {
            (Ok(v), Some(w)) => assert_bytes_eq(&v, w, &format!("{name} on {}", p.display())),
            (Err(e), None) if e.raw_os_error() == Some(libc::ENODATA) => {}
            (got, want) => panic!(
                "{name} on {}: got {got:?}, want {:?}",
                p.display(),
                want.map(String::from_utf8_lossy)
            ),
        }
    }
}

fn xattr_roundtrip(m: &Mounted, rel: &str) {
    let p = m.path(rel);
    let binary: Vec<u8> = (0..300u32).map(|i| (i % 7) as u8).collect(); // contains NULs
    let big = pattern(2000, 77); // ext4 keeps all xattrs of an inode in one 4 KiB block

    assert!(user_names(&p).is_empty(), "fresh {rel} has user xattrs");
    set_xattr(&p, "user.a", b"1", 0).expect("setxattr user.a");
    set_xattr(&p, "user.binary", &binary, 0).expect("setxattr user.binary");
    set_xattr(&p, "user.big", &big, 0).expect("setxattr user.big (2000 bytes)");
    set_xattr(&p, "user.empty", b"", 0).expect("setxattr user.empty");

    assert_eq!(get_xattr(&p, "user.a").unwrap(), b"1");
    assert_bytes_eq(
        &get_xattr(&p, "user.binary").unwrap(),
        &binary,
        "user.binary",
    );
    assert_bytes_eq(&get_xattr(&p, "user.big").unwrap(), &big, "user.big");
    assert_eq!(get_xattr(&p, "user.empty").unwrap(), b"");
    assert_eq!(
        user_names(&p),
        vec!["user.a", "user.big", "user.binary", "user.empty"],
        "listxattr of {rel}"
    );
    assert_xattr_on_legs(m, rel, "user.a", Some(b"1"));
    assert_xattr_on_legs(m, rel, "user.binary", Some(&binary));
    assert_xattr_on_legs(m, rel, "user.big", Some(&big));
    assert_xattr_on_legs(m, rel, "user.empty", Some(b""));

    // Size query and a too-small buffer.
    let c = cstr(&p);
    let name = std::ffi::CString::new("user.big").unwrap();
    let size = unsafe { libc::getxattr(c.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    assert_eq!(size, 2000, "getxattr size query");
    let mut small = [0u8; 10];
    let r = unsafe {
        libc::getxattr(
            c.as_ptr(),
            name.as_ptr(),
            small.as_mut_ptr() as *mut libc::c_void,
            small.len(),
        )
    };
    assert_eq!(r, -1, "getxattr into a 10-byte buffer");
    assert_eq!(errno(), libc::ERANGE, "getxattr into a too-small buffer");

    // Flags and missing names.
    assert_errno(
        get_xattr(&p, "user.missing"),
        libc::ENODATA,
        "getxattr missing",
    );
    assert_errno(
        set_xattr(&p, "user.a", b"2", libc::XATTR_CREATE),
        libc::EEXIST,
        "XATTR_CREATE on an existing name",
    );
    assert_errno(
        set_xattr(&p, "user.missing", b"2", libc::XATTR_REPLACE),
        libc::ENODATA,
        "XATTR_REPLACE on a missing name",
    );
    assert_eq!(get_xattr(&p, "user.a").unwrap(), b"1");
    set_xattr(&p, "user.a", b"replaced", libc::XATTR_REPLACE).expect("XATTR_REPLACE");
    assert_eq!(get_xattr(&p, "user.a").unwrap(), b"replaced");
    assert_xattr_on_legs(m, rel, "user.a", Some(b"replaced"));
    set_xattr(&p, "user.a", b"x", 0).expect("overwrite");
    assert_xattr_on_legs(m, rel, "user.a", Some(b"x"));

    // Remove.
    remove_xattr(&p, "user.binary").expect("removexattr user.binary");
    assert_errno(
        get_xattr(&p, "user.binary"),
        libc::ENODATA,
        "getxattr after removexattr",
    );
    assert_xattr_on_legs(m, rel, "user.binary", None);
    assert_errno(
        remove_xattr(&p, "user.binary"),
        libc::ENODATA,
        "removexattr missing",
    );
    assert_eq!(
        user_names(&p),
        vec!["user.a", "user.big", "user.empty"],
        "listxattr of {rel} after removexattr"
    );
    // Names in no namespace are refused.
    assert_errno(
        set_xattr(&p, "nonamespace", b"x", 0),
        libc::EOPNOTSUPP,
        "setxattr without a namespace",
    );
}

fn user_xattrs_on_files(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("f"), b"data").unwrap();
    xattr_roundtrip(&m, "f");
    // Content is untouched by xattr operations.
    assert_content_on_legs(m.legs(), "f", b"data");
    m.finish();
}

fn user_xattrs_on_dirs(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::create_dir_all(m.path("d/e")).unwrap();
    xattr_roundtrip(&m, "d");
    xattr_roundtrip(&m, "d/e");
    m.finish();
}

fn xattrs_follow_renames_and_links(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("f"), b"x").unwrap();
    set_xattr(m.path("f"), "user.tag", b"v1", 0).unwrap();
    fs::rename(m.path("f"), m.path("g")).unwrap();
    assert_eq!(get_xattr(m.path("g"), "user.tag").unwrap(), b"v1");
    assert_xattr_on_legs(&m, "g", "user.tag", Some(b"v1"));
    // Hard links share the inode, so they share xattrs.
    fs::hard_link(m.path("g"), m.path("h")).unwrap();
    set_xattr(m.path("h"), "user.tag", b"v2", 0).unwrap();
    assert_eq!(get_xattr(m.path("g"), "user.tag").unwrap(), b"v2");
    assert_xattr_on_legs(&m, "g", "user.tag", Some(b"v2"));
    // A renamed directory keeps its xattrs.
    fs::create_dir(m.path("d")).unwrap();
    set_xattr(m.path("d"), "user.dir", b"yes", 0).unwrap();
    fs::rename(m.path("d"), m.path("e")).unwrap();
    assert_xattr_on_legs(&m, "e", "user.dir", Some(b"yes"));
    m.finish();
}

legs_test!(xattrs_on_symlinks_stay_on_the_link);

/// `trusted.*` (root only) can be set on a symlink itself (ext4 allows it). mirrorfs may store
/// it on the link on every leg, or refuse (EPERM/EOPNOTSUPP); what it must never do is put it
/// on the file the link points to (which here is outside the mirror).
fn xattrs_on_symlinks_stay_on_the_link(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let outside = m.root().join("outside");
    fs::write(&outside, b"not part of the mirror").unwrap();
    std::os::unix::fs::symlink(&outside, m.path("out")).unwrap();
    match set_xattr(m.path("out"), "trusted.test", b"on-the-link", 0) {
        Ok(()) => {
            assert_eq!(
                get_xattr(m.path("out"), "trusted.test").unwrap(),
                b"on-the-link"
            );
            assert_xattr_on_legs(&m, "out", "trusted.test", Some(b"on-the-link"));
            remove_xattr(m.path("out"), "trusted.test").expect("lremovexattr on symlink");
            assert_xattr_on_legs(&m, "out", "trusted.test", None);
        }
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM) | Some(libc::EOPNOTSUPP)) => {
            eprintln!("note: mirrorfs refuses trusted.* on symlinks ({e})");
            assert_xattr_on_legs(&m, "out", "trusted.test", None);
        }
        Err(e) => panic!("lsetxattr trusted.test on a symlink: {e}"),
    }
    assert_errno(
        get_xattr(&outside, "trusted.test"),
        libc::ENODATA,
        "the symlink's target outside the mirror got the xattr",
    );
    // user.* is refused on symlinks by the kernel.
    assert_errno(
        set_xattr(m.path("out"), "user.x", b"1", 0),
        libc::EPERM,
        "user.* on a symlink",
    );
    m.finish();
}

/// How often `ls -l DIR` asked for an SELinux label (traced with strace).
fn ls_label_lookups(dir: &std::path::Path) -> usize {
    let trace = tempfile::NamedTempFile::new().unwrap();
    let out = run(
        "strace",
        &[
            &"-f",
            &"-e",
            &"trace=getxattr,lgetxattr,fgetxattr",
            &"-o",
            &trace.path(),
            &"ls",
            &"-l",
            &dir,
        ],
        TOOL_TIMEOUT,
    );
    assert!(out.status.success(), "strace ls -l: {}", text(&out.stderr));
    fs::read_to_string(trace.path())
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"security.selinux\""))
        .count()
}

/// `selinux_xattr=`: a missing SELinux label is answered ENOTSUP (`enotsup`, and `auto` on a
/// host without SELinux), so `ls -l` asks once per listing instead of once per entry, while a
/// label that exists is read, listed and stored on every leg; `pass` answers ENODATA.
#[test]
fn a_missing_selinux_label_can_be_answered_not_supported() {
    require_fuse!();
    require_tool!("strace");
    let host_has_selinux = std::path::Path::new("/sys/fs/selinux/enforce").exists();
    for (mode, enotsup) in [
        ("enotsup", true),
        ("pass", false),
        ("auto", !host_has_selinux),
    ] {
        let m = TestMirror::new(2)
            .option(&format!("selinux_xattr={mode}"))
            .mount();
        fs::create_dir(m.path("d")).unwrap();
        for i in 0..20 {
            fs::write(m.path(&format!("d/f{i}")), b"x").unwrap();
        }
        std::os::unix::fs::symlink("f0", m.path("d/link")).unwrap();
        let want = if enotsup {
            libc::ENOTSUP
        } else {
            libc::ENODATA
        };
        for rel in ["d/f0", "d", "d/link"] {
            let e = get_xattr(m.path(rel), "security.selinux").unwrap_err();
            assert_eq!(e.raw_os_error(), Some(want), "{mode}: {rel}: {e}");
        }
        // Other names are answered as always.
        let e = get_xattr(m.path("d/f0"), "user.nothing").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODATA), "{mode}");
        let asked = ls_label_lookups(&m.path("d"));
        if enotsup {
            assert!(
                asked <= 2,
                "{mode}: ls -l asked for {asked} labels of 21 entries"
            );
        } else {
            assert!(
                asked >= 21,
                "{mode}: ls -l asked for {asked} labels of 21 entries"
            );
        }
        // A label that exists (root may store one without SELinux) is kept and read back.
        let label = b"system_u:object_r:etc_t:s0\0";
        set_xattr(m.path("d/f1"), "security.selinux", label, 0).expect("set a label");
        assert_eq!(
            get_xattr(m.path("d/f1"), "security.selinux").unwrap(),
            label
        );
        assert!(list_xattr(m.path("d/f1"))
            .unwrap()
            .contains(&"security.selinux".to_string()));
        for p in m.leg_paths("d/f1") {
            assert_eq!(get_xattr(&p, "security.selinux").unwrap(), label);
        }
        m.finish();
    }
}
