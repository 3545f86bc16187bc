//! Every mount option and every control key, declared once: its name, how its value is parsed,
//! its default, whether it can change while mounted, and one line of documentation.
//!
//! This table drives `-o` parsing ([`super::MountConfig::parse`]), the `user.mirrorfs.*` keys
//! the control file answers (and lists, for `mirrorfs list`), the live settings, and the tables
//! in `README.md` and `docs/control.md`, which `tests::doc_tables_follow_the_table` holds to it
//! (`make doc-tables` writes them).

use super::MountConfig;
use crate::value;

/// How an option appears on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Given<'a> {
    /// A flag: its name (`true`) or its opposite's (`false`).
    Flag(bool),
    /// `name=value`.
    Value(&'a str),
}

/// The options that can be changed while mounted, each a setting of the running mirror. The
/// control file matches on this (every variant, so an option made live here cannot lack its
/// setter there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Live {
    ReadPolicy,
    MinFreeSpace,
    ResyncSpeedMax,
    Readahead,
    LegTimeout,
}

/// One mount option.
pub struct OptionSpec {
    pub name: &'static str,
    /// A flag's opposite (`rw` for `ro`), also accepted.
    pub opposite: Option<&'static str>,
    /// The value's form in the docs (`SIZE`, `S`, `N`...); empty for a flag.
    pub form: &'static str,
    /// The default, as the docs say it.
    pub default: &'static str,
    /// Can be changed while mounted, through `user.mirrorfs.<name>`: which of the running
    /// mirror's settings it is (the control file sets and reads it through that).
    pub live: Option<Live>,
    /// One line for the docs.
    pub doc: &'static str,
    /// Sets the option in a configuration; the reason (without the option's name) when the
    /// value is refused.
    pub apply: fn(&mut MountConfig, Given<'_>) -> Result<(), String>,
    /// The value in force as `user.mirrorfs.<name>` shows it.
    pub show: fn(&MountConfig) -> String,
}

/// Who may do what with a control key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    ReadWrite,
    WriteOnly,
    /// Readable, by each process for itself (not listed).
    ReadOwn,
}

/// Where a control key is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// On the control file `MOUNT/.mirrorfs` and the mount's root.
    Mount,
    /// On every file and directory.
    File,
}

/// One control key that is not a mount option (every option is a key as well).
pub struct KeySpec {
    pub name: &'static str,
    pub access: Access,
    pub scope: Scope,
    /// One line for the docs.
    pub doc: &'static str,
}

fn flag(given: Given<'_>) -> Result<bool, String> {
    match given {
        Given::Flag(on) => Ok(on),
        Given::Value(_) => Err("takes no value".into()),
    }
}

fn text(given: Given<'_>) -> Result<&str, String> {
    match given {
        Given::Value(v) => Ok(v),
        Given::Flag(_) => Err("needs a value".into()),
    }
}

/// An absolute path, without control characters.
fn path(given: Given<'_>) -> Result<String, String> {
    let v = name(given).map_err(|_| "an absolute path".to_string())?;
    if !v.starts_with('/') {
        return Err("an absolute path".into());
    }
    Ok(v)
}

/// A name that is not empty and holds no control character.
fn name(given: Given<'_>) -> Result<String, String> {
    let v = text(given)?;
    if v.is_empty() || v.chars().any(char::is_control) {
        return Err("a name, not empty".into());
    }
    Ok(v.to_string())
}

fn yes_no(b: bool) -> String {
    if b { "true" } else { "false" }.into()
}

/// Seconds as an option's value shows them (`0.5`, `60`).
pub fn secs(d: std::time::Duration) -> String {
    format!("{}", d.as_secs_f64())
}

/// The most FUSE worker threads, and I/O threads per leg.
pub const MAX_THREADS: u64 = 256;

/// The option that reads more options from a file (`-o config=FILE`).
pub const CONFIG: &str = "config";

