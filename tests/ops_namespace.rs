//! Namespace operations through a mirrorfs mount: mkdir, unlink, symlinks, special nodes,
//! rename(2)/renameat2(2), hard links, inode numbers, name length, readdir, `.mirrorfs`.

#[macro_use]
mod common;

use common::*;
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{symlink, DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::Path;

legs_test!(
    mkdir_rmdir,
    unlink_files,
    symlink_readlink,
    special_nodes,
    rename_plain,
    rename_over_existing,
    rename_directories,
    rename_across_directories,
    renameat2_noreplace,
    renameat2_exchange,
    hard_links,
    ino_stable_across_rename,
    names_too_long,
    readdir_lists_exact_names,
    mirrorfs_name_reserved,
);

fn ino(p: &Path) -> u64 {
    lstat_ok(p).st_ino
}

#[track_caller]
fn assert_absent_everywhere(m: &Mounted, rel: &str) {
    assert_errno(
        lstat(m.path(rel)),
        libc::ENOENT,
        &format!("lstat mnt/{rel}"),
    );
    for p in m.leg_paths(rel) {
        assert!(
            fs::symlink_metadata(&p).is_err(),
            "{} still exists on a leg",
            p.display()
        );
    }
}

fn mkdir_rmdir(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::create_dir(m.path("a")).expect("mkdir a");
    fs::create_dir(m.path("a/b")).expect("mkdir a/b");
    fs::DirBuilder::new()
        .mode(0o750)
        .create(m.path("a/b/c"))
        .expect("mkdir a/b/c 0750");
    assert_eq!(
        lstat_ok(m.path("a/b/c")).st_mode & 0o7777,
        0o750 & !current_umask()
    );
    assert!(fs::metadata(m.path("a/b")).unwrap().is_dir());

    assert_errno(fs::create_dir(m.path("a")), libc::EEXIST, "mkdir existing");
    assert_errno(
        fs::remove_dir(m.path("a")),
        libc::ENOTEMPTY,
        "rmdir non-empty",
    );
    assert_errno(
        fs::remove_dir(m.path("missing")),
        libc::ENOENT,
        "rmdir missing",
    );
    fs::write(m.path("file"), b"x").unwrap();
    assert_errno(
        fs::remove_dir(m.path("file")),
        libc::ENOTDIR,
        "rmdir a file",
    );
    assert_errno(
        fs::create_dir(m.path("file/sub")),
        libc::ENOTDIR,
        "mkdir under a file",
    );
    assert_errno(
        fs::create_dir(m.path("nope/sub")),
        libc::ENOENT,
        "mkdir under a missing dir",
    );

    fs::remove_dir(m.path("a/b/c")).expect("rmdir a/b/c");
    assert_absent_everywhere(&m, "a/b/c");
    // nlink of a directory: 2 + subdirectories.
    fs::create_dir(m.path("a/b/x")).unwrap();
    fs::create_dir(m.path("a/b/y")).unwrap();
    assert_eq!(
        lstat_ok(m.path("a/b")).st_nlink,
        4,
        "nlink of a/b with 2 subdirs"
    );
    fs::remove_dir(m.path("a/b/x")).unwrap();
    assert_eq!(lstat_ok(m.path("a/b")).st_nlink, 3, "nlink after rmdir");
    for p in m.leg_paths("a/b/y") {
        assert!(p.is_dir(), "{} missing", p.display());
    }
    m.finish();
}

fn unlink_files(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("f"), b"data").unwrap();
    fs::remove_file(m.path("f")).expect("unlink f");
    assert_absent_everywhere(&m, "f");
    assert_errno(fs::remove_file(m.path("f")), libc::ENOENT, "unlink missing");
    fs::create_dir(m.path("d")).unwrap();
    assert_errno(fs::remove_file(m.path("d")), libc::EISDIR, "unlink a dir");

    // Unlink while open: the fd keeps working, the name is gone everywhere.
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(m.path("open"))
        .unwrap();
    f.write_all(b"still here").unwrap();
    fs::remove_file(m.path("open")).expect("unlink open file");
    assert_absent_everywhere(&m, "open");
    f.write_all(b", more").expect("write after unlink");
    let mut s = String::new();
    let mut r = f.try_clone().unwrap();
    use std::io::Seek;
    r.seek(std::io::SeekFrom::Start(0)).unwrap();
    r.read_to_string(&mut s).expect("read after unlink");
    assert_eq!(s, "still here, more");
    assert_eq!(
        f.metadata().unwrap().nlink(),
        0,
        "nlink of an unlinked open file"
    );
    drop(f);
    drop(r);
    // The name can be reused at once.
    fs::write(m.path("open"), b"new").unwrap();
    assert_content_on_legs(m.legs(), "open", b"new");
    m.finish();
}

