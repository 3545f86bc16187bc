//! The statistics document (`user.mirrorfs.stats`, [`crate::stats`]) built from the
//! core's counters: the legs', the mount's state, the integrity and read-ahead figures,
//! the daemon's own process, the keeper and the transport. `control.rs` serves it.

use super::MirrorFs;
use crate::stats::{LatencyStats, LegStats, MountState, Stats, STATS_VERSION};
use std::sync::atomic::Ordering;

impl MirrorFs {
    /// ONLINE, DEGRADED or FAULTED.
    pub fn mount_state(&self) -> MountState {
        let online = self.mirror.in_sync_legs().len();
        let members = self
            .mirror
            .legs()
            .iter()
            .filter(|l| l.state() != crate::leg::LegState::Removed)
            .count()
            + self.mirror.unlisted_members();
        if online == 0 {
            MountState::Faulted
        } else if online < members {
            MountState::Degraded
        } else {
            MountState::Online
        }
    }

    /// Zeroes every leg's counters.
    pub fn reset_stats(&self) {
        for leg in self.mirror.legs() {
            leg.counters.reset();
        }
        self.mirror.integrity().clear_all_damage();
    }

    fn readahead_stats(&self) -> crate::stats::ReadAheadStats {
        let ra = self.mirror.readahead();
        let c = ra.counters();
        crate::stats::ReadAheadStats {
            limit_bytes: ra.limit(),
            held_bytes: c.held.load(Ordering::Relaxed),
            fetched_bytes: c.fetched.load(Ordering::Relaxed),
            served_bytes: c.served.load(Ordering::Relaxed),
            streams: c.engaged.load(Ordering::Relaxed),
            invalidated: c.invalidated.load(Ordering::Relaxed),
        }
    }

    fn integrity_stats(&self) -> Option<crate::stats::IntegrityStats> {
        let ig = self.mirror.integrity();
        if !ig.enabled() {
            return None;
        }
        let (files_covered, records) = ig.stored_counts().unwrap_or((0, 0));
        let store_bytes = ig
            .store(self.mirror.metadata_leg())
            .and_then(|s| std::fs::metadata(s.path()).ok())
            .map_or(0, |m| m.len());
        let c = &ig.counters;
        let backfill = self.recovery.backfill_job();
        let bytes_pending = backfill
            .as_ref()
            .filter(|j| j.state.lock().is_running())
            .map_or(0, |j| {
                let p = &j.progress;
                p.bytes_total
                    .load(Ordering::Relaxed)
                    .saturating_sub(p.bytes_done.load(Ordering::Relaxed))
            });
        Some(crate::stats::IntegrityStats {
            files_covered,
            bytes_covered: ig.covered_bytes(),
            bytes_pending,
            records,
            store_bytes,
            files_pending: ig.dirty_files() as u64,
            verified_blocks: c.verified_blocks.load(Ordering::Relaxed),
            crash_resolved: c.crash_resolved.load(Ordering::Relaxed),
            damaged: ig
                .damaged()
                .into_iter()
                .map(|d| crate::stats::DamagedFile {
                    path: d.path,
                    ranges: d.ranges.into_iter().map(|(o, l)| [o, l]).collect(),
                })
                .collect(),
            backfill: backfill.map(|j| {
                j.scan_stats(vec![self
                    .mirror
                    .leg(self.mirror.metadata_leg())
                    .name
                    .clone()])
            }),
            diverged: ig
                .diverged()
                .into_iter()
                .map(|(path, legs)| crate::stats::DivergedFile { path, legs })
                .collect(),
        })
    }

