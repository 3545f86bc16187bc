//! A deterministic simulator of the read policies on modelled devices (`make sim`).
//!
//! It drives a policy exactly as the engine does: for each read, the open file's
//! [`StreamTracker`] gives the stream, the legs are snapshotted into [`LegView`]s with our own
//! in-flight pieces counted at the moment of decision, the policy picks, each piece of the plan
//! is handed to its leg's device (in parallel for a split plan), `last_read_end` moves when a
//! piece is handed over, and each leg's [`ServiceTime`] is fed at completion (contiguity judged in
//! completion order). Jobs behave like
//! fio jobs with `iodepth`: each keeps that many reads in flight and issues the next the moment
//! one completes. Nothing is random except through seeded generators, so a run always gives
//! the same numbers.
//!
//! Models and workloads: [`device`], [`workload`].

pub mod device;
pub mod workload;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;

use mirrorfs::policy::service_time::ServiceTime;
use mirrorfs::policy::stream::{StreamId, StreamTracker};
use mirrorfs::policy::{by_name_among, LegView, ReadPlan, ReadRequest};

use device::{Device, Io};
pub use workload::{Job, LegSpec, Pattern, Workload};

/// One job's outcome.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobResult {
    pub bytes: u64,
    pub reads: u64,
    /// Reads whose set of legs differed from the job's previous read's (spread reads
    /// neither count nor change the previous read's legs: the stream did not move).
    pub leg_switches: u64,
    /// Reads split over several legs.
    pub split_reads: u64,
    /// Whole reads spread over several legs ([`ReadPlan::Spread`]).
    pub spread_reads: u64,
    /// Bytes of this job each leg read.
    pub leg_bytes: Vec<u64>,
}

/// One run of one policy on one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct RunResult {
    pub workload: String,
    pub policy: String,
    pub duration_us: u64,
    pub jobs: Vec<JobResult>,
    /// Bytes each leg read.
    pub leg_bytes: Vec<u64>,
}

impl RunResult {
    pub fn bytes(&self) -> u64 {
        self.jobs.iter().map(|j| j.bytes).sum()
    }

    /// Total throughput, MB/s (10^6 bytes).
    pub fn mbs(&self) -> f64 {
        self.bytes() as f64 / self.duration_us as f64
    }

    pub fn iops(&self) -> f64 {
        self.jobs.iter().map(|j| j.reads).sum::<u64>() as f64 * 1e6 / self.duration_us as f64
    }

    /// The slowest job's throughput, MB/s.
    pub fn min_job_mbs(&self) -> f64 {
        self.jobs
            .iter()
            .map(|j| j.bytes as f64 / self.duration_us as f64)
            .fold(f64::INFINITY, f64::min)
    }

    /// Share of the bytes read from each leg, percent.
    pub fn leg_share(&self) -> Vec<f64> {
        let total: u64 = self.leg_bytes.iter().sum();
        self.leg_bytes
            .iter()
            .map(|&b| 100.0 * b as f64 / total.max(1) as f64)
            .collect()
    }

    pub fn leg_switches(&self) -> u64 {
        self.jobs.iter().map(|j| j.leg_switches).sum()
    }

    pub fn split_reads(&self) -> u64 {
        self.jobs.iter().map(|j| j.split_reads).sum()
    }

    pub fn spread_reads(&self) -> u64 {
        self.jobs.iter().map(|j| j.spread_reads).sum()
    }
}

/// The policies the table compares: (label, spec, pid offset of the jobs). `pid` runs twice,
/// with the jobs' pids even and odd, as the bench rig must (btrfs's result depends on it).
pub const SIM_POLICIES: &[(&str, &str, u32)] = &[
    ("first", "first", 0),
    ("devid:1", "devid:1", 0),
    ("pid (even)", "pid", 0),
    ("pid (odd)", "pid", 1),
    ("round-robin", "round-robin", 0),
    ("nonrot", "nonrot", 0),
    ("queue", "queue", 0),
    ("latency", "latency", 0),
    ("md", "md", 0),
    ("auto", "auto", 0),
];

struct Leg {
    device: Device,
    svc: ServiceTime,
    inflight: u32,
    last_read_end: Option<(u64, u64)>,
    /// Where the last completed piece ended: contiguity for the service times is judged in
    /// completion order, as the engine does.
    last_done_end: Option<(u64, u64)>,
    rotational: bool,
    bytes: u64,
}

struct Piece {
    read: usize,
    leg: usize,
    len: u64,
    submitted_ns: u64,
    file: u64,
    offset: u64,
    queued: u32,
}

struct Read {
    job: usize,
    stream: StreamId,
    size: u32,
    pieces_left: usize,
}

