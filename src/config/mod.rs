//! Mount options: parsed once into a typed [`MountConfig`], every problem reported as one line.
//! Each option is declared once, in [`table::OPTIONS`].

pub mod table;

use std::time::Duration;
use table::Given;

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
    /// How long the kernel caches attributes. Default 1 s.
    pub attr_timeout: Duration,
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
    /// Mount even when a leg is missing or behind, serving from the others (btrfs's option).
    pub degraded: bool,
    /// Free space every leg keeps: a write that would go below it on any leg fails with
    /// ENOSPC before any leg is written. `None`: 4 GiB, or 5% of a leg's size if less.
    pub minfreespace: Option<u64>,
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            allow_other: crate::sys::geteuid() == 0,
            default_permissions: true,
            threads: 8,
            fsname: None,
            attr_timeout: Duration::from_secs(1),
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
            init_from: None,
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
            if let Err(e) = c.apply(key, value) {
                errs.push(e);
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

    /// How long the kernel caches names: as given, else 1 s, and 0 when the daemon checks
    /// access itself (`no_default_permissions`).
    pub fn entry_timeout(&self) -> Duration {
        match (self.entry_timeout, self.default_permissions) {
            (Some(t), _) => t,
            (None, true) => Duration::from_secs(1),
            (None, false) => Duration::ZERO,
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
        assert_eq!(c.attr_timeout, Duration::from_millis(500));
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
                            !o.form.is_empty() && matches!(o.form, "NAME" | "LEG" | "SIZE"),
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
            ("minfreespace", &["4294967297", "9999999999999"][..]),
            ("resync_speed_max", &["4294967297", "9999999999999"][..]),
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

    #[test]
    fn no_default_permissions_caches_no_names() {
        let c = parse(&["no_default_permissions"]).unwrap();
        assert_eq!(c.entry_timeout(), Duration::ZERO);
        assert_eq!(parse(&[]).unwrap().entry_timeout(), Duration::from_secs(1));
        let c = parse(&["no_default_permissions,entry_timeout=0"]).unwrap();
        assert_eq!(c.entry_timeout(), Duration::ZERO);
        let e = parse(&["no_default_permissions,entry_timeout=2"]).unwrap_err();
        assert!(e[0].starts_with("entry_timeout must be 0"), "{e:?}");
    }
}