fn symlink_readlink(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/x"), b"X").unwrap();
    fs::write(m.path("f"), b"F").unwrap();
    let long_target = "t/".repeat(500) + "end";
    let cases: [(&str, &str); 5] = [
        ("rel", "f"),
        ("dangling", "does/not/exist"),
        ("abs", "/etc/hostname"),
        ("dirlink", "d"),
        ("long", &long_target),
    ];
    for (name, target) in cases {
        symlink(target, m.path(name)).unwrap_or_else(|e| panic!("symlink {name}: {e}"));
        assert_eq!(
            fs::read_link(m.path(name)).unwrap().as_os_str(),
            target,
            "readlink {name}"
        );
        let st = lstat_ok(m.path(name));
        assert_eq!(
            st.st_mode & libc::S_IFMT,
            libc::S_IFLNK,
            "{name} is a symlink"
        );
        assert_eq!(
            st.st_size as usize,
            target.len(),
            "st_size of symlink {name}"
        );
        for p in m.leg_paths(name) {
            assert_eq!(
                fs::read_link(&p)
                    .unwrap_or_else(|e| panic!("readlink {}: {e}", p.display()))
                    .as_os_str(),
                target,
                "symlink target on {}",
                p.display()
            );
        }
    }
    // Following works through the mount.
    assert_eq!(fs::read(m.path("rel")).unwrap(), b"F");
    assert_eq!(fs::read(m.path("dirlink/x")).unwrap(), b"X");
    assert_errno(
        fs::metadata(m.path("dangling")),
        libc::ENOENT,
        "stat dangling",
    );
    // EEXIST on an existing name; readlink of a non-symlink is EINVAL.
    assert_errno(
        symlink("x", m.path("f")),
        libc::EEXIST,
        "symlink over a file",
    );
    assert_errno(fs::read_link(m.path("f")), libc::EINVAL, "readlink a file");
    // Removing a symlink leaves its target alone.
    fs::remove_file(m.path("rel")).unwrap();
    assert_eq!(fs::read(m.path("f")).unwrap(), b"F");
    m.finish();
}

