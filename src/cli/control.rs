//! Talking to a running mirror through its control file: finding mounts, reading the stats
//! document, and `mirrorfs get|set|list`.

use crate::errno::Errno;
use crate::recovery::{LegCommand, RepairFrom, ScrubCommand};
use crate::stats::Stats;
use crate::sys;
use std::ffi::{CString, OsStr, OsString};
use std::path::{Path, PathBuf};

/// Exit status for usage errors and for paths that are not mirrorfs mounts.
pub const EXIT_USAGE: i32 = 2;

/// What a refused change says (EPERM from the daemon, or EACCES from the kernel on the
/// control file).
const NOT_ALLOWED: &str = "permission denied: only root (or the user who mounted the mirror) \
                           may change it";

/// The prefix of every key.
const PREFIX: &str = "user.mirrorfs.";

/// Every mirrorfs mount point, from `/proc/self/mountinfo`.
pub fn mounts() -> Vec<PathBuf> {
    sys::mountinfo::read()
        .into_iter()
        .filter(|m| m.fstype == "fuse.mirrorfs")
        .map(|m| m.mount_point)
        .collect()
}

/// The control file of the mirrorfs mount at `mount` (or `mount` itself when it is the
/// control file); `None` when `mount` is not a mirrorfs mount, so that nothing is ever set on
/// an ordinary directory by mistake.
fn control_file(mount: &Path) -> Option<PathBuf> {
    let c = if mount.file_name().is_some_and(|n| n == ".mirrorfs") && mount.is_file() {
        mount.to_path_buf()
    } else {
        mount.join(".mirrorfs")
    };
    let is_ours = c.is_file()
        && CString::new(format!("{PREFIX}version"))
            .ok()
            .is_some_and(|k| sys::xattr::get_path(&c, &k).is_ok());
    is_ours.then_some(c)
}

/// Why `mount` has no control file. A mount whose daemon is gone fails every call that
/// reaches it, and a getxattr always does (a stat may be answered from the kernel's cache):
/// with ENOTCONN, or, while the kernel is still tearing the connection down, ECONNABORTED, or
/// ECANCELED over io_uring. Say so, with the way out, rather than call it "not a mirrorfs
/// mount".
fn not_a_mount(mount: &Path) -> (i32, String) {
    let m = mount.display();
    let gone = CString::new(format!("{PREFIX}version"))
        .ok()
        .and_then(|k| sys::xattr::get_path(mount, &k).err())
        .is_some_and(|e| {
            matches!(
                e.code(),
                libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED
            )
        });
    let why = if gone {
        format!(
            "{m}: the mirrorfs daemon of this mount is gone (transport endpoint is not \
             connected); 'umount -l {m}' clears it, and the next mount recovers as after a crash"
        )
    } else {
        format!("{m}: not a mirrorfs mount")
    };
    (EXIT_USAGE, why)
}

fn key_name(key: &str) -> Result<CString, String> {
    let full = if key.starts_with(PREFIX) {
        key.to_string()
    } else {
        format!("{PREFIX}{key}")
    };
    CString::new(full).map_err(|_| format!("invalid key '{key}'"))
}

/// Why a key could not be read or set, in words.
fn explain(mount: &Path, key: &str, e: Errno) -> String {
    let m = mount.display();
    match e.code() {
        libc::ENODATA => format!("{m}: no key '{key}'"),
        libc::ENOTSUP => format!("{m}: not a mirrorfs mount"),
        libc::EROFS => format!("{m}: '{key}' cannot be changed while mounted"),
        libc::EINVAL => format!("{m}: invalid value for '{key}'"),
        libc::ENOENT => format!("{m}: no such file or directory"),
        libc::EPERM | libc::EACCES => format!("{m}: {key}: {NOT_ALLOWED}"),
        _ => format!("{m}: {key}: {e}"),
    }
}

/// The value of one key.
pub fn get(mount: &Path, key: &str) -> Result<Vec<u8>, (i32, String)> {
    let name = key_name(key).map_err(|e| (EXIT_USAGE, e))?;
    let file = control_file(mount).ok_or_else(|| not_a_mount(mount))?;
    sys::xattr::get_path(&file, &name).map_err(|e| {
        let code = if e.code() == libc::ENOTSUP || e.code() == libc::ENOENT {
            EXIT_USAGE
        } else {
            1
        };
        (code, explain(mount, key, e))
    })
}

