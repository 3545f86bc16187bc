//! Mount options: parsed once into a typed [`MountConfig`], every problem reported as one line.
//! Each option is declared once, in [`table::OPTIONS`].

pub mod table;

use std::path::Path;
use std::time::Duration;
use table::Given;

/// The text of a configuration file; why not, in words.
pub fn read_config_file(file: &str) -> Result<String, String> {
    if file.is_empty() {
        return Err("a file".into());
    }
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read it: {e}"))?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".into())
}

/// The extent read-ahead's memory by default: 2 extents of 16 MiB per leg for a stream on up
/// to four disks.
pub const DEFAULT_READAHEAD: u64 = 128 << 20;

/// `leg_timeout=`'s default: none. With one, every read, write and fsync runs on its leg's
/// worker with its own copy of the data, which costs small reads most of their speed (see
/// docs/operations.md); a local disk's own timeouts end in EIO, which the mirror handles.
pub const DEFAULT_LEG_TIMEOUT: std::time::Duration = std::time::Duration::ZERO;

/// Everything `-o` can say.
#[derive(Clone, Debug, PartialEq)]
pub struct MountConfig {
    /// Let users other than the mounting one use the mount. Default: on when root mounts.
    pub allow_other: bool,
    /// Let the kernel check mode bits (default on). Off only with `no_default_permissions`;
    /// with `allow_other` and a root daemon, off means every user can read every file.
    pub default_permissions: bool,
    /// FUSE worker threads (requests in flight at once). Default 8.
    pub threads: usize,
    /// Source name shown in /proc/mounts. Default: the leg list.
    pub fsname: Option<String>,
    /// What the kernel may keep between requests (`cache=`). Default: everything.
    pub cache: CacheMode,
    /// How `security.selinux` of an object without one is answered (`selinux_xattr=`).
    pub selinux_xattr: SelinuxXattr,
    /// Pass read-only opens through to one leg's file in the kernel (`passthrough=ro`).
    pub passthrough: bool,
    /// How requests reach the daemon (`transport=`).
    pub transport: Transport,
    /// The longest a queue's reader looks for completions before it sleeps, while reads are
    /// under way (`ring_poll=`, microseconds; io_uring only; `fuse::uring::PollWindow`).
    pub ring_poll: Duration,
    /// Whether a queue's entry threads wait for requests under `SCHED_IDLE`, so that the
    /// program they answer keeps its CPU (`ring_idle=`; io_uring only; `fuse::uring::Turns`).
    pub ring_idle: bool,
    /// A keeper process holds the session, and starts a successor when the server dies
    /// (`keeper=`).
    pub keeper: bool,
    /// Servers that may die within `keeper_window` before the keeper gives up.
    pub keeper_retries: usize,
    pub keeper_window: Duration,
    /// How long a successor may take to take the session over and serve.
    pub keeper_start_timeout: Duration,
    /// How long the kernel caches attributes, when given (see [`MountConfig::attr_timeout`]).
    pub attr_timeout: Option<Duration>,
    /// How long the kernel caches names, when given (see [`MountConfig::entry_timeout`]).
    pub entry_timeout: Option<Duration>,
    /// The read policy's name.
    pub read_policy: String,
    /// Kernel mount flags as given (ro, nosuid, noexec...), passed through.
    pub read_only: bool,
    pub dev: bool,
    pub suid: bool,
    pub exec: bool,
    pub atime: Option<bool>,
    pub sync: bool,
    pub dirsync: bool,
    /// Accept injected leg faults through `user.mirrorfs.fault` (for tests only).
    pub fault_injection: bool,
    /// Keep the write-intent log (default on): after a crash only the files being written
    /// then need checking. Off trades that for one flush less per newly written file.
    pub write_intent: bool,
    /// Checksums of every file's blocks, verified reads (`None`: on, unless the write-intent
    /// log is off: without it a crash would leave checksums that disagree with the data).
    pub checksum: Option<bool>,
    /// At the first mount, the leg whose data the others get (by name or path).
    pub init_from: Option<String>,
    /// Bytes per second a resync or scrub may use (0: unlimited, the default).
    pub resync_speed_max: u64,
    /// Memory the extent read-ahead may hold, bytes (0: off).
    pub readahead: u64,
    /// How long a leg may take to answer a read, write, fsync or free-space query before it
    /// is dropped (zero: for ever).
    pub leg_timeout: std::time::Duration,
    /// Mount even when a leg is missing or behind, serving from the others (btrfs's option).
    pub degraded: bool,
    /// Free space every leg keeps: a write that would go below it on any leg fails with
    /// ENOSPC before any leg is written. `None`: 4 GiB, or 5% of a leg's size if less.
    pub minfreespace: Option<u64>,
    /// The files `config=FILE` read, as given.
    pub config_files: Vec<String>,
    /// Events: a program to run, a directory of programs, an address to mail, and the least
    /// time between two runs for the same event and leg.
    pub notify_program: Option<String>,
    pub events_dir: String,
    pub mail_to: Option<String>,
    pub notify_interval: Duration,
}