fn special_nodes(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let chr_dev = libc::makedev(1, 3);
    let blk_dev = libc::makedev(7, 200);
    mkfifo(m.path("fifo"), 0o644).expect("mkfifo");
    mknod(m.path("sock"), libc::S_IFSOCK | 0o644, 0).expect("mknod S_IFSOCK");
    mknod(m.path("chr"), libc::S_IFCHR | 0o600, chr_dev).expect("mknod S_IFCHR");
    mknod(m.path("blk"), libc::S_IFBLK | 0o640, blk_dev).expect("mknod S_IFBLK");
    mknod(m.path("reg"), libc::S_IFREG | 0o600, 0).expect("mknod S_IFREG");
    let expect: [(&str, u32, u32, u64); 5] = [
        ("fifo", libc::S_IFIFO, 0o644, 0),
        ("sock", libc::S_IFSOCK, 0o644, 0),
        ("chr", libc::S_IFCHR, 0o600, chr_dev),
        ("blk", libc::S_IFBLK, 0o640, blk_dev),
        ("reg", libc::S_IFREG, 0o600, 0),
    ];
    let mut paths = vec![("mnt".to_string(), m.mnt().to_path_buf())];
    for (i, l) in m.legs().iter().enumerate() {
        paths.push((format!("leg{i}"), l.clone()));
    }
    for (name, fmt, perm, rdev) in expect {
        for (where_, base) in &paths {
            let st = lstat_ok(base.join(name));
            assert_eq!(st.st_mode & libc::S_IFMT, fmt, "type of {name} on {where_}");
            let want = perm & !current_umask();
            assert_eq!(st.st_mode & 0o7777, want, "mode of {name} on {where_}");
            if fmt == libc::S_IFCHR || fmt == libc::S_IFBLK {
                assert_eq!(st.st_rdev, rdev, "rdev of {name} on {where_}");
            }
        }
    }
    assert!(fs::symlink_metadata(m.path("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    // A FIFO in the mount works as a pipe (the kernel handles the data).
    {
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(m.path("fifo"))
            .expect("open fifo O_RDWR");
        f.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        f.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
    }
    assert_errno(
        mknod(m.path("fifo"), libc::S_IFIFO | 0o644, 0),
        libc::EEXIST,
        "mknod over an existing name",
    );
    for name in ["fifo", "sock", "chr", "blk"] {
        fs::remove_file(m.path(name)).unwrap_or_else(|e| panic!("unlink {name}: {e}"));
        assert_absent_everywhere(&m, name);
    }
    mkfifo(m.path("fifo2"), 0o600).unwrap();
    mknod(m.path("chr2"), libc::S_IFCHR | 0o644, libc::makedev(4, 64)).unwrap();
    m.finish();
}

fn rename_plain(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("a"), b"content of a").unwrap();
    fs::rename(m.path("a"), m.path("b")).expect("rename a b");
    assert_absent_everywhere(&m, "a");
    assert_eq!(fs::read(m.path("b")).unwrap(), b"content of a");
    assert_content_on_legs(m.legs(), "b", b"content of a");
    // Rename onto itself is a no-op.
    fs::rename(m.path("b"), m.path("b")).expect("rename b b");
    assert_eq!(fs::read(m.path("b")).unwrap(), b"content of a");
    assert_errno(
        fs::rename(m.path("missing"), m.path("c")),
        libc::ENOENT,
        "rename missing",
    );
    // Renaming an open file: the fd keeps working.
    let mut f = OpenOptions::new().append(true).open(m.path("b")).unwrap();
    fs::rename(m.path("b"), m.path("c")).unwrap();
    f.write_all(b"!").expect("write after rename");
    drop(f);
    assert_content_on_legs(m.legs(), "c", b"content of a!");
    m.finish();
}

fn rename_over_existing(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("a"), b"AAA").unwrap();
    fs::write(m.path("b"), b"BBBBBB").unwrap();
    let ino_a = ino(&m.path("a"));
    fs::rename(m.path("a"), m.path("b")).expect("rename a over b");
    assert_absent_everywhere(&m, "a");
    assert_eq!(fs::read(m.path("b")).unwrap(), b"AAA");
    assert_eq!(ino(&m.path("b")), ino_a, "b has a's inode after the rename");
    assert_content_on_legs(m.legs(), "b", b"AAA");

    // Type mismatches and non-empty targets.
    fs::create_dir(m.path("d")).unwrap();
    fs::create_dir(m.path("full")).unwrap();
    fs::write(m.path("full/x"), b"").unwrap();
    fs::create_dir(m.path("empty")).unwrap();
    assert_errno(
        fs::rename(m.path("b"), m.path("d")),
        libc::EISDIR,
        "rename file over dir",
    );
    assert_errno(
        fs::rename(m.path("d"), m.path("b")),
        libc::ENOTDIR,
        "rename dir over file",
    );
    let r = fs::rename(m.path("d"), m.path("full"));
    match r {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY) | Some(libc::EEXIST)) => {}
        other => panic!("rename dir over non-empty dir: expected ENOTEMPTY, got {other:?}"),
    }
    fs::rename(m.path("d"), m.path("empty")).expect("rename dir over empty dir");
    assert_absent_everywhere(&m, "d");
    assert!(m.path("empty").is_dir());
    assert!(m.path("full/x").exists());
    // Over a symlink: the symlink is replaced, its target untouched.
    fs::write(m.path("target"), b"T").unwrap();
    symlink("target", m.path("link")).unwrap();
    fs::rename(m.path("b"), m.path("link")).unwrap();
    assert!(fs::symlink_metadata(m.path("link")).unwrap().is_file());
    assert_eq!(fs::read(m.path("target")).unwrap(), b"T");
    assert_content_on_legs(m.legs(), "link", b"AAA");
    m.finish();
}