struct JobState {
    tracker: StreamTracker,
    next_offset: u64,
    rng: u64,
    last_legs: Vec<usize>,
    result: JobResult,
}

/// Runs `policy_spec` on `w`; the jobs' pids are `1000 + job index + pid_offset`.
///
/// # Panics
/// On an unknown policy, or when the policy makes a plan that names a leg that is not a
/// candidate or does not cover the read exactly.
pub fn run(w: &Workload, policy_spec: &str, pid_offset: u32) -> RunResult {
    let names: Vec<String> = w.legs.iter().map(|l| l.name.to_string()).collect();
    let policy =
        by_name_among(policy_spec, &names).unwrap_or_else(|| panic!("policy {policy_spec}"));
    let mut legs: Vec<Leg> = w
        .legs
        .iter()
        .map(|l| Leg {
            device: Device::new(l.model.clone()),
            svc: ServiceTime::new(),
            inflight: 0,
            last_read_end: None,
            last_done_end: None,
            rotational: l.rotational,
            bytes: 0,
        })
        .collect();
    let mut jobs: Vec<JobState> = w
        .jobs
        .iter()
        .enumerate()
        .map(|(i, j)| JobState {
            tracker: StreamTracker::new(),
            next_offset: j.start,
            rng: 0x2545_F491_4F6C_DD1D ^ (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            last_legs: Vec::new(),
            result: JobResult {
                leg_bytes: vec![0; w.legs.len()],
                ..JobResult::default()
            },
        })
        .collect();
    let mut pieces: Vec<Piece> = Vec::new();
    let mut reads: Vec<Read> = Vec::new();
    // (completion time, piece id): completion order, ties by piece id.
    let mut events: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let end_ns = w.duration_us * 1000;

    let issue = |job: usize,
                 now: u64,
                 jobs: &mut Vec<JobState>,
                 legs: &mut Vec<Leg>,
                 pieces: &mut Vec<Piece>,
                 reads: &mut Vec<Read>,
                 events: &mut BinaryHeap<Reverse<(u64, usize)>>| {
        let spec = &w.jobs[job];
        let st = &mut jobs[job];
        let bs = u64::from(spec.bs);
        let offset = match spec.pattern {
            Pattern::Sequential => {
                if st.next_offset + bs > spec.start + spec.len {
                    st.next_offset = spec.start;
                }
                let o = st.next_offset;
                st.next_offset += bs;
                o
            }
            Pattern::Random => {
                st.rng ^= st.rng << 13;
                st.rng ^= st.rng >> 7;
                st.rng ^= st.rng << 17;
                spec.start + ((st.rng >> 16) % (spec.len / bs)) * bs
            }
        };
        let now_us = now / 1000;
        let (sid, stream) = st.tracker.observe(offset, spec.bs, now_us);
        let views: Vec<LegView> = legs
            .iter()
            .enumerate()
            .map(|(idx, l)| {
                let mut v = LegView {
                    idx,
                    rotational: l.rotational,
                    inflight: l.inflight,
                    last_read_end: l.last_read_end,
                    ..Default::default()
                };
                l.svc.fill(&mut v);
                v
            })
            .collect();
        let req = ReadRequest {
            pid: 1000 + job as u32 + pid_offset,
            file: spec.file,
            offset,
            size: spec.bs,
            now_us,
            stream,
        };
        let plan = policy.pick(&views, &req);
        if let Err(e) = plan.check(&views, offset, spec.bs) {
            panic!("{}: bad plan {plan:?} for {req:?}: {e}", policy.name());
        }
        st.tracker.record(sid, &plan, spec.bs, now_us);
        if matches!(plan, ReadPlan::Spread(_)) {
            st.result.spread_reads += 1;
        } else {
            let mut plan_legs = plan.legs();
            plan_legs.sort_unstable();
            if !st.last_legs.is_empty() && st.last_legs != plan_legs {
                st.result.leg_switches += 1;
            }
            if matches!(plan, ReadPlan::Split(_)) {
                st.result.split_reads += 1;
            }
            st.last_legs = plan_legs;
        }
        let parts = plan.pieces(offset, spec.bs);
        reads.push(Read {
            job,
            stream: sid,
            size: spec.bs,
            pieces_left: parts.len(),
        });
        let read_id = reads.len() - 1;
        for p in parts {
            let leg = &mut legs[p.leg];
            leg.last_read_end = Some((spec.file, p.offset + u64::from(p.len)));
            let queued = leg.inflight;
            leg.inflight += 1;
            pieces.push(Piece {
                read: read_id,
                leg: p.leg,
                len: u64::from(p.len),
                submitted_ns: now,
                file: spec.file,
                offset: p.offset,
                queued,
            });
            let io = Io {
                id: pieces.len() - 1,
                addr: workload::disk_address(spec.file, p.offset),
                len: u64::from(p.len),
            };
            for (id, done) in leg.device.submit(io, now) {
                events.push(Reverse((done, id)));
            }
        }
    };

    for (j, spec) in w.jobs.iter().enumerate() {
        for _ in 0..spec.iodepth {
            issue(
                j,
                0,
                &mut jobs,
                &mut legs,
                &mut pieces,
                &mut reads,
                &mut events,
            );
        }
    }
    while let Some(Reverse((now, id))) = events.pop() {
        if now > end_ns {
            break;
        }
        let (leg_idx, read_id, len, submitted, at, queued) = {
            let p = &pieces[id];
            (
                p.leg,
                p.read,
                p.len,
                p.submitted_ns,
                (p.file, p.offset),
                p.queued,
            )
        };
        let leg = &mut legs[leg_idx];
        let contiguous = leg.last_done_end == Some(at);
        leg.last_done_end = Some((at.0, at.1 + len));
        leg.inflight -= 1;
        leg.bytes += len;
        jobs[reads[read_id].job].result.leg_bytes[leg_idx] += len;
        let elapsed_us = (now - submitted) / 1000;
        leg.svc
            .record_queued(len, elapsed_us, now / 1000, Some(contiguous), Some(queued));
        for (nid, done) in leg.device.complete(now) {
            events.push(Reverse((done, nid)));
        }
        let r = &mut reads[read_id];
        r.pieces_left -= 1;
        if r.pieces_left == 0 {
            let (job, sid, size) = (r.job, r.stream, r.size);
            let st = &mut jobs[job];
            st.tracker.done(sid);
            st.result.bytes += u64::from(size);
            st.result.reads += 1;
            issue(
                job,
                now,
                &mut jobs,
                &mut legs,
                &mut pieces,
                &mut reads,
                &mut events,
            );
        }
    }
    RunResult {
        workload: w.name.to_string(),
        policy: policy.name(),
        duration_us: w.duration_us,
        jobs: jobs.into_iter().map(|j| j.result).collect(),
        leg_bytes: legs.iter().map(|l| l.bytes).collect(),
    }
}

/// Runs every policy of [`SIM_POLICIES`] on `w`: (label, result).
pub fn run_all(w: &Workload) -> Vec<(&'static str, RunResult)> {
    SIM_POLICIES
        .iter()
        .map(|&(label, spec, pid)| (label, run(w, spec, pid)))
        .collect()
}

/// The summary matrix: one row per workload, one column per policy, total MB/s.
pub fn summary_table(all: &[(&Workload, Vec<(&'static str, RunResult)>)]) -> String {
    let mut s = String::new();
    let _ = write!(s, "| workload (total MB/s) |");
    for (label, _, _) in SIM_POLICIES {
        let _ = write!(s, " {label} |");
    }
    s.push('\n');
    s.push_str("|---|");
    for _ in SIM_POLICIES {
        s.push_str("---:|");
    }
    s.push('\n');
    for (w, results) in all {
        let best = results.iter().map(|(_, r)| r.mbs()).fold(0.0, f64::max);
        let _ = write!(s, "| {} |", w.name);
        for (_, r) in results {
            let v = r.mbs();
            let shown = if v < 10.0 {
                format!("{v:.2}")
            } else {
                format!("{v:.0}")
            };
            if v >= best * 0.995 {
                let _ = write!(s, " **{shown}** |");
            } else {
                let _ = write!(s, " {shown} |");
            }
        }
        s.push('\n');
    }
    s
}

/// The detail of one workload: one row per policy.
pub fn detail_table(w: &Workload, results: &[(&'static str, RunResult)]) -> String {
    let mut s = String::new();
    let legs: Vec<&str> = w.legs.iter().map(|l| l.name).collect();
    let _ = writeln!(s, "#### {} ({})\n", w.name, w.describe());
    let _ = writeln!(
        s,
        "| policy | MB/s | IOPS | slowest job MB/s | share % ({}) | leg switches | split reads | spread reads |",
        legs.join(" / ")
    );
    s.push_str("|---|---:|---:|---:|---|---:|---:|---:|\n");
    for (label, r) in results {
        let share: Vec<String> = r.leg_share().iter().map(|p| format!("{p:.0}")).collect();
        let _ = writeln!(
            s,
            "| {label} | {:.2} | {:.0} | {:.2} | {} | {} | {} | {} |",
            r.mbs(),
            r.iops(),
            r.min_job_mbs(),
            share.join(" / "),
            r.leg_switches(),
            r.split_reads(),
            r.spread_reads()
        );
    }
    s
}