    /// The statistics document, now.
    pub fn stats(&self) -> Stats {
        let legs: Vec<LegStats> = self
            .mirror
            .legs()
            .iter()
            .map(|l| {
                let c = &l.counters;
                let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
                let f = self.mirror.service_figures(l.idx);
                // Measured here without touching the leg's free-space estimate, which the
                // write path keeps (a stats read must not reset it while writes are in flight).
                // Within `leg_timeout`: a hanging leg shows no figures.
                #[allow(clippy::unnecessary_cast)] // (statvfs's fields are not u64 everywhere)
                let space = self.mirror.leg_statvfs(l.idx).map(|st| {
                    let frsize = st.f_frsize as u64;
                    (st.f_blocks as u64 * frsize, st.f_bavail as u64 * frsize)
                });
                LegStats {
                    name: l.name.clone(),
                    path: l.path().display().to_string(),
                    state: l.state(),
                    rotational: l.rotational,
                    rotational_source: l.rotational_source.as_str().into(),
                    writemostly: l.writemostly,
                    quiet: l.quiet,
                    device: l.device.name(),
                    read_ops: get(&c.read_ops),
                    read_bytes: get(&c.read_bytes),
                    write_ops: get(&c.write_ops),
                    write_bytes: get(&c.write_bytes),
                    read_errors: get(&c.read_errors),
                    write_errors: get(&c.write_errors),
                    checksum_errors: get(&c.checksum_errors),
                    read_repairs: get(&c.read_repairs),
                    timeouts: get(&c.timeouts),
                    abandoned: l.abandoned.load(Ordering::Relaxed),
                    inflight: l.inflight.load(Ordering::Relaxed),
                    device_inflight: l.device.inflight_recent(),
                    latency_us: LatencyStats {
                        small_read: f.small_read_us,
                        large_read: f.large_read_us,
                        seek: f.seek_us,
                    },
                    read_bandwidth: f.read_bandwidth,
                    policy_picks: get(&c.policy_picks),
                    stream_switches: get(&c.stream_switches),
                    split_reads: get(&c.split_reads),
                    spread_reads: get(&c.spread_reads),
                    size_bytes: space.map(|(size, _)| size),
                    free_bytes: space.map(|(_, free)| free),
                    reserve_bytes: l.reserve.load(Ordering::Relaxed),
                    disk: crate::sys::host::disk_of(
                        &l.path(),
                        l.device.sysfs.as_deref(),
                        l.device.rotational,
                    )
                    .map(|d| crate::stats::DiskStats {
                        device: d.device,
                        model: d.model,
                        kind: d.kind.into(),
                        filesystem: d.file_system,
                        mount_point: d.mount_point.display().to_string(),
                        removable: d.removable,
                    }),
                }
            })
            .collect();
        let up = self.started.elapsed();
        Stats {
            version: STATS_VERSION,
            mirrorfs_version: env!("CARGO_PKG_VERSION").into(),
            exe: own_program().0.clone(),
            build: own_program().1.clone(),
            mount: self.config.mount.display().to_string(),
            pid: std::process::id(),
            state: self.mount_state(),
            read_policy: self.mirror.policy_name(),
            uptime_s: up.as_secs(),
            uptime_us: up.as_micros() as u64,
            legs_total: legs.len() + self.mirror.unlisted_members(),
            members_not_given: self.mirror.unlisted_members(),
            legs_online: self.mirror.in_sync_legs().len(),
            legs,
            resync: self
                .recovery
                .resync_job()
                .map(|j| j.scan_stats(&self.mirror.leg(j.target).name)),
            scrub: self.recovery.scrub_job().map(|j| {
                j.scan_stats(
                    j.legs
                        .iter()
                        .map(|&l| self.mirror.leg(l).name.clone())
                        .collect(),
                )
            }),
            last_scrub: self.recovery.last_scrub(),
            integrity: self.integrity_stats(),
            daemon: crate::sys::host::own_process().map(|p| crate::stats::DaemonStats {
                memory_bytes: p.memory,
                virtual_memory_bytes: p.virtual_memory,
                cpu_us: p.cpu_us,
                threads: p.threads,
                live_inodes: Some(self.inodes.live_count() as u64),
                known_identities: Some(self.inodes.known_count() as u64),
            }),
            readahead: Some(self.readahead_stats()),
            keeper: self.keeper.lock().clone(),
            transport: self.transport.lock().clone().map(|mut t| {
                t.requests = self.requests.load(Ordering::Relaxed);
                t.ring_reads = self.ring_reads.load(Ordering::Relaxed);
                t.ring_reads_redone = self.ring_reads_redone.load(Ordering::Relaxed);
                t
            }),
        }
    }
}

/// This process's program (`/proc/self/exe`) and its build: the CRC-32C of its bytes, so that
/// two builds of one version tell apart (`mirrorfs restart --binary`). Read once.
fn own_program() -> &'static (String, String) {
    static OWN: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    OWN.get_or_init(|| {
        let exe = std::fs::read_link("/proc/self/exe")
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let build = std::fs::read("/proc/self/exe")
            .map(|b| format!("{:08x}", crc32c::crc32c(&b)))
            .unwrap_or_default();
        (exe, build)
    })
}
