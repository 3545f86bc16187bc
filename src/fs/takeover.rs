//! What a successor needs to take the kernel's session over from a serving process that died
//! (`docs/architecture.md`, "A mount that outlives its daemon"): the node ids the kernel holds,
//! with their lookup counts and their objects on the legs (file handles), and the open file
//! handles. The kernel keeps using them across the restart; they must name the same objects.
//!
//! The serving process appends a record for every change to a log in a memory file that the
//! keeper holds (`sys::session::memfd`), so the log outlives the process. A successor replays
//! it ([`State::replay`]), resolves every node on the legs, and starts a log of its own from a
//! snapshot of what it took over.
//!
//! When records are written decides what a crash between the record and the kernel can do:
//! a lookup or an open is recorded before its answer goes to the kernel, a forget or a release
//! after it is done. So the successor may count one lookup more than the kernel, or keep a
//! handle the kernel released (a few bytes kept until unmount), never one fewer (a node id the
//! kernel still uses and the successor dropped). A request that was answered before the crash
//! but recorded again by the successor (the kernel resends what was read and not answered)
//! errs the same way.

/// The format of the session log and of the keeper's messages (`daemon/keeper.rs`): a successor
/// must speak the same (`mirrorfs restart --binary` probes it). Bump it when either changes.
pub const FORMAT: u32 = 1;

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::io::{Read, Seek, Write};

/// A node id's object on one leg: the leg's device and inode number, and its file handle
/// (empty when the leg's filesystem has none: the object is then lost to a successor).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LegNode {
    pub dev: u64,
    pub ino: u64,
    pub handle: Vec<u8>,
}

/// A node id the kernel holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// The `S_IFMT` bits.
    pub kind: u32,
    /// The kernel's lookup count.
    pub lookups: u64,
    /// Per leg, its object there (None: not on that leg, or not found there yet).
    pub legs: Vec<Option<LegNode>>,
}

/// An open file handle the kernel holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Open {
    pub ino: u64,
    /// The flags the legs' descriptors were opened with.
    pub flags: i32,
    /// A directory handle (else a regular file's).
    pub dir: bool,
}

/// Everything a log says: the last word of each record kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    pub nodes: BTreeMap<u64, Node>,
    pub opens: BTreeMap<u64, Open>,
    /// The FUSE layer's own record (what INIT settled), opaque here.
    pub session: Vec<u8>,
    /// The highest node id and file handle ever handed out: a successor hands out higher ones.
    pub top_ino: u64,
    pub top_fh: u64,
}

const NODE: u8 = 1;
const LOOKUPS: u8 = 2;
const GONE: u8 = 3;
const OPEN: u8 = 4;
const CLOSE: u8 = 5;
const SESSION: u8 = 6;

/// A record's bytes as they are built.
struct Rec(Vec<u8>);

impl Rec {
    fn new(tag: u8) -> Rec {
        Rec(vec![tag, 0, 0, 0, 0])
    }
    fn u8(mut self, v: u8) -> Rec {
        self.0.push(v);
        self
    }
    fn u32(mut self, v: u32) -> Rec {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Rec {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Rec {
        self = self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self
    }
    fn done(mut self) -> Vec<u8> {
        let len = (self.0.len() - 5) as u32;
        self.0[1..5].copy_from_slice(&len.to_le_bytes());
        self.0
    }
}

/// Reads a record's fields in order; `None` past its end.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        Some(self.take(n)?.to_vec())
    }
}

fn node_record(ino: u64, n: &Node) -> Vec<u8> {
    let mut r = Rec::new(NODE)
        .u64(ino)
        .u32(n.kind)
        .u64(n.lookups)
        .u8(n.legs.len().min(255) as u8);
    for l in n.legs.iter().take(255) {
        r = match l {
            None => r.u8(0),
            Some(l) => r.u8(1).u64(l.dev).u64(l.ino).bytes(&l.handle),
        };
    }
    r.done()
}

