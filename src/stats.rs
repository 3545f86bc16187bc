//! The statistics document (`user.mirrorfs.stats`): one JSON object, `"version"` first.
//!
//! The daemon builds it (see `fs/control.rs`); `mirrorfs status` and `mirrorfs iostat` read it
//! back. Every figure is an integer in bytes, microseconds or seconds; a figure that is not
//! known (no device, nothing measured yet) is `null`. Fields are only ever added within a
//! version; a change in meaning moves [`STATS_VERSION`].

pub use crate::leg::LegState;
/// The last scrub's record, as kept on the legs (`meta/scrub_record.rs`): the document's
/// `last_scrub`.
pub use crate::meta::scrub_record::ScrubRecord as LastScrub;
use serde::{Deserialize, Serialize};

/// The format's version, the document's first field.
pub const STATS_VERSION: u32 = 1;

/// The whole mount.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Stats {
    pub version: u32,
    /// mirrorfs's own version.
    pub mirrorfs_version: String,
    /// The serving process's program, and its build (the CRC-32C of the program's bytes).
    #[serde(default)]
    pub exe: String,
    #[serde(default)]
    pub build: String,
    /// The mount point.
    pub mount: String,
    /// The daemon's process id.
    pub pid: u32,
    /// ONLINE (every leg in sync), DEGRADED (some leg is not, the data is still served), or
    /// FAULTED (no leg can serve).
    pub state: MountState,
    pub read_policy: String,
    pub uptime_s: u64,
    /// Microseconds since the mount (for rates between two samples).
    pub uptime_us: u64,
    /// Members of the mirror, counting those not given at mount.
    pub legs_total: usize,
    pub legs_online: usize,
    /// Members not in the leg list at mount (`-o degraded`); they are not in `legs`.
    #[serde(default)]
    pub members_not_given: usize,
    pub legs: Vec<LegStats>,
    /// Resync progress, when a resync is running or has run since the mount.
    pub resync: Option<ScanStats>,
    /// Scrub progress, when a scrub is running or has run since the mount.
    pub scrub: Option<ScanStats>,
    /// How the last scrub that ended (since the mount or before it: kept on the legs) ended;
    /// null if no scrub is on record.
    #[serde(default)]
    pub last_scrub: Option<LastScrub>,
    /// Checksums (`-o checksum`); null when off.
    #[serde(default)]
    pub integrity: Option<IntegrityStats>,
    /// The daemon process: memory and CPU time (`null` if the system will not say).
    #[serde(default)]
    pub daemon: Option<DaemonStats>,
    /// The extent read-ahead (`readahead=`; `docs/policies.md`).
    #[serde(default)]
    pub readahead: Option<ReadAheadStats>,
    /// How requests reach the daemon (`transport=`); null before the session is set up.
    #[serde(default)]
    pub transport: Option<TransportStats>,
    /// The keeper that holds the session (`keeper=on`); null without one.
    #[serde(default)]
    pub keeper: Option<KeeperStats>,
}

/// The keeper of a session (`keeper=on`): its process, and how often a successor took the
/// session over from a server that died.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct KeeperStats {
    pub keeper_pid: u32,
    /// Servers that died and were followed by a successor since the mount.
    pub restarts: u64,
    /// Why the last one went (empty before the first restart), and when (Unix seconds).
    pub last_cause: String,
    pub last_restart_unix_s: u64,
}

/// The FUSE transport in use.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TransportStats {
    /// `uring` (FUSE over io_uring) or `devfuse` (reads and writes of /dev/fuse).
    pub kind: String,
    /// Why this one: what was asked for (`transport=`) and what the kernel offered.
    pub why: String,
    /// io_uring queues (one per possible CPU), and ring entries per queue; 0 over /dev/fuse.
    pub queues: usize,
    pub queue_depth: usize,
    /// Threads reading /dev/fuse (over io_uring: forgets, interrupts, and what came before
    /// the rings were ready).
    pub devfuse_threads: usize,
    /// READs whose leg reads a queue's reader ran on its ring (over io_uring, while other reads
    /// were under way), and those of them that went back to the blocking way (a leg failed, a
    /// block did not match its checksum): since the mount.
    /// Requests answered since the mount, on either transport (forgets and the like
    /// included: every request the kernel sent that mirrorfs took).
    #[serde(default)]
    pub requests: u64,
    #[serde(default)]
    pub ring_reads: u64,
    #[serde(default)]
    pub ring_reads_redone: u64,
}