/// Every mount option, in the order the docs list them.
pub static OPTIONS: &[OptionSpec] = &[
    OptionSpec {
        name: "read_policy",
        opposite: None,
        form: "NAME",
        default: "auto",
        live: Some(Live::ReadPolicy),
        doc: "which leg serves reads: `auto`, `first`, `pid`, `round-robin[:SIZE]`, `devid:N`, `leg:NAME`, `nonrot`, `queue`, `latency`, `md` (see Read policies)",
        apply: |c, g| {
            let v = text(g)?;
            crate::policy::check_spec(v)?;
            c.read_policy = v.to_string();
            Ok(())
        },
        show: |c| c.read_policy.clone(),
    },
    OptionSpec {
        name: "degraded",
        opposite: None,
        form: "",
        default: "off",
        live: None,
        doc: "mount even when a leg is missing or not a member, serving from the others",
        apply: |c, g| {
            c.degraded = flag(g)?;
            Ok(())
        },
        show: |c| yes_no(c.degraded),
    },
    OptionSpec {
        name: "minfreespace",
        opposite: None,
        form: "SIZE",
        default: "4G, or 5% of the leg if less",
        live: Some(Live::MinFreeSpace),
        doc: "free space every leg keeps: a write that would go below it on any leg fails with ENOSPC before any leg is written",
        apply: |c, g| {
            c.minfreespace = Some(value::size(text(g)?)?);
            Ok(())
        },
        show: |c| c.minfreespace.map_or("default".into(), |n| n.to_string()),
    },
    OptionSpec {
        name: "write_intent",
        opposite: None,
        form: "on|off",
        default: "on",
        live: None,
        doc: "keep the write-intent log, so that after a crash only the files being written are checked",
        apply: |c, g| {
            c.write_intent = value::switch(text(g)?)?;
            Ok(())
        },
        show: |c| if c.write_intent { "on" } else { "off" }.into(),
    },
    OptionSpec {
        name: "checksum",
        opposite: None,
        form: "on|off",
        default: "on (off with write_intent=off)",
        live: None,
        doc: "keep a checksum of every 4 KiB block of every file, verify every read and repair a bad copy from a good one",
        apply: |c, g| {
            c.checksum = Some(value::switch(text(g)?)?);
            Ok(())
        },
        show: |c| if c.checksums() { "on" } else { "off" }.into(),
    },
    OptionSpec {
        name: "resync_speed_max",
        opposite: None,
        form: "SIZE",
        default: "0 (unlimited)",
        live: Some(Live::ResyncSpeedMax),
        doc: "bytes per second a resync or scrub may use; a new value applies to the pass that is running",
        apply: |c, g| {
            c.resync_speed_max = value::size(text(g)?)?;
            Ok(())
        },
        show: |c| c.resync_speed_max.to_string(),
    },
    OptionSpec {
        name: "readahead",
        opposite: None,
        form: "SIZE",
        default: "128M",
        live: Some(Live::Readahead),
        doc: "memory for the extent read-ahead, which reads one sequential stream from every idle disk of the same speed in 16 MiB extents (`auto` only; 0: off)",
        apply: |c, g| {
            c.readahead = value::size(text(g)?)?;
            Ok(())
        },
        show: |c| c.readahead.to_string(),
    },
    OptionSpec {
        name: "leg_timeout",
        opposite: None,
        form: "S",
        default: "0 (none)",
        live: Some(Live::LegTimeout),
        doc: "seconds a leg may take to answer a read, write, fsync or free-space query; one that has not answered by then is dropped (reads go to another leg, the mirror carries on DEGRADED) and can be resynced once it answers again. For remote legs (NFS, SMB, sshfs); it costs small reads and writes speed (0: wait for ever)",
        apply: |c, g| {
            c.leg_timeout = value::seconds(text(g)?)?;
            Ok(())
        },
        show: |c| secs(c.leg_timeout),
    },
    OptionSpec {
        name: "init_from",
        opposite: None,
        form: "LEG",
        default: "",
        live: None,
        doc: "first mount only: the leg (name, `legN` or path) whose data the other legs get",
        apply: |c, g| {
            c.init_from = Some(name(g)?);
            Ok(())
        },
        show: |c| c.init_from.clone().unwrap_or_default(),
    },
    OptionSpec {
        name: "threads",
        opposite: None,
        form: "N",
        default: "8",
        live: None,
        doc: "FUSE worker threads, and I/O workers per leg (1 to 256)",
        apply: |c, g| {
            c.threads = value::count(text(g)?, 1, MAX_THREADS)? as usize;
            Ok(())
        },
        show: |c| c.threads.to_string(),
    },
    OptionSpec {
        name: "fsname",
        opposite: None,
        form: "NAME",
        default: "the leg list",
        live: None,
        doc: "the source shown in `/proc/mounts`",
        apply: |c, g| {
            c.fsname = Some(name(g)?);
            Ok(())
        },
        show: |c| c.fsname.clone().unwrap_or_default(),
    },
    OptionSpec {
        name: "cache",
        opposite: None,
        form: "full|shared|off",
        default: "full",
        live: None,
        doc: "what the kernel keeps: `full` when only mirrorfs writes the legs; `shared` when other programs write them too (1 s); `off` (see Caching)",
        apply: |c, g| {
            c.cache = super::CacheMode::parse(text(g)?)?;
            Ok(())
        },
        show: |c| c.cache.name().into(),
    },
    OptionSpec {
        name: "passthrough",
        opposite: None,
        form: "off|ro",
        default: "off",
        live: None,
        doc: "`ro`: the kernel reads read-only opens straight from one leg's file, without the daemon (root only; needs `checksum=off`; see Passthrough)",
        apply: |c, g| {
            c.passthrough = match text(g)? {
                "off" => false,
                "ro" => true,
                _ => return Err("off or ro".into()),
            };
            Ok(())
        },
        show: |c| if c.passthrough { "ro" } else { "off" }.into(),
    },
    OptionSpec {
        name: "transport",
        opposite: None,
        form: "auto|uring|devfuse",
        default: "auto",
        live: None,
        doc: "how requests reach the daemon: `uring` (FUSE over io_uring, one queue per CPU; needs the kernel's `enable_uring` switch), `devfuse`, or `auto` (io_uring when the kernel offers it; see Transport)",
        apply: |c, g| {
            c.transport = super::Transport::parse(text(g)?)?;
            Ok(())
        },
        show: |c| c.transport.name().into(),
    },
    OptionSpec {
        name: "keeper",
        opposite: None,
        form: "on|off",
        default: "off",
        live: None,
        doc: "a keeper process holds the mount's FUSE session, so that the mount outlives the process serving it: a server that dies is followed by a successor that takes the session over, and programs see a pause, not an error (/dev/fuse only; see Keeper)",
        apply: |c, g| {
            c.keeper = value::switch(text(g)?)?;
            Ok(())
        },
        show: |c| if c.keeper { "on" } else { "off" }.into(),
    },
    OptionSpec {
        name: "keeper_retries",
        opposite: None,
        form: "N",
        default: "5",
        live: None,
        doc: "when this many servers died within `keeper_window`, the keeper starts no more: it gives the mount up, aborting the connection (programs get an error instead of waiting) and detaching the mount",
        apply: |c, g| {
            c.keeper_retries = value::count(text(g)?, 1, 1000)? as usize;
            Ok(())
        },
        show: |c| c.keeper_retries.to_string(),
    },
    OptionSpec {
        name: "keeper_window",
        opposite: None,
        form: "S",
        default: "60",
        live: None,
        doc: "seconds over which `keeper_retries` counts the servers that died",
        apply: |c, g| {
            c.keeper_window = value::seconds(text(g)?)?;
            Ok(())
        },
        show: |c| secs(c.keeper_window),
    },
    OptionSpec {
        name: "keeper_start_timeout",
        opposite: None,
        form: "S",
        default: "30",
        live: None,
        doc: "seconds a successor has to take the session over and serve; one that has not is killed, and counts as a server that died; `keeper_retries` successors in a row that never served end the mount however long they took (0: no limit)",
        apply: |c, g| {
            c.keeper_start_timeout = value::seconds(text(g)?)?;
            Ok(())
        },
        show: |c| secs(c.keeper_start_timeout),
    },
    OptionSpec {
        name: "ring_poll",
        opposite: None,
        form: "N",
        default: "200",
        live: None,
        doc: "the longest a queue's reader (io_uring) looks for a completion before it sleeps, in microseconds, while reads are under way and come back sooner than that on average: CPU time spent to answer reads sooner (0: sleep at once; see Transport)",
        apply: |c, g| {
            c.ring_poll = std::time::Duration::from_micros(value::count(text(g)?, 0, 10_000)?);
            Ok(())
        },
        show: |c| c.ring_poll.as_micros().to_string(),
    },
    OptionSpec {
        name: "ring_idle",
        opposite: None,
        form: "on|off",
        default: "on",
        live: None,
        doc: "a queue's threads (io_uring) wait for requests, and answer all but big reads and writes and fsyncs, under the `SCHED_IDLE` policy, so that the program they answer stays on its CPU instead of moving to another at every request: small requests 2-3 x as fast on an idle machine, a little slower while other programs keep every CPU busy (`off`: the normal policy throughout; see Transport)",
        apply: |c, g| {
            c.ring_idle = value::switch(text(g)?)?;
            Ok(())
        },
        show: |c| if c.ring_idle { "on" } else { "off" }.into(),
    },
    OptionSpec {
        name: "selinux_xattr",
        opposite: None,
        form: "auto|pass|enotsup",
        default: "auto",
        live: None,
        doc: "how a missing `security.selinux` is answered: `enotsup` lets `ls -l` stop asking for every entry; `auto` is `enotsup` on a host without SELinux, else `pass` (see Caching)",
        apply: |c, g| {
            c.selinux_xattr = super::SelinuxXattr::parse(text(g)?)?;
            Ok(())
        },
        show: |c| c.selinux_xattr.name().into(),
    },
    OptionSpec {
        name: "attr_timeout",
        opposite: None,
        form: "S",
        default: "86400 (`cache=shared`: 1, `off`: 0)",
        live: None,
        doc: "seconds the kernel caches attributes",
        apply: |c, g| {
            c.attr_timeout = Some(value::seconds(text(g)?)?);
            Ok(())
        },
        show: |c| secs(c.attr_timeout()),
    },
    OptionSpec {
        name: "entry_timeout",
        opposite: None,
        form: "S",
        default: "as `attr_timeout` (0 with `no_default_permissions`)",
        live: None,
        doc: "seconds the kernel caches names; must be 0 with `no_default_permissions`",
        apply: |c, g| {
            c.entry_timeout = Some(value::seconds(text(g)?)?);
            Ok(())
        },
        show: |c| secs(c.entry_timeout()),
    },
    OptionSpec {
        name: "allow_other",
        opposite: None,
        form: "",
        default: "on when root mounts",
        live: None,
        doc: "let other users use the mount",
        apply: |c, g| {
            c.allow_other = flag(g)?;
            Ok(())
        },
        show: |c| yes_no(c.allow_other),
    },
    OptionSpec {
        name: "default_permissions",
        opposite: Some("no_default_permissions"),
        form: "",
        default: "on",
        live: None,
        doc: "the kernel checks mode bits; with `no_default_permissions` mirrorfs checks them itself, by acting as the caller on the legs (POSIX ACLs on the legs then count too; names are not cached)",
        apply: |c, g| {
            c.default_permissions = flag(g)?;
            Ok(())
        },
        show: |c| yes_no(c.default_permissions),
    },
    OptionSpec {
        name: "ro",
        opposite: Some("rw"),
        form: "",
        default: "rw",
        live: None,
        doc: "read-only mount",
        apply: |c, g| {
            c.read_only = flag(g)?;
            Ok(())
        },
        show: |c| yes_no(c.read_only),
    },
    OptionSpec {
        name: "dev",
        opposite: Some("nodev"),
        form: "",
        default: "nodev",
        live: None,
        doc: "device nodes on the mount work",
        apply: |c, g| {
            c.dev = flag(g)?;
            Ok(())
        },
        show: |c| yes_no(c.dev),
    },
    OptionSpec {
        name: "suid",
        opposite: Some("nosuid"),
        form: "",
        default: "nosuid",
        live: None,
        doc: "setuid and setgid bits take effect",
        apply: |c, g| {
            c.suid = flag(g)?;
            Ok(())
        },
        show: |c| yes_no(c.suid),
    },
    OptionSpec {
        name: "exec",
        opposite: Some("noexec"),
        form: "",
        default: "exec",
        live: None,
        doc: "programs on the mount can run",
        apply: |c, g| {
            c.exec = flag(g)?;
            Ok(())
        },
        show: |c| yes_no(c.exec),
    },
    OptionSpec {
        name: "atime",
        opposite: Some("noatime"),
        form: "",
        default: "the kernel's",
        live: None,
        doc: "update access times",
        apply: |c, g| {
            c.atime = Some(flag(g)?);
            Ok(())
        },
        show: |c| {
            match c.atime {
                Some(true) => "atime",
                Some(false) => "noatime",
                None => "default",
            }
            .into()
        },
    },
    OptionSpec {
        name: "sync",
        opposite: None,
        form: "",
        default: "off",
        live: None,
        doc: "synchronous writes",
        apply: |c, g| {
            c.sync = flag(g)?;
            Ok(())
        },
        show: |c| yes_no(c.sync),
    },
    OptionSpec {
        name: "dirsync",
        opposite: None,
        form: "",
        default: "off",
        live: None,
        doc: "synchronous directory changes",
        apply: |c, g| {
            c.dirsync = flag(g)?;
            Ok(())
        },
        show: |c| yes_no(c.dirsync),
    },
    OptionSpec {
        name: "notify_program",
        opposite: None,
        form: "PATH",
        default: "",
        live: None,
        doc: "a program run on every event (leg failed or removed, mirror degraded, resync started or finished, scrub finished, read error repaired, I/O error, leg below its reserve, test) with `MIRRORFS_*` variables (docs/operations.md, Alerts)",
        apply: |c, g| {
            c.notify_program = Some(path(g)?);
            Ok(())
        },
        show: |c| c.notify_program.clone().unwrap_or_default(),
    },
    OptionSpec {
        name: "events_dir",
        opposite: None,
        form: "DIR",
        default: "/etc/mirrorfs/events.d",
        live: None,
        doc: "a directory whose executables run on every event, in name order, like `notify_program`",
        apply: |c, g| {
            c.events_dir = path(g)?;
            Ok(())
        },
        show: |c| c.events_dir.clone(),
    },
    OptionSpec {
        name: "mail_to",
        opposite: None,
        form: "ADDR",
        default: "",
        live: None,
        doc: "mail every event to ADDR through `sendmail` (when installed)",
        apply: |c, g| {
            let v = name(g)?;
            if v.contains(char::is_whitespace) || !v.contains('@') || v.starts_with('-') {
                return Err("a mail address, like root@localhost".into());
            }
            c.mail_to = Some(v);
            Ok(())
        },
        show: |c| c.mail_to.clone().unwrap_or_default(),
    },
    OptionSpec {
        name: "notify_interval",
        opposite: None,
        form: "S",
        default: "60",
        live: None,
        doc: "seconds between two runs for the same event on the same leg; events in between are counted (`MIRRORFS_SUPPRESSED`) and logged, not run",
        apply: |c, g| {
            c.notify_interval = value::seconds(text(g)?)?;
            Ok(())
        },
        show: |c| secs(c.notify_interval),
    },
    OptionSpec {
        name: CONFIG,
        opposite: None,
        form: "FILE",
        default: "",
        live: None,
        doc: "more options from FILE, one per line as `-o` takes them (`name=value` or `flag`), `#` starting a comment; they apply where `config=` stands, so later options win; an error names FILE:LINE",
        apply: |c, g| {
            let file = text(g)?;
            let lines = super::read_config_file(file)?;
            match c.apply_lines(file, &lines).into_iter().next() {
                None => Ok(()),
                Some(e) => Err(e),
            }
        },
        show: |c| c.config_files.join(":"),
    },
    OptionSpec {
        name: "fault_injection",
        opposite: None,
        form: "",
        default: "off",
        live: None,
        doc: "accept injected leg faults through `user.mirrorfs.fault` (for tests only)",
        apply: |c, g| {
            c.fault_injection = flag(g)?;
            Ok(())
        },
        show: |c| yes_no(c.fault_injection),
    },
];