fn open_record(fh: u64, o: &Open) -> Vec<u8> {
    Rec::new(OPEN)
        .u64(fh)
        .u64(o.ino)
        .u32(o.flags as u32)
        .u8(o.dir as u8)
        .done()
}

impl State {
    /// The state a log says, up to its first incomplete record (a process may die while
    /// writing one: what it had not written, the kernel had not been told).
    pub fn replay(log: &[u8]) -> State {
        let mut s = State::default();
        let mut at = 0;
        while log.len() >= at + 5 {
            let tag = log[at];
            let len = u32::from_le_bytes([log[at + 1], log[at + 2], log[at + 3], log[at + 4]]);
            let Some(body) = log.get(at + 5..at + 5 + len as usize) else {
                break;
            };
            at += 5 + len as usize;
            if s.apply(tag, &mut Fields(body)).is_none() {
                log::warn!("takeover: a record of kind {tag} does not parse: skipped");
            }
        }
        s
    }

    fn apply(&mut self, tag: u8, f: &mut Fields<'_>) -> Option<()> {
        match tag {
            NODE => {
                let ino = f.u64()?;
                let kind = f.u32()?;
                let lookups = f.u64()?;
                let n = f.u8()? as usize;
                let mut legs = Vec::with_capacity(n);
                for _ in 0..n {
                    legs.push(match f.u8()? {
                        0 => None,
                        _ => Some(LegNode {
                            dev: f.u64()?,
                            ino: f.u64()?,
                            handle: f.bytes()?,
                        }),
                    });
                }
                self.top_ino = self.top_ino.max(ino);
                self.nodes.insert(
                    ino,
                    Node {
                        kind,
                        lookups,
                        legs,
                    },
                );
            }
            LOOKUPS => {
                let ino = f.u64()?;
                let n = f.u64()?;
                if let Some(node) = self.nodes.get_mut(&ino) {
                    node.lookups = n;
                }
            }
            GONE => {
                self.nodes.remove(&f.u64()?);
            }
            OPEN => {
                let fh = f.u64()?;
                let ino = f.u64()?;
                let flags = f.u32()? as i32;
                let dir = f.u8()? != 0;
                self.top_fh = self.top_fh.max(fh);
                self.opens.insert(fh, Open { ino, flags, dir });
            }
            CLOSE => {
                self.opens.remove(&f.u64()?);
            }
            SESSION => self.session = f.bytes()?,
            _ => return None,
        }
        Some(())
    }

    /// This state as a log of its own (a successor starts from it).
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = Rec::new(SESSION).bytes(&self.session).done();
        for (ino, n) in &self.nodes {
            out.extend(node_record(*ino, n));
        }
        for (fh, o) in &self.opens {
            out.extend(open_record(*fh, o));
        }
        // The highest numbers handed out, even if their nodes and handles are gone: a node and
        // a handle that says them, then their end.
        if !self.nodes.contains_key(&self.top_ino) && self.top_ino > 0 {
            out.extend(node_record(self.top_ino, &Node::default()));
            out.extend(Rec::new(GONE).u64(self.top_ino).done());
        }
        if !self.opens.contains_key(&self.top_fh) && self.top_fh > 0 {
            out.extend(open_record(self.top_fh, &Open::default()));
            out.extend(Rec::new(CLOSE).u64(self.top_fh).done());
        }
        out
    }
}

/// The log a serving process writes: appended records in a memory file the keeper holds.
/// Each record is one `write`, so a process that dies leaves whole records behind it (and at
/// most one cut short, which [`State::replay`] stops at).
pub struct Journal {
    file: Mutex<std::fs::File>,
}

impl Journal {
    /// A log in `file` (a memory file), starting with `start` (a snapshot, or nothing).
    pub fn new(mut file: std::fs::File, start: &[u8]) -> std::io::Result<Journal> {
        file.set_len(0)?;
        file.rewind()?;
        file.write_all(start)?;
        Ok(Journal {
            file: Mutex::new(file),
        })
    }