fn rename_directories(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::create_dir_all(m.path("d/sub/deeper")).unwrap();
    fs::write(m.path("d/x"), b"x").unwrap();
    fs::write(m.path("d/sub/deeper/y"), b"y").unwrap();
    fs::rename(m.path("d"), m.path("e")).expect("rename d e");
    assert_absent_everywhere(&m, "d");
    assert_eq!(fs::read(m.path("e/x")).unwrap(), b"x");
    assert_eq!(fs::read(m.path("e/sub/deeper/y")).unwrap(), b"y");
    assert_content_on_legs(m.legs(), "e/sub/deeper/y", b"y");
    // Into its own subdirectory: EINVAL.
    assert_errno(
        fs::rename(m.path("e"), m.path("e/sub/e")),
        libc::EINVAL,
        "rename a dir into itself",
    );
    // New files in the renamed tree go to the right place on every leg.
    fs::write(m.path("e/sub/new"), b"n").unwrap();
    assert_content_on_legs(m.legs(), "e/sub/new", b"n");
    m.finish();
}

fn rename_across_directories(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::create_dir(m.path("d1")).unwrap();
    fs::create_dir(m.path("d2")).unwrap();
    fs::write(m.path("d1/f"), b"file").unwrap();
    fs::create_dir(m.path("d1/sub")).unwrap();
    fs::write(m.path("d1/sub/z"), b"z").unwrap();
    fs::rename(m.path("d1/f"), m.path("d2/g")).expect("rename d1/f d2/g");
    fs::rename(m.path("d1/sub"), m.path("d2/sub")).expect("rename d1/sub d2/sub");
    assert_absent_everywhere(&m, "d1/f");
    assert_absent_everywhere(&m, "d1/sub");
    assert_eq!(dir_names(m.path("d1")), Vec::<String>::new());
    assert_eq!(dir_names(m.path("d2")), vec!["g", "sub"]);
    assert_content_on_legs(m.legs(), "d2/g", b"file");
    assert_content_on_legs(m.legs(), "d2/sub/z", b"z");
    assert_eq!(
        lstat_ok(m.path("d1")).st_nlink,
        2,
        "nlink of d1 after moving sub out"
    );
    assert_eq!(
        lstat_ok(m.path("d2")).st_nlink,
        3,
        "nlink of d2 after moving sub in"
    );
    // And back up to the root.
    fs::rename(m.path("d2/sub/z"), m.path("z")).unwrap();
    assert_content_on_legs(m.legs(), "z", b"z");
    m.finish();
}

fn renameat2_noreplace(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("a"), b"A").unwrap();
    fs::write(m.path("b"), b"B").unwrap();
    assert_errno(
        renameat2(m.path("a"), m.path("b"), libc::RENAME_NOREPLACE),
        libc::EEXIST,
        "renameat2 NOREPLACE over an existing file",
    );
    assert_eq!(fs::read(m.path("a")).unwrap(), b"A");
    assert_eq!(fs::read(m.path("b")).unwrap(), b"B");
    assert_content_on_legs(m.legs(), "a", b"A");
    assert_content_on_legs(m.legs(), "b", b"B");
    renameat2(m.path("a"), m.path("c"), libc::RENAME_NOREPLACE)
        .expect("renameat2 NOREPLACE to a free name");
    assert_absent_everywhere(&m, "a");
    assert_content_on_legs(m.legs(), "c", b"A");
    m.finish();
}