/// The extent read-ahead's figures.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ReadAheadStats {
    /// The memory it may hold (`readahead=`), bytes; 0: off.
    pub limit_bytes: u64,
    /// Held now (extents being read or read, 16 MiB each), bytes.
    pub held_bytes: u64,
    /// Read ahead from the legs since the mount, bytes.
    pub fetched_bytes: u64,
    /// Reads answered from its buffers since the mount, bytes.
    pub served_bytes: u64,
    /// Streams it took on since the mount.
    pub streams: u64,
    /// Of those, how many a change of the file ended.
    pub invalidated: u64,
}

/// The checksums' figures (see `docs/integrity.md`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct IntegrityStats {
    /// Files whose checksums are in the stores.
    pub files_covered: u64,
    /// Their bytes (sizes at the last commit).
    #[serde(default)]
    pub bytes_covered: u64,
    /// Bytes of files without checksums that the background walk has still to hash (0 when
    /// it is not running).
    #[serde(default)]
    pub bytes_pending: u64,
    /// Records of 256 checksums (1 MiB of data each) in a store.
    pub records: u64,
    /// Size of the metadata leg's store file, bytes.
    pub store_bytes: u64,
    /// Files with checksums not committed yet (committed by the sweep within seconds).
    pub files_pending: u64,
    /// Blocks read from a leg and found as written, since the mount.
    pub verified_blocks: u64,
    /// Files whose checksums crash recovery computed again at this mount.
    pub crash_resolved: u64,
    /// Files no leg holds as written somewhere (reads there fail with EIO) until they are
    /// rewritten there or removed, or the list is cleared (`stats_reset`).
    pub damaged: Vec<DamagedFile>,
    /// Files whose copy on some leg fails its checksums and differs in size or mtime from the
    /// others: changed on the leg itself, behind the mirror's back; reported, not repaired.
    #[serde(default)]
    pub diverged: Vec<DivergedFile>,
    /// The background walk that gives files without checksums theirs (files from before
    /// checksums, or written with them off): progress, when it ran since the mount.
    /// `done_entries` counts files looked at, `differences` files whose copies differ (left
    /// without checksums), `done_bytes` bytes hashed.
    #[serde(default)]
    pub backfill: Option<ScanStats>,
}

/// A file changed behind the mirror's back on some legs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DivergedFile {
    pub path: String,
    /// The legs (names) whose copy diverged.
    pub legs: Vec<String>,
}

/// A damaged file: its path and the byte ranges no leg holds as written.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct DamagedFile {
    pub path: String,
    /// `[offset, length]` pairs.
    pub ranges: Vec<[u64; 2]>,
}

/// The daemon process.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DaemonStats {
    /// Resident and virtual memory, bytes.
    pub memory_bytes: u64,
    pub virtual_memory_bytes: u64,
    /// CPU time since the daemon started (user and system), µs; a rate between two documents
    /// is its share of one CPU.
    pub cpu_us: u64,
    pub threads: Option<u64>,
    /// Inodes the kernel holds (the root included): each keeps its objects on the legs.
    #[serde(default)]
    pub live_inodes: Option<u64>,
    /// Leg objects (`(leg, st_dev, st_ino)`) the inode table maps to inode numbers: those of
    /// the live inodes, and of at most `fs::inode::REMEMBERED` numbers forgotten or only listed.
    #[serde(default)]
    pub known_identities: Option<u64>,
}

/// The disk under a leg: the filesystem holding the leg's directory.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DiskStats {
    /// The filesystem's device or source (`/dev/sda1`).
    pub device: String,
    /// The disk's model, from sysfs, when it has one.
    pub model: Option<String>,
    /// `ssd`, `hdd` or `unknown`, as the system says.
    pub kind: String,
    pub filesystem: String,
    pub mount_point: String,
    pub removable: bool,
}

/// The state of the whole mount. Its names are derived once, as [`LegState`]'s are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
#[derive(strum::IntoStaticStr, strum::Display, strum::EnumString, strum::VariantArray)]
#[strum(serialize_all = "UPPERCASE")]
pub enum MountState {
    /// Every member is in sync.
    Online,
    /// Some member is not; the data is still served.
    Degraded,
    /// No leg can serve.
    Faulted,
}

impl MountState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// For serde's `try_from` (an owned string, as for [`LegState`]).
impl TryFrom<String> for MountState {
    type Error = strum::ParseError;
    fn try_from(s: String) -> Result<MountState, strum::ParseError> {
        s.parse()
    }
}

/// The state of a resync or a scrub. In the document: `"running"`, `"finished"`,
/// `"cancelled"` or `"failed: REASON"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    Running,
    Finished,
    Cancelled,
    Failed(String),
}

