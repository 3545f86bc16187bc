//! Device models: flash (an SSD, a USB stick) and a disk with one head.
//!
//! Time is in nanoseconds. A device gets pieces of reads at disk addresses, queues them and
//! says when each completes; it knows nothing of legs, files or policies.

use std::collections::VecDeque;

/// What a device is like.
#[derive(Clone, Debug, PartialEq)]
pub enum Model {
    /// Flash behind a controller: up to `depth` requests in service at once, each taking a
    /// fixed `latency_ns` that overlaps with the others, plus its turn on one shared transfer
    /// channel of `bytes_per_sec`, at least `1 / iops` per request. So a deep queue reaches
    /// the bandwidth (large reads) or the IOPS limit (small ones), and queue depth 1 sees the
    /// latency. No position effects.
    Flash {
        latency_ns: u64,
        bytes_per_sec: u64,
        iops: u64,
        depth: usize,
    },
    /// A disk with one head, serving one request at a time from its queue as Linux's
    /// mq-deadline does: in C-LOOK order (the next address at or after the head, else the
    /// lowest), except that each batch of 16 starts with the oldest request if it has waited
    /// 500 ms (`fifo_batch`, `read_expire`), so that no stream starves. Each request costs
    /// positioning plus transfer at `bytes_per_sec`.
    /// Positioning: none when the request starts where the previous one ended; the time the
    /// platter takes to pass over a forward gap of up to 2 MiB; otherwise a seek of
    /// `settle_ns + (full_stroke_ns - settle_ns) x sqrt(distance / capacity)` followed by the
    /// rotational wait until the target sector comes under the head (the angle follows from
    /// the address and the time: `rpm`, one track = one revolution of `bytes_per_sec`).
    Disk {
        bytes_per_sec: u64,
        rpm: u64,
        capacity: u64,
        settle_ns: u64,
        full_stroke_ns: u64,
    },
}

impl Model {
    /// The seed's notebook SSD: 417 MB/s (seed 000: 417 MB/s at 32 KiB random, iodepth 16),
    /// 100 µs latency, 100k IOPS, 32 deep.
    pub fn ssd() -> Model {
        Model::Flash {
            latency_ns: 100_000,
            bytes_per_sec: 417_000_000,
            iops: 100_000,
            depth: 32,
        }
    }

    /// The seed's USB stick as the bench rig throttles it: 50 MiB/s and 1600 IOPS, 300 µs.
    pub fn usb_stick() -> Model {
        Model::Flash {
            latency_ns: 300_000,
            bytes_per_sec: 50 << 20,
            iops: 1600,
            depth: 32,
        }
    }

    /// One of the bench rig's equal "HDD" legs: a loop device throttled by cgroup blkio to
    /// 150 MB/s and 320 IOPS (`bench/run.sh`, scenario `hdd`). Whatever its rotational flag
    /// says, it has no positioning cost; every request costs at least 1/320 s, so requests
    /// under 468 KiB are IOPS-bound.
    pub fn throttled_disk() -> Model {
        Model::Flash {
            latency_ns: 100_000,
            bytes_per_sec: 150_000_000,
            iops: 320,
            depth: 32,
        }
    }

    /// A 7200 rpm disk: 150 MB/s, 1 ms track-to-track, 15 ms full stroke over 1 TB.
    pub fn hdd() -> Model {
        Model::Disk {
            bytes_per_sec: 150_000_000,
            rpm: 7200,
            capacity: 1_000_000_000_000,
            settle_ns: 1_000_000,
            full_stroke_ns: 15_000_000,
        }
    }
}

/// A read piece waiting for or in service on a device.
#[derive(Clone, Copy, Debug)]
pub struct Io {
    pub id: usize,
    pub addr: u64,
    pub len: u64,
}

/// mq-deadline's `read_expire` and `fifo_batch`.
const READ_EXPIRE_NS: u64 = 500_000_000;
const FIFO_BATCH: u32 = 16;

/// A device and its queue.
#[derive(Debug)]
pub struct Device {
    model: Model,
    /// Queued requests and when they were queued, oldest first.
    queue: VecDeque<(Io, u64)>,
    in_service: usize,
    batch_left: u32,
    channel_free_ns: u64,
    head: u64,
}

/// How far a disk reads ahead on its own after a read, while no request is waiting.
pub const LOOKAHEAD_BYTES: u64 = 2 << 20;

fn transfer_ns(len: u64, bytes_per_sec: u64) -> u64 {
    (len as u128 * 1_000_000_000 / bytes_per_sec as u128) as u64
}

impl Device {
    pub fn new(model: Model) -> Device {
        Device {
            model,
            queue: VecDeque::new(),
            in_service: 0,
            batch_left: 0,
            channel_free_ns: 0,
            head: 0,
        }
    }