fn renameat2_exchange(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("a"), b"AAA").unwrap();
    fs::write(m.path("b"), b"BBBBB").unwrap();
    let (ia, ib) = (ino(&m.path("a")), ino(&m.path("b")));
    renameat2(m.path("a"), m.path("b"), libc::RENAME_EXCHANGE).expect("RENAME_EXCHANGE a b");
    assert_eq!(fs::read(m.path("a")).unwrap(), b"BBBBB");
    assert_eq!(fs::read(m.path("b")).unwrap(), b"AAA");
    assert_eq!(
        (ino(&m.path("a")), ino(&m.path("b"))),
        (ib, ia),
        "inodes swapped"
    );
    assert_content_on_legs(m.legs(), "a", b"BBBBB");
    assert_content_on_legs(m.legs(), "b", b"AAA");

    // A file and a directory, in different directories.
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/child"), b"c").unwrap();
    fs::create_dir(m.path("other")).unwrap();
    fs::write(m.path("other/f"), b"f").unwrap();
    renameat2(m.path("d"), m.path("other/f"), libc::RENAME_EXCHANGE)
        .expect("RENAME_EXCHANGE dir <-> file");
    assert!(m.path("other/f").is_dir());
    assert_eq!(fs::read(m.path("other/f/child")).unwrap(), b"c");
    assert_eq!(fs::read(m.path("d")).unwrap(), b"f");
    assert_content_on_legs(m.legs(), "other/f/child", b"c");
    assert_content_on_legs(m.legs(), "d", b"f");
    assert_errno(
        renameat2(m.path("a"), m.path("missing"), libc::RENAME_EXCHANGE),
        libc::ENOENT,
        "RENAME_EXCHANGE with a missing target",
    );
    m.finish();
}

fn hard_links(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("f"), b"one").unwrap();
    fs::hard_link(m.path("f"), m.path("g")).expect("link f g");
    let (sf, sg) = (lstat_ok(m.path("f")), lstat_ok(m.path("g")));
    assert_eq!(sf.st_ino, sg.st_ino, "f and g have one st_ino");
    assert_eq!(sf.st_nlink, 2, "nlink of f right after link()");
    assert_eq!(sg.st_nlink, 2, "nlink of g right after link()");
    for (i, leg) in m.legs().iter().enumerate() {
        let (a, b) = (lstat_ok(leg.join("f")), lstat_ok(leg.join("g")));
        assert_eq!(a.st_ino, b.st_ino, "f and g are one inode on leg{i}");
        assert_eq!(a.st_nlink, 2, "nlink on leg{i}");
    }

    // A write through one name is seen through the other (and on every leg).
    {
        let mut w = OpenOptions::new().append(true).open(m.path("g")).unwrap();
        w.write_all(b"+two").unwrap();
    }
    assert_eq!(fs::read(m.path("f")).unwrap(), b"one+two");
    assert_content_on_legs(m.legs(), "f", b"one+two");

    // A third name in a subdirectory.
    fs::create_dir(m.path("sub")).unwrap();
    fs::hard_link(m.path("g"), m.path("sub/h")).expect("link g sub/h");
    assert_eq!(
        lstat_ok(m.path("f")).st_nlink,
        3,
        "nlink after the second link"
    );
    assert_eq!(ino(&m.path("sub/h")), sf.st_ino);

    // Unlink: nlink drops at once on the remaining names.
    fs::remove_file(m.path("f")).unwrap();
    assert_eq!(
        lstat_ok(m.path("g")).st_nlink,
        2,
        "nlink of g after unlink f"
    );
    fs::remove_file(m.path("sub/h")).unwrap();
    assert_eq!(
        lstat_ok(m.path("g")).st_nlink,
        1,
        "nlink of g after unlink sub/h"
    );
    assert_eq!(fs::read(m.path("g")).unwrap(), b"one+two");
    for (i, leg) in m.legs().iter().enumerate() {
        assert_eq!(lstat_ok(leg.join("g")).st_nlink, 1, "nlink of g on leg{i}");
    }

    // Errors.
    assert_errno(
        fs::hard_link(m.path("sub"), m.path("dirlink")),
        libc::EPERM,
        "link a directory",
    );
    fs::write(m.path("other"), b"").unwrap();
    assert_errno(
        fs::hard_link(m.path("g"), m.path("other")),
        libc::EEXIST,
        "link over an existing name",
    );
    assert_errno(
        fs::hard_link(m.path("missing"), m.path("x")),
        libc::ENOENT,
        "link a missing file",
    );

    // Renaming a linked name keeps the inode; link again after rename.
    fs::hard_link(m.path("g"), m.path("g2")).unwrap();
    fs::rename(m.path("g2"), m.path("sub/g3")).unwrap();
    assert_eq!(ino(&m.path("sub/g3")), sf.st_ino);
    assert_eq!(lstat_ok(m.path("g")).st_nlink, 2);
    // Link to a symlink links the symlink itself.
    symlink("g", m.path("sl")).unwrap();
    fs::hard_link(m.path("sl"), m.path("sl2")).expect("link a symlink");
    assert_eq!(ino(&m.path("sl")), ino(&m.path("sl2")));
    m.finish();
}

