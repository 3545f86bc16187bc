//! `mirrorfs status --format=prometheus`: the statistics of every mount in Prometheus's text
//! exposition format (version 0.0.4), for node_exporter's textfile collector
//! (`contrib/prometheus/`). Written by hand: a few `# HELP`/`# TYPE` lines and samples.
//!
//! Every family is declared once, then has one sample per mount (or per leg, or per scan). A
//! mount whose statistics cannot be read shows only as `mirrorfs_up{mount="..."} 0`. States
//! are one sample per possible state, 1 for the one in force (node_exporter's md collector
//! does the same), so an alert is `mirrorfs_state{state="ONLINE"} == 0`.

use crate::stats::{JobState, LegState, MountState, ScanStats, Stats};
use std::fmt::Write;
use strum::VariantArray;

/// One metric family: its name, type, help line and samples (label set, value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: String,
    samples: Vec<(String, f64)>,
}

/// A label value as the format wants it: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `{a="x",b="y"}`.
fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// `A, B, C`: the names of every state, for a help line.
fn names<S: Copy + Into<&'static str>>(states: &[S]) -> String {
    let names: Vec<&str> = states.iter().map(|&s| s.into()).collect();
    names.join(", ")
}

/// The end of a scan that is over (start plus elapsed), in Unix seconds.
fn scan_end(s: &ScanStats) -> Option<u64> {
    (!s.state.is_running()).then_some(s.started_unix_s + s.elapsed_s)
}