    /// Queues `io` at `now`; gives the (id, completion time) of what starts now.
    pub fn submit(&mut self, io: Io, now: u64) -> Vec<(usize, u64)> {
        self.queue.push_back((io, now));
        self.dispatch(now)
    }

    /// One request completed at `now`; gives what starts next.
    pub fn complete(&mut self, now: u64) -> Vec<(usize, u64)> {
        self.in_service -= 1;
        self.dispatch(now)
    }

    fn dispatch(&mut self, now: u64) -> Vec<(usize, u64)> {
        let mut started = Vec::new();
        match self.model {
            Model::Flash {
                latency_ns,
                bytes_per_sec,
                iops,
                depth,
            } => {
                while self.in_service < depth {
                    let Some((io, _)) = self.queue.pop_front() else {
                        break;
                    };
                    let channel = transfer_ns(io.len, bytes_per_sec).max(1_000_000_000 / iops);
                    let done = (now + latency_ns).max(self.channel_free_ns) + channel;
                    self.channel_free_ns = done;
                    self.in_service += 1;
                    started.push((io.id, done));
                }
            }
            Model::Disk { .. } => {
                if self.in_service == 0 && !self.queue.is_empty() {
                    let expired = self.queue[0].1 + READ_EXPIRE_NS <= now;
                    let next = if self.batch_left == 0 && expired {
                        0
                    } else {
                        self.queue
                            .iter()
                            .enumerate()
                            .filter(|(_, (io, _))| io.addr >= self.head)
                            .min_by_key(|(_, (io, _))| io.addr)
                            .or_else(|| {
                                self.queue
                                    .iter()
                                    .enumerate()
                                    .min_by_key(|(_, (io, _))| io.addr)
                            })
                            .map(|(i, _)| i)
                            .unwrap_or(0)
                    };
                    self.batch_left = self.batch_left.checked_sub(1).unwrap_or(FIFO_BATCH - 1);
                    let (io, _) = self.queue.remove(next).expect("queued");
                    let done = now + self.disk_service_ns(io, now);
                    self.head = io.addr + io.len;
                    self.in_service = 1;
                    started.push((io.id, done));
                }
            }
        }
        started
    }

    fn disk_service_ns(&self, io: Io, now: u64) -> u64 {
        self.model
            .disk_service_ns(self.head, io.addr, io.len, now)
            .expect("a disk")
    }
}

impl Model {
    /// For a disk: how long a request of `len` bytes at `addr` takes when the head is at
    /// `head` (where the previous request ended) and it starts at `now` (ns); `None` for
    /// flash. The simulator's queue and the disk model's FUSE layer (`diskmodel/`) both use
    /// it, so they are calibrated alike.
    pub fn disk_service_ns(&self, head: u64, addr: u64, len: u64, now: u64) -> Option<u64> {
        self.disk_service_after_idle_ns(head, addr, len, now, 0)
    }