fn ino_stable_across_rename(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("f"), b"f").unwrap();
    fs::create_dir_all(m.path("d/inner")).unwrap();
    fs::write(m.path("d/inner/x"), b"x").unwrap();
    fs::create_dir(m.path("other")).unwrap();
    let i_f = ino(&m.path("f"));
    let i_d = ino(&m.path("d"));
    let i_x = ino(&m.path("d/inner/x"));

    fs::rename(m.path("f"), m.path("g")).unwrap();
    assert_eq!(ino(&m.path("g")), i_f, "st_ino of a file after rename");
    fs::rename(m.path("g"), m.path("other/g")).unwrap();
    assert_eq!(
        ino(&m.path("other/g")),
        i_f,
        "st_ino of a file after a move"
    );
    fs::rename(m.path("d"), m.path("e")).unwrap();
    assert_eq!(ino(&m.path("e")), i_d, "st_ino of a directory after rename");
    assert_eq!(
        ino(&m.path("e/inner/x")),
        i_x,
        "st_ino of a file inside a renamed directory"
    );
    fs::rename(m.path("e"), m.path("other/e")).unwrap();
    assert_eq!(ino(&m.path("other/e")), i_d);
    // fstat on an open fd agrees with stat.
    let f = File::open(m.path("other/g")).unwrap();
    use std::os::fd::AsRawFd;
    assert_eq!(fstat(f.as_raw_fd()).unwrap().st_ino, i_f, "fstat st_ino");
    // Distinct files have distinct inode numbers.
    let all: BTreeSet<u64> = [
        ino(&m.path("other/g")),
        ino(&m.path("other/e")),
        ino(&m.path("other/e/inner")),
        ino(&m.path("other/e/inner/x")),
        ino(&m.path("other")),
        ino(m.mnt()),
    ]
    .into_iter()
    .collect();
    assert_eq!(all.len(), 6, "inode numbers are not unique: {all:?}");
    drop(f);
    m.finish();
}

fn names_too_long(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    let n255 = "a".repeat(255);
    let n256 = "b".repeat(256);
    fs::write(m.path(&n255), b"ok").expect("create a 255-byte name");
    assert!(lstat(m.path(&n255)).is_ok());
    assert_eq!(dir_names(m.mnt()), vec![n255.clone()]);
    assert_content_on_legs(m.legs(), &n255, b"ok");

    assert_errno(
        File::create(m.path(&n256)),
        libc::ENAMETOOLONG,
        "create a 256-byte name",
    );
    assert_errno(
        fs::create_dir(m.path(&n256)),
        libc::ENAMETOOLONG,
        "mkdir a 256-byte name",
    );
    assert_errno(
        lstat(m.path(&n256)),
        libc::ENAMETOOLONG,
        "lstat a 256-byte name",
    );
    assert_errno(
        symlink("x", m.path(&n256)),
        libc::ENAMETOOLONG,
        "symlink with a 256-byte name",
    );
    assert_errno(
        fs::rename(m.path(&n255), m.path(&n256)),
        libc::ENAMETOOLONG,
        "rename to a 256-byte name",
    );
    assert_errno(
        mkfifo(m.path(&n256), 0o644),
        libc::ENAMETOOLONG,
        "mkfifo with a 256-byte name",
    );
    fs::create_dir(m.path("d")).unwrap();
    assert_errno(
        File::create(m.path(&format!("d/{n256}"))),
        libc::ENAMETOOLONG,
        "create a 256-byte name in a subdir",
    );
    assert_eq!(dir_names(m.mnt()), vec![n255.clone(), "d".to_string()]);
    m.finish();
}

