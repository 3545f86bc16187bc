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

use mirrorfs::policy::extents::{self, Extents, CHUNK, EXTENT};
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
    /// When (µs of simulated time) each leg last measured its positioning cost.
    pub seek_sampled_us: Vec<Option<u64>>,
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

/// One column of the tables: a label, the policy's spec, the pid offset of the jobs, and
/// whether the extent read-ahead ([`mirrorfs::policy::extents`]) runs, as the engine runs it
/// under `auto` (`readahead=`).
#[derive(Clone, Copy, Debug)]
pub struct SimPolicy {
    pub label: &'static str,
    pub spec: &'static str,
    pub pid_offset: u32,
    pub extents: bool,
}

const fn p(label: &'static str, spec: &'static str, pid_offset: u32) -> SimPolicy {
    SimPolicy {
        label,
        spec,
        pid_offset,
        extents: false,
    }
}

/// The policies the table compares. `pid` runs twice, with the jobs' pids even and odd, as the
/// bench rig must (btrfs's result depends on it). `auto` runs twice: routing alone (as with
/// `readahead=0`), and with the extent read-ahead (the engine's default).
pub const SIM_POLICIES: &[SimPolicy] = &[
    p("first", "first", 0),
    p("devid:1", "devid:1", 0),
    p("pid (even)", "pid", 0),
    p("pid (odd)", "pid", 1),
    p("round-robin", "round-robin", 0),
    p("nonrot", "nonrot", 0),
    p("queue", "queue", 0),
    p("latency", "latency", 0),
    p("md", "md", 0),
    p("auto", "auto", 0),
    SimPolicy {
        label: "auto + read-ahead",
        spec: "auto",
        pid_offset: 0,
        extents: true,
    },
];

/// The time a read served from the read-ahead buffer takes: the copy into the reply (ns).
fn buffer_copy_ns(len: u64) -> u64 {
    50_000 + len / 4
}

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

/// What a piece of I/O is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum For {
    /// A piece of a job's read (index into `reads`), on a leg.
    Read(usize),
    /// A chunk of extent `index` fetched ahead for `job`, on a leg.
    Fetch { job: usize, index: u64 },
    /// A read served from the read-ahead buffer: no leg.
    Buffer(usize),
}

struct Piece {
    what: For,
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
    offset: u64,
    pieces_left: usize,
}

/// An extent being fetched ahead, or fetched.
struct Buffered {
    leg: usize,
    start: u64,
    len: u64,
    /// Bytes arrived, from the start (its chunks are fetched in order, one at a time).
    done: u64,
    /// Its first chunk has been handed to the leg (a leg fetches its extents one after
    /// another: two at once would make the disk seek between them at every chunk).
    started: bool,
}

struct JobState {
    tracker: StreamTracker,
    next_offset: u64,
    rng: u64,
    last_legs: Vec<usize>,
    result: JobResult,
    extents: Option<Extents>,
    buffered: Vec<(u64, Buffered)>,
    /// Reads waiting for fetched bytes.
    waiting: Vec<usize>,
    /// This job's pieces outstanding on each leg (reads and fetches).
    own: Vec<u32>,
}

struct Sim<'a> {
    w: &'a Workload,
    policy: Box<dyn mirrorfs::policy::ReadPolicy>,
    pid_offset: u32,
    extents: bool,
    legs: Vec<Leg>,
    jobs: Vec<JobState>,
    pieces: Vec<Piece>,
    reads: Vec<Read>,
    /// (completion time, piece id): completion order, ties by piece id.
    events: BinaryHeap<Reverse<(u64, usize)>>,
}

/// Runs `policy_spec` on `w`; the jobs' pids are `1000 + job index + pid_offset`.
///
/// # Panics
/// On an unknown policy, or when the policy makes a plan that names a leg that is not a
/// candidate or does not cover the read exactly.
pub fn run(w: &Workload, policy_spec: &str, pid_offset: u32) -> RunResult {
    run_with(w, policy_spec, pid_offset, false)
}

/// As [`run`], with the extent read-ahead on or off.
pub fn run_with(w: &Workload, policy_spec: &str, pid_offset: u32, extents: bool) -> RunResult {
    let names: Vec<String> = w.legs.iter().map(|l| l.name.to_string()).collect();
    let policy =
        by_name_among(policy_spec, &names).unwrap_or_else(|| panic!("policy {policy_spec}"));
    let mut sim = Sim {
        w,
        policy,
        pid_offset,
        extents,
        legs: w
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
            .collect(),
        jobs: w
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
                extents: None,
                buffered: Vec::new(),
                waiting: Vec::new(),
                own: vec![0; w.legs.len()],
            })
            .collect(),
        pieces: Vec::new(),
        reads: Vec::new(),
        events: BinaryHeap::new(),
    };
    let end_ns = w.duration_us * 1000;
    for (j, spec) in w.jobs.iter().enumerate() {
        for _ in 0..spec.iodepth {
            sim.issue(j, 0);
        }
    }
    while let Some(Reverse((now, id))) = sim.events.pop() {
        if now > end_ns {
            break;
        }
        sim.complete(id, now);
    }
    RunResult {
        workload: w.name.to_string(),
        policy: sim.policy.name(),
        duration_us: w.duration_us,
        jobs: sim.jobs.into_iter().map(|j| j.result).collect(),
        leg_bytes: sim.legs.iter().map(|l| l.bytes).collect(),
        seek_sampled_us: sim
            .legs
            .iter()
            .map(|l| {
                let mut v = LegView::default();
                l.svc.fill(&mut v);
                v.seek_sampled_us
            })
            .collect(),
    }
}

