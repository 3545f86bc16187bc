//! Power cuts (issue 26, part 2): not a killed daemon, but every disk losing what it had not
//! flushed, each its own random part of it.
//!
//! Two (and three) legs, each a real ext4 on a loop device over a cache disk
//! (`mirrorfs-cachedisk`, keep-fraction 0.5: a disk keeps a seeded random half of its
//! unflushed blocks). Seven workloads run on the mirror at once, each recording outside the
//! disks what was acknowledged as durable (`tests/workloads/power_cut.py`): an appender that
//! fsyncs each record, random block writes with an fdatasync after every 8 (fio's random
//! writes with --verify and --fsync, with the record of what was acknowledged that fio does
//! not keep), 1 MiB writes that mirrorfs streams to the legs (`RWF_DONTCACHE`) with an
//! fdatasync after every 2, sqlite in WAL mode, `git commit` in a loop, the
//! write-fsync-rename pattern, and a scribbler that never syncs.
//!
//! The cut, at a seeded random moment: one control file cuts every disk at the same instant,
//! and the workloads and the daemon are killed. The loop devices and the disks go; the power
//! comes back (the disks start again on their images), ext4 replays its journal, mirrorfs
//! mounts and recovers. Then, for every round so far (the rounds build on each other):
//! - every acknowledged write is there and right, read through the mount;
//! - the renamed file is one whole version, not older than the last acknowledged;
//! - no leg counts a checksum error and no file is damaged: crash recovery is not rot;
//! - the mount is ONLINE, and a scrub finds the legs identical.
//!
//! `MIRRORFS_POWER_CUTS=N` sets the cuts per test (CI: 3 with two legs, 2 with three);
//! `MIRRORFS_POWER_CUT_SEED=S` the seed (printed by every run). `make test-power-cut` makes
//! the long run: 25 cuts with each, 50 in all.

#[macro_use]
mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

const KINDS: &[&str] = &[
    "append",
    "randwrite",
    "stream",
    "sqlite",
    "git",
    "rename",
    "scribble",
];
const IMAGE_SIZE: u64 = 256 << 20;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/power_cut.py")
}

/// A small deterministic generator (splitmix64): the seeds of a run are its whole input.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One leg's disk, powered: the cache disk, the loop device over it, ext4 mounted on it.
/// Dropped in the right order: ext4, the loop device, the disk.
struct Powered {
    fs: MountGuard,
    lo: LoopDev,
    disk: CacheDisk,
}

/// The machine: the images of the disks (which survive the cuts), the mirror's mount point,
/// and the acknowledgement files (outside the disks).
struct Machine {
    tmp: tempfile::TempDir,
    n: usize,
    control: PathBuf,
    powered: Vec<Powered>,
    mirror: Option<Remounted>,
}