    fn append(&self, rec: &[u8]) {
        if let Err(e) = self.file.lock().write_all(rec) {
            log::error!("takeover: cannot append to the session log: {e}");
        }
    }

    /// A new node id, with its objects.
    pub fn node(&self, ino: u64, n: &Node) {
        self.append(&node_record(ino, n));
    }

    /// The kernel's lookup count of `ino` is now `n`.
    pub fn lookups(&self, ino: u64, n: u64) {
        self.append(&Rec::new(LOOKUPS).u64(ino).u64(n).done());
    }

    /// The kernel forgot `ino`.
    pub fn gone(&self, ino: u64) {
        self.append(&Rec::new(GONE).u64(ino).done());
    }

    pub fn open(&self, fh: u64, o: &Open) {
        self.append(&open_record(fh, o));
    }

    pub fn close(&self, fh: u64) {
        self.append(&Rec::new(CLOSE).u64(fh).done());
    }

    /// The FUSE layer's record of the session.
    pub fn session(&self, bytes: &[u8]) {
        self.append(&Rec::new(SESSION).bytes(bytes).done());
    }

    /// Everything written so far (tests, and a clean handover).
    pub fn read_all(file: &mut std::fs::File) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        file.rewind()?;
        file.read_to_end(&mut out)?;
        Ok(out)
    }
}

/// The gate every request passes on its way to the core, closed when a server hands its
/// session to a successor on purpose (`mirrorfs restart`): requests under way finish and are
/// answered; a request read after the gate closed is left unanswered, and the kernel sends it
/// again to the successor (`FUSE_NOTIFY_RESEND`). So no request is cut off halfway, as a
/// crash may cut one.
#[derive(Default)]
pub struct Gate {
    closed: std::sync::atomic::AtomicBool,
    inside: std::sync::atomic::AtomicUsize,
}

impl Gate {
    /// A request passes in (true), or the gate is closed (false: leave it unanswered).
    pub fn enter(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        // Counted first, then the gate looked at: `drain` cannot miss a request that passed.
        self.inside.fetch_add(1, SeqCst);
        if self.closed.load(SeqCst) {
            self.inside.fetch_sub(1, SeqCst);
            return false;
        }
        true
    }