/// How a `security.selinux` that an object lacks is answered (`-o selinux_xattr=`).
///
/// The kernel caches no extended attribute of a FUSE file, and `ls -l` asks for the
/// SELinux label of every entry it lists: one round trip each. Answered "not supported"
/// (ENOTSUP) instead of "no such attribute" (ENODATA), `ls` takes the whole filesystem for
/// one without labels and stops asking. Labels that exist are read, listed and written as
/// always.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelinuxXattr {
    /// `enotsup` when the host runs without SELinux (no `/sys/fs/selinux/enforce`),
    /// `pass` when it runs with it.
    Auto,
    /// ENODATA, as the legs answer.
    Pass,
    /// ENOTSUP.
    Enotsup,
}

impl SelinuxXattr {
    pub fn parse(v: &str) -> Result<SelinuxXattr, String> {
        match v {
            "auto" => Ok(SelinuxXattr::Auto),
            "pass" => Ok(SelinuxXattr::Pass),
            "enotsup" => Ok(SelinuxXattr::Enotsup),
            _ => Err("auto, pass or enotsup".into()),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SelinuxXattr::Auto => "auto",
            SelinuxXattr::Pass => "pass",
            SelinuxXattr::Enotsup => "enotsup",
        }
    }

    /// Whether a missing label is answered ENOTSUP on this host.
    pub fn enotsup(self) -> bool {
        match self {
            SelinuxXattr::Auto => !Path::new("/sys/fs/selinux/enforce").exists(),
            SelinuxXattr::Pass => false,
            SelinuxXattr::Enotsup => true,
        }
    }
}

/// How requests reach the daemon (`-o transport=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// io_uring when the kernel offers it (`enable_uring` is on), /dev/fuse otherwise.
    Auto,
    /// FUSE over io_uring, or the mount is refused.
    Uring,
    /// Reads and writes of /dev/fuse.
    Devfuse,
}

impl Transport {
    pub fn parse(v: &str) -> Result<Transport, String> {
        match v {
            "auto" => Ok(Transport::Auto),
            "uring" => Ok(Transport::Uring),
            "devfuse" => Ok(Transport::Devfuse),
            _ => Err("auto, uring or devfuse".into()),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Uring => "uring",
            Transport::Devfuse => "devfuse",
        }
    }
}

/// What the kernel may keep between requests (`-o cache=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheMode {
    /// mirrorfs is the only writer of its legs: the kernel keeps attributes, names (present
    /// and absent), file data, listings and symlink targets until mirrorfs says otherwise.
    Full,
    /// Other programs also write the legs: attributes and names for 1 s, no absent names, no
    /// listings; file data until a refreshed attribute shows another mtime or size.
    Shared,
    /// Nothing beyond one request: every stat and every open asks the daemon.
    Off,
}

impl CacheMode {
    pub fn parse(v: &str) -> Result<CacheMode, String> {
        match v {
            "full" => Ok(CacheMode::Full),
            "shared" => Ok(CacheMode::Shared),
            "off" => Ok(CacheMode::Off),
            _ => Err("full, shared or off".into()),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CacheMode::Full => "full",
            CacheMode::Shared => "shared",
            CacheMode::Off => "off",
        }
    }