impl Machine {
    fn new(n: usize) -> Machine {
        let tmp = tempfile::Builder::new()
            .prefix("mirrorfs-powercut-")
            .tempdir_in("/var/tmp")
            .unwrap();
        for i in 0..n {
            make_image(&tmp.path().join(format!("img{i}")), IMAGE_SIZE);
        }
        fs::create_dir_all(tmp.path().join("acks")).unwrap();
        fs::create_dir_all(tmp.path().join("mnt")).unwrap();
        let control = tmp.path().join("cut");
        Machine {
            tmp,
            n,
            control,
            powered: Vec::new(),
            mirror: None,
        }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn mnt(&self) -> PathBuf {
        self.p("mnt")
    }

    fn legs(&self) -> Vec<PathBuf> {
        (0..self.n).map(|i| self.p(&format!("fs{i}/leg"))).collect()
    }

    /// The power comes on: each disk with its seed for the next cut, ext4 (made the first
    /// time; its journal replayed on the others), then the mirror over the legs.
    fn power_on(&mut self, seeds: &[u64], first: bool) {
        assert!(self.powered.is_empty());
        let _ = fs::remove_file(&self.control);
        for (i, seed) in seeds.iter().enumerate() {
            let disk = CacheDisk::start(
                &self.p(&format!("img{i}")),
                &self.p(&format!("disk{i}")),
                &self.control,
                &self.p(&format!("disk{i}.report")),
                &["--seed", &seed.to_string(), "--keep-fraction", "0.5"],
            );
            let mut lo = LoopDev::attach(&disk.disk());
            // At most 1 MiB of dirty pages: writeback then pushes the unsynced writes to the
            // disk all the time, where the cut finds them unflushed, instead of keeping them
            // in memory for 30 s.
            lo.limit_dirty(1 << 20);
            if first {
                mkfs_ext4(&lo.dev);
            }
            let fs = MountGuard::mount(&lo.dev, &self.p(&format!("fs{i}")), "rw");
            if first {
                fs::create_dir(fs.path.join("leg")).unwrap();
                syncfs(&fs.path);
            }
            self.powered.push(Powered { fs, lo, disk });
        }
        self.mirror = Some(mount_ok(&self.legs(), &self.mnt(), &[]));
    }

    /// The power goes: every disk at once (one creation of the control file), and at the same
    /// moment every process that used the mount and the daemon are killed. Returns each disk's
    /// (dropped, kept) blocks.
    fn cut(&mut self, workloads: &mut Vec<Child>) -> Vec<(usize, usize)> {
        let pids = self.mirror.as_ref().unwrap().pids().to_vec();
        cut_power(&self.control);
        for w in workloads.iter() {
            // SAFETY: plain kill(2) of a process group this test made.
            unsafe { libc::kill(-(w.id() as i32), libc::SIGKILL) };
        }
        for &p in &pids {
            // SAFETY: plain kill(2).
            unsafe { libc::kill(p, libc::SIGKILL) };
        }
        for w in workloads.iter_mut() {
            let _ = w.wait();
        }
        workloads.clear();
        assert!(
            wait_pids_gone(&pids, Duration::from_secs(20)),
            "the daemon {pids:?} outlived SIGKILL by 20 s"
        );
        let reports: Vec<(usize, usize)> = self
            .powered
            .iter()
            .map(|p| {
                let r = p.disk.wait_report();
                (r.dropped, r.kept)
            })
            .collect();
        // The dead mount, then ext4 (its disk fails every request now), the loop device and
        // the disk, as a machine going down would lose them.
        if let Some(mut m) = self.mirror.take() {
            m.unmount();
        }
        for mut p in self.powered.drain(..).rev() {
            if let Err(e) = p.fs.unmount() {
                panic!("unmounting ext4 after the cut: {e}");
            }
            p.lo.detach();
            p.disk.stop();
        }
        reports
    }
}

fn syncfs(p: &Path) {
    use std::os::fd::AsRawFd;
    let f = fs::File::open(p).unwrap();
    // SAFETY: a valid descriptor.
    let r = unsafe { libc::syncfs(f.as_raw_fd()) };
    assert_eq!(r, 0, "syncfs {}", p.display());
}

fn fsync_dir(p: &Path) {
    fs::File::open(p)
        .and_then(|f| f.sync_all())
        .unwrap_or_else(|e| panic!("fsync {}: {e}", p.display()));
}

/// Starts the workloads of round `r` on the mount, each in a process group of its own (git's
/// children die with it). Their directories are made and made durable first.
fn start_workloads(m: &Machine, r: usize, pace_ms: u64) -> Vec<Child> {
    let round = m.mnt().join(format!("r{r}"));
    fs::create_dir(&round).unwrap();
    for k in KINDS {
        fs::create_dir(round.join(k)).unwrap();
    }
    fsync_dir(&round);
    fsync_dir(&m.mnt());
    KINDS
        .iter()
        .map(|k| {
            Command::new("python3")
                .arg(script())
                .args(["run", k])
                .arg(round.join(k))
                .arg(m.p(&format!("acks/r{r}-{k}")))
                .env("POWER_CUT_PACE_MS", pace_ms.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(fs::File::create(m.p(&format!("acks/r{r}-{k}.err"))).unwrap())
                .process_group(0)
                .spawn()
                .expect("start python3 (scripts/install-test-deps.sh installs it)")
        })
        .collect()
}

/// (round, workload) -> (acknowledged, lost); -1 for both when it could not be checked.
type Checked = BTreeMap<(usize, String), (i64, i64)>;

/// Every workload's check of rounds 0 to `last`, after the power came back, in one run of the
/// script: (round, kind) -> (acknowledged, lost), and what the script said on stderr.
fn check_all(m: &Machine, last: usize) -> (Checked, String) {
    let out = run_timeout(
        Command::new("python3")
            .arg(script())
            .arg("check-all")
            .arg(m.mnt())
            .arg(m.p("acks"))
            .arg(last.to_string())
            .arg(KINDS.join(",")),
        Duration::from_secs(300),
    );
    let so = text(&out.stdout);
    let mut found = BTreeMap::new();
    for line in so.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |p: &str| -> i64 {
            w.iter()
                .find_map(|x| x.strip_prefix(p))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("a check's line without {p}: {line}"))
        };
        let r: usize = w[0].trim_start_matches('r').parse().unwrap();
        found.insert((r, w[1].to_string()), (num("acked="), num("lost=")));
    }
    assert!(
        out.status.success() && found.len() == (last + 1) * KINDS.len(),
        "the checks of rounds 0 to {last} ended {} with {} of {} lines: {so} {}",
        out.status,
        found.len(),
        (last + 1) * KINDS.len(),
        text(&out.stderr)
    );
    (found, text(&out.stderr))
}

