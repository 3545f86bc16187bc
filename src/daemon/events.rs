//! Alerts: the daemon watches its own state and turns each change into an event (leg failed or
//! removed, mirror degraded, faulted or online again, resync started or finished, scrub
//! finished, read error repaired, I/O error, leg below its free-space reserve, test), which goes
//! to the system log, to `notify_program=PATH`, to every executable of `events_dir=DIR`
//! (default `/etc/mirrorfs/events.d`) and, with `mail_to=ADDR`, to `sendmail`. The programs get
//! the event in `MIRRORFS_*` variables (ZED's and mdadm --monitor's model).
//!
//! Two threads, neither on the I/O path: the watcher compares the statistics twice a second
//! with the previous ones (what changed is the event: no hook in the data path can block a
//! write), and the dispatcher runs the programs one after the other, each for at most
//! [`PROGRAM_TIMEOUT`]. The same event on the same leg runs the programs at most once per
//! `notify_interval`; events in between are logged, counted and reported with the next run
//! (`MIRRORFS_SUPPRESSED`). A test event (`mirrorfs notify-test`) is never held back.

use crate::config::MountConfig;
use crate::fs::MirrorFs;
use crate::stats::{IntegrityStats, JobState, LegState, LegStats, MountState, ScanStats, Stats};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use wait_timeout::ChildExt;

/// How often the watcher looks.
const POLL: Duration = Duration::from_millis(500);
/// The longest a program may run before it is killed.
const PROGRAM_TIMEOUT: Duration = Duration::from_secs(60);

/// How bad an event is. Its name (`MIRRORFS_SEVERITY`) is the variant's, in lower case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
}

/// One event: its name, severity, summary line, the leg it concerns, and its variables.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub name: &'static str,
    pub severity: Severity,
    pub summary: String,
    pub leg: Option<String>,
    /// `MIRRORFS_<KEY>=value`, beyond the ones every event has.
    pub vars: Vec<(&'static str, String)>,
}

fn leg_vars(st: &Stats, i: usize) -> Vec<(&'static str, String)> {
    let l = &st.legs[i];
    vec![
        ("LEG", l.name.clone()),
        ("LEG_PATH", l.path.clone()),
        ("LEG_STATE", l.state.as_str().into()),
        ("READ_ERRORS", l.read_errors.to_string()),
        ("WRITE_ERRORS", l.write_errors.to_string()),
        ("CHECKSUM_ERRORS", l.checksum_errors.to_string()),
        ("READ_REPAIRS", l.read_repairs.to_string()),
    ]
}

fn scan_vars(s: &ScanStats) -> Vec<(&'static str, String)> {
    vec![
        ("JOB_STATE", s.state.to_string()),
        ("JOB_LEGS", s.legs.join(",")),
        ("DIFFERENCES", s.differences.to_string()),
        ("REPAIRED", s.repaired.to_string()),
        ("SCAN_ERRORS", s.errors.to_string()),
        ("DONE_BYTES", s.done_bytes.to_string()),
        ("DONE_ENTRIES", s.done_entries.to_string()),
        ("ELAPSED_S", s.elapsed_s.to_string()),
    ]
}

/// Whether `now` is a scan other than `prev` (a new one started since).
fn new_scan(prev: Option<&ScanStats>, now: &ScanStats) -> bool {
    prev.is_none_or(|p| p.started_unix_s != now.started_unix_s || p.legs != now.legs)
}

/// What the watcher remembers between two looks.
#[derive(Default)]
pub struct Watch {
    prev: Option<Stats>,
    /// Errors counted on a leg that was still in sync: reported at the next look if it still
    /// is (a failing leg is reported as failed, once).
    pending_errors: HashMap<usize, u64>,
    /// Legs below their reserve, reported once until they are above it again.
    below: Vec<bool>,
    tests: u64,
    /// Damaged and diverged files already reported (checksums, docs/integrity.md).
    damaged_seen: std::collections::BTreeSet<String>,
    diverged_seen: std::collections::BTreeSet<String>,
}