    /// [`disk_service_ns`](Self::disk_service_ns) for a read that reaches a head idle for
    /// `idle_ns`. A drive reads on into its look-ahead segment while idle, so a read that
    /// continues where the last one ended finds up to [`LOOKAHEAD_BYTES`] of it read
    /// already. The simulator's requests follow each other without a pause (0); the disk
    /// model (`diskmodel/`) passes the turnaround of its FUSE requests, which would
    /// otherwise cost its disk a gap that the simulator's does not have.
    pub fn disk_service_after_idle_ns(
        &self,
        head: u64,
        addr: u64,
        len: u64,
        now: u64,
        idle_ns: u64,
    ) -> Option<u64> {
        let Model::Disk {
            bytes_per_sec,
            rpm,
            capacity,
            settle_ns,
            full_stroke_ns,
        } = *self
        else {
            return None;
        };
        let io = Io { id: 0, addr, len };
        let transfer = transfer_ns(io.len, bytes_per_sec);
        if io.addr == head {
            let ahead = transfer_ns(LOOKAHEAD_BYTES, bytes_per_sec).min(idle_ns);
            return Some(transfer.saturating_sub(ahead));
        }
        let period = 60_000_000_000 / rpm;
        let track = (bytes_per_sec as u128 * period as u128 / 1_000_000_000) as u64;
        let distance = io.addr.abs_diff(head);
        let pass_over =
            (io.addr > head && distance <= 2 << 20).then(|| transfer_ns(distance, bytes_per_sec));
        let seek = settle_ns
            + ((full_stroke_ns - settle_ns) as f64 * (distance as f64 / capacity as f64).sqrt())
                as u64;
        let arrive = now + seek;
        let angle_now = (arrive % period) as f64 / period as f64;
        let angle_target = (io.addr % track) as f64 / track as f64;
        let wait = ((angle_target - angle_now).rem_euclid(1.0) * period as f64) as u64;
        let positioning = match pass_over {
            Some(p) => p.min(seek + wait),
            None => seek + wait,
        };
        Some(positioning + transfer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_serial(model: Model, ios: &[(u64, u64)]) -> u64 {
        let mut d = Device::new(model);
        let mut now = 0;
        for (i, &(addr, len)) in ios.iter().enumerate() {
            let s = d.submit(Io { id: i, addr, len }, now);
            now = s[0].1;
            d.complete(now);
        }
        now
    }

    #[test]
    fn ssd_bandwidth_and_latency() {
        // qd1 32 KiB: latency + transfer.
        let t = run_serial(Model::ssd(), &[(0, 32768)]);
        assert_eq!(t, 100_000 + 78_580);
        // Deep queue: bandwidth bound.
        let mut d = Device::new(Model::ssd());
        let mut last = 0;
        for i in 0..32 {
            for (_, done) in d.submit(
                Io {
                    id: i,
                    addr: i as u64 * 32768,
                    len: 32768,
                },
                0,
            ) {
                last = last.max(done);
            }
        }
        let mbs = 32.0 * 32768.0 / (last as f64 / 1e9) / 1e6;
        assert!((380.0..418.0).contains(&mbs), "{mbs}");
    }

    #[test]
    fn usb_iops_bound_for_small_reads() {
        let mut d = Device::new(Model::usb_stick());
        let mut last = 0;
        for i in 0..32 {
            for (_, done) in d.submit(
                Io {
                    id: i,
                    addr: i as u64 * 8192,
                    len: 4096,
                },
                0,
            ) {
                last = last.max(done);
            }
        }
        let iops = 32.0 / (last as f64 / 1e9);
        assert!((1500.0..1601.0).contains(&iops), "{iops}");
    }

    #[test]
    fn a_disk_idle_before_a_sequential_read_has_read_part_of_it_ahead() {
        let m = Model::hdd();
        let mib = 1u64 << 20;
        let full = m.disk_service_ns(0, 0, mib, 0).unwrap();
        assert_eq!(m.disk_service_after_idle_ns(0, 0, mib, 0, 0), Some(full));
        // 1 ms idle: 1 ms of the transfer was done meanwhile.
        assert_eq!(
            m.disk_service_after_idle_ns(0, 0, mib, 0, 1_000_000),
            Some(full - 1_000_000)
        );
        // A long idle reads ahead at most LOOKAHEAD_BYTES: a 4 MiB read still costs 2 MiB.
        let four = m.disk_service_ns(0, 0, 4 * mib, 0).unwrap();
        let two = m.disk_service_ns(0, 0, 2 * mib, 0).unwrap();
        let after = m.disk_service_after_idle_ns(0, 0, 4 * mib, 0, 1_000_000_000);
        assert!(after.unwrap().abs_diff(four - two) <= 1, "{after:?}");
        // Nothing for a read elsewhere: the look-ahead read the wrong bytes.
        assert_eq!(
            m.disk_service_after_idle_ns(0, 64 * mib, mib, 0, 1_000_000_000),
            m.disk_service_ns(0, 64 * mib, mib, 0)
        );
    }

    #[test]
    fn disk_sequential_fast_random_slow() {
        let seq: Vec<(u64, u64)> = (0..100).map(|i| (i << 20, 1 << 20)).collect();
        let t = run_serial(Model::hdd(), &seq);
        let mbs = 100.0 * 1048576.0 / (t as f64 / 1e9) / 1e6;
        assert!((140.0..151.0).contains(&mbs), "{mbs}");
        let mut x = 88_172_645_463_325_252u64;
        let rand: Vec<(u64, u64)> = (0..200)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 16) % (8 << 30) / 4096 * 4096 + (100 << 30), 4096)
            })
            .collect();
        let t = run_serial(Model::hdd(), &rand);
        let iops = 200.0 / (t as f64 / 1e9);
        assert!((120.0..250.0).contains(&iops), "{iops}");
        // Skipping every other 512 KiB gains nothing over reading it all.
        let skip: Vec<(u64, u64)> = (0..100).map(|i| (i << 20, 1 << 19)).collect();
        let t_skip = run_serial(Model::hdd(), &skip);
        let t_all = run_serial(
            Model::hdd(),
            &(0..100).map(|i| (i << 20, 1 << 20)).collect::<Vec<_>>(),
        );
        assert!(t_skip * 100 >= t_all * 98, "{t_skip} {t_all}");
    }
}