#[derive(Default)]
struct Tally {
    cuts: usize,
    acked: u64,
    lost: u64,
}

/// What one recovery found: checksum errors, damaged files, scrub differences, the state.
fn after_recovery(mnt: &Path) -> (u64, usize, Vec<String>, String) {
    // The resync a recovery may start (a leg that missed a write) ends first.
    let t = Instant::now();
    let mut v: Value;
    loop {
        (_, _, v) = stats_of(&mnt.join(".mirrorfs"));
        if v["state"] == "ONLINE" || t.elapsed() > RESYNC_TIMEOUT {
            break;
        }
        sleep(Duration::from_millis(100));
    }
    mirrorfs_ok(&[&"scrub", &"start", &mnt]);
    let doc = wait_scrubbed(mnt);
    let (_, _, v2) = stats_of(&mnt.join(".mirrorfs"));
    let errors: u64 = v2["legs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["checksum_errors"].as_u64().unwrap_or(0))
        .sum();
    let damaged = v2["integrity"]["damaged"].as_array().map_or(0, |d| d.len());
    (errors, damaged, differing(&doc), v["state"].to_string())
}

fn power_cuts(n_legs: usize, default_cuts: usize) {
    require_fuse!();
    for tool in ["python3", "git", "mkfs.ext4", "losetup"] {
        require_tool!(tool);
    }
    let cuts: usize = std::env::var("MIRRORFS_POWER_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cuts);
    let seed: u64 = std::env::var("MIRRORFS_POWER_CUT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| monotonic_ns() % 1_000_000);
    eprintln!(
        "power cuts: {n_legs} legs, {cuts} cuts, seed {seed} (MIRRORFS_POWER_CUT_SEED={seed} repeats it)"
    );
    let mut rng = Rng(seed * 31 + n_legs as u64);
    let mut m = Machine::new(n_legs);
    let disk_seeds =
        |rng: &mut Rng| -> Vec<u64> { (0..n_legs).map(|_| rng.below(1 << 32)).collect() };
    let mut seeds = disk_seeds(&mut rng);
    m.power_on(&seeds, true);

    let mut tally: BTreeMap<&str, Tally> = BTreeMap::new();
    let mut table = String::new();
    let mut failures = Vec::new();
    let (mut checksum_errors, mut damaged_files, mut differences) = (0u64, 0usize, 0usize);
    let (mut blocks_dropped, mut cuts_that_dropped) = (0usize, 0usize);
    for r in 0..cuts {
        // In three rounds of four (by the seed) the workloads pause between their durable
        // writes, up to 50, 500 or 3,000 ms: each fsync through the mirror is an fsync on
        // every leg and two cache flushes of its disk (ext4's commit), so with fsyncs back to
        // back a cut finds almost nothing unflushed; in the long pauses only the scribbler
        // writes, and its writes pile up on the disks unflushed.
        let pace_ms = [0, 50, 500, 3000][rng.below(4) as usize];
        let mut workloads = start_workloads(&m, r, pace_ms);
        let delay = Duration::from_millis(800 + rng.below(2200));
        sleep(delay);
        for (w, k) in workloads.iter_mut().zip(KINDS) {
            if let Ok(Some(st)) = w.try_wait() {
                panic!(
                    "the {k} workload of round {r} ended before the cut ({st}): {}",
                    fs::read_to_string(m.p(&format!("acks/r{r}-{k}.err"))).unwrap_or_default()
                );
            }
        }
        let cut_seeds = seeds.clone();
        let lost_blocks = m.cut(&mut workloads);
        let dropped: usize = lost_blocks.iter().map(|&(d, _)| d).sum();
        blocks_dropped += dropped;
        cuts_that_dropped += usize::from(dropped > 0);
        seeds = disk_seeds(&mut rng);
        m.power_on(&seeds, false);

        let mut row = format!(
            "cut {r:>2}  at {:>4} ms  pace {pace_ms:>4} ms  disk seeds {cut_seeds:?}  unflushed blocks dropped/kept {lost_blocks:?}\n",
            delay.as_millis()
        );
        let (checked, said) = check_all(&m, r);
        for ((done, k), (acked, lost)) in &checked {
            let t = tally
                .entry(KINDS.iter().find(|x| *x == k).unwrap())
                .or_default();
            if *done == r {
                t.cuts += 1;
                t.acked += (*acked).max(0) as u64;
                let _ = write!(row, "  {k} {acked} acked, {lost} lost;");
            }
            if *lost != 0 {
                t.lost += lost.unsigned_abs();
                failures.push(format!(
                    "after cut {r} (seed {seed}), round {done}'s {k}: {lost} of {acked} \
                     acknowledged writes lost (-1: could not be checked): {said}"
                ));
            }
        }
        let (errors, damaged, differing, state) = after_recovery(&m.mnt());
        let _ = writeln!(
            row,
            "\n  checksum errors {errors}, damaged files {damaged}, scrub differences {}, state {state}",
            differing.len()
        );
        eprint!("{row}");
        table.push_str(&row);
        checksum_errors += errors;
        damaged_files += damaged;
        differences += differing.len();
        if errors > 0 || damaged > 0 || !differing.is_empty() || state != "\"ONLINE\"" {
            failures.push(format!(
                "after cut {r} (seed {seed}): {errors} checksum errors, {damaged} damaged files, \
                 state {state}, scrub found the legs different at {differing:?}"
            ));
        }
        if !failures.is_empty() {
            break;
        }
    }

    // The legs themselves, with the mirror unmounted cleanly.
    if let Some(mut mirror) = m.mirror.take() {
        mirror.unmount();
    }
    let legs_differ = legs_differences(&m.legs());
    let mut summary = format!(
        "power cuts with {n_legs} legs, seed {seed}:\n\
         | workload | cuts | acknowledged writes checked | lost |\n|---|---|---|---|\n"
    );
    for (k, t) in &tally {
        let _ = writeln!(summary, "| {k} | {} | {} | {} |", t.cuts, t.acked, t.lost);
    }
    let _ = writeln!(
        summary,
        "cuts in which a disk lost unflushed blocks: {cuts_that_dropped} ({blocks_dropped} \
         blocks of 4 KiB in all; the others found every disk flushed)"
    );
    let _ = writeln!(
        summary,
        "checksum errors {checksum_errors}, damaged files {damaged_files}, scrub differences \
         {differences}, legs identical after the last recovery: {}",
        legs_differ.is_empty()
    );
    eprintln!("{table}\n{summary}");
    println!("{summary}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        legs_differ.is_empty(),
        "the legs differ after recovery and a scrub: {legs_differ:?}"
    );
    for mut p in m.powered.drain(..).rev() {
        let _ = p.fs.unmount();
        p.lo.detach();
        p.disk.stop();
    }
}

#[test]
fn power_cuts_with_two_legs_lose_nothing_acknowledged() {
    power_cuts(2, 3);
}

#[test]
fn power_cuts_with_three_legs_lose_nothing_acknowledged() {
    power_cuts(3, 2);
}