impl Watch {
    /// The events between the previous look and `now` (`tests`: test events asked for so
    /// far). The first look reports a mount that is not ONLINE, and legs below their reserve.
    pub fn look(&mut self, now: Stats, tests: u64) -> Vec<Event> {
        let mut out = self.pending_errors(&now);
        match self.prev.take() {
            None => out.extend(first_look(&now)),
            Some(prev) => out.extend(self.changes_since(&prev, &now)),
        }
        if let Some(ig) = &now.integrity {
            out.extend(self.damaged_files(ig));
            out.extend(self.diverged_files(ig));
        }
        out.extend(self.below_reserve(&now));
        out.extend(self.test_events(tests));
        for e in &mut out {
            let mut v = mount_vars(&now);
            v.append(&mut e.vars);
            e.vars = v;
        }
        self.prev = Some(now);
        out
    }

    /// `io_error`: the errors the last look held back, on each leg that is still in sync now
    /// (a leg that failed meanwhile is reported as failed, not for its errors).
    fn pending_errors(&mut self, now: &Stats) -> Vec<Event> {
        let mut out = Vec::new();
        let pending = std::mem::take(&mut self.pending_errors);
        for (i, n) in pending {
            if now.legs.get(i).is_some_and(|l| l.state == LegState::InSync) {
                let l = &now.legs[i];
                let mut vars = leg_vars(now, i);
                vars.push(("COUNT", n.to_string()));
                out.push(Event {
                    name: "io_error",
                    severity: Severity::Warning,
                    summary: format!(
                        "{n} I/O error(s) on leg {} ({}); it is still in the mirror",
                        l.name, l.path
                    ),
                    leg: Some(l.name.clone()),
                    vars,
                });
            }
        }
        out
    }

    /// What changed since the previous look, leg by leg (each leg's state change, then its
    /// repairs), then the mount's state (unless a leg's event already says it), the resync
    /// and the scrub.
    fn changes_since(&mut self, prev: &Stats, now: &Stats) -> Vec<Event> {
        let mut out = Vec::new();
        let mut leg_events = 0;
        for i in 0..now.legs.len() {
            let Some(p) = prev.legs.get(i) else { continue };
            if let Some(e) = leg_state_change(now, i, p) {
                leg_events += 1;
                out.push(e);
            }
            out.extend(self.leg_errors(now, i, p));
        }
        if leg_events == 0 {
            out.extend(mount_state_change(prev, now));
        }
        out.extend(resync_events(prev, now));
        out.extend(scrub_finished(prev, now));
        out
    }

    /// `read_repaired`: read errors on leg `i` since `p` (its previous figures) that another
    /// leg answered and that were repaired. Errors beyond the repaired ones, on a leg that
    /// stays in sync, are held for the next look (`io_error`, [`Watch::pending_errors`]).
    fn leg_errors(&mut self, now: &Stats, i: usize, p: &LegStats) -> Option<Event> {
        let l = &now.legs[i];
        let errors = |x: &LegStats| x.read_errors + x.write_errors;
        let new_errors = errors(l).saturating_sub(errors(p));
        let repaired = l.read_repairs.saturating_sub(p.read_repairs);
        if new_errors > repaired && l.state == LegState::InSync {
            self.pending_errors.insert(i, new_errors - repaired);
        }
        if repaired == 0 {
            return None;
        }
        let mut vars = leg_vars(now, i);
        vars.push(("COUNT", repaired.to_string()));
        Some(Event {
            name: "read_repaired",
            severity: Severity::Warning,
            summary: format!(
                "{repaired} read error(s) on leg {} ({}) answered from another leg and repaired",
                l.name, l.path
            ),
            leg: Some(l.name.clone()),
            vars,
        })
    }