/// The stats document of `mount`.
pub fn stats(mount: &Path) -> Result<Stats, (i32, String)> {
    let raw = get(mount, "stats").map_err(|(_, e)| {
        (
            EXIT_USAGE,
            if e.ends_with("no key 'stats'") {
                format!("{}: not a mirrorfs mount", mount.display())
            } else {
                e
            },
        )
    })?;
    serde_json::from_slice(&raw).map_err(|e| {
        (
            1,
            format!("{}: unreadable statistics: {e}", mount.display()),
        )
    })
}

/// Sends a command through a writable key; prints one line and returns the exit status.
pub fn command(mount: &Path, key: &str, value: &[u8], what: &str) -> i32 {
    let Some(file) = control_file(mount) else {
        let (code, e) = not_a_mount(mount);
        eprintln!("mirrorfs: {e}");
        return code;
    };
    let name = key_name(key).expect("a plain key");
    match sys::xattr::set_path(&file, &name, value) {
        Ok(()) => 0,
        Err(e) => {
            let why = refusal_reason(&file, e).unwrap_or_else(|| match e.code() {
                libc::ENOTSUP => "not supported yet".to_string(),
                libc::EPERM | libc::EACCES => NOT_ALLOWED.to_string(),
                _ => e.to_string(),
            });
            eprintln!("mirrorfs: {}: {what}: {why}", mount.display());
            1
        }
    }
}

/// Why the daemon refused this process's last write to a key (`user.mirrorfs.last_error`),
/// when the errno `e` came from the daemon and not from the kernel before it.
fn refusal_reason(control: &Path, e: Errno) -> Option<String> {
    if matches!(
        e.code(),
        libc::EACCES | libc::E2BIG | libc::ENOTSUP | libc::ENOENT
    ) {
        return None;
    }
    let name = key_name("last_error").ok()?;
    let why = sys::xattr::get_path(control, &name).ok()?;
    Some(String::from_utf8_lossy(&why).into_owned())
}

/// How the daemon is to find a leg the user named on the command line. A leg of the mirror,
/// found by the one rule the daemon uses too ([`crate::leg::find`]: its name, `legN`, or its
/// directory, here resolved in the caller's directory), is sent by its name. Anything else is
/// sent as the user wrote it when it is no path here (the daemon then names it in its
/// refusal), or else as an absolute path (a new leg's directory; the daemon's directory is
/// `/`).
fn leg_arg(mount: &Path, arg: &OsStr) -> OsString {
    if let Ok(st) = stats(mount) {
        let legs: Vec<(&str, &Path)> = st
            .legs
            .iter()
            .map(|l| (l.name.as_str(), Path::new(&l.path)))
            .collect();
        if let Some(i) = crate::leg::find(arg, &legs) {
            return st.legs[i].name.clone().into();
        }
    }
    let is_path = arg.as_encoded_bytes().contains(&b'/') || Path::new(arg).exists();
    if !is_path {
        return arg.to_os_string();
    }
    std::path::absolute(arg)
        .map(PathBuf::into_os_string)
        .unwrap_or_else(|_| arg.to_os_string())
}

/// The scrub document (`user.mirrorfs.scrub`) of the mount: its progress, or `None` when no
/// scrub ran since the mount.
fn scrub_doc(mount: &Path) -> Result<Option<crate::stats::ScanStats>, (i32, String)> {
    let v = get(mount, "scrub")?;
    if v == b"none" {
        return Ok(None);
    }
    serde_json::from_slice(&v).map(Some).map_err(|e| {
        (
            1,
            format!(
                "{}: the scrub document does not parse: {e}",
                mount.display()
            ),
        )
    })
}

/// Waits until the scrub of `mount` is over, showing its progress (`progress.rs`).
fn wait_scrub(mount: &Path) -> i32 {
    super::progress::follow(
        super::progress::Job {
            kind: "scrub",
            read: Box::new(|| scrub_doc(mount)),
        },
        std::time::Duration::from_secs(5),
    )
}

/// Waits for the resync that a leg command just started (one that was not `before`) to end.
fn wait_resync(mount: &Path, before: Option<crate::stats::ScanStats>) -> i32 {
    let key = |s: &crate::stats::ScanStats| (s.started_unix_s, s.legs.clone());
    let before = before.as_ref().map(key);
    super::progress::follow(
        super::progress::Job {
            kind: "resync",
            read: Box::new(move || {
                let st = stats(mount)?;
                Ok(st.resync.filter(|r| Some(key(r)) != before))
            }),
        },
        std::time::Duration::from_secs(10),
    )
}