    /// How long attributes and names stay cached unless given.
    fn timeout(self) -> Duration {
        match self {
            CacheMode::Full => FULL_CACHE_TIMEOUT,
            CacheMode::Shared => Duration::from_secs(1),
            CacheMode::Off => Duration::ZERO,
        }
    }
}

/// Attributes and names under `cache=full`: a day. The kernel drops them sooner under memory
/// pressure, and whenever a request through the mount or a notice from mirrorfs says so.
pub const FULL_CACHE_TIMEOUT: Duration = Duration::from_secs(86_400);

/// What the kernel may cache (the FUSE adapter applies it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelCache {
    pub attr: Duration,
    pub entry: Duration,
    /// How long a name that is not there stays known as absent (0: not cached).
    pub negative: Duration,
    /// Keep a file's cached data when it is opened again (FOPEN_KEEP_CACHE).
    pub keep_data: bool,
    /// Drop a file's cached data when a refreshed attribute shows another mtime or size
    /// (FUSE_AUTO_INVAL_DATA).
    pub inval_data_on_change: bool,
    /// Keep directory listings (FOPEN_CACHE_DIR).
    pub listings: bool,
    /// Keep symlink targets (FUSE_CACHE_SYMLINKS).
    pub symlinks: bool,
    /// Keep POSIX ACLs, and check access with them (FUSE_POSIX_ACL).
    pub acls: bool,
    /// Answer OPENDIR with ENOSYS where the kernel takes that as "no OPENDIR or RELEASEDIR
    /// from now on" (FUSE_NO_OPENDIR_SUPPORT): listings then come from READDIRs with handle 0.
    pub zero_message_opendir: bool,
    /// Pass read-only opens through to a leg's file (FUSE_PASSTHROUGH).
    pub passthrough: bool,
}

/// `ring_poll`'s default: measured on two CPUs (docs/architecture.md), 200 us made random
/// 4 KiB reads 1.2 x as fast as 50 did, for about twice the daemon's CPU per read; slow legs
/// cost no polling (`fuse::uring::PollWindow`).
pub const DEFAULT_RING_POLL: Duration = Duration::from_micros(200);

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            allow_other: crate::sys::geteuid() == 0,
            default_permissions: true,
            threads: 8,
            fsname: None,
            cache: CacheMode::Full,
            selinux_xattr: SelinuxXattr::Auto,
            passthrough: false,
            transport: Transport::Auto,
            ring_poll: DEFAULT_RING_POLL,
            ring_idle: true,
            keeper: false,
            keeper_retries: 5,
            keeper_window: Duration::from_secs(60),
            keeper_start_timeout: Duration::from_secs(30),
            attr_timeout: None,
            entry_timeout: None,
            read_policy: "auto".to_string(),
            read_only: false,
            dev: false,
            suid: false,
            exec: true,
            atime: None,
            sync: false,
            dirsync: false,
            fault_injection: false,
            minfreespace: None,
            degraded: false,
            write_intent: true,
            checksum: None,
            resync_speed_max: 0,
            readahead: DEFAULT_READAHEAD,
            leg_timeout: DEFAULT_LEG_TIMEOUT,
            init_from: None,
            config_files: Vec::new(),
            notify_program: None,
            events_dir: "/etc/mirrorfs/events.d".into(),
            mail_to: None,
            notify_interval: Duration::from_secs(60),
        }
    }
}

impl MountConfig {
    /// Parses `-o` arguments (each may hold several comma-separated options). Returns every
    /// problem found, one line each.
    pub fn parse(option_args: &[String]) -> Result<MountConfig, Vec<String>> {
        let mut c = MountConfig::default();
        let mut errs = Vec::new();
        for opt in option_args.iter().flat_map(|a| a.split(',')) {
            let opt = opt.trim();
            if opt.is_empty() {
                continue;
            }
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            match (key, value) {
                // Every problem in the file, one line each, naming FILE:LINE.
                (table::CONFIG, Some(file)) => errs.extend(c.apply_file(file)),
                _ => {
                    if let Err(e) = c.apply(key, value) {
                        errs.push(e);
                    }
                }
            }
        }
        errs.extend(c.conflicts());
        if errs.is_empty() {
            Ok(c)
        } else {
            Err(errs)
        }
    }

