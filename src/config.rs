//! Mount options: parsed once into a typed [`MountConfig`], every problem reported as one line.

use std::time::Duration;

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
    /// How long the kernel caches attributes / names. Default 1 s each.
    pub attr_timeout: Duration,
    pub entry_timeout: Duration,
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

/// Parses `4G`, `500M`, `64K`, `1T` (powers of 1024) or a plain number of bytes.
pub fn parse_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let (num, mult) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 1u64 << 10),
        (i, 'M' | 'm') => (&v[..i], 1 << 20),
        (i, 'G' | 'g') => (&v[..i], 1 << 30),
        (i, 'T' | 't') => (&v[..i], 1 << 40),
        _ => (v, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            allow_other: crate::sys::geteuid() == 0,
            default_permissions: true,
            threads: 8,
            fsname: None,
            attr_timeout: Duration::from_secs(1),
            entry_timeout: Duration::from_secs(1),
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
            resync_speed_max: 0,
            init_from: None,
        }
    }
}

/// Options mount(8) and mount.fuse3 pass that need nothing from us.
const IGNORED: &[&str] = &[
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
    "x-systemd.automount",
];

fn parse_timeout(key: &str, v: &str) -> Result<Duration, String> {
    match v.parse::<f64>() {
        Ok(s) if s >= 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("invalid value for '{key}': '{v}'")),
    }
}

impl MountConfig {
    /// Parses `-o` arguments (each may hold several comma-separated options). Returns every
    /// problem found, one line each.
    pub fn parse(option_args: &[String]) -> Result<MountConfig, Vec<String>> {
        let mut c = MountConfig::default();
        let mut errs = Vec::new();
        let mut entry_timeout_given = false;
        for opt in option_args.iter().flat_map(|a| a.split(',')) {
            let opt = opt.trim();
            if opt.is_empty() {
                continue;
            }
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            entry_timeout_given |= key == "entry_timeout";
            if let Err(e) = c.apply(key, value) {
                errs.push(e);
            }
        }
        if !c.default_permissions {
            // The kernel skips its own checks and trusts names it has cached: a name must not
            // stay cached, or a lookup by someone without search permission on its directory
            // would never reach the daemon that checks it.
            if entry_timeout_given && !c.entry_timeout.is_zero() {
                errs.push(
                    "entry_timeout must be 0 with no_default_permissions (cached names would \
                     skip the daemon's permission checks)"
                        .into(),
                );
            }
            c.entry_timeout = Duration::ZERO;
            if c.allow_other && crate::sys::geteuid() != 0 {
                errs.push(
                    "no_default_permissions with allow_other needs mirrorfs to run as root (it \
                     checks access by acting as each caller)"
                        .into(),
                );
            }
        }
        if errs.is_empty() {
            Ok(c)
        } else {
            Err(errs)
        }
    }