    /// `permanent_error`: each file no leg holds as written, once until the list no longer
    /// names it (checksums, docs/integrity.md).
    fn damaged_files(&mut self, ig: &IntegrityStats) -> Vec<Event> {
        let mut out = Vec::new();
        for d in ig
            .damaged
            .iter()
            .filter(|d| !self.damaged_seen.contains(&d.path))
        {
            let ranges: Vec<String> = d
                .ranges
                .iter()
                .map(|[o, l]| format!("{o}..{}", o + l))
                .collect();
            out.push(Event {
                name: "permanent_error",
                severity: Severity::Error,
                summary: format!(
                    "{}: no leg holds bytes {} as written; reads there fail with EIO \
                     (mirrorfs status lists it)",
                    d.path,
                    ranges.join(", ")
                ),
                leg: None,
                vars: vec![("FILE", d.path.clone()), ("RANGES", ranges.join(","))],
            });
        }
        self.damaged_seen = ig.damaged.iter().map(|d| d.path.clone()).collect();
        out
    }

    /// `diverged`: each file whose copy on some leg was changed behind the mirror's back, once
    /// until the list no longer names it.
    fn diverged_files(&mut self, ig: &IntegrityStats) -> Vec<Event> {
        let mut out = Vec::new();
        for d in ig
            .diverged
            .iter()
            .filter(|d| !self.diverged_seen.contains(&d.path))
        {
            out.push(Event {
                name: "diverged",
                severity: Severity::Warning,
                summary: format!(
                    "{}: its copy on {} was changed behind the mirror's back; not repaired",
                    d.path,
                    d.legs.join(", ")
                ),
                leg: d.legs.first().cloned(),
                vars: vec![("FILE", d.path.clone()), ("LEGS", d.legs.join(","))],
            });
        }
        self.diverged_seen = ig.diverged.iter().map(|d| d.path.clone()).collect();
        out
    }

    /// `below_reserve`: each in-sync leg whose free space fell under its reserve, once until it
    /// is above again.
    fn below_reserve(&mut self, now: &Stats) -> Vec<Event> {
        let mut out = Vec::new();
        self.below.resize(now.legs.len(), false);
        for (i, l) in now.legs.iter().enumerate() {
            let below =
                l.state == LegState::InSync && l.free_bytes.is_some_and(|f| f < l.reserve_bytes);
            if below && !self.below[i] {
                let mut vars = leg_vars(now, i);
                vars.push(("FREE_BYTES", l.free_bytes.unwrap_or(0).to_string()));
                vars.push(("RESERVE_BYTES", l.reserve_bytes.to_string()));
                out.push(Event {
                    name: "below_reserve",
                    severity: Severity::Warning,
                    summary: format!(
                        "leg {} ({}) has {} free, below its reserve of {}: writes get ENOSPC",
                        l.name,
                        l.path,
                        crate::value::show_size(l.free_bytes.unwrap_or(0)),
                        crate::value::show_size(l.reserve_bytes)
                    ),
                    leg: Some(l.name.clone()),
                    vars,
                });
            }
            self.below[i] = below;
        }
        out
    }

    /// `test`: one per test event asked for (`mirrorfs notify-test`) since the previous look;
    /// `tests` counts those asked for so far.
    fn test_events(&mut self, tests: u64) -> Vec<Event> {
        let out = (self.tests..tests)
            .map(|_| Event {
                name: "test",
                severity: Severity::Info,
                summary: "a test event (mirrorfs notify-test)".into(),
                leg: None,
                vars: Vec::new(),
            })
            .collect();
        self.tests = tests;
        out
    }
}

/// The variables of the mount's state, which every event carries first.
fn mount_vars(st: &Stats) -> Vec<(&'static str, String)> {
    vec![
        ("MOUNT_STATE", st.state.as_str().to_string()),
        ("LEGS_ONLINE", st.legs_online.to_string()),
        ("LEGS_TOTAL", st.legs_total.to_string()),
    ]
}

/// At the first look: `degraded` or `faulted` when the mount did not come up ONLINE.
fn first_look(now: &Stats) -> Option<Event> {
    if now.state == MountState::Online {
        return None;
    }
    Some(Event {
        name: if now.state == MountState::Faulted {
            "faulted"
        } else {
            "degraded"
        },
        severity: Severity::Error,
        summary: format!(
            "mounted {}: {} of {} legs online",
            now.state, now.legs_online, now.legs_total
        ),
        leg: None,
        vars: Vec::new(),
    })
}