    /// Applies one option; the one-line problem if it is refused.
    pub fn apply(&mut self, key: &str, value: Option<&str>) -> Result<(), String> {
        if table::IGNORED.contains(&key) || key.starts_with("x-") {
            return Ok(());
        }
        let Some((spec, positive)) = table::option(key) else {
            return Err(format!("unknown option '{key}'"));
        };
        let given = match (value, spec.form.is_empty()) {
            (None, true) => Given::Flag(positive),
            (Some(_), true) => return Err(format!("option '{key}' takes no value")),
            (None, false) => return Err(format!("option '{key}' needs a value")),
            (Some(v), false) => Given::Value(v),
        };
        (spec.apply)(self, given).map_err(|why| match value {
            Some(v) => format!("invalid value for '{key}': '{}' ({why})", v.escape_debug()),
            None => format!("option '{key}' {why}"),
        })
    }

    /// Applies the options of a configuration file (`config=FILE`): one option per line, as
    /// `-o` takes it (`name=value` or `flag`), blanks around it ignored, `#` starting a comment.
    /// Returns every problem, one line each, starting with `FILE:LINE: `; nothing is applied
    /// unless the whole file is good.
    pub fn apply_file(&mut self, file: &str) -> Vec<String> {
        match read_config_file(file) {
            Ok(text) => self.apply_lines(file, &text),
            Err(why) => vec![format!(
                "invalid value for '{}': '{}' ({why})",
                table::CONFIG,
                file.escape_debug()
            )],
        }
    }