impl JobState {
    pub fn is_running(&self) -> bool {
        *self == JobState::Running
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JobState::Running => f.write_str("running"),
            JobState::Finished => f.write_str("finished"),
            JobState::Cancelled => f.write_str("cancelled"),
            JobState::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

impl std::str::FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<JobState, String> {
        match s {
            "running" => Ok(JobState::Running),
            "finished" => Ok(JobState::Finished),
            "cancelled" => Ok(JobState::Cancelled),
            s => match s.strip_prefix("failed") {
                Some(why) => Ok(JobState::Failed(
                    why.trim_start_matches(':').trim_start().to_string(),
                )),
                None => Err(format!("unknown job state '{s}'")),
            },
        }
    }
}

impl Serialize for JobState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JobState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<JobState, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// One leg, in leg order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LegStats {
    pub name: String,
    pub path: String,
    /// ONLINE (in sync), FAULTED (dropped after an error), MISSING (not there at mount),
    /// STALE (behind, waiting for its resync), RESYNCING, or REMOVED (`mirrorfs leg remove`).
    pub state: LegState,
    /// Effective rotational flag, and its source: sysfs, option, measured or unknown.
    pub rotational: bool,
    pub rotational_source: String,
    pub writemostly: bool,
    /// Lookups, listings and attribute reads leave the leg alone (`=quiet`).
    #[serde(default)]
    pub quiet: bool,
    /// The block device under the leg (its sysfs name), if one was found.
    pub device: Option<String>,
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    /// Ranges rewritten on this leg after it failed to read them (read-repair).
    pub read_repairs: u64,
    /// Operations not answered within `leg_timeout` (each dropped the leg).
    #[serde(default)]
    pub timeouts: u64,
    /// Operations given up on after `leg_timeout` that the leg has not finished yet: it may
    /// not be resynced until none is left.
    #[serde(default)]
    pub abandoned: u32,
    /// Our own reads and writes on the leg now.
    pub inflight: u32,
    /// The device's in-flight count from sysfs (last fresh sample), if there is a device.
    pub device_inflight: Option<u32>,
    /// Time-decayed mean service times.
    pub latency_us: LatencyStats,
    /// Measured bandwidth of large reads, bytes per second.
    pub read_bandwidth: Option<u64>,
    /// Reads (or pieces of split reads) the read policy sent here.
    pub policy_picks: u64,
    /// Times a read stream moved onto this leg from another.
    pub stream_switches: u64,
    /// Split reads this leg served a piece of.
    pub split_reads: u64,
    /// Whole reads of a sequential stream spread over several legs that this leg served.
    #[serde(default)]
    pub spread_reads: u64,
    /// The size of the leg's filesystem and the bytes available on it, measured when the
    /// document is made; `null` for a leg that is not there.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    #[serde(default)]
    pub free_bytes: Option<u64>,
    /// The free space the leg keeps (`minfreespace`, as it applies to this leg).
    #[serde(default)]
    pub reserve_bytes: u64,
    /// The disk under the leg, `null` when it cannot be found.
    #[serde(default)]
    pub disk: Option<DiskStats>,
}

/// Service-time averages of one leg, µs.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencyStats {
    /// Reads of 64 KiB or less.
    pub small_read: Option<u64>,
    /// Larger reads.
    pub large_read: Option<u64>,
    /// Positioning cost: how much longer a large read takes when it does not continue the
    /// leg's previous read.
    #[serde(default)]
    pub seek: Option<u64>,
}

/// Progress of a resync or a scrub.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ScanStats {
    /// running, finished, cancelled or failed (with the reason).
    pub state: JobState,
    /// The leg(s) being written (resync) or every leg (scrub).
    pub legs: Vec<String>,
    pub started_unix_s: u64,
    pub elapsed_s: u64,
    pub done_entries: u64,
    pub total_entries: u64,
    pub done_bytes: u64,
    pub total_bytes: u64,
    /// Bytes per second over the scan so far.
    pub rate: u64,
    /// Seconds left at that rate, while running.
    pub eta_s: Option<u64>,
    /// Differences found (scrub) and repaired.
    pub differences: u64,
    pub repaired: u64,
    pub errors: u64,
}