/// `mirrorfs scrub start MOUNT [--repair[=majority|LEG]] [--wait]`.
pub fn scrub_start(mount: &Path, repair: Option<&OsStr>, wait: bool) -> i32 {
    let repair = match repair {
        None => RepairFrom::Nothing,
        Some(r) if r == "majority" => RepairFrom::Majority,
        Some(r) if r.is_empty() => {
            return usage("--repair= needs 'majority' or a leg (see 'mirrorfs scrub start --help')")
        }
        Some(leg) => RepairFrom::Leg(leg_arg(mount, leg)),
    };
    let value = ScrubCommand::Start(repair).encode();
    match command(mount, "scrub", &value, "scrub start") {
        0 if wait => wait_scrub(mount),
        code => code,
    }
}

/// `mirrorfs scrub cancel MOUNT`.
pub fn scrub_cancel(mount: &Path) -> i32 {
    command(
        mount,
        "scrub",
        &ScrubCommand::Cancel.encode(),
        "scrub cancel",
    )
}

/// `mirrorfs scrub status MOUNT`: exit 1 while differences remain unrepaired.
pub fn scrub_status(mount: &Path) -> i32 {
    match get(mount, "scrub") {
        Ok(v) if v == b"none" => {
            println!("no scrub since the mount");
            0
        }
        Ok(v) => {
            let doc: serde_json::Value = serde_json::from_slice(&v).unwrap_or_default();
            let s: Result<crate::stats::ScanStats, _> = serde_json::from_value(doc.clone());
            match s {
                Ok(s) => println!("{}", super::format::scan_line("scrub", &s)),
                Err(_) => println!("{}", String::from_utf8_lossy(&v)),
            }
            for d in doc["differing"].as_array().into_iter().flatten() {
                println!("  differs: {}", d.as_str().unwrap_or(""));
            }
            let diffs = doc["differences"].as_u64().unwrap_or(0);
            let repaired = doc["repaired"].as_u64().unwrap_or(0);
            if diffs > repaired {
                1
            } else {
                0
            }
        }
        Err((code, e)) => {
            eprintln!("mirrorfs: {e}");
            code
        }
    }
}

/// `mirrorfs leg fail|add|remove|replace MOUNT LEG [NEWLEG] [--full]`. LEG and NEWLEG may be
/// any path (spaces, newlines, bytes that are not UTF-8), relative to the caller's directory.
pub fn leg(cmd: super::args::LegCmd) -> i32 {
    use super::args::LegCmd as L;
    let wait = matches!(
        cmd,
        L::Add { wait: true, .. } | L::Replace { wait: true, .. }
    );
    let (what, mount, c) = match cmd {
        L::Fail { mount, leg } => {
            let c = LegCommand::Fail(leg_arg(&mount, &leg));
            ("fail", mount, c)
        }
        L::Add {
            mount, leg, full, ..
        } => {
            let c = LegCommand::Add {
                leg: leg_arg(&mount, &leg),
                full,
            };
            ("add", mount, c)
        }
        L::Remove { mount, leg } => {
            let c = LegCommand::Remove(leg_arg(&mount, &leg));
            ("remove", mount, c)
        }
        L::Replace {
            mount, leg, newdir, ..
        } => {
            let c = LegCommand::Replace {
                leg: leg_arg(&mount, &leg),
                new: std::path::absolute(&newdir).unwrap_or(newdir),
            };
            ("replace", mount, c)
        }
    };
    // The resync before the command, to tell the new one from it.
    let before = if wait {
        match stats(&mount) {
            Ok(st) => st.resync,
            Err((code, e)) => {
                eprintln!("mirrorfs: {e}");
                return code;
            }
        }
    } else {
        None
    };
    match command(&mount, "leg", &c.encode(), &format!("leg {what}")) {
        0 if wait => wait_resync(&mount, before),
        code => code,
    }
}

fn usage(line: &str) -> i32 {
    eprintln!("mirrorfs: {line}");
    EXIT_USAGE
}

/// The id of the last event a mount dispatched (0: none yet).
fn last_event(mount: &Path) -> Result<(u64, serde_json::Value), (i32, String)> {
    let v = get(mount, "notify_last")?;
    if v == b"none" {
        return Ok((0, serde_json::Value::Null));
    }
    let doc: serde_json::Value = serde_json::from_slice(&v).map_err(|e| {
        (
            1,
            format!("{}: unreadable notify_last: {e}", mount.display()),
        )
    })?;
    Ok((doc["id"].as_u64().unwrap_or(0), doc))
}

