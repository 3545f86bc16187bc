//! The control interface: `MOUNT/.mirrorfs` and the `user.mirrorfs.*` keys.
//!
//! The control file is an empty, read-only regular file at the mount's root that readdir does
//! not list. It (and the root directory) answers:
//! - `user.mirrorfs.stats`: the statistics document ([`crate::stats`], built in `stats.rs`);
//! - `user.mirrorfs.<option>` for every mount option, `version`, `pid`, `mount`, `state`,
//!   `legs`; the options the table marks live ([`Live`]) can be set (EINVAL and no change for
//!   a bad value), the others are read-only (EROFS);
//! - `user.mirrorfs.stats_reset` (write-only) zeroes the counters.
//!
//! Every file answers `relpath`, `allpaths`, `readleg` and `copies` (read-only).
//!
//! With `-o fault_injection` (tests only), `user.mirrorfs.fault` takes a rule
//! (`leg=LEG op=read|write|...|* errno=EIO|EROFS|ENOSPC|N [times=N]`): on the root or the
//! control file for every file, on a file for that file only; `clear` removes every rule.
//! `transport=panic|error` instead makes the thread that takes the next request panic, or end
//! with an error ([`TransportFault`]), as a bug or a failed ring would.
//!
//! Who may write: every write (or removal) of a `user.mirrorfs.*` key, settings and commands
//! alike, needs root, `CAP_SYS_ADMIN` in the requesting process, or the user who mounted a
//! mirror that root did not mount ([`may_control`]); anyone else gets EPERM and nothing
//! changes, whatever the modes of the root directory and `default_permissions` say. Reading is
//! open to everyone who can see the mount (per-file keys need read access to the file).
//!
//! None of these keys is stored on a leg, and none is listed by listxattr except on the
//! control file itself (so `cp -a` and `rsync -X` never copy them). Unknown keys get ENODATA.

use super::inode::{CONTROL_INO, ROOT_INO};
use super::{Caller, InodeRef, MirrorFs};
use crate::config::table::{self, Access, KeySpec, Live, OptionSpec, Scope};
use crate::errno::{refuse, Errno, Refusal, Result};
use crate::leg::LegIdx;
use crate::mirror::fault::FaultRule;
use crate::policy::ReadRequest;
use crate::recovery::Outcome;
use fuser::{FileAttr, FileType, INodeNo};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

/// The control file's name at the mount's root.
pub const CONTROL_NAME: &str = ".mirrorfs";

/// The handle number an open of the control file gets (real handles start at 1).
pub const CONTROL_FH: u64 = 0;

/// Whether a caller may change the mirror through `user.mirrorfs.*`: root, a process holding
/// `CAP_SYS_ADMIN` (asked only when needed), or the user who mounted the mirror when the
/// daemon does not run as root (`daemon_uid`).
pub fn may_control(caller_uid: u32, daemon_uid: u32, cap_sys_admin: impl FnOnce() -> bool) -> bool {
    caller_uid == 0 || (daemon_uid != 0 && caller_uid == daemon_uid) || cap_sys_admin()
}

/// An injected fault of the FUSE transport (the `fault` key's `transport=panic|error`, with
/// `-o fault_injection`): the serving thread (an io_uring queue thread, or a /dev/fuse reader
/// when there are no rings) that takes the next request panics, or ends with an error, as a
/// bug in it or a ring the kernel failed would. Every later request meets it first, so it
/// cannot be cleared: the mount ends. The FUSE layer acts on it
/// ([`MirrorFs::take_transport_fault`]); the filesystem only keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportFault {
    Panic = 1,
    Error = 2,
    /// The next request that changes a name is done, and the process dies (SIGKILL) before
    /// it answers: the kernel sends it again to a successor (`keeper=on`).
    DieUnanswered = 3,
}

impl TransportFault {
    fn parse(v: &str) -> Option<TransportFault> {
        match v {
            "panic" => Some(TransportFault::Panic),
            "error" => Some(TransportFault::Error),
            "die-unanswered" => Some(TransportFault::DieUnanswered),
            _ => None,
        }
    }
}

impl MirrorFs {
    /// The injected transport fault, if one is set, cleared as it is taken (one relaxed load
    /// per request when none is).
    pub fn take_transport_fault(&self) -> Option<TransportFault> {
        self.take_transport_fault_if(|_| true)
    }