impl ScanStats {
    /// Percent done by bytes (entries when there are no bytes), 0–100.
    pub fn percent(&self) -> f64 {
        let (done, total) = if self.total_bytes > 0 {
            (self.done_bytes, self.total_bytes)
        } else {
            (self.done_entries, self.total_entries)
        };
        if total == 0 {
            100.0
        } else {
            (done as f64 * 100.0 / total as f64).min(100.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_states_read_back_as_they_were_written() {
        for j in [
            JobState::Running,
            JobState::Finished,
            JobState::Cancelled,
            JobState::Failed("No space left on device (os error 28)".into()),
        ] {
            let text = serde_json::to_string(&j).unwrap();
            assert_eq!(
                serde_json::from_str::<JobState>(&text).unwrap(),
                j,
                "{text}"
            );
        }
        assert_eq!(
            serde_json::to_string(&JobState::Failed("x".into())).unwrap(),
            "\"failed: x\""
        );
    }

    /// Each state's name in every form it takes: `as_str` (the events, Prometheus), `Display`
    /// (`mirrorfs status`), parsing and the stats document, both ways. These names are an
    /// external format, so the table spells them out again on purpose; it must list every
    /// variant, in declaration order (the order Prometheus lists them in).
    fn names_agree<S>(table: &[(S, &str)], as_str: fn(S) -> &'static str)
    where
        S: Copy + PartialEq + std::fmt::Debug + std::fmt::Display,
        S: std::str::FromStr + strum::VariantArray,
        S: Serialize + serde::de::DeserializeOwned,
    {
        let listed: Vec<S> = table.iter().map(|&(state, _)| state).collect();
        assert_eq!(listed, S::VARIANTS);
        for &(state, name) in table {
            assert_eq!(as_str(state), name);
            assert_eq!(state.to_string(), name);
            assert!(name.parse::<S>().ok() == Some(state), "{name}");
            let text = serde_json::to_string(&state).unwrap();
            assert_eq!(text, format!("\"{name}\""));
            assert_eq!(serde_json::from_str::<S>(&text).unwrap(), state, "{text}");
            let value = serde_json::Value::String(name.into());
            assert_eq!(serde_json::from_value::<S>(value).unwrap(), state);
            let lower = format!("\"{}\"", name.to_lowercase());
            assert!(serde_json::from_str::<S>(&lower).is_err(), "{lower}");
        }
    }

    #[test]
    fn every_leg_state_keeps_its_name() {
        names_agree(
            &[
                (LegState::InSync, "ONLINE"),
                (LegState::Failed, "FAULTED"),
                (LegState::Missing, "MISSING"),
                (LegState::Stale, "STALE"),
                (LegState::Resyncing, "RESYNCING"),
                (LegState::Removed, "REMOVED"),
            ],
            LegState::as_str,
        );
    }

    #[test]
    fn every_mount_state_keeps_its_name() {
        names_agree(
            &[
                (MountState::Online, "ONLINE"),
                (MountState::Degraded, "DEGRADED"),
                (MountState::Faulted, "FAULTED"),
            ],
            MountState::as_str,
        );
    }
}

/// A document to render in the tests of the layers above (`daemon/events.rs`,
/// `cli/prometheus.rs`): legs in the given states, the mount's state following from them.
#[cfg(test)]
pub(crate) mod fixture {
    use super::*;

    pub fn leg(name: &str, state: LegState) -> LegStats {
        LegStats {
            name: name.into(),
            path: format!("/legs/{name}"),
            state,
            rotational: false,
            rotational_source: "unknown".into(),
            writemostly: false,
            quiet: false,
            device: None,
            read_ops: 0,
            read_bytes: 0,
            write_ops: 0,
            write_bytes: 0,
            read_errors: 0,
            write_errors: 0,
            checksum_errors: 0,
            read_repairs: 0,
            timeouts: 0,
            abandoned: 0,
            inflight: 0,
            device_inflight: None,
            latency_us: LatencyStats::default(),
            read_bandwidth: None,
            policy_picks: 0,
            stream_switches: 0,
            split_reads: 0,
            spread_reads: 0,
            size_bytes: Some(1 << 30),
            free_bytes: Some(1 << 29),
            reserve_bytes: 0,
            disk: None,
        }
    }

    pub fn stats(legs: Vec<LegStats>) -> Stats {
        let online = legs.iter().filter(|l| l.state == LegState::InSync).count();
        Stats {
            version: 1,
            mirrorfs_version: "0".into(),
            exe: String::new(),
            build: String::new(),
            mount: "/m".into(),
            pid: 1,
            state: if online == legs.len() {
                MountState::Online
            } else if online > 0 {
                MountState::Degraded
            } else {
                MountState::Faulted
            },
            read_policy: "auto".into(),
            uptime_s: 0,
            uptime_us: 0,
            legs_total: legs.len(),
            legs_online: online,
            members_not_given: 0,
            legs,
            resync: None,
            scrub: None,
            last_scrub: None,
            daemon: None,
            readahead: None,
            transport: None,
            integrity: None,
            keeper: None,
        }
    }
}