/// `leg_failed` or `leg_removed`: leg `i` went to that state since `p` (its previous figures).
fn leg_state_change(now: &Stats, i: usize, p: &LegStats) -> Option<Event> {
    let l = &now.legs[i];
    if p.state == l.state {
        return None;
    }
    let (name, severity, summary) = match l.state {
        LegState::Failed => (
            "leg_failed",
            Severity::Error,
            format!(
                "leg {} ({}) failed and was dropped; {} of {} legs online",
                l.name, l.path, now.legs_online, now.legs_total
            ),
        ),
        LegState::Removed => (
            "leg_removed",
            Severity::Warning,
            format!("leg {} ({}) was removed from the mirror", l.name, l.path),
        ),
        _ => return None,
    };
    Some(Event {
        name,
        severity,
        summary,
        leg: Some(l.name.clone()),
        vars: leg_vars(now, i),
    })
}

/// `online`, `degraded` or `faulted`: the mount's state changed since `prev`.
fn mount_state_change(prev: &Stats, now: &Stats) -> Option<Event> {
    if prev.state == now.state {
        return None;
    }
    let (name, severity) = match now.state {
        MountState::Online => ("online", Severity::Info),
        MountState::Degraded => ("degraded", Severity::Error),
        MountState::Faulted => ("faulted", Severity::Error),
    };
    Some(Event {
        name,
        severity,
        summary: format!(
            "the mirror is {}: {} of {} legs online",
            now.state, now.legs_online, now.legs_total
        ),
        leg: None,
        vars: Vec::new(),
    })
}

/// `resync_started` for a resync new since `prev`, and `resync_finished` for one that ended
/// since (both, for one that started and ended between two looks).
fn resync_events(prev: &Stats, now: &Stats) -> Vec<Event> {
    let mut out = Vec::new();
    let Some(r) = &now.resync else {
        return out;
    };
    let fresh = new_scan(prev.resync.as_ref(), r);
    let was_running = !fresh && prev.resync.as_ref().is_some_and(|p| p.state.is_running());
    if fresh {
        out.push(Event {
            name: "resync_started",
            severity: Severity::Info,
            summary: format!("resync of {} started", r.legs.join(", ")),
            leg: r.legs.first().cloned(),
            vars: scan_vars(r),
        });
    }
    if (fresh || was_running) && !r.state.is_running() {
        let ok = r.state == JobState::Finished;
        out.push(Event {
            name: "resync_finished",
            severity: if ok { Severity::Info } else { Severity::Error },
            summary: format!("resync of {} {}", r.legs.join(", "), r.state),
            leg: r.legs.first().cloned(),
            vars: scan_vars(r),
        });
    }
    out
}

/// `scrub_finished`: a scrub ended since `prev`; info when it found nothing, a warning when it
/// repaired every difference, an error when some stay or it counted errors.
fn scrub_finished(prev: &Stats, now: &Stats) -> Option<Event> {
    let s = now.scrub.as_ref()?;
    let fresh = new_scan(prev.scrub.as_ref(), s);
    let was_running = !fresh && prev.scrub.as_ref().is_some_and(|p| p.state.is_running());
    if !(fresh || was_running) || s.state.is_running() {
        return None;
    }
    let clean = s.state == JobState::Finished && s.differences == 0 && s.errors == 0;
    Some(Event {
        name: "scrub_finished",
        severity: if clean {
            Severity::Info
        } else if s.differences > s.repaired || s.errors > 0 {
            Severity::Error
        } else {
            Severity::Warning
        },
        summary: format!(
            "scrub {}: {} differences, {} repaired, {} errors",
            s.state, s.differences, s.repaired, s.errors
        ),
        leg: None,
        vars: scan_vars(s),
    })
}