    /// As [`take_transport_fault`](Self::take_transport_fault), for a fault `wanted` takes:
    /// another is left set.
    pub fn take_transport_fault_if(
        &self,
        wanted: impl Fn(TransportFault) -> bool,
    ) -> Option<TransportFault> {
        let f = match self.transport_fault.load(Ordering::Relaxed) {
            1 => TransportFault::Panic,
            2 => TransportFault::Error,
            3 => TransportFault::DieUnanswered,
            _ => return None,
        };
        let took = wanted(f)
            && self
                .transport_fault
                .compare_exchange(f as u8, 0, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        took.then_some(f)
    }
}

/// What the keys and the daemon's event notifier (`daemon/events.rs`) share: test events asked
/// for with `user.mirrorfs.notify_test`, and the last event the notifier dispatched, which
/// `user.mirrorfs.notify_last` shows (so `mirrorfs notify-test` can say what ran).
#[derive(Default)]
pub struct EventBus {
    test_requests: std::sync::atomic::AtomicU64,
    last: parking_lot::Mutex<Option<String>>,
    /// The watcher's looks whose events have all been dispatched (`user.mirrorfs.notify_looks`):
    /// once it has moved on by one, whatever the state before showed has run its programs.
    looks: std::sync::atomic::AtomicU64,
}

impl EventBus {
    /// Test events asked for since the mount.
    pub fn test_requests(&self) -> u64 {
        self.test_requests.load(Ordering::Relaxed)
    }

    /// Records the last event dispatched (a JSON document).
    pub fn record(&self, doc: String) {
        *self.last.lock() = Some(doc);
    }

    /// A look of the watcher is over, and every event it found dispatched.
    pub fn looked(&self) {
        self.looks.fetch_add(1, Ordering::Release);
    }
}

/// Why the last refused control writes were refused, by requesting process, so that a
/// command that got only an errno can read the reason back (`user.mirrorfs.last_error`).
/// The most recent [`LastErrors::KEPT`] processes are remembered.
#[derive(Default)]
pub(super) struct LastErrors(parking_lot::Mutex<std::collections::VecDeque<(u32, String)>>);

impl LastErrors {
    const KEPT: usize = 64;

    fn remember(&self, pid: u32, why: String) {
        let mut q = self.0.lock();
        q.retain(|(p, _)| *p != pid);
        q.push_back((pid, why));
        while q.len() > Self::KEPT {
            q.pop_front();
        }
    }