/// The exposition for `mounts`: each mount's statistics, or the error that kept them away.
pub fn render(mounts: &[(String, Result<Stats, String>)]) -> String {
    let fam = |name, kind, help: &str| Family {
        name,
        kind,
        help: help.to_string(),
        samples: Vec::new(),
    };
    let mut up = fam(
        "mirrorfs_up",
        "gauge",
        "1 if the mount's statistics could be read",
    );
    let mut info = fam(
        "mirrorfs_info",
        "gauge",
        "Always 1; the mount's daemon pid, version, build and read policy as labels",
    );
    let mut state = fam(
        "mirrorfs_state",
        "gauge",
        &format!(
            "1 for the mount's state ({}), 0 for the others",
            names(MountState::VARIANTS)
        ),
    );
    let mut legs_total = fam(
        "mirrorfs_legs",
        "gauge",
        "Members of the mirror, counting those not given at mount",
    );
    let mut legs_online = fam("mirrorfs_legs_online", "gauge", "Legs in sync");
    let mut uptime = fam(
        "mirrorfs_uptime_seconds",
        "gauge",
        "Seconds since the mount",
    );
    let mut daemon_memory = fam(
        "mirrorfs_daemon_memory_bytes",
        "gauge",
        "Resident memory of the mount's daemon",
    );
    let mut daemon_cpu = fam(
        "mirrorfs_daemon_cpu_seconds_total",
        "counter",
        "CPU time the mount's daemon used, user and system",
    );
    let mut daemon_threads = fam(
        "mirrorfs_daemon_threads",
        "gauge",
        "Threads of the mount's daemon",
    );
    let mut keeper_info = fam(
        "mirrorfs_keeper_info",
        "gauge",
        "Always 1, for a mount a keeper holds (keeper=on); the keeper's pid and why the server was last replaced as labels",
    );
    let mut keeper_restarts = fam(
        "mirrorfs_keeper_restarts_total",
        "counter",
        "Servers the keeper replaced (deaths and restarts asked for) since the mount",
    );
    let mut keeper_last = fam(
        "mirrorfs_keeper_last_restart_timestamp_seconds",
        "gauge",
        "When the keeper last replaced the server (Unix seconds; 0: never)",
    );
    let mut leg_disk = fam(
        "mirrorfs_leg_disk_info",
        "gauge",
        "Always 1; the disk under the leg as labels: device, model, kind (ssd, hdd, unknown), filesystem",
    );
    let mut leg_state = fam(
        "mirrorfs_leg_state",
        "gauge",
        &format!(
            "1 for the leg's state ({}), 0 for the others",
            names(LegState::VARIANTS)
        ),
    );
    let mut leg_info = fam(
        "mirrorfs_leg_info",
        "gauge",
        "Always 1; the leg's path, block device and rotational flag as labels",
    );
    let mut errors = fam(
        "mirrorfs_leg_errors_total",
        "counter",
        "I/O errors on the leg by kind (read, write, checksum), since the mount or stats_reset",
    );
    let mut repairs = fam(
        "mirrorfs_leg_read_repairs_total",
        "counter",
        "Ranges rewritten on the leg after it failed to read them",
    );
    let mut read_bytes = fam(
        "mirrorfs_leg_read_bytes_total",
        "counter",
        "Bytes read from the leg",
    );
    let mut written_bytes = fam(
        "mirrorfs_leg_written_bytes_total",
        "counter",
        "Bytes written to the leg",
    );
    let mut read_ops = fam(
        "mirrorfs_leg_reads_total",
        "counter",
        "Reads served by the leg",
    );
    let mut write_ops = fam("mirrorfs_leg_writes_total", "counter", "Writes to the leg");
    let mut size = fam(
        "mirrorfs_leg_size_bytes",
        "gauge",
        "Size of the leg's filesystem",
    );
    let mut free = fam(
        "mirrorfs_leg_free_bytes",
        "gauge",
        "Bytes available on the leg's filesystem",
    );
    let mut reserve = fam(
        "mirrorfs_leg_reserve_bytes",
        "gauge",
        "Free space the leg keeps (minfreespace): writes fail with ENOSPC below it",
    );
    let mut scan_running = fam(
        "mirrorfs_scan_running",
        "gauge",
        "1 while the resync or scrub since the mount runs, 0 once it is over",
    );
    let mut scan_state = fam(
        "mirrorfs_scan_state",
        "gauge",
        "1 for the scan's state (running, finished, cancelled, failed), 0 for the others",
    );
    let mut scan_done_bytes = fam(
        "mirrorfs_scan_done_bytes",
        "gauge",
        "Bytes the resync or scrub has gone through",
    );
    let mut scan_size_bytes = fam(
        "mirrorfs_scan_size_bytes",
        "gauge",
        "Bytes the resync or scrub has to go through",
    );
    let mut scan_done_entries = fam(
        "mirrorfs_scan_done_entries",
        "gauge",
        "Entries the resync or scrub has gone through",
    );
    let mut scan_entries = fam(
        "mirrorfs_scan_entries",
        "gauge",
        "Entries the resync or scrub has to go through",
    );
    let mut scan_ratio = fam(
        "mirrorfs_scan_progress_ratio",
        "gauge",
        "How far the resync or scrub is, 0 to 1",
    );
    let mut scan_differences = fam(
        "mirrorfs_scan_differences",
        "gauge",
        "Differences the scrub (or resync) found",
    );
    let mut scan_repaired = fam("mirrorfs_scan_repaired", "gauge", "Differences repaired");
    let mut scan_errors = fam(
        "mirrorfs_scan_errors",
        "gauge",
        "Entries the scan could not read or repair",
    );
    let mut scan_start = fam(
        "mirrorfs_scan_start_timestamp_seconds",
        "gauge",
        "When the resync or scrub started, Unix time",
    );
    let mut scan_end_f = fam(
        "mirrorfs_scan_end_timestamp_seconds",
        "gauge",
        "When the resync or scrub ended, Unix time (absent while it runs)",
    );
    let mut scrub_end = fam(
        "mirrorfs_scrub_last_end_timestamp_seconds",
        "gauge",
        "When the last scrub ended, Unix time (kept on the legs across mounts)",
    );
    let mut scrub_finished = fam(
        "mirrorfs_scrub_last_finished_timestamp_seconds",
        "gauge",
        "When the last scrub that went through every entry ended, Unix time (kept across mounts)",
    );
    let mut scrub_last_state = fam(
        "mirrorfs_scrub_last_state",
        "gauge",
        "1 for how the last scrub ended: finished, cancelled or failed",
    );
    let mut scrub_last_differences = fam(
        "mirrorfs_scrub_last_differences",
        "gauge",
        "Differences the last scrub found",
    );
    let mut scrub_last_repaired = fam(
        "mirrorfs_scrub_last_repaired",
        "gauge",
        "Differences the last scrub repaired",
    );
    let mut scrub_last_errors = fam(
        "mirrorfs_scrub_last_errors",
        "gauge",
        "Entries the last scrub could not read or repair",
    );

    for (mount, st) in mounts {
        let st = match st {
            Ok(st) => st,
            Err(_) => {
                up.samples.push((labels(&[("mount", mount)]), 0.0));
                continue;
            }
        };
        let m = st.mount.as_str();
        let ml = labels(&[("mount", m)]);
        up.samples.push((ml.clone(), 1.0));
        info.samples.push((
            labels(&[
                ("mount", m),
                ("version", &st.mirrorfs_version),
                ("pid", &st.pid.to_string()),
                ("build", &st.build),
                ("read_policy", &st.read_policy),
            ]),
            1.0,
        ));
        if let Some(k) = &st.keeper {
            keeper_info.samples.push((
                labels(&[
                    ("mount", m),
                    ("keeper_pid", &k.keeper_pid.to_string()),
                    ("last_cause", &k.last_cause),
                ]),
                1.0,
            ));
            keeper_restarts
                .samples
                .push((ml.clone(), k.restarts as f64));
            keeper_last
                .samples
                .push((ml.clone(), k.last_restart_unix_s as f64));
        }
        for s in MountState::VARIANTS {
            state.samples.push((
                labels(&[("mount", m), ("state", s.as_str())]),
                flag(st.state == *s),
            ));
        }
        legs_total.samples.push((ml.clone(), st.legs_total as f64));
        legs_online
            .samples
            .push((ml.clone(), st.legs_online as f64));
        uptime.samples.push((ml.clone(), st.uptime_us as f64 / 1e6));
        if let Some(d) = &st.daemon {
            daemon_memory
                .samples
                .push((ml.clone(), d.memory_bytes as f64));
            daemon_cpu.samples.push((ml.clone(), d.cpu_us as f64 / 1e6));
            if let Some(t) = d.threads {
                daemon_threads.samples.push((ml.clone(), t as f64));
            }
        }
        for l in &st.legs {
            let ll = labels(&[("mount", m), ("leg", &l.name)]);
            for s in LegState::VARIANTS {
                leg_state.samples.push((
                    labels(&[("mount", m), ("leg", &l.name), ("state", s.as_str())]),
                    flag(l.state == *s),
                ));
            }
            leg_info.samples.push((
                labels(&[
                    ("mount", m),
                    ("leg", &l.name),
                    ("path", &l.path),
                    ("device", l.device.as_deref().unwrap_or("")),
                    ("rotational", if l.rotational { "1" } else { "0" }),
                    ("writemostly", if l.writemostly { "1" } else { "0" }),
                    ("quiet", if l.quiet { "1" } else { "0" }),
                ]),
                1.0,
            ));
            if let Some(d) = &l.disk {
                leg_disk.samples.push((
                    labels(&[
                        ("mount", m),
                        ("leg", &l.name),
                        ("device", &d.device),
                        ("model", d.model.as_deref().unwrap_or("")),
                        ("kind", &d.kind),
                        ("filesystem", &d.filesystem),
                    ]),
                    1.0,
                ));
            }
            for (kind, n) in [
                ("read", l.read_errors),
                ("write", l.write_errors),
                ("checksum", l.checksum_errors),
            ] {
                errors.samples.push((
                    labels(&[("mount", m), ("leg", &l.name), ("kind", kind)]),
                    n as f64,
                ));
            }
            repairs.samples.push((ll.clone(), l.read_repairs as f64));
            read_bytes.samples.push((ll.clone(), l.read_bytes as f64));
            written_bytes
                .samples
                .push((ll.clone(), l.write_bytes as f64));
            read_ops.samples.push((ll.clone(), l.read_ops as f64));
            write_ops.samples.push((ll.clone(), l.write_ops as f64));
            if let Some(n) = l.size_bytes {
                size.samples.push((ll.clone(), n as f64));
            }
            if let Some(n) = l.free_bytes {
                free.samples.push((ll.clone(), n as f64));
            }
            reserve.samples.push((ll, l.reserve_bytes as f64));
        }
        for (kind, scan) in [("resync", &st.resync), ("scrub", &st.scrub)] {
            let Some(s) = scan else { continue };
            let sl = labels(&[("mount", m), ("scan", kind)]);
            scan_running
                .samples
                .push((sl.clone(), flag(s.state.is_running())));
            for (name, on) in [
                ("running", s.state == JobState::Running),
                ("finished", s.state == JobState::Finished),
                ("cancelled", s.state == JobState::Cancelled),
                ("failed", matches!(s.state, JobState::Failed(_))),
            ] {
                scan_state.samples.push((
                    labels(&[("mount", m), ("scan", kind), ("state", name)]),
                    flag(on),
                ));
            }
            scan_done_bytes
                .samples
                .push((sl.clone(), s.done_bytes as f64));
            scan_size_bytes
                .samples
                .push((sl.clone(), s.total_bytes as f64));
            scan_done_entries
                .samples
                .push((sl.clone(), s.done_entries as f64));
            scan_entries
                .samples
                .push((sl.clone(), s.total_entries as f64));
            scan_ratio.samples.push((sl.clone(), s.percent() / 100.0));
            scan_differences
                .samples
                .push((sl.clone(), s.differences as f64));
            scan_repaired.samples.push((sl.clone(), s.repaired as f64));
            scan_errors.samples.push((sl.clone(), s.errors as f64));
            scan_start
                .samples
                .push((sl.clone(), s.started_unix_s as f64));
            if let Some(end) = scan_end(s) {
                scan_end_f.samples.push((sl, end as f64));
                // A daemon from before `last_scrub` (an upgrade does not restart it): this
                // mount's scrub is the last one known.
                if kind == "scrub" && st.last_scrub.is_none() {
                    scrub_end.samples.push((ml.clone(), end as f64));
                }
            }
        }
        if let Some(r) = &st.last_scrub {
            scrub_end.samples.push((ml.clone(), r.ended_unix_s as f64));
            if let Some(t) = r.last_finished_unix_s {
                scrub_finished.samples.push((ml.clone(), t as f64));
            }
            let ended: Option<JobState> = r.state.parse().ok();
            for (name, on) in [
                ("finished", ended == Some(JobState::Finished)),
                ("cancelled", ended == Some(JobState::Cancelled)),
                ("failed", matches!(ended, Some(JobState::Failed(_)))),
            ] {
                scrub_last_state
                    .samples
                    .push((labels(&[("mount", m), ("state", name)]), flag(on)));
            }
            scrub_last_differences
                .samples
                .push((ml.clone(), r.differences as f64));
            scrub_last_repaired
                .samples
                .push((ml.clone(), r.repaired as f64));
            scrub_last_errors
                .samples
                .push((ml.clone(), r.errors as f64));
        }
    }

    let mut out = String::new();
    for f in [
        up,
        info,
        state,
        legs_total,
        legs_online,
        uptime,
        daemon_memory,
        daemon_cpu,
        daemon_threads,
        keeper_info,
        keeper_restarts,
        keeper_last,
        leg_state,
        leg_info,
        leg_disk,
        errors,
        repairs,
        read_bytes,
        written_bytes,
        read_ops,
        write_ops,
        size,
        free,
        reserve,
        scan_running,
        scan_state,
        scan_done_bytes,
        scan_size_bytes,
        scan_done_entries,
        scan_entries,
        scan_ratio,
        scan_differences,
        scan_repaired,
        scan_errors,
        scan_start,
        scan_end_f,
        scrub_end,
        scrub_finished,
        scrub_last_state,
        scrub_last_differences,
        scrub_last_repaired,
        scrub_last_errors,
    ] {
        if f.samples.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (l, v) in f.samples {
            let _ = writeln!(out, "{}{l} {v}", f.name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(
            labels(&[("mount", "/a\"b\\c\nd")]),
            "{mount=\"/a\\\"b\\\\c\\nd\"}"
        );
    }

    #[test]
    fn an_unreadable_mount_is_down() {
        let out = render(&[("/srv/x".into(), Err("not a mirrorfs mount".into()))]);
        assert_eq!(
            out,
            "# HELP mirrorfs_up 1 if the mount's statistics could be read\n\
             # TYPE mirrorfs_up gauge\n\
             mirrorfs_up{mount=\"/srv/x\"} 0\n"
        );
        assert_eq!(render(&[]), "");
    }

    /// The state families list every state, in this order and with these names: alerts and
    /// dashboards match them.
    #[test]
    fn states_are_one_sample_each() {
        use crate::stats::fixture::{leg, stats};
        let out = render(&[(
            "/m".into(),
            Ok(stats(vec![
                leg("a", LegState::InSync),
                leg("b", LegState::Stale),
            ])),
        )]);
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("mirrorfs_state") || l.contains("mirrorfs_leg_state"))
            .collect();
        assert_eq!(
            lines.join("\n"),
            "# HELP mirrorfs_state 1 for the mount's state (ONLINE, DEGRADED, FAULTED), 0 for the others\n\
             # TYPE mirrorfs_state gauge\n\
             mirrorfs_state{mount=\"/m\",state=\"ONLINE\"} 0\n\
             mirrorfs_state{mount=\"/m\",state=\"DEGRADED\"} 1\n\
             mirrorfs_state{mount=\"/m\",state=\"FAULTED\"} 0\n\
             # HELP mirrorfs_leg_state 1 for the leg's state (ONLINE, FAULTED, MISSING, STALE, RESYNCING, REMOVED), 0 for the others\n\
             # TYPE mirrorfs_leg_state gauge\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"a\",state=\"ONLINE\"} 1\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"a\",state=\"FAULTED\"} 0\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"a\",state=\"MISSING\"} 0\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"a\",state=\"STALE\"} 0\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"a\",state=\"RESYNCING\"} 0\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"a\",state=\"REMOVED\"} 0\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"b\",state=\"ONLINE\"} 0\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"b\",state=\"FAULTED\"} 0\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"b\",state=\"MISSING\"} 0\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"b\",state=\"STALE\"} 1\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"b\",state=\"RESYNCING\"} 0\n\
             mirrorfs_leg_state{mount=\"/m\",leg=\"b\",state=\"REMOVED\"} 0"
        );
    }
}