/// Where events go, and the rate limit's memory.
pub struct Dispatcher {
    mount: PathBuf,
    program: Option<PathBuf>,
    events_dir: PathBuf,
    mail_to: Option<String>,
    interval: Duration,
    /// (event, leg) → when the programs last ran for it, and events held back since.
    last_run: HashMap<(&'static str, Option<String>), (Instant, u64)>,
    next_id: u64,
}

/// The executables of `dir`, in name order (hidden files and editor or package backups left
/// out).
fn programs_in(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            !n.starts_with('.')
                && !n.ends_with('~')
                && !n.contains(".dpkg-")
                && std::fs::metadata(e.path())
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// `sendmail`, if installed (`MIRRORFS_SENDMAIL` names another, for tests).
fn sendmail() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MIRRORFS_SENDMAIL") {
        return Some(PathBuf::from(p));
    }
    ["/usr/sbin/sendmail", "/usr/lib/sendmail"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Runs `cmd` (stdin `input`), waiting at most [`PROGRAM_TIMEOUT`]; its exit status, or why
/// it did not run or end, in words.
fn run_program(mut cmd: std::process::Command, input: Option<&[u8]>) -> String {
    use std::io::Write;
    use std::process::Stdio;
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return format!("did not run: {e}"),
    };
    if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
        let _ = stdin.write_all(data);
    }
    // Drain stderr on the side, so a chatty program cannot block on a full pipe.
    let stderr = child.stderr.take();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut e) = stderr {
            use std::io::Read;
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let status = match child.wait_timeout(PROGRAM_TIMEOUT) {
        Ok(Some(st)) => Some(st),
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
        Err(_) => None,
    };
    let err = reader.join().unwrap_or_default();
    let first = err.lines().next().unwrap_or("").to_string();
    match status {
        Some(st) if st.success() => "exit 0".into(),
        Some(st) => match st.code() {
            Some(c) if first.is_empty() => format!("exit {c}"),
            Some(c) => format!("exit {c}: {first}"),
            None => format!("{st}"),
        },
        None => format!("killed after {}s", PROGRAM_TIMEOUT.as_secs()),
    }
}

impl Dispatcher {
    pub fn new(mount: &Path, c: &MountConfig) -> Dispatcher {
        Dispatcher {
            mount: mount.to_path_buf(),
            program: c.notify_program.as_ref().map(PathBuf::from),
            events_dir: PathBuf::from(&c.events_dir),
            mail_to: c.mail_to.clone(),
            interval: c.notify_interval,
            last_run: HashMap::new(),
            next_id: 1,
        }
    }