    fn recall(&self, pid: u32) -> Option<String> {
        let q = self.0.lock();
        q.iter()
            .find(|(p, _)| *p == pid)
            .map(|(_, why)| why.clone())
    }
}

/// How a `user.mirrorfs.*` name relates to an inode (see [`crate::config::table`]).
enum Key {
    /// A mount option (control file or root).
    Option(&'static OptionSpec),
    /// Another mount-wide key (control file or root).
    Mount(&'static KeySpec),
    /// A per-file key.
    File(&'static KeySpec),
    /// Injected faults (only with `-o fault_injection`), on any inode.
    Fault,
    /// Nothing we know.
    Unknown,
}

impl MirrorFs {
    /// The control file's attributes: empty, 0644, owned by the daemon's user, timed at mount.
    pub fn control_attr(&self) -> FileAttr {
        let t = SystemTime::now() - self.started.elapsed();
        FileAttr {
            ino: INodeNo(CONTROL_INO),
            size: 0,
            blocks: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            kind: FileType::RegularFile,
            perm: 0o644,
            nlink: 1,
            uid: crate::sys::geteuid(),
            gid: crate::sys::getegid(),
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// Whether `parent`/`name` is the control file.
    pub(super) fn is_control_name(parent: u64, name: &std::ffi::OsStr) -> bool {
        parent == ROOT_INO && name == CONTROL_NAME
    }

    fn classify(&self, ino: u64, key: &str) -> Key {
        let mount_wide = ino == CONTROL_INO || ino == ROOT_INO;
        if key == "fault" {
            return match self.config.options.fault_injection {
                true => Key::Fault,
                false => Key::Unknown,
            };
        }
        match (table::option(key), table::key(key)) {
            (Some((o, true)), _) if mount_wide => Key::Option(o),
            (_, Some(k)) if mount_wide && k.scope == Scope::Mount => Key::Mount(k),
            (_, Some(k)) if ino != CONTROL_INO && k.scope == Scope::File => Key::File(k),
            _ => Key::Unknown,
        }
    }

    /// `getxattr` of `user.mirrorfs.<key>` on `ino`.
    pub(super) fn control_get(&self, ino: u64, key: &str, caller: &Caller) -> Result<Vec<u8>> {
        match self.classify(ino, key) {
            Key::Option(o) => Ok(self.option_value(o).into()),
            Key::Mount(k) if k.access == Access::WriteOnly => Err(Errno::ENODATA),
            Key::Mount(k) if k.access == Access::ReadOwn => self
                .last_errors
                .recall(caller.pid)
                .map(String::into_bytes)
                .ok_or(Errno::ENODATA),
            Key::Mount(k) => self.mount_key(k.name),
            Key::File(k) => {
                let inode = self.inodes.get(ino)?;
                if !self.config.options.default_permissions {
                    // As for any `user.*` attribute: read permission on the file.
                    self.on_metadata_leg("getxattr", |leg| {
                        let fd = inode.fd(leg)?;
                        self.checked(caller, || crate::sys::fd::access(fd.as_fd(), libc::R_OK))
                    })?;
                }
                self.file_key(&inode, k.name)
            }
            Key::Fault => self.mount_key("fault"),
            Key::Unknown => Err(Errno::ENODATA),
        }
    }

    /// Whether `caller` may change the mirror ([`may_control`]).
    fn caller_may_control(&self, caller: &Caller) -> bool {
        may_control(caller.uid, crate::sys::geteuid(), || {
            caller.has_cap(crate::sys::creds::CAP_SYS_ADMIN)
        })
    }

    /// `setxattr` of `user.mirrorfs.<key>` on `ino`. Nothing changes unless the caller may
    /// control the mirror (EPERM) and the value is good.
    pub(super) fn control_set(
        &self,
        ino: u64,
        key: &str,
        value: &[u8],
        caller: &Caller,
    ) -> Result<()> {
        let r = if self.caller_may_control(caller) {
            self.control_write(ino, key, value)
        } else {
            Err(Refusal::new(
                Errno::EPERM,
                "only root (or the user who mounted the mirror) may change it",
            ))
        };
        r.map_err(|refusal| {
            log::info!(
                "user.mirrorfs.{key}: refused to uid {} (pid {}): {refusal}",
                caller.uid,
                caller.pid
            );
            let errno = refusal.errno;
            self.last_errors.remember(caller.pid, refusal.why);
            errno
        })
    }

    /// A write of `user.mirrorfs.<key>` on `ino` by someone who may control the mirror.
    fn control_write(&self, ino: u64, key: &str, value: &[u8]) -> Outcome<()> {
        let text = || {
            std::str::from_utf8(value)
                .map(str::trim)
                .map_err(|_| Refusal::new(Errno::EINVAL, "the value is not text"))
        };
        match self.classify(ino, key) {
            Key::Option(o) if o.live.is_some() => self.set_live(o, text()?),
            // Commands: raw bytes, so that paths may hold anything (see `recovery::command`).
            Key::Mount(k) if k.name == "scrub" => self.recovery.scrub_command(value),
            Key::Mount(k) if k.name == "leg" => self.recovery.leg_command(value),
            Key::Mount(k) if k.name == "stats_reset" => {
                self.reset_stats();
                Ok(())
            }
            Key::Mount(k) if k.name == "restart" => match self.restart.lock().as_ref() {
                Some(hook) => hook(value).map_err(|(errno, why)| Refusal::new(errno, why)),
                None => refuse(
                    Errno::ENOTSUP,
                    "no keeper holds this mount's session: mount with -o keeper=on to restart \
                     it in place",
                ),
            },
            Key::Mount(k) if k.name == "notify_test" => {
                self.events.test_requests.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Key::Fault => {
                let v = text()?;
                if v == "clear" {
                    self.mirror.clear_faults();
                    return Ok(());
                }
                if let Some(kind) = v.strip_prefix("transport=") {
                    let f = TransportFault::parse(kind).ok_or_else(|| {
                        Refusal::new(
                            Errno::EINVAL,
                            "not a transport fault: panic, error or die-unanswered",
                        )
                    })?;
                    log::warn!("fault injection: the transport's next request: {f:?}");
                    self.transport_fault.store(f as u8, Ordering::Relaxed);
                    return Ok(());
                }
                let file = (ino != CONTROL_INO && ino != ROOT_INO).then_some(ino);
                let find = |w: &str| self.mirror.find_leg(std::ffi::OsStr::new(w));
                let rule = FaultRule::parse(v, &find, file).ok_or_else(|| {
                    Refusal::new(Errno::EINVAL, "not a fault rule (docs/control.md)")
                })?;
                log::warn!("fault injection: {rule:?}");
                self.mirror.inject_fault(rule);
                Ok(())
            }
            Key::Option(_) | Key::Mount(_) | Key::File(_) => refuse(
                Errno::EROFS,
                format!("'{key}' cannot be changed while mounted"),
            ),
            // On ordinary files the whole namespace is reserved: nothing is ever stored.
            Key::Unknown if ino == CONTROL_INO || ino == ROOT_INO => {
                refuse(Errno::ENODATA, format!("no key '{key}'"))
            }
            Key::Unknown => refuse(
                Errno::EPERM,
                "user.mirrorfs.* names are mirrorfs's own: nothing is stored under them",
            ),
        }
    }

    /// Changes a live option while mounted: the value is parsed exactly as `-o` parses it,
    /// and nothing changes unless it is good (EINVAL).
    fn set_live(&self, o: &OptionSpec, v: &str) -> Outcome<()> {
        let mut parsed = self.config.options.clone();
        if let Err(why) = (o.apply)(&mut parsed, table::Given::Value(v)) {
            return refuse(
                Errno::EINVAL,
                format!(
                    "invalid value for '{}': '{}' ({why})",
                    o.name,
                    v.escape_debug()
                ),
            );
        }
        let Some(live) = o.live else {
            return Err(Errno::EROFS.into());
        };
        match live {
            Live::ReadPolicy => self.mirror.set_policy(&parsed.read_policy).map_err(|e| {
                let legs: Vec<&str> = self.mirror.legs().iter().map(|l| l.name.as_str()).collect();
                Refusal::new(
                    e,
                    format!("no such leg in '{v}' (the legs: {})", legs.join(", ")),
                )
            }),
            Live::MinFreeSpace => {
                let bytes = parsed.minfreespace.ok_or(Errno::EINVAL)?;
                for leg in self.mirror.legs() {
                    leg.reserve.store(bytes, Ordering::Relaxed);
                }
                log::info!(
                    "minfreespace: {} on every leg",
                    crate::value::show_size(bytes)
                );
                Ok(())
            }
            Live::ResyncSpeedMax => {
                self.recovery.set_speed_max(parsed.resync_speed_max);
                Ok(())
            }
            Live::Readahead => {
                self.mirror.readahead().set_limit(parsed.readahead);
                Ok(())
            }
            Live::LegTimeout => {
                self.mirror.set_leg_timeout(parsed.leg_timeout);
                Ok(())
            }
        }
    }

    /// An option's value in force: live options as the running mirror has them, the others as
    /// given at mount.
    fn option_value(&self, o: &OptionSpec) -> String {
        let Some(live) = o.live else {
            return (o.show)(&self.config.options);
        };
        match live {
            Live::ReadPolicy => self.mirror.policy_name(),
            Live::MinFreeSpace => {
                let legs = self.mirror.legs();
                let r: Vec<u64> = legs
                    .iter()
                    .map(|l| l.reserve.load(Ordering::Relaxed))
                    .collect();
                if r.iter().all(|&x| x == r[0]) {
                    r[0].to_string()
                } else {
                    legs.iter()
                        .zip(&r)
                        .map(|(l, x)| format!("{}={x}", l.name))
                        .collect::<Vec<_>>()
                        .join(",")
                }
            }
            Live::ResyncSpeedMax => self.recovery.speed_max().to_string(),
            Live::Readahead => self.mirror.readahead().limit().to_string(),
            Live::LegTimeout => {
                crate::config::table::secs(self.mirror.leg_timeout().unwrap_or_default())
            }
        }
    }

    /// `removexattr` of `user.mirrorfs.<key>`: nothing of ours can be removed (and only who
    /// may control the mirror is told so).
    pub(super) fn control_remove(&self, ino: u64, key: &str, caller: &Caller) -> Result<()> {
        if !self.caller_may_control(caller) {
            return Err(Errno::EPERM);
        }
        match self.classify(ino, key) {
            Key::Option(_) | Key::Mount(_) | Key::File(_) | Key::Fault => Err(Errno::EROFS),
            Key::Unknown => Err(Errno::ENODATA),
        }
    }

    /// The names listxattr shows on the control file: every readable mount-wide key, then
    /// every option.
    pub(super) fn control_list(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let keys = table::KEYS
            .iter()
            .filter(|k| {
                k.scope == Scope::Mount && matches!(k.access, Access::Read | Access::ReadWrite)
            })
            .filter(|k| k.name != "fault" || self.config.options.fault_injection)
            .map(|k| k.name)
            .chain(table::OPTIONS.iter().map(|o| o.name));
        for k in keys {
            out.extend_from_slice(super::xattr::CONTROL_PREFIX);
            out.extend_from_slice(k.as_bytes());
            out.push(0);
        }
        out
    }

    fn mount_key(&self, key: &str) -> Result<Vec<u8>> {
        let v = match key {
            "stats" => serde_json::to_vec(&self.stats()).map_err(|_| Errno::EIO)?,
            "version" => env!("CARGO_PKG_VERSION").into(),
            "pid" => std::process::id().to_string().into(),
            "mount" => self.config.mount.display().to_string().into(),
            "state" => self.mount_state().as_str().into(),
            "legs" => self
                .mirror
                .legs()
                .iter()
                .map(|l| l.path().display().to_string())
                .collect::<Vec<_>>()
                .join(":")
                .into(),
            "scrub" => match self.recovery.scrub_job() {
                Some(j) => {
                    let names = j.legs.iter().map(|&l| self.mirror.leg(l).name.clone());
                    let mut doc = serde_json::to_value(j.scan_stats(names.collect()))
                        .map_err(|_| Errno::EIO)?;
                    doc["differing"] = serde_json::Value::from(j.listed.lock().clone());
                    serde_json::to_vec(&doc).map_err(|_| Errno::EIO)?
                }
                None => b"none".to_vec(),
            },
            "notify_last" => self
                .events
                .last
                .lock()
                .clone()
                .unwrap_or_else(|| "none".into())
                .into(),
            "notify_looks" => self.events.looks.load(Ordering::Acquire).to_string().into(),
            "fault" => self
                .mirror
                .faults()
                .iter()
                .map(|r| format!("{r:?}\n"))
                .collect::<String>()
                .into(),
            _ => return Err(Errno::ENODATA),
        };
        Ok(v)
    }

    /// What the keys share with the event notifier.
    pub fn events(&self) -> &EventBus {
        &self.events
    }

    fn file_key(&self, inode: &InodeRef, key: &str) -> Result<Vec<u8>> {
        let leg_path = |leg: LegIdx| -> Result<std::path::PathBuf> {
            crate::sys::fd::path_of(inode.fd(leg)?.as_fd())
        };
        match key {
            "relpath" => {
                let leg = self.mirror.metadata_leg();
                let p = leg_path(leg)?;
                let rel = p
                    .strip_prefix(self.mirror.leg(leg).path())
                    .map_err(|_| Errno::EIO)?;
                Ok(format!("/{}", rel.display()).into())
            }
            "allpaths" => {
                let mut out = Vec::new();
                for leg in self.mirror.in_sync_legs() {
                    if !out.is_empty() {
                        out.push(0);
                    }
                    out.extend_from_slice(leg_path(leg)?.display().to_string().as_bytes());
                }
                Ok(out)
            }
            "readleg" => {
                let req = ReadRequest {
                    file: inode.ino,
                    size: 128 * 1024,
                    ..Default::default()
                };
                let legs = self.mirror.in_sync_legs();
                let leg = self
                    .mirror
                    .preview_read_leg(&legs, &req)
                    .ok_or(Errno::EIO)?;
                Ok(self.mirror.leg(leg).name.clone().into())
            }
            "copies" => {
                let mut map = serde_json::Map::new();
                for l in self.mirror.legs() {
                    let state = if !l.is_in_sync() {
                        "stale"
                    } else if inode.fd(l.idx).is_ok() {
                        "in_sync"
                    } else {
                        "missing"
                    };
                    map.insert(l.name.clone(), state.into());
                }
                serde_json::to_vec(&map).map_err(|_| Errno::EIO)
            }
            _ => Err(Errno::ENODATA),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::may_control;

    #[test]
    fn only_root_capable_or_the_mounting_user_control() {
        let never = || panic!("asked for capabilities when the uid settles it");
        // A root daemon: root, or a capable process; nobody else, whatever it owns.
        assert!(may_control(0, 0, never));
        assert!(may_control(1000, 0, || true));
        assert!(!may_control(1000, 0, || false));
        assert!(!may_control(65534, 0, || false));
        // A mirror mounted by user 1000: that user too, and not another.
        assert!(may_control(1000, 1000, never));
        assert!(may_control(0, 1000, never));
        assert!(!may_control(1001, 1000, || false));
    }
}