fn readdir_lists_exact_names(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    assert_eq!(
        dir_names(m.mnt()),
        Vec::<String>::new(),
        "a fresh mount lists nothing (no .mirrorfs)"
    );
    let mut want: BTreeSet<String> = BTreeSet::new();
    for i in 0..300 {
        let name = format!("file-{i:04}");
        fs::write(m.path(&name), b"").unwrap();
        want.insert(name);
    }
    for name in [
        ".hidden",
        "with space",
        "ünïcödé",
        "-dash",
        "x".repeat(255).as_str(),
        "..dots",
        "a\nnewline",
    ] {
        fs::write(m.path(name), b"").unwrap_or_else(|e| panic!("create {name:?}: {e}"));
        want.insert(name.to_string());
    }
    fs::create_dir(m.path("dir")).unwrap();
    symlink("file-0000", m.path("link")).unwrap();
    mkfifo(m.path("fifo"), 0o644).unwrap();
    want.extend(["dir", "link", "fifo"].map(String::from));

    let got: BTreeSet<String> = dir_names(m.mnt()).into_iter().collect();
    assert_eq!(got, want, "readdir of the mount root");
    // d_type is right.
    for e in fs::read_dir(m.mnt()).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let ft = e.file_type().unwrap();
        let expected = match name.as_str() {
            "dir" => ft.is_dir(),
            "link" => ft.is_symlink(),
            "fifo" => ft.is_fifo(),
            _ => ft.is_file(),
        };
        assert!(expected, "d_type of {name:?} is {ft:?}");
    }
    // Removing half of the files shows at once.
    for i in (0..300).step_by(2) {
        let name = format!("file-{i:04}");
        fs::remove_file(m.path(&name)).unwrap();
        want.remove(&name);
    }
    let got: BTreeSet<String> = dir_names(m.mnt()).into_iter().collect();
    assert_eq!(got, want, "readdir after removing half of the files");
    // A subdirectory.
    for name in ["a", "b", "c"] {
        fs::write(m.path(&format!("dir/{name}")), b"").unwrap();
    }
    assert_eq!(dir_names(m.path("dir")), vec!["a", "b", "c"]);
    // Every leg has the same names as the mount (plus .mirrorfs at the root).
    for leg in m.legs() {
        let names: BTreeSet<String> = dir_names(leg)
            .into_iter()
            .filter(|n| n != ".mirrorfs")
            .collect();
        assert_eq!(names, want, "names on {}", leg.display());
    }
    m.finish();
}