/// Options mount(8) and mount.fuse3 pass that need nothing from us (and any `x-*`).
pub const IGNORED: &[&str] = &[
    "defaults",
    "nofail",
    "_netdev",
    "auto",
    "noauto",
    "user",
    "users",
    "nouser",
    "owner",
    "relatime",
    "norelatime",
    "strictatime",
    "nodiratime",
    "diratime",
    "lazytime",
    "nolazytime",
    "async",
    "comment",
];

/// Every control key that is not a mount option.
pub static KEYS: &[KeySpec] = &[
    KeySpec {
        name: "stats",
        access: Access::Read,
        scope: Scope::Mount,
        doc: "the statistics document, JSON (below)",
    },
    KeySpec {
        name: "version",
        access: Access::Read,
        scope: Scope::Mount,
        doc: "mirrorfs's version: `0.1.0`",
    },
    KeySpec {
        name: "pid",
        access: Access::Read,
        scope: Scope::Mount,
        doc: "the running daemon's pid (after the fork): `6657`",
    },
    KeySpec {
        name: "mount",
        access: Access::Read,
        scope: Scope::Mount,
        doc: "the mount point: `/tmp/ex/mnt`",
    },
    KeySpec {
        name: "state",
        access: Access::Read,
        scope: Scope::Mount,
        doc: "`ONLINE`, `DEGRADED` or `FAULTED` (below)",
    },
    KeySpec {
        name: "legs",
        access: Access::Read,
        scope: Scope::Mount,
        doc: "the leg paths, `:`-separated, without attributes: `/tmp/ex/ssd:/tmp/ex/usb`",
    },
    KeySpec {
        name: "scrub",
        access: Access::ReadWrite,
        scope: Scope::Mount,
        doc: "reading: the last scrub's progress (the `scrub` object below, plus `differing`, up to 100 differing paths), or `none`; writing `start`, `start repair` (majority, three legs or more), `start repair=LEG` or `cancel` (what `mirrorfs scrub` does)",
    },
    KeySpec {
        name: "leg",
        access: Access::WriteOnly,
        scope: Scope::Mount,
        doc: "leg management (what `mirrorfs leg` does): `fail LEG`, `add LEG [full]`, `remove LEG`, `replace LEG NEWDIR`; fields separated by spaces, or by NUL bytes for paths that hold spaces (Leg commands, below)",
    },
    KeySpec {
        name: "last_error",
        access: Access::ReadOwn,
        scope: Scope::Mount,
        doc: "why this process's last change through a key was refused (a write gives only an errno); `mirrorfs set`, `leg` and `scrub` print it",
    },
    KeySpec {
        name: "notify_test",
        access: Access::WriteOnly,
        scope: Scope::Mount,
        doc: "writing any value fires a `test` event (what `mirrorfs notify-test` does): the notify program, the events directory's programs, mail",
    },
    KeySpec {
        name: "restart",
        access: Access::WriteOnly,
        scope: Scope::Mount,
        doc: "writing hands the session to a new server (what `mirrorfs restart` does): empty for the same program, or the absolute path of another build (`--binary`); needs `keeper=on` and /dev/fuse (Keeper)",
    },
    KeySpec {
        name: "notify_last",
        access: Access::Read,
        scope: Scope::Mount,
        doc: "the last event dispatched, JSON: `id`, `event`, `time`, `leg`, `summary`, `suppressed` (true when rate-limited) and `ran`, each program with its exit status (`mail` for the mail), or `none`",
    },
    KeySpec {
        name: "notify_looks",
        access: Access::Read,
        scope: Scope::Mount,
        doc: "how many times the event watcher has compared the statistics (twice a second) and dispatched every event it found, since the mount: once it has moved on, whatever happened before has run its programs",
    },
    KeySpec {
        name: "stats_reset",
        access: Access::WriteOnly,
        scope: Scope::Mount,
        doc: "writing any value zeroes every leg's counters",
    },
    KeySpec {
        name: "fault",
        access: Access::ReadWrite,
        scope: Scope::Mount,
        doc: "only with `-o fault_injection` (tests): a fault rule `leg=LEG op=read|write|...|* errno=EIO|EROFS|ENOSPC|N [times=N]` (LEG as for `mirrorfs leg`: a name, `legN` or the directory), or `clear`; reading lists the rules. `transport=panic|error` makes the serving thread that takes the next request panic or fail (the daemon then ends as a crash would: connection aborted, mount detached, exit 1); `transport=die-unanswered` makes the daemon die (SIGKILL) after it did the next request that changes a name, before it answers (for `keeper=on`: the successor gets it again)",
    },
    KeySpec {
        name: "relpath",
        access: Access::Read,
        scope: Scope::File,
        doc: "the path inside the mirror: `/photos/a.jpg` (the root: `/`)",
    },
    KeySpec {
        name: "allpaths",
        access: Access::Read,
        scope: Scope::File,
        doc: "the backing path on every in-sync leg, NUL-separated: `/tmp/ex/ssd/photos/a.jpg` `\\0` `/tmp/ex/usb/photos/a.jpg`",
    },
    KeySpec {
        name: "readleg",
        access: Access::Read,
        scope: Scope::File,
        doc: "the leg the read policy would pick for a 128 KiB read now: `ssd`",
    },
    KeySpec {
        name: "copies",
        access: Access::Read,
        scope: Scope::File,
        doc: "JSON, per leg name: `in_sync`, `stale` (the leg was dropped) or `missing`: `{\"ssd\":\"in_sync\",\"usb\":\"in_sync\"}`",
    },
];