    /// Logs `e`, and runs its programs and mail unless the rate limit holds it back. Returns
    /// the record `user.mirrorfs.notify_last` shows.
    pub fn dispatch(&mut self, e: &Event) -> String {
        let id = self.next_id;
        self.next_id += 1;
        let now = Instant::now();
        let key = (e.name, e.leg.clone());
        let held = e.name != "test"
            && self
                .last_run
                .get(&key)
                .is_some_and(|(at, _)| now.duration_since(*at) < self.interval);
        let line = format!("event {}: {}", e.name, e.summary);
        match e.severity {
            Severity::Error => log::error!("{line}"),
            Severity::Warning => log::warn!("{line}"),
            Severity::Info => log::info!("{line}"),
        }
        let time = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut record = serde_json::json!({
            "id": id,
            "event": e.name,
            "time": time,
            "leg": e.leg,
            "summary": e.summary,
            "suppressed": held,
            "ran": serde_json::Map::new(),
        });
        if held {
            if let Some((_, n)) = self.last_run.get_mut(&key) {
                *n += 1;
            }
            log::info!(
                "event {}: held back (notify_interval {}s)",
                e.name,
                self.interval.as_secs_f64()
            );
            return record.to_string();
        }
        let suppressed = self.last_run.get(&key).map_or(0, |(_, n)| *n);
        self.last_run.insert(key, (now, 0));
        let mut vars: Vec<(String, String)> = vec![
            ("MIRRORFS_EVENT".into(), e.name.into()),
            ("MIRRORFS_EVENT_ID".into(), id.to_string()),
            ("MIRRORFS_SEVERITY".into(), e.severity.to_string()),
            ("MIRRORFS_SUMMARY".into(), e.summary.clone()),
            ("MIRRORFS_MOUNT".into(), self.mount.display().to_string()),
            ("MIRRORFS_TIME".into(), time.to_string()),
            ("MIRRORFS_PID".into(), std::process::id().to_string()),
            ("MIRRORFS_VERSION".into(), env!("CARGO_PKG_VERSION").into()),
            ("MIRRORFS_SUPPRESSED".into(), suppressed.to_string()),
        ];
        vars.extend(
            e.vars
                .iter()
                .map(|(k, v)| (format!("MIRRORFS_{k}"), v.clone())),
        );
        let mut programs: Vec<PathBuf> = self.program.iter().cloned().collect();
        programs.extend(programs_in(&self.events_dir));
        let ran = record["ran"].as_object_mut().expect("an object");
        for p in programs {
            let mut cmd = std::process::Command::new(&p);
            cmd.env_clear()
                .env(
                    "PATH",
                    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                )
                .envs(vars.iter().map(|(k, v)| (k, v)))
                .current_dir("/");
            let result = run_program(cmd, None);
            if result != "exit 0" {
                log::warn!("event {}: {}: {result}", e.name, p.display());
            }
            ran.insert(p.display().to_string(), result.into());
        }
        if let Some(to) = &self.mail_to {
            let result = match sendmail() {
                None => "no sendmail installed".to_string(),
                Some(sm) => {
                    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                        .map(|h| h.trim().to_string())
                        .unwrap_or_default();
                    let mut body = format!(
                        "To: {to}\nSubject: mirrorfs on {host}: {} ({})\n\
                         Content-Type: text/plain; charset=utf-8\n\n{}\n\n",
                        e.name,
                        self.mount.display(),
                        e.summary
                    );
                    for (k, v) in &vars {
                        body.push_str(&format!("{k}={v}\n"));
                    }
                    let mut cmd = std::process::Command::new(&sm);
                    cmd.args(["-t", "-i"]);
                    let r = run_program(cmd, Some(body.as_bytes()));
                    if r != "exit 0" {
                        log::warn!("event {}: mail to {to}: {r}", e.name);
                    }
                    r
                }
            };
            ran.insert("mail".into(), result.into());
        }
        record.to_string()
    }
}