fn mirrorfs_name_reserved(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    for leg in m.legs() {
        assert!(
            leg.join(".mirrorfs").is_dir(),
            "{} has no .mirrorfs/ after the first mount",
            leg.display()
        );
    }
    // The superblock must not change; the change logs beside it do (files are created below).
    let superblocks = |leg: &std::path::Path| {
        let mut t = snapshot_tree(&leg.join(".mirrorfs"));
        t.retain(|k, _| k.as_os_str() == "superblock.json");
        t
    };
    let meta_before: Vec<_> = m.legs().iter().map(|l| superblocks(l)).collect();
    // At the root, `.mirrorfs` is the control file (an empty regular file, not listed): the
    // legs' metadata folders never show through it.
    let r = m.path(".mirrorfs");
    assert_no_mirrorfs_leak(m.mnt());
    let mut buf = Vec::new();
    File::open(&r)
        .expect("open .mirrorfs for reading")
        .read_to_end(&mut buf)
        .unwrap();
    assert!(buf.is_empty(), "the control file has contents");
    assert_errno(
        fs::read_dir(&r).map(|_| ()),
        libc::ENOTDIR,
        "opendir .mirrorfs",
    );
    assert_errno(
        lstat(m.path(".mirrorfs/superblock.json")),
        libc::ENOTDIR,
        "lstat .mirrorfs/superblock.json",
    );
    assert_errno(
        File::create(m.path(".mirrorfs/x")),
        libc::ENOTDIR,
        "create .mirrorfs/x",
    );
    // Creating the name: it exists (the kernel answers from the lookup).
    assert_errno(fs::create_dir(&r), libc::EEXIST, "mkdir .mirrorfs");
    assert_errno(
        OpenOptions::new().write(true).create_new(true).open(&r),
        libc::EEXIST,
        "O_CREAT|O_EXCL .mirrorfs",
    );
    assert_errno(mkfifo(&r, 0o644), libc::EEXIST, "mkfifo .mirrorfs");
    assert_errno(symlink("x", &r), libc::EEXIST, "symlink named .mirrorfs");
    // Writing it: the open is refused; truncating it is a refused setattr.
    assert_errno(File::create(&r), libc::EACCES, "create (O_TRUNC) .mirrorfs");
    assert_errno(
        OpenOptions::new().write(true).open(&r),
        libc::EACCES,
        "open .mirrorfs for writing",
    );
    assert_errno(truncate(&r, 0), libc::EPERM, "truncate .mirrorfs");
    // Removing it: a directory operation on a file, or refused.
    assert_errno(fs::remove_dir(&r), libc::ENOTDIR, "rmdir .mirrorfs");
    assert_errno(fs::remove_file(&r), libc::EPERM, "unlink .mirrorfs");
    fs::write(m.path("f"), b"f").unwrap();
    fs::create_dir(m.path("d")).unwrap();
    // Renaming or linking it away, or something over it: refused.
    assert_errno(
        fs::rename(&r, m.path("stolen")),
        libc::EPERM,
        "rename .mirrorfs away",
    );
    assert_errno(
        fs::rename(m.path("f"), &r),
        libc::EPERM,
        "rename a file to .mirrorfs",
    );
    assert_errno(
        fs::rename(m.path("d"), &r),
        libc::ENOTDIR,
        "rename a dir to .mirrorfs (over a file)",
    );
    assert_errno(
        renameat2(m.path("f"), &r, libc::RENAME_EXCHANGE),
        libc::EPERM,
        "RENAME_EXCHANGE with .mirrorfs",
    );
    assert_errno(
        renameat2(m.path("f"), &r, libc::RENAME_NOREPLACE),
        libc::EEXIST,
        "RENAME_NOREPLACE to .mirrorfs",
    );
    assert_errno(
        fs::hard_link(m.path("f"), &r),
        libc::EEXIST,
        "link a file as .mirrorfs",
    );
    assert_errno(
        fs::hard_link(&r, m.path("hl")),
        libc::EPERM,
        "link .mirrorfs to another name",
    );
    assert_errno(lstat(m.path("stolen")), libc::ENOENT, "lstat stolen");
    assert_errno(lstat(m.path("hl")), libc::ENOENT, "lstat hl");
    assert_eq!(fs::read(m.path("f")).unwrap(), b"f");
    assert!(m.path("d").is_dir());
    assert_no_mirrorfs_leak(m.mnt());
    for (i, leg) in m.legs().iter().enumerate() {
        assert_snapshot_eq(
            &meta_before[i],
            &superblocks(leg),
            &format!(
                "{}/.mirrorfs/superblock.json after the attempts through the mount",
                leg.display()
            ),
        );
    }
    // Only the root-level name is reserved: below the root it is an ordinary name.
    fs::write(m.path("d/.mirrorfs"), b"user data").expect("create d/.mirrorfs");
    assert_eq!(dir_names(m.path("d")), vec![".mirrorfs"]);
    assert_content_on_legs(m.legs(), "d/.mirrorfs", b"user data");
    m.finish();
}

legs_test!(rename_between_hard_links_is_noop);

/// rename(2) between two names of one inode does nothing (POSIX): both names stay.
fn rename_between_hard_links_is_noop(n: usize) {
    require_fuse!();
    let m = TestMirror::new(n).mount();
    fs::write(m.path("f"), b"same inode").unwrap();
    fs::hard_link(m.path("f"), m.path("g")).unwrap();
    fs::rename(m.path("f"), m.path("g")).expect("rename f g (same inode)");
    assert_eq!(dir_names(m.mnt()), vec!["f", "g"], "both names must stay");
    assert_eq!(lstat_ok(m.path("f")).st_nlink, 2);
    for leg in m.legs() {
        assert!(
            leg.join("f").exists() && leg.join("g").exists(),
            "{}",
            leg.display()
        );
    }
    m.finish();
}