/// The option `name` is given as (its own name or its opposite's).
pub fn option(name: &str) -> Option<(&'static OptionSpec, bool)> {
    OPTIONS.iter().find_map(|o| {
        if o.name == name {
            Some((o, true))
        } else if o.opposite == Some(name) {
            Some((o, false))
        } else {
            None
        }
    })
}

/// The key `name` if it is not an option's.
pub fn key(name: &str) -> Option<&'static KeySpec> {
    KEYS.iter().find(|k| k.name == name)
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The options table of `README.md`.
pub fn markdown_options() -> String {
    let mut out = String::from("| option | meaning | default |\n| --- | --- | --- |\n");
    for o in OPTIONS {
        let mut name = match o.form {
            "" => format!("`{}`", o.name),
            f => format!("`{}={f}`", o.name),
        };
        if let Some(opp) = o.opposite {
            name = format!("{name} / `{opp}`");
        }
        let live = if o.live.is_some() {
            "; can be changed live"
        } else {
            ""
        };
        let default = match o.default {
            "" => String::new(),
            d if d.contains(' ') || d.contains('(') => d.to_string(),
            d => format!("`{d}`"),
        };
        out.push_str(&format!(
            "| {} | {}{live} | {} |\n",
            md_cell(&name),
            md_cell(o.doc),
            md_cell(&default)
        ));
    }
    out
}