    /// A request that passed was answered.
    pub fn leave(&self) {
        self.inside
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Closes the gate and waits until every request that passed has left, for `limit` at
    /// most; whether they all did.
    pub fn drain(&self, limit: std::time::Duration) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.closed.store(true, SeqCst);
        let start = std::time::Instant::now();
        while self.inside.load(SeqCst) > 0 {
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        true
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_gate_lets_nothing_in_and_drain_waits_for_who_is_inside() {
        let g = std::sync::Arc::new(Gate::default());
        assert!(g.enter());
        let g2 = g.clone();
        let t = std::thread::spawn(move || g2.drain(std::time::Duration::from_secs(10)));
        while !g.is_closed() {
            std::thread::yield_now();
        }
        assert!(!g.enter(), "a closed gate let a request in");
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(
            !t.is_finished(),
            "drain returned while a request was inside"
        );
        g.leave();
        assert!(t.join().unwrap());
        let stuck = Gate::default();
        assert!(stuck.enter());
        assert!(!stuck.drain(std::time::Duration::from_millis(10)));
    }

    fn leg(dev: u64, ino: u64) -> Option<LegNode> {
        Some(LegNode {
            dev,
            ino,
            handle: vec![ino as u8; 8],
        })
    }

    #[test]
    fn a_log_replays_to_the_last_word_of_each_record() {
        let file = crate::sys::session::memfd("takeover-test").unwrap();
        let j = Journal::new(file.try_clone().unwrap(), &[]).unwrap();
        j.session(b"init");
        j.node(
            5,
            &Node {
                kind: libc::S_IFREG,
                lookups: 1,
                legs: vec![leg(1, 50), leg(2, 60)],
            },
        );
        j.node(
            6,
            &Node {
                kind: libc::S_IFDIR,
                lookups: 1,
                legs: vec![leg(1, 70), None],
            },
        );
        j.lookups(5, 3);
        j.gone(6);
        j.open(
            9,
            &Open {
                ino: 5,
                flags: libc::O_RDWR,
                dir: false,
            },
        );
        j.open(
            10,
            &Open {
                ino: 5,
                flags: libc::O_RDONLY,
                dir: false,
            },
        );
        j.close(10);
        let log = Journal::read_all(&mut file.try_clone().unwrap()).unwrap();
        let s = State::replay(&log);
        assert_eq!(s.session, b"init");
        assert_eq!(s.nodes.len(), 1);
        assert_eq!(s.nodes[&5].lookups, 3);
        assert_eq!(s.nodes[&5].legs, vec![leg(1, 50), leg(2, 60)]);
        assert_eq!(s.opens.keys().copied().collect::<Vec<_>>(), vec![9]);
        assert_eq!((s.top_ino, s.top_fh), (6, 10));
        // A snapshot says the same, and the highest numbers handed out.
        assert_eq!(State::replay(&s.snapshot()), s);
        // A record cut short by a death is where the replay stops.
        let mut cut = log.clone();
        cut.extend_from_slice(&Rec::new(GONE).u64(5).done()[..7]);
        assert_eq!(State::replay(&cut), s);
    }
}

/// What a successor took over of its predecessor's session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TakenOver {
    pub nodes: usize,
    /// Node ids found on no leg: the kernel's requests for them get ESTALE.
    pub lost_nodes: Vec<u64>,
    pub handles: usize,
    /// File handles whose node was lost (or that no descriptor budget could take).
    pub lost_handles: Vec<u64>,
}

impl super::MirrorFs {
    /// Keeps the session log in `journal` from now on: every node id and file handle the
    /// kernel is given is recorded there. Before any request is answered.
    pub fn keep_session_log(&self, journal: std::sync::Arc<Journal>) {
        self.inodes.set_journal(journal.clone());
        self.handles.set_journal(journal);
    }

    /// Takes over the session a serving process that died left in `state`: its node ids (see
    /// `InodeTable::restore`) and its open handles, whose descriptors are opened again at
    /// their first use, with the flags they were opened with (never `O_TRUNC`, `O_CREAT` or
    /// `O_EXCL`: those did their work at the open).
    pub fn take_over(&self, state: &State) -> TakenOver {
        let n = self.mirror.legs().len();
        let in_sync: Vec<bool> = (0..n).map(|l| self.mirror.leg(l).is_in_sync()).collect();
        let lost_nodes = self.inodes.restore(state, &in_sync);
        let mut out = TakenOver {
            nodes: state.nodes.len() - lost_nodes.len(),
            lost_nodes,
            ..TakenOver::default()
        };
        for (&fh, o) in &state.opens {
            let Ok(inode) = self.inodes.get(o.ino) else {
                out.lost_handles.push(fh);
                continue;
            };
            if o.dir {
                self.handles.restore_dir(
                    fh,
                    super::handle::OpenDir {
                        inode,
                        entries: Default::default(),
                    },
                );
                out.handles += 1;
                continue;
            }
            let legs = self.legs_known(&inode);
            let restored = self.handles.admit(legs.len()).and_then(|admission| {
                super::handle::OpenFile::read_only(inode, admission, &legs, n, o.flags)
                    .with_io(|_| Ok(super::handle::IoKind::Cached))
            });
            match restored {
                Ok(f) => {
                    self.handles.restore_file(fh, f);
                    out.handles += 1;
                }
                Err(_) => out.lost_handles.push(fh),
            }
        }
        self.handles.numbers_above(state.top_fh);
        out
    }

    /// The session as it stands, for a log of its own (`session`: the FUSE layer's record).
    pub fn takeover_state(&self, session: Vec<u8>) -> State {
        State {
            nodes: self.inodes.takeover_nodes(),
            opens: self.handles.takeover_opens(),
            session,
            top_ino: self.inodes.top_number(),
            top_fh: self.handles.top_number(),
        }
    }
}
