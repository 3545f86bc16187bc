//! The mount's line in libmount's `/run/mount/utab`, so that `umount MNT` runs our helper.
//!
//! As root, util-linux's umount takes a shortcut for a mount that has no utab entry: it asks
//! statfs for the type, which for every FUSE mount says only `fuse`, and so never looks for
//! `umount.fuse.mirrorfs` (the helper that waits for the daemon to release the legs, see
//! `cli/unmount.rs`). With an entry it reads the type from mountinfo, `fuse.mirrorfs`, and runs
//! the helper. mount(8) writes such an entry only for a mount with userspace options (`x-*`), and a
//! mirror started as `mirrorfs LEGS MNT` gets none; so the daemon writes its own once mounted
//! (`SRC=... TARGET=... ROOT=/ OPTS=x-mirrorfs`, libmount's format, under libmount's lock file
//! and replaced by a rename, as libmount does) and takes it out when it ends. (`mount --fake`
//! cannot do it: for a `fuse.*` type it runs mount.fuse3, which mounts for real.)

use std::fs::OpenOptions;
use std::path::Path;

const DIR: &str = "/run/mount";

/// A value as libmount writes it: space, tab, newline and backslash escaped in octal.
fn mangle(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            ' ' => out.push_str("\\040"),
            '\t' => out.push_str("\\011"),
            '\n' => out.push_str("\\012"),
            '\\' => out.push_str("\\134"),
            c => out.push(c),
        }
    }
    out
}

/// Whether a utab line is the entry of the mount on `target`.
fn is_entry_of(line: &str, target: &str) -> bool {
    let want = format!("TARGET={}", mangle(target));
    line.split(' ').any(|f| f == want)
}

/// `text` without our entries for targets that are no longer mounted (a daemon that was
/// killed could not take its line out).
pub fn pruned(text: &str, mounted: &[String]) -> String {
    text.lines()
        .filter(|l| !l.ends_with("OPTS=x-mirrorfs") || mounted.iter().any(|m| is_entry_of(l, m)))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `text` with an entry for `target` added, or `None` when it has one already.
pub fn with_entry(text: &str, source: &str, target: &str) -> Option<String> {
    if text.lines().any(|l| is_entry_of(l, target)) {
        return None;
    }
    let mut out = text.to_string();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "SRC={} TARGET={} ROOT=/ OPTS=x-mirrorfs\n",
        mangle(source),
        mangle(target)
    ));
    Some(out)
}

/// `text` without our entry for `target` (an entry of mount(8)'s own is left alone), or
/// `None` when there is none.
pub fn without_entry(text: &str, target: &str) -> Option<String> {
    let ours = |l: &str| is_entry_of(l, target) && l.ends_with("OPTS=x-mirrorfs");
    if !text.lines().any(ours) {
        return None;
    }
    Some(
        text.lines()
            .filter(|l| !ours(l))
            .map(|l| format!("{l}\n"))
            .collect(),
    )
}

/// Changes utab under libmount's lock: `change` gets the text and returns the new one, or
/// `None` to leave it.
fn update(change: impl FnOnce(&str) -> Option<String>) -> std::io::Result<()> {
    std::fs::create_dir_all(DIR)?;
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(Path::new(DIR).join("utab.lock"))?;
    lock.lock()?;
    let path = Path::new(DIR).join("utab");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    if let Some(new) = change(&text) {
        // 0644, as libmount makes it (the daemon's umask is 0).
        let dir = crate::sys::fd::open_dir(Path::new(DIR))?;
        crate::sys::replace::replace_file_with(&dir, "utab", 0o644, new.as_bytes())?;
    }
    drop(lock);
    Ok(())
}

/// Writes the mount's entry (as root only; a failure is logged: umount then just does not
/// wait).
pub fn register(source: &str, target: &Path) {
    if crate::sys::geteuid() != 0 {
        return;
    }
    let target = target.to_string_lossy().into_owned();
    let mounted: Vec<String> = crate::sys::mountinfo::read()
        .into_iter()
        .map(|m| m.mount_point.to_string_lossy().into_owned())
        .collect();
    let change = |t: &str| {
        let kept = pruned(t, &mounted);
        with_entry(&kept, source, &target).or((kept != t).then_some(kept))
    };
    if let Err(e) = update(change) {
        log::warn!("cannot add the mount to {DIR}/utab ({e}): umount will not wait for the legs");
    }
}

/// Takes the mount's entry out again.
pub fn unregister(target: &Path) {
    if crate::sys::geteuid() != 0 {
        return;
    }
    let target = target.to_string_lossy().into_owned();
    if let Err(e) = update(|t| without_entry(t, &target)) {
        log::warn!("cannot remove the mount from {DIR}/utab: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_added_once_and_ours_removed() {
        let other = "SRC=/dev/sdb1 TARGET=/media/usb ROOT=/ OPTS=x-udisks\n";
        let t = with_entry(other, "/a:/b c", "/srv/my mirror").unwrap();
        assert_eq!(
            t,
            format!("{other}SRC=/a:/b\\040c TARGET=/srv/my\\040mirror ROOT=/ OPTS=x-mirrorfs\n")
        );
        assert_eq!(with_entry(&t, "/a:/b c", "/srv/my mirror"), None);
        // mount(8)'s own entry for the target counts as one, and stays.
        let theirs = "SRC=/a:/b TARGET=/srv/m ROOT=/ OPTS=x-test=1\n";
        assert_eq!(with_entry(theirs, "/a:/b", "/srv/m"), None);
        assert_eq!(without_entry(theirs, "/srv/m"), None);
        assert_eq!(without_entry(&t, "/srv/my mirror").unwrap(), other);
        assert_eq!(without_entry(other, "/srv/my mirror"), None);
        // Lines of ours whose mount is gone are pruned; others' stay.
        assert_eq!(pruned(&t, &["/media/usb".into()]), other);
        assert_eq!(pruned(&t, &["/srv/my mirror".into()]), t);
        // A target that only begins like ours is another.
        assert_eq!(
            with_entry(
                "SRC=x TARGET=/srv/m2 ROOT=/ OPTS=x-mirrorfs\n",
                "y",
                "/srv/m"
            )
            .map(|t| t.lines().count()),
            Some(2)
        );
    }
}
