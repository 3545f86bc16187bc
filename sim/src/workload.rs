//! The legs and the jobs of a simulated run, and the seed workloads.

use super::device::Model;

/// One leg: a name, a device model and the rotational flag the policies see.
#[derive(Clone, Debug, PartialEq)]
pub struct LegSpec {
    pub name: &'static str,
    pub model: Model,
    pub rotational: bool,
}

impl LegSpec {
    pub fn ssd(name: &'static str) -> LegSpec {
        LegSpec {
            name,
            model: Model::ssd(),
            rotational: false,
        }
    }

    /// Flagged rotational, as the bench rig's slow leg and many USB sticks are.
    pub fn usb(name: &'static str) -> LegSpec {
        LegSpec {
            name,
            model: Model::usb_stick(),
            rotational: true,
        }
    }

    /// The bench rig's throttled loop device, flagged rotational as the rig marks it.
    pub fn rig_hdd(name: &'static str) -> LegSpec {
        LegSpec {
            name,
            model: Model::throttled_disk(),
            rotational: true,
        }
    }

    pub fn hdd(name: &'static str) -> LegSpec {
        LegSpec {
            name,
            model: Model::hdd(),
            rotational: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// From `start` on, wrapping at `start + len` (a jump: a new stream).
    Sequential,
    /// Uniform over `start..start + len`, aligned to the block size.
    Random,
}

/// A fio-like job: its own open file handle, `iodepth` reads in flight.
#[derive(Clone, Debug, PartialEq)]
pub struct Job {
    pub file: u64,
    pub start: u64,
    pub len: u64,
    pub bs: u32,
    pub iodepth: u32,
    pub pattern: Pattern,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub name: &'static str,
    pub legs: Vec<LegSpec>,
    pub jobs: Vec<Job>,
    /// Simulated time, µs.
    pub duration_us: u64,
}

impl Workload {
    /// A one-line description of the jobs.
    pub fn describe(&self) -> String {
        let jobs: Vec<String> = self
            .jobs
            .iter()
            .map(|j| {
                let kind = match j.pattern {
                    Pattern::Sequential => "read",
                    Pattern::Random => "randread",
                };
                format!(
                    "{kind} bs={}k iodepth={} over {} MiB",
                    j.bs / 1024,
                    j.iodepth,
                    j.len >> 20
                )
            })
            .collect();
        format!(
            "{} s simulated: {}",
            self.duration_us as f64 / 1e6,
            jobs.join("; ")
        )
    }
}

const GIB: u64 = 1 << 30;
const FILE_SIZE: u64 = 8 * GIB;

/// Where byte `offset` of `file` lies on a leg's device (the same on every leg): files of
/// 16 GiB apart from 100 GiB on.
pub fn disk_address(file: u64, offset: u64) -> u64 {
    100 * GIB + file * 2 * FILE_SIZE + offset
}

fn seq(file: u64, start: u64, len: u64) -> Job {
    Job {
        file,
        start,
        len,
        bs: 1 << 20,
        iodepth: 4,
        pattern: Pattern::Sequential,
    }
}

fn rand(file: u64, bs: u32) -> Job {
    Job {
        file,
        start: 0,
        len: FILE_SIZE,
        bs,
        iodepth: 16,
        pattern: Pattern::Random,
    }
}

fn four_readers() -> Vec<Job> {
    (0..4)
        .map(|i| seq(1, i * FILE_SIZE / 4, FILE_SIZE / 4))
        .collect()
}

/// The seed workloads (issue 4, item 5), each run for `duration_us` of simulated time.
/// Sequential jobs read 1 MiB with iodepth 4 (the rig's `seq1`/`seq4`); the four readers each
/// read their own quarter of one file (`seq4`).
pub fn seed_workloads(duration_us: u64) -> Vec<Workload> {
    let w = |name, legs: Vec<LegSpec>, jobs| Workload {
        name,
        legs,
        jobs,
        duration_us,
    };
    let hdds = || vec![LegSpec::hdd("hdd0"), LegSpec::hdd("hdd1")];
    let ssds = || vec![LegSpec::ssd("ssd0"), LegSpec::ssd("ssd1")];
    let ssd_usb = || vec![LegSpec::ssd("ssd"), LegSpec::usb("usb")];
    let ssd_hdd = || vec![LegSpec::ssd("ssd"), LegSpec::hdd("hdd")];
    let rig = || vec![LegSpec::rig_hdd("rig0"), LegSpec::rig_hdd("rig1")];
    let hdds3 = || {
        vec![
            LegSpec::hdd("hdd0"),
            LegSpec::hdd("hdd1"),
            LegSpec::hdd("hdd2"),
        ]
    };
    let rig3 = || {
        vec![
            LegSpec::rig_hdd("rig0"),
            LegSpec::rig_hdd("rig1"),
            LegSpec::rig_hdd("rig2"),
        ]
    };
    let ssds4 = || {
        vec![
            LegSpec::ssd("ssd0"),
            LegSpec::ssd("ssd1"),
            LegSpec::ssd("ssd2"),
            LegSpec::ssd("ssd3"),
        ]
    };
    let ssd_hdds = || {
        vec![
            LegSpec::ssd("ssd"),
            LegSpec::hdd("hdd0"),
            LegSpec::hdd("hdd1"),
        ]
    };
    vec![
        w("ssd+usb randread 32k", ssd_usb(), vec![rand(1, 32768)]),
        w(
            "ssd+usb 1 seq reader",
            ssd_usb(),
            vec![seq(1, 0, FILE_SIZE)],
        ),
        w("2 hdd 1 seq reader", hdds(), vec![seq(1, 0, FILE_SIZE)]),
        w("2 hdd 4 seq readers", hdds(), four_readers()),
        w("2 hdd randread 4k", hdds(), vec![rand(1, 4096)]),
        w("2 rig-hdd 1 seq reader", rig(), vec![seq(1, 0, FILE_SIZE)]),
        w("2 rig-hdd 4 seq readers", rig(), four_readers()),
        w("2 ssd 1 seq reader", ssds(), vec![seq(1, 0, FILE_SIZE)]),
        w("2 ssd 4 seq readers", ssds(), four_readers()),
        w("2 ssd randread 4k", ssds(), vec![rand(1, 4096)]),
        w(
            "ssd+hdd randread 4k + seq reader",
            ssd_hdd(),
            vec![rand(1, 4096), seq(2, 0, FILE_SIZE)],
        ),
        // Three and four legs (issue 13, item 5).
        w("3 hdd 1 seq reader", hdds3(), vec![seq(1, 0, FILE_SIZE)]),
        w("3 hdd 4 seq readers", hdds3(), four_readers()),
        w("3 hdd randread 4k", hdds3(), vec![rand(1, 4096)]),
        w("3 rig-hdd 1 seq reader", rig3(), vec![seq(1, 0, FILE_SIZE)]),
        w("4 ssd 1 seq reader", ssds4(), vec![seq(1, 0, FILE_SIZE)]),
        w("4 ssd randread 4k", ssds4(), vec![rand(1, 4096)]),
        w(
            "ssd+2 hdd 1 seq reader",
            ssd_hdds(),
            vec![seq(1, 0, FILE_SIZE)],
        ),
        w(
            "ssd+2 hdd randread 4k + seq reader",
            ssd_hdds(),
            vec![rand(1, 4096), seq(2, 0, FILE_SIZE)],
        ),
        w("ssd+2 hdd 4 seq readers", ssd_hdds(), four_readers()),
    ]
}

/// The seed workload called `name`.
pub fn seed_workload(name: &str, duration_us: u64) -> Option<Workload> {
    seed_workloads(duration_us)
        .into_iter()
        .find(|w| w.name == name)
}