/// `mirrorfs notify-test MOUNT`: fires a test event and says what ran.
pub fn notify_test(mount: &Path) -> i32 {
    let before = match last_event(mount) {
        Ok((id, _)) => id,
        Err((code, e)) => {
            eprintln!("mirrorfs: {e}");
            return code;
        }
    };
    match command(mount, "notify_test", b"1", "notify-test") {
        0 => {}
        code => return code,
    }
    let start = std::time::Instant::now();
    let doc = loop {
        match last_event(mount) {
            Ok((id, doc)) if id > before && doc["event"] == "test" => break doc,
            Ok(_) if start.elapsed() > std::time::Duration::from_secs(130) => {
                eprintln!(
                    "mirrorfs: {}: notify-test: the daemon did not report the test event",
                    mount.display()
                );
                return 1;
            }
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
            Err((code, e)) => {
                eprintln!("mirrorfs: {e}");
                return code;
            }
        }
    };
    let ran = doc["ran"].as_object().cloned().unwrap_or_default();
    if ran.is_empty() {
        eprintln!(
            "mirrorfs: {}: notify-test: nothing to run: set notify_program=, mail_to=, or put \
             executables in the events directory (mirrorfs get {} events_dir)",
            mount.display(),
            mount.display()
        );
        return 1;
    }
    let mut ok = true;
    for (what, result) in &ran {
        let result = result.as_str().unwrap_or("");
        ok &= result == "exit 0";
        println!("{what}: {result}");
    }
    if ok {
        0
    } else {
        1
    }
}

/// A key's value as `get` and `list` print it: the sizes of the options that take one
/// (`minfreespace`, `resync_speed_max`; the keys themselves hold byte counts) as
/// `value::show_size` writes them, which `set` and `-o` read back; with `bytes`, or for any
/// other key, as the daemon gave it.
fn shown(key: &str, raw: &[u8], bytes: bool) -> String {
    let text = String::from_utf8_lossy(raw).into_owned();
    let key = key.strip_prefix(PREFIX).unwrap_or(key);
    let is_size = crate::config::table::option(key).is_some_and(|(o, _)| o.form == "SIZE");
    if bytes || !is_size {
        return text;
    }
    // `N`, or `NAME=N,...` when the legs differ.
    let one = |item: &str| -> String {
        let (name, n) = match item.rsplit_once('=') {
            Some((name, n)) => (Some(name), n),
            None => (None, item),
        };
        match (name, n.parse::<u64>()) {
            (Some(name), Ok(n)) => format!("{name}={}", crate::value::show_size(n)),
            (None, Ok(n)) => crate::value::show_size(n),
            _ => item.to_string(),
        }
    };
    text.split(',').map(one).collect::<Vec<_>>().join(",")
}

/// `mirrorfs get [--bytes] MOUNT KEY`.
pub fn get_cmd(mount: &Path, key: &str, bytes: bool) -> i32 {
    match get(mount, key) {
        Ok(v) => {
            println!("{}", shown(key, &v, bytes));
            0
        }
        Err((code, e)) => {
            eprintln!("mirrorfs: {e}");
            code
        }
    }
}

/// `mirrorfs set MOUNT KEY VALUE`.
pub fn set_cmd(m: &Path, key: &str, value: &str) -> i32 {
    let name = match key_name(key) {
        Ok(n) => n,
        Err(e) => return usage(&e),
    };
    let Some(file) = control_file(m) else {
        let (code, e) = not_a_mount(m);
        eprintln!("mirrorfs: {e}");
        return code;
    };
    match sys::xattr::set_path(&file, &name, value.as_bytes()) {
        Ok(()) => 0,
        Err(e) => {
            match refusal_reason(&file, e) {
                Some(why) => eprintln!("mirrorfs: {}: {why}", m.display()),
                None => eprintln!("mirrorfs: {}", explain(m, key, e)),
            }
            if e.code() == libc::ENOTSUP {
                EXIT_USAGE
            } else {
                1
            }
        }
    }
}