/// The mount-wide keys table of `docs/control.md`.
pub fn markdown_keys() -> String {
    let mut out = String::from("| key | access | value |\n| --- | --- | --- |\n");
    let access = |a: Access| match a {
        Access::Read => "read",
        Access::ReadWrite => "**read, write**",
        Access::WriteOnly => "**write only**",
        Access::ReadOwn => "read (the caller's own)",
    };
    for k in KEYS.iter().filter(|k| k.scope == Scope::Mount) {
        out.push_str(&format!(
            "| `user.mirrorfs.{}` | {} | {} |\n",
            k.name,
            access(k.access),
            md_cell(k.doc)
        ));
    }
    for o in OPTIONS.iter().filter(|o| o.live.is_some()) {
        out.push_str(&format!(
            "| `user.mirrorfs.{}` | **read, write** | the option in force; writing a new value (as for `-o {}=`) changes it at once |\n",
            o.name, o.name
        ));
    }
    let others: Vec<String> = OPTIONS
        .iter()
        .filter(|o| o.live.is_none())
        .map(|o| format!("`{}`", o.name))
        .collect();
    out.push_str(&format!(
        "| `user.mirrorfs.<option>` | read | every other mount option, with the value in force: {} |\n",
        others.join(", ")
    ));
    out
}