    fn apply(&mut self, key: &str, value: Option<&str>) -> Result<(), String> {
        fn need<'a>(key: &str, v: Option<&'a str>) -> Result<&'a str, String> {
            v.ok_or_else(|| format!("option '{key}' needs a value"))
        }
        let flag = |v: Option<&str>| match v {
            None => Ok(()),
            Some(_) => Err(format!("option '{key}' takes no value")),
        };
        match key {
            "allow_other" => flag(value).map(|()| self.allow_other = true),
            "default_permissions" => flag(value).map(|()| self.default_permissions = true),
            "no_default_permissions" => flag(value).map(|()| self.default_permissions = false),
            "threads" => {
                let v = need(key, value)?;
                match v.parse::<usize>() {
                    Ok(n) if (1..=256).contains(&n) => {
                        self.threads = n;
                        Ok(())
                    }
                    _ => Err(format!("invalid value for 'threads': '{v}'")),
                }
            }
            "fsname" => {
                let v = need(key, value)?;
                if v.is_empty() {
                    return Err("invalid value for 'fsname': ''".into());
                }
                self.fsname = Some(v.to_string());
                Ok(())
            }
            "attr_timeout" => {
                self.attr_timeout = parse_timeout(key, need(key, value)?)?;
                Ok(())
            }
            "entry_timeout" => {
                self.entry_timeout = parse_timeout(key, need(key, value)?)?;
                Ok(())
            }
            "read_policy" => {
                let v = need(key, value)?;
                crate::policy::check_spec(v)?;
                self.read_policy = v.to_string();
                Ok(())
            }
            "ro" => flag(value).map(|()| self.read_only = true),
            "rw" => flag(value).map(|()| self.read_only = false),
            "dev" => flag(value).map(|()| self.dev = true),
            "nodev" => flag(value).map(|()| self.dev = false),
            "suid" => flag(value).map(|()| self.suid = true),
            "nosuid" => flag(value).map(|()| self.suid = false),
            "exec" => flag(value).map(|()| self.exec = true),
            "noexec" => flag(value).map(|()| self.exec = false),
            "atime" => flag(value).map(|()| self.atime = Some(true)),
            "noatime" => flag(value).map(|()| self.atime = Some(false)),
            "sync" => flag(value).map(|()| self.sync = true),
            "dirsync" => flag(value).map(|()| self.dirsync = true),
            "fault_injection" => flag(value).map(|()| self.fault_injection = true),
            "degraded" => flag(value).map(|()| self.degraded = true),
            "init_from" => {
                let v = need(key, value)?;
                if v.is_empty() {
                    return Err("invalid value for 'init_from': ''".into());
                }
                self.init_from = Some(v.to_string());
                Ok(())
            }
            "resync_speed_max" => {
                let v = need(key, value)?;
                self.resync_speed_max = parse_size(v)
                    .ok_or_else(|| format!("invalid value for 'resync_speed_max': '{v}'"))?;
                Ok(())
            }
            "write_intent" => match need(key, value)? {
                "on" => {
                    self.write_intent = true;
                    Ok(())
                }
                "off" => {
                    self.write_intent = false;
                    Ok(())
                }
                v => Err(format!(
                    "invalid value for 'write_intent': '{v}' (valid: on, off)"
                )),
            },
            "minfreespace" => {
                let v = need(key, value)?;
                self.minfreespace = Some(
                    parse_size(v)
                        .ok_or_else(|| format!("invalid value for 'minfreespace': '{v}'"))?,
                );
                Ok(())
            }
            k if IGNORED.contains(&k) || k.starts_with("x-") || k.starts_with("comment=") => Ok(()),
            _ => Err(format!("unknown option '{key}'")),
        }
    }

    /// Every option as `user.mirrorfs.<key>` shows it (read-only keys; `read_policy` is answered
    /// live by the mirror, not from here).
    pub fn as_keys(&self, default_fsname: &str) -> Vec<(String, String)> {
        let b = |v: bool| if v { "true" } else { "false" }.to_string();
        let secs = |d: Duration| format!("{}", d.as_secs_f64());
        vec![
            ("allow_other".into(), b(self.allow_other)),
            ("default_permissions".into(), b(self.default_permissions)),
            ("threads".into(), self.threads.to_string()),
            (
                "fsname".into(),
                self.fsname
                    .clone()
                    .unwrap_or_else(|| default_fsname.to_string()),
            ),
            ("attr_timeout".into(), secs(self.attr_timeout)),
            ("entry_timeout".into(), secs(self.entry_timeout)),
            ("ro".into(), b(self.read_only)),
            ("dev".into(), b(self.dev)),
            ("suid".into(), b(self.suid)),
            ("exec".into(), b(self.exec)),
            (
                "atime".into(),
                match self.atime {
                    Some(true) => "atime",
                    Some(false) => "noatime",
                    None => "default",
                }
                .into(),
            ),
            ("sync".into(), b(self.sync)),
            ("dirsync".into(), b(self.dirsync)),
            ("fault_injection".into(), b(self.fault_injection)),
            ("degraded".into(), b(self.degraded)),
            (
                "write_intent".into(),
                if self.write_intent { "on" } else { "off" }.into(),
            ),
        ]
    }

    /// The `fuser` session configuration.
    pub fn fuser_config(&self, default_fsname: &str) -> fuser::Config {
        use fuser::MountOption as M;
        let mut o = vec![
            M::FSName(
                self.fsname
                    .clone()
                    .unwrap_or_else(|| default_fsname.to_string()),
            ),
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
        assert_eq!(parse_size("0"), Some(0));
        assert_eq!(parse_size("4G"), Some(4 << 30));
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("1234"), Some(1234));
        assert_eq!(parse_size("4X"), None);
        assert_eq!(parse_size("G"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(
            parse(&["minfreespace=2G"]).unwrap().minfreespace,
            Some(2 << 30)
        );
        assert!(parse(&["minfreespace=lots"]).is_err());
    }

    #[test]
    fn every_problem_is_one_line() {
        let e = parse(&["x,threads=abc,read_policy=fast,attr_timeout=-1"]).unwrap_err();
        assert_eq!(
            e,
            vec![
                "unknown option 'x'".to_string(),
                "invalid value for 'threads': 'abc'".to_string(),
                format!(
                    "invalid value for 'read_policy': 'fast' (valid: {})",
                    crate::policy::check_spec("fast")
                        .unwrap_err()
                        .split("(valid: ")
                        .nth(1)
                        .unwrap()
                        .trim_end_matches(')')
                ),
                "invalid value for 'attr_timeout': '-1'".to_string(),
            ]
        );
    }
}