    /// The lines of a configuration file read from `file` (see [`MountConfig::apply_file`]).
    pub fn apply_lines(&mut self, file: &str, text: &str) -> Vec<String> {
        let shown = file.escape_debug();
        let mut next = self.clone();
        let mut errs = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let at = format!("{shown}:{}", i + 1);
            let opt = line
                .split_once('#')
                .map_or(line, |(before, _)| before)
                .trim();
            if opt.is_empty() {
                continue;
            }
            if opt.contains(',') {
                errs.push(format!(
                    "{at}: one option per line: '{}'",
                    opt.escape_debug()
                ));
                continue;
            }
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (opt, None),
            };
            if key == table::CONFIG {
                errs.push(format!("{at}: a config file cannot name another one"));
                continue;
            }
            if let Err(e) = next.apply(key, value) {
                errs.push(format!("{at}: {e}"));
            }
        }
        if errs.is_empty() {
            next.config_files.push(file.to_string());
            *self = next;
        }
        errs
    }

    /// Problems between options, one line each.
    fn conflicts(&self) -> Vec<String> {
        let mut errs = Vec::new();
        if !self.default_permissions {
            // The kernel skips its own checks and trusts names it has cached: a name must not
            // stay cached, or a lookup by someone without search permission on its directory
            // would never reach the daemon that checks it.
            if self.entry_timeout.is_some_and(|t| !t.is_zero()) {
                errs.push(
                    "entry_timeout must be 0 with no_default_permissions (cached names would \
                     skip the daemon's permission checks)"
                        .into(),
                );
            }
            if self.allow_other && crate::sys::geteuid() != 0 {
                errs.push(
                    "no_default_permissions with allow_other needs mirrorfs to run as root (it \
                     checks access by acting as each caller)"
                        .into(),
                );
            }
        }
        if self.passthrough && self.checksums() {
            errs.push(
                "passthrough=ro needs checksum=off (the kernel reads passed-through files \
                 itself, so mirrorfs could not verify them)"
                    .into(),
            );
        }
        if self.passthrough && crate::sys::geteuid() != 0 {
            errs.push(
                "passthrough=ro needs mirrorfs to run as root (the kernel lets only \
                 CAP_SYS_ADMIN pass files through)"
                    .into(),
            );
        }
        if self.checksum == Some(true) && !self.write_intent {
            errs.push(
                "checksum=on needs write_intent=on (after a crash, the write-intent log says \
                 which files' checksums may be behind their data)"
                    .into(),
            );
        }
        errs
    }

    /// Whether checksums are kept and reads verified.
    pub fn checksums(&self) -> bool {
        self.checksum.unwrap_or(self.write_intent)
    }

    /// How long the kernel caches attributes: as given, else as `cache=` says.
    pub fn attr_timeout(&self) -> Duration {
        self.attr_timeout.unwrap_or(self.cache.timeout())
    }

    /// How long the kernel caches names: as given, else as `cache=` says, and 0 when the
    /// daemon checks access itself (`no_default_permissions`).
    pub fn entry_timeout(&self) -> Duration {
        match (self.entry_timeout, self.default_permissions) {
            (Some(t), _) => t,
            (None, true) => self.cache.timeout(),
            (None, false) => Duration::ZERO,
        }
    }

    /// What the kernel may cache, in full.
    pub fn kernel_cache(&self) -> KernelCache {
        let full = self.cache == CacheMode::Full;
        let entry = self.entry_timeout();
        KernelCache {
            attr: self.attr_timeout(),
            entry,
            // A name that is not there stays unknown as long as one that is stays known; not
            // at all when others may create names on the legs.
            negative: if full { entry } else { Duration::ZERO },
            keep_data: self.cache != CacheMode::Off,
            inval_data_on_change: self.cache == CacheMode::Shared,
            listings: full,
            symlinks: full,
            // The kernel enforces and caches ACLs itself; it needs `default_permissions`.
            acls: full && self.default_permissions,
            // The kernel checks who may list (so the daemon needs no OPENDIR), and keeps the
            // listings it reads (it does so by itself without OPENDIR).
            zero_message_opendir: full && self.default_permissions,
            passthrough: self.passthrough,
        }
    }

    /// The `fuser` session configuration.
    pub fn fuser_config(&self) -> fuser::Config {
        use fuser::MountOption as M;
        let mut o = vec![
            M::FSName(self.fsname.clone().unwrap_or_else(|| "mirrorfs".into())),
            // Shown as "fuse.mirrorfs" in /proc/mounts (the kernel takes subtype= itself).
            M::CUSTOM("subtype=mirrorfs".to_string()),
            if self.read_only { M::RO } else { M::RW },
            if self.dev { M::Dev } else { M::NoDev },
            if self.suid { M::Suid } else { M::NoSuid },
            if self.exec { M::Exec } else { M::NoExec },
        ];
        if self.default_permissions {
            o.push(M::DefaultPermissions);
        }
        match self.atime {
            Some(true) => o.push(M::Atime),
            Some(false) => o.push(M::NoAtime),
            None => {}
        }
        if self.sync {
            o.push(M::Sync);
        }
        if self.dirsync {
            o.push(M::DirSync);
        }
        let mut config = fuser::Config::default();
        config.mount_options = o;
        config.acl = if self.allow_other {
            fuser::SessionACL::All
        } else {
            fuser::SessionACL::Owner
        };
        config.n_threads = Some(self.threads);
        config.clone_fd = true;
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &[&str]) -> Result<MountConfig, Vec<String>> {
        MountConfig::parse(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn defaults_and_values() {
        let c = parse(&["threads=4,attr_timeout=0.5", "ro,no_default_permissions"]).unwrap();
        assert_eq!(c.threads, 4);
        assert_eq!(c.attr_timeout(), Duration::from_millis(500));
        assert!(c.read_only);
        assert!(!c.default_permissions);
        assert_eq!(c.read_policy, "auto");
    }

    #[test]
    fn mount_helper_options_are_accepted() {
        parse(&["rw,nosuid,nodev,noexec,relatime,defaults,nofail,_netdev,auto,user,dev,suid"])
            .unwrap();
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(
            parse(&["minfreespace=2G"]).unwrap().minfreespace,
            Some(2 << 30)
        );
        assert!(parse(&["minfreespace=lots"]).is_err());
    }

    #[test]
    fn every_problem_is_one_line() {
        let e = parse(&["x,threads=abc,read_policy=fast,attr_timeout=-1,ro=1,fsname"]).unwrap_err();
        assert_eq!(
            e,
            vec![
                "unknown option 'x'".to_string(),
                "invalid value for 'threads': 'abc' (a whole number from 1 to 256)".to_string(),
                format!(
                    "invalid value for 'read_policy': 'fast' (valid: {})",
                    crate::policy::POLICY_FORMS
                ),
                "invalid value for 'attr_timeout': '-1' (seconds, like 1, 0.5 or 0)".to_string(),
                "option 'ro' takes no value".to_string(),
                "option 'fsname' needs a value".to_string(),
            ]
        );
    }

    /// Every option in the table, given every hostile value: refused with one line naming the
    /// option (or, for the few values some option takes, accepted), never a panic; and a
    /// refused value leaves the configuration as it was.
    #[test]
    fn hostile_values_for_every_option() {
        use crate::value::HOSTILE;
        for o in table::OPTIONS {
            for name in std::iter::once(o.name).chain(o.opposite) {
                for v in HOSTILE {
                    let mut c = MountConfig::default();
                    let before = c.clone();
                    match c.apply(name, Some(v)) {
                        Ok(()) => assert!(
                            !o.form.is_empty()
                                && matches!(o.form, "NAME" | "LEG" | "SIZE" | "PATH" | "DIR"),
                            "{name}={v:?} was accepted"
                        ),
                        Err(e) => {
                            assert_eq!(c, before, "{name}={v:?} changed the configuration");
                            assert!(e.contains(name) && !e.contains('\n'), "{e:?}");
                        }
                    }
                }
            }
        }
        // The numeric ones refuse every hostile value but the sizes a size may be.
        for (name, ok) in [
            ("threads", &[][..]),
            ("attr_timeout", &[][..]),
            ("entry_timeout", &[][..]),
            ("write_intent", &[][..]),
            ("checksum", &[][..]),
            ("minfreespace", &["4294967297", "9999999999999", "1 G"][..]),
            (
                "resync_speed_max",
                &["4294967297", "9999999999999", "1 G"][..],
            ),
        ] {
            for v in HOSTILE.iter().filter(|v| !ok.contains(v)) {
                assert!(
                    MountConfig::default().apply(name, Some(v)).is_err(),
                    "{name}={v:?} was accepted"
                );
            }
        }
        // Names: no control characters, not empty.
        for v in ["", "\u{0}", "\n", "a\tb"] {
            assert!(MountConfig::default().apply("fsname", Some(v)).is_err());
            assert!(MountConfig::default().apply("init_from", Some(v)).is_err());
        }
        assert!(MountConfig::default()
            .apply("attr_timeout", Some("1e300"))
            .is_err());
    }

    fn config_file(text: &str) -> tempfile::NamedTempFile {
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn config_file_applies_where_it_stands() {
        let f = config_file(
            "# a mirror of two disks\n\nthreads = 3\n  read_policy=first   # comment\nro\n",
        );
        let path = f.path().to_str().unwrap().to_string();
        let c = parse(&[&format!("threads=5,config={path}")]).unwrap();
        assert_eq!(c.threads, 3, "the file comes after threads=5");
        assert_eq!(c.read_policy, "first");
        assert!(c.read_only);
        assert_eq!(c.config_files, vec![path.clone()]);
        let c = parse(&[&format!("config={path}"), "threads=5"]).unwrap();
        assert_eq!(c.threads, 5, "a later -o wins");
    }

    #[test]
    fn config_file_errors_name_file_and_line() {
        let f = config_file("threads=2\nbogus\n# fine\nthreads=abc\nro,rw\nconfig=/x\n");
        let path = f.path().to_str().unwrap().to_string();
        let e = parse(&[&format!("config={path}")]).unwrap_err();
        assert_eq!(
            e,
            vec![
                format!("{path}:2: unknown option 'bogus'"),
                format!(
                    "{path}:4: invalid value for 'threads': 'abc' (a whole number from 1 to 256)"
                ),
                format!("{path}:5: one option per line: 'ro,rw'"),
                format!("{path}:6: a config file cannot name another one"),
            ]
        );
        let e = parse(&["config=/nonexistent/mirrorfs.conf"]).unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(
            e[0].starts_with(
                "invalid value for 'config': '/nonexistent/mirrorfs.conf' (cannot read it: "
            ),
            "{e:?}"
        );
        assert_eq!(
            parse(&["config"]).unwrap_err(),
            vec!["option 'config' needs a value".to_string()]
        );
        // A refused file changes nothing.
        let mut c = MountConfig::default();
        assert!(!c.apply_file(&path).is_empty());
        assert_eq!(c, MountConfig::default());
    }

    #[test]
    fn no_default_permissions_caches_no_names() {
        let c = parse(&["no_default_permissions"]).unwrap();
        assert_eq!(c.entry_timeout(), Duration::ZERO);
        assert_eq!(c.kernel_cache().negative, Duration::ZERO);
        assert_eq!(parse(&[]).unwrap().entry_timeout(), FULL_CACHE_TIMEOUT);
        let c = parse(&["no_default_permissions,entry_timeout=0"]).unwrap();
        assert_eq!(c.entry_timeout(), Duration::ZERO);
        let e = parse(&["no_default_permissions,entry_timeout=2"]).unwrap_err();
        assert!(e[0].starts_with("entry_timeout must be 0"), "{e:?}");
    }

    #[test]
    fn cache_modes_say_what_the_kernel_keeps() {
        let full = parse(&[]).unwrap().kernel_cache();
        assert_eq!(
            full,
            KernelCache {
                attr: FULL_CACHE_TIMEOUT,
                entry: FULL_CACHE_TIMEOUT,
                negative: FULL_CACHE_TIMEOUT,
                keep_data: true,
                inval_data_on_change: false,
                listings: true,
                symlinks: true,
                acls: true,
                zero_message_opendir: true,
                passthrough: false,
            }
        );
        let ndp = parse(&["no_default_permissions"]).unwrap().kernel_cache();
        assert!(!ndp.zero_message_opendir, "the daemon checks who may list");
        let pt = parse(&["passthrough=ro,checksum=off"]).unwrap();
        assert!(pt.kernel_cache().passthrough);
        let e = parse(&["passthrough=ro"]).unwrap_err();
        assert!(
            e[0].starts_with("passthrough=ro needs checksum=off"),
            "{e:?}"
        );
        let shared = parse(&["cache=shared"]).unwrap().kernel_cache();
        let second = Duration::from_secs(1);
        assert_eq!(
            (shared.attr, shared.entry, shared.negative),
            (second, second, Duration::ZERO)
        );
        assert!(shared.keep_data && shared.inval_data_on_change);
        assert!(!shared.listings && !shared.symlinks && !shared.zero_message_opendir);
        let off = parse(&["cache=off"]).unwrap().kernel_cache();
        assert_eq!(
            (off.attr, off.entry, off.negative),
            (Duration::ZERO, Duration::ZERO, Duration::ZERO)
        );
        assert!(!off.keep_data && !off.listings && !off.symlinks);
        // Given timeouts win over the mode's; absent names follow names under `full`.
        let c = parse(&["attr_timeout=5,entry_timeout=2"])
            .unwrap()
            .kernel_cache();
        assert_eq!(
            (c.attr, c.entry, c.negative),
            (
                Duration::from_secs(5),
                Duration::from_secs(2),
                Duration::from_secs(2)
            )
        );
        let e = parse(&["cache=always"]).unwrap_err();
        assert_eq!(
            e,
            vec!["invalid value for 'cache': 'always' (full, shared or off)".to_string()]
        );
    }
}