/// Starts the watcher and the dispatcher for the mount `fs` serves.
pub fn start(fs: Arc<MirrorFs>, mount: &Path, config: &MountConfig) -> std::io::Result<()> {
    // Each look's events, then the end of the look: the dispatcher counts a look once it has
    // run the programs of every event found in it (`user.mirrorfs.notify_looks`).
    let (tx, rx) = crossbeam_channel::unbounded::<Option<Event>>();
    let mut dispatcher = Dispatcher::new(mount, config);
    let fs2 = fs.clone();
    std::thread::Builder::new()
        .name("events".into())
        .spawn(move || {
            for e in rx {
                match e {
                    Some(e) => {
                        let record = dispatcher.dispatch(&e);
                        fs2.events().record(record);
                    }
                    None => fs2.events().looked(),
                }
            }
        })?;
    std::thread::Builder::new()
        .name("event-watch".into())
        .spawn(move || {
            let mut watch = Watch::default();
            loop {
                let events = watch.look(fs.stats(), fs.events().test_requests());
                for e in events.into_iter().map(Some).chain([None]) {
                    if tx.send(e).is_err() {
                        return;
                    }
                }
                std::thread::sleep(POLL);
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::fixture::{leg, stats};

    /// Notify programs read these in `MIRRORFS_SEVERITY`.
    #[test]
    fn severities_keep_their_names() {
        let all = [Severity::Info, Severity::Warning, Severity::Error];
        assert_eq!(all.map(|s| s.to_string()), ["info", "warning", "error"]);
    }

    fn names(e: &[Event]) -> Vec<&'static str> {
        e.iter().map(|e| e.name).collect()
    }

    #[test]
    fn a_damaged_or_diverged_file_is_one_event_until_cleared() {
        let mut w = Watch::default();
        let mut s = stats(vec![leg("a", LegState::InSync), leg("b", LegState::InSync)]);
        assert!(w.look(s.clone(), 0).is_empty());
        s.integrity = Some(crate::stats::IntegrityStats {
            damaged: vec![crate::stats::DamagedFile {
                path: "/f".into(),
                ranges: vec![[4096, 4096]],
            }],
            diverged: vec![crate::stats::DivergedFile {
                path: "/g".into(),
                legs: vec!["b".into()],
            }],
            ..Default::default()
        });
        let e = w.look(s.clone(), 0);
        assert_eq!(names(&e), ["permanent_error", "diverged"]);
        assert!(
            e[0].vars.contains(&("RANGES", "4096..8192".into())),
            "{e:?}"
        );
        assert!(w.look(s.clone(), 0).is_empty(), "once");
        s.integrity = Some(Default::default());
        assert!(w.look(s.clone(), 0).is_empty());
        s.integrity = Some(crate::stats::IntegrityStats {
            damaged: vec![crate::stats::DamagedFile {
                path: "/f".into(),
                ranges: vec![[0, 4096]],
            }],
            ..Default::default()
        });
        assert_eq!(
            names(&w.look(s, 0)),
            ["permanent_error"],
            "again after a clear"
        );
    }

    fn scan(state: JobState, started: u64) -> ScanStats {
        ScanStats {
            state,
            legs: vec!["b".into()],
            started_unix_s: started,
            elapsed_s: 1,
            done_entries: 1,
            total_entries: 1,
            done_bytes: 1,
            total_bytes: 1,
            rate: 1,
            eta_s: None,
            differences: 0,
            repaired: 0,
            errors: 0,
        }
    }

    #[test]
    fn a_failing_leg_is_one_event_and_its_errors_no_other() {
        let mut w = Watch::default();
        let ok = || stats(vec![leg("a", LegState::InSync), leg("b", LegState::InSync)]);
        assert!(w.look(ok(), 0).is_empty());
        let mut failed = ok();
        failed.legs[1].state = LegState::Failed;
        failed.legs[1].write_errors = 1;
        failed.legs_online = 1;
        failed.state = MountState::Degraded;
        let e = w.look(failed.clone(), 0);
        assert_eq!(names(&e), ["leg_failed"]);
        assert!(e[0].vars.contains(&("MOUNT_STATE", "DEGRADED".into())));
        assert!(e[0].vars.contains(&("WRITE_ERRORS", "1".into())));
        assert!(w.look(failed, 0).is_empty(), "nothing new");
    }

    #[test]
    fn errors_on_a_leg_that_stays_in_sync_wait_one_look() {
        let mut w = Watch::default();
        let mut s = stats(vec![leg("a", LegState::InSync), leg("b", LegState::InSync)]);
        w.look(s.clone(), 0);
        s.legs[0].write_errors = 2;
        assert!(w.look(s.clone(), 0).is_empty(), "held one look");
        let e = w.look(s.clone(), 0);
        assert_eq!(names(&e), ["io_error"]);
        assert!(e[0].vars.contains(&("COUNT", "2".into())));
        // A read error answered and repaired: read_repaired only.
        s.legs[0].read_errors = 1;
        s.legs[0].read_repairs = 1;
        assert_eq!(names(&w.look(s.clone(), 0)), ["read_repaired"]);
        assert!(w.look(s.clone(), 0).is_empty());
        // stats_reset: counters go down, nothing to say.
        assert!(w
            .look(
                stats(vec![leg("a", LegState::InSync), leg("b", LegState::InSync)]),
                0
            )
            .is_empty());
    }

    #[test]
    fn a_scrub_that_ended_is_graded_by_what_it_left() {
        let ok = || stats(vec![leg("a", LegState::InSync), leg("b", LegState::InSync)]);
        let mut prev = ok();
        prev.scrub = Some(scan(JobState::Running, 200));
        let ended = |f: &dyn Fn(&mut ScanStats)| {
            let mut s = scan(JobState::Finished, 200);
            f(&mut s);
            let mut now = ok();
            now.scrub = Some(s);
            scrub_finished(&prev, &now).map(|e| e.severity)
        };
        assert_eq!(ended(&|_| {}), Some(Severity::Info), "nothing found");
        let repaired = |s: &mut ScanStats| {
            s.differences = 2;
            s.repaired = 2;
        };
        assert_eq!(ended(&repaired), Some(Severity::Warning), "all repaired");
        let left = |s: &mut ScanStats| {
            s.differences = 2;
            s.repaired = 1;
        };
        assert_eq!(ended(&left), Some(Severity::Error), "some left");
        assert_eq!(ended(&|s| s.errors = 1), Some(Severity::Error), "errors");
        let cancelled = |s: &mut ScanStats| s.state = JobState::Cancelled;
        assert_eq!(ended(&cancelled), Some(Severity::Warning));
        // Still running, or the same scrub already reported: nothing.
        assert_eq!(ended(&|s| s.state = JobState::Running), None);
        assert_eq!(scrub_finished(&prev, &prev), None);
        let mut done = ok();
        done.scrub = Some(scan(JobState::Finished, 200));
        assert_eq!(scrub_finished(&done, &done), None, "reported once");
    }

    #[test]
    fn a_leg_removed_is_a_warning_and_a_leg_back_in_sync_no_leg_event() {
        let before = stats(vec![leg("a", LegState::InSync), leg("b", LegState::InSync)]);
        let mut now = before.clone();
        now.legs[1].state = LegState::Removed;
        let e = leg_state_change(&now, 1, &before.legs[1]).unwrap();
        assert_eq!((e.name, e.severity), ("leg_removed", Severity::Warning));
        assert_eq!(e.leg.as_deref(), Some("b"));
        assert!(leg_state_change(&now, 0, &before.legs[0]).is_none());
        let mut stale = before.clone();
        stale.legs[1].state = LegState::Stale;
        assert!(leg_state_change(&before, 1, &stale.legs[1]).is_none());
    }

    #[test]
    fn a_resync_that_failed_is_an_error() {
        let ok = stats(vec![leg("a", LegState::InSync), leg("b", LegState::Stale)]);
        let mut running = ok.clone();
        running.resync = Some(scan(JobState::Running, 100));
        assert_eq!(names(&resync_events(&ok, &running)), ["resync_started"]);
        let mut failed = ok.clone();
        failed.resync = Some(scan(JobState::Failed("no space".into()), 100));
        let e = resync_events(&running, &failed);
        assert_eq!(names(&e), ["resync_finished"]);
        assert_eq!(e[0].severity, Severity::Error);
        assert!(resync_events(&failed, &failed).is_empty(), "reported once");
    }

    #[test]
    fn jobs_mount_states_reserve_and_tests() {
        let mut w = Watch::default();
        // Mounted degraded: said at once.
        let mut s = stats(vec![leg("a", LegState::InSync), leg("b", LegState::Stale)]);
        assert_eq!(names(&w.look(s.clone(), 0)), ["degraded"]);
        // A resync that started and ended between two looks: both.
        s.legs[1].state = LegState::InSync;
        s.legs_online = 2;
        s.state = MountState::Online;
        s.resync = Some(scan(JobState::Finished, 100));
        assert_eq!(
            names(&w.look(s.clone(), 0)),
            ["online", "resync_started", "resync_finished"]
        );
        // A scrub running, then finished with a difference.
        s.scrub = Some(scan(JobState::Running, 200));
        assert!(w.look(s.clone(), 0).is_empty());
        let mut done = scan(JobState::Finished, 200);
        done.differences = 1;
        s.scrub = Some(done);
        let e = w.look(s.clone(), 0);
        assert_eq!(names(&e), ["scrub_finished"]);
        assert_eq!(e[0].severity, Severity::Error);
        // Below the reserve: once, until above again.
        s.legs[0].reserve_bytes = 1 << 30;
        assert_eq!(names(&w.look(s.clone(), 0)), ["below_reserve"]);
        assert!(w.look(s.clone(), 0).is_empty());
        s.legs[0].reserve_bytes = 0;
        assert!(w.look(s.clone(), 0).is_empty());
        // Two test events asked for.
        assert_eq!(names(&w.look(s, 2)), ["test", "test"]);
    }
}