impl Sim<'_> {
    fn views(&self) -> Vec<LegView> {
        self.legs
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
            .collect()
    }

    /// Hands a piece to a leg's device.
    fn submit(&mut self, what: For, leg: usize, file: u64, offset: u64, len: u64, now: u64) {
        let l = &mut self.legs[leg];
        l.last_read_end = Some((file, offset + len));
        let queued = l.inflight;
        l.inflight += 1;
        let job = match what {
            For::Read(r) => self.reads[r].job,
            For::Fetch { job, .. } => job,
            For::Buffer(_) => unreachable!("not a leg's"),
        };
        self.jobs[job].own[leg] += 1;
        self.pieces.push(Piece {
            what,
            leg,
            len,
            submitted_ns: now,
            file,
            offset,
            queued,
        });
        let io = Io {
            id: self.pieces.len() - 1,
            addr: workload::disk_address(file, offset),
            len,
        };
        for (id, done) in self.legs[leg].device.submit(io, now) {
            self.events.push(Reverse((done, id)));
        }
    }

    /// The next read of `job`.
    fn issue(&mut self, job: usize, now: u64) {
        let spec = &self.w.jobs[job];
        let st = &mut self.jobs[job];
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
        let views = self.views();
        let req = ReadRequest {
            pid: 1000 + job as u32 + self.pid_offset,
            file: spec.file,
            offset,
            size: spec.bs,
            now_us,
            stream,
        };
        self.reads.push(Read {
            job,
            stream: sid,
            size: spec.bs,
            offset,
            pieces_left: 1,
        });
        let read_id = self.reads.len() - 1;
        let st = &mut self.jobs[job];
        if self.extents && st.extents.is_none() {
            let own = st.own.clone();
            if let Some(order) = extents::engage(&views, &req, &|l| own[l]) {
                st.extents = Some(Extents::new(order, offset));
            }
        }
        // Served from the read-ahead buffer when every extent it touches is held.
        let held = st.extents.as_ref().and_then(|e| {
            let (k1, k2) = (offset / EXTENT, (offset + bs - 1) / EXTENT);
            (k1..=k2)
                .all(|k| e.state(k).is_some())
                .then(|| e.owner(k1))
                .flatten()
        });
        if let Some(owner) = held {
            st.tracker
                .record(sid, &ReadPlan::Spread(owner), spec.bs, now_us);
            st.result.spread_reads += 1;
            st.waiting.push(read_id);
            self.serve_waiting(job, now);
        } else {
            let plan = self.policy.pick(&views, &req);
            if let Err(e) = plan.check(&views, offset, spec.bs) {
                panic!("{}: bad plan {plan:?} for {req:?}: {e}", self.policy.name());
            }
            let st = &mut self.jobs[job];
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
            self.reads[read_id].pieces_left = parts.len();
            for p in parts {
                self.submit(
                    For::Read(read_id),
                    p.leg,
                    spec.file,
                    p.offset,
                    u64::from(p.len),
                    now,
                );
            }
        }
        self.read_ahead(job, offset, now);
    }

    /// Moves `job`'s read-ahead window to the reader at `offset`: frees what it passed, starts
    /// new extents.
    fn read_ahead(&mut self, job: usize, offset: u64, now: u64) {
        let spec = &self.w.jobs[job];
        let views = self.views();
        let st = &mut self.jobs[job];
        let Some(e) = st.extents.as_mut() else {
            return;
        };
        // The reads still in flight may lie a few reads behind this one.
        let behind = offset.saturating_sub(u64::from(spec.iodepth) * u64::from(spec.bs));
        for index in e.release_behind(behind) {
            st.buffered.retain(|(k, _)| *k != index);
        }
        let own = st.own.clone();
        let fetches = e.wanted(
            offset,
            &views,
            &|l| own[l],
            spec.start + spec.len,
            usize::MAX,
        );
        let legs = e.legs().to_vec();
        if e.finished() {
            st.extents = None;
            st.buffered.clear();
        }
        for f in fetches {
            self.jobs[job].buffered.push((
                f.index,
                Buffered {
                    leg: f.leg,
                    start: f.offset,
                    len: f.len,
                    done: 0,
                    started: false,
                },
            ));
        }
        // Every leg of the plan, for a fetch that waited for the reader.
        for leg in legs {
            self.start_fetch(job, leg, now);
        }
    }

    /// Starts the next extent of `job` on `leg`, unless one is being fetched there (or it
    /// must wait for the reader, [`Extents::may_start`]).
    fn start_fetch(&mut self, job: usize, leg: usize, now: u64) {
        let st = &mut self.jobs[job];
        let reader = st.next_offset;
        let on_leg = |b: &Buffered| b.leg == leg;
        if st
            .buffered
            .iter()
            .any(|(_, b)| on_leg(b) && b.started && b.done < b.len)
        {
            return;
        }
        let Some((index, b)) = st
            .buffered
            .iter_mut()
            .filter(|(_, b)| on_leg(b) && !b.started)
            .min_by_key(|(k, _)| *k)
        else {
            return;
        };
        if st
            .extents
            .as_ref()
            .is_some_and(|e| !e.may_start(*index, reader))
        {
            return;
        }
        b.started = true;
        let (index, offset, chunk) = (*index, b.start, CHUNK.min(b.len));
        let file = self.w.jobs[job].file;
        self.submit(For::Fetch { job, index }, leg, file, offset, chunk, now);
    }

    /// Serves `job`'s waiting reads whose bytes have all arrived.
    fn serve_waiting(&mut self, job: usize, now: u64) {
        let st = &mut self.jobs[job];
        let mut still = Vec::new();
        for r in std::mem::take(&mut st.waiting) {
            let (o, len) = (self.reads[r].offset, u64::from(self.reads[r].size));
            let arrived = (o / EXTENT..=(o + len - 1) / EXTENT).all(|k| {
                st.buffered
                    .iter()
                    .any(|(i, b)| *i == k && b.start + b.done >= (o + len).min(b.start + b.len))
            });
            if arrived {
                self.pieces.push(Piece {
                    what: For::Buffer(r),
                    leg: usize::MAX,
                    len,
                    submitted_ns: now,
                    file: 0,
                    offset: o,
                    queued: 0,
                });
                self.events
                    .push(Reverse((now + buffer_copy_ns(len), self.pieces.len() - 1)));
            } else {
                still.push(r);
            }
        }
        self.jobs[job].waiting = still;
    }

    fn complete(&mut self, id: usize, now: u64) {
        let (what, leg_idx, len, submitted, at, queued) = {
            let p = &self.pieces[id];
            (
                p.what,
                p.leg,
                p.len,
                p.submitted_ns,
                (p.file, p.offset),
                p.queued,
            )
        };
        if let For::Buffer(r) = what {
            self.finish_read(r, now);
            return;
        }
        let leg = &mut self.legs[leg_idx];
        let contiguous = leg.last_done_end == Some(at);
        leg.last_done_end = Some((at.0, at.1 + len));
        leg.inflight -= 1;
        leg.bytes += len;
        let elapsed_us = (now - submitted) / 1000;
        leg.svc
            .record_queued(len, elapsed_us, now / 1000, Some(contiguous), Some(queued));
        for (nid, done) in leg.device.complete(now) {
            self.events.push(Reverse((done, nid)));
        }
        match what {
            For::Read(r) => {
                let job = self.reads[r].job;
                self.jobs[job].own[leg_idx] -= 1;
                self.jobs[job].result.leg_bytes[leg_idx] += len;
                self.reads[r].pieces_left -= 1;
                if self.reads[r].pieces_left == 0 {
                    self.finish_read(r, now);
                }
            }
            For::Fetch { job, index } => {
                let st = &mut self.jobs[job];
                st.own[leg_idx] -= 1;
                st.result.leg_bytes[leg_idx] += len;
                // A chunk of an extent that was released meanwhile is dropped.
                let next = st
                    .buffered
                    .iter_mut()
                    .find(|(k, _)| *k == index)
                    .and_then(|(_, b)| {
                        b.done += len;
                        (b.done < b.len)
                            .then(|| (b.leg, b.start + b.done, CHUNK.min(b.len - b.done)))
                    });
                match next {
                    Some((leg, offset, chunk)) => {
                        let file = self.w.jobs[job].file;
                        self.submit(For::Fetch { job, index }, leg, file, offset, chunk, now);
                    }
                    None => {
                        if let Some(e) = st.extents.as_mut() {
                            e.ready(index);
                        }
                        self.start_fetch(job, leg_idx, now);
                    }
                }
                self.serve_waiting(job, now);
            }
            For::Buffer(_) => unreachable!(),
        }
    }

    fn finish_read(&mut self, r: usize, now: u64) {
        let (job, sid, size) = (self.reads[r].job, self.reads[r].stream, self.reads[r].size);
        let st = &mut self.jobs[job];
        st.tracker.done(sid);
        st.result.bytes += u64::from(size);
        st.result.reads += 1;
        self.issue(job, now);
    }
}

/// Runs every policy of [`SIM_POLICIES`] on `w`: (label, result).
pub fn run_all(w: &Workload) -> Vec<(&'static str, RunResult)> {
    SIM_POLICIES
        .iter()
        .map(|p| (p.label, run_with(w, p.spec, p.pid_offset, p.extents)))
        .collect()
}

/// The summary matrix: one row per workload, one column per policy, total MB/s.
pub fn summary_table(all: &[(&Workload, Vec<(&'static str, RunResult)>)]) -> String {
    let mut s = String::new();
    let _ = write!(s, "| workload (total MB/s) |");
    for SimPolicy { label, .. } in SIM_POLICIES {
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