/// `mirrorfs list [--bytes] MOUNT`.
pub fn list_cmd(m: &Path, bytes: bool) -> i32 {
    let Some(file) = control_file(m) else {
        let (code, e) = not_a_mount(m);
        eprintln!("mirrorfs: {e}");
        return code;
    };
    let names = match sys::xattr::list_path(&file) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("mirrorfs: {}", explain(m, "(list)", e));
            return EXIT_USAGE;
        }
    };
    let keys: Vec<String> = names
        .iter()
        .filter_map(|n| std::str::from_utf8(n).ok()?.strip_prefix(PREFIX))
        .filter(|k| *k != "stats")
        .map(str::to_string)
        .collect();
    if keys.is_empty() {
        return usage(&format!("{}: not a mirrorfs mount", m.display()));
    }
    for k in keys {
        match get(m, &k) {
            Ok(v) => println!("{k}={}", shown(&k, &v, bytes)),
            Err((_, e)) => eprintln!("mirrorfs: {e}"),
        }
    }
    0
}

/// `mirrorfs restart MOUNT [--binary PROGRAM]`: the keeper replaces the mount's server (with
/// PROGRAM, another build, when given) and programs see a pause; this command waits until the
/// new server answers, and prints its pid and build.
pub fn restart(mount: &Path, binary: Option<&Path>) -> i32 {
    let before = match stats(mount) {
        Ok(s) => s,
        Err((code, e)) => {
            eprintln!("mirrorfs: {e}");
            return code;
        }
    };
    let program = match binary {
        None => Vec::new(),
        Some(b) => match std::fs::canonicalize(b) {
            Ok(p) => p.into_os_string().into_encoded_bytes(),
            Err(e) => {
                eprintln!(
                    "mirrorfs: {}: restart: '{}': {e}",
                    mount.display(),
                    b.display()
                );
                return 2;
            }
        },
    };
    let Some(file) = control_file(mount) else {
        let (code, e) = not_a_mount(mount);
        eprintln!("mirrorfs: {e}");
        return code;
    };
    let name = key_name("restart").expect("a plain key");
    if let Err(e) = sys::xattr::set_path(&file, &name, &program) {
        // The daemon says why (no keeper, io_uring, a program it will not run), unless the
        // kernel refused before it.
        let why = match e.code() {
            libc::EACCES => None,
            _ => key_name("last_error")
                .ok()
                .and_then(|n| sys::xattr::get_path(&file, &n).ok())
                .map(|w| String::from_utf8_lossy(&w).into_owned())
                .filter(|w| !w.is_empty()),
        };
        let why = why.unwrap_or_else(|| match e.code() {
            libc::EPERM | libc::EACCES => NOT_ALLOWED.to_string(),
            _ => e.to_string(),
        });
        eprintln!("mirrorfs: {}: restart: {why}", mount.display());
        return 1;
    }
    let start = std::time::Instant::now();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(100));
        match stats(mount) {
            Ok(now) if now.pid != before.pid => {
                println!(
                    "{}: restarted: pid {} -> {}, {} {} -> {} {} ({:.1} s)",
                    mount.display(),
                    before.pid,
                    now.pid,
                    before.mirrorfs_version,
                    before.build,
                    now.mirrorfs_version,
                    now.build,
                    start.elapsed().as_secs_f64()
                );
                return 0;
            }
            Ok(_) | Err(_) if start.elapsed() < std::time::Duration::from_secs(120) => {}
            Ok(_) => {
                eprintln!(
                    "mirrorfs: {}: restart: no new server after 120 s (see the log)",
                    mount.display()
                );
                return 1;
            }
            Err((code, e)) => {
                eprintln!("mirrorfs: restart: {e}");
                return code;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_shown_for_people_unless_bytes_are_asked_for() {
        assert_eq!(shown("minfreespace", b"4294967296", false), "4G");
        assert_eq!(
            shown("user.mirrorfs.minfreespace", b"4294967296", false),
            "4G"
        );
        assert_eq!(shown("minfreespace", b"4294967296", true), "4294967296");
        assert_eq!(
            shown("minfreespace", b"ssd=1610612736,usb=0", false),
            "ssd=1.5G,usb=0B"
        );
        assert_eq!(shown("resync_speed_max", b"52428800", false), "50M");
        assert_eq!(shown("resync_speed_max", b"0", false), "0B");
        // Not sizes: as they are.
        assert_eq!(shown("threads", b"4096", false), "4096");
        assert_eq!(shown("pid", b"4096", false), "4096");
        assert_eq!(
            shown("read_policy", b"round-robin:256K", false),
            "round-robin:256K"
        );
    }

    #[test]
    fn keys_take_or_leave_the_prefix() {
        assert_eq!(
            key_name("read_policy").unwrap().to_str().unwrap(),
            "user.mirrorfs.read_policy"
        );
        assert_eq!(
            key_name("user.mirrorfs.stats").unwrap().to_str().unwrap(),
            "user.mirrorfs.stats"
        );
    }
}