/// The file-key table of `docs/control.md`.
pub fn markdown_file_keys() -> String {
    let mut out = String::from("| key | value (example for `photos/a.jpg`) |\n| --- | --- |\n");
    for k in KEYS.iter().filter(|k| k.scope == Scope::File) {
        out.push_str(&format!(
            "| `user.mirrorfs.{}` | {} |\n",
            k.name,
            md_cell(k.doc)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<&str> = OPTIONS
            .iter()
            .flat_map(|o| std::iter::once(o.name).chain(o.opposite))
            .chain(KEYS.iter().map(|k| k.name))
            .chain(IGNORED.iter().copied())
            .collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "a name is declared twice");
    }

    /// The text between `<!-- BEGIN name -->` and `<!-- END name -->` in `file`.
    fn section(file: &Path, name: &str) -> (String, String, String) {
        let text = std::fs::read_to_string(file).unwrap();
        let begin = format!(
            "<!-- BEGIN {name}: generated from src/config/table.rs by `make doc-tables` -->\n"
        );
        let end = format!("<!-- END {name} -->");
        let i = text
            .find(&begin)
            .unwrap_or_else(|| panic!("{}: no {begin}", file.display()))
            + begin.len();
        let j = text[i..]
            .find(&end)
            .unwrap_or_else(|| panic!("{}: no {end}", file.display()))
            + i;
        (
            text[..i].to_string(),
            text[i..j].to_string(),
            text[j..].to_string(),
        )
    }

    /// README.md and docs/control.md show exactly this table; `MIRRORFS_WRITE_DOCS=1` (what
    /// `make doc-tables` sets) writes them instead.
    #[test]
    fn doc_tables_follow_the_table() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let write = std::env::var_os("MIRRORFS_WRITE_DOCS").is_some();
        let mut stale = Vec::new();
        for (file, name, want) in [
            ("README.md", "options", markdown_options()),
            ("docs/control.md", "mount-keys", markdown_keys()),
            ("docs/control.md", "file-keys", markdown_file_keys()),
        ] {
            let path = root.join(file);
            let (head, have, tail) = section(&path, name);
            if have != want {
                if write {
                    std::fs::write(&path, format!("{head}{want}{tail}")).unwrap();
                } else {
                    stale.push(format!("{file} ({name})"));
                }
            }
        }
        assert!(
            stale.is_empty(),
            "these tables differ from src/config/table.rs; run `make doc-tables`: {stale:?}"
        );
        // The man page and the CLI contract name every option.
        for file in ["docs/mirrorfs.8", "docs/cli-contract.md"] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            for o in OPTIONS {
                for n in std::iter::once(o.name).chain(o.opposite) {
                    assert!(
                        text.contains(n) || text.contains(&n.replace('_', "\\_")),
                        "{file} does not name the option '{n}'"
                    );
                }
            }
        }
    }
}
