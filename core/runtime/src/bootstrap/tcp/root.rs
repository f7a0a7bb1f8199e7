//! The bootstrap root (NCCL 2.28.9 `src/bootstrap.cc`, `bootstrapRoot`, single-root case): every rank checks in
//! with its rank, the rank count and the address of its ring listener; the root tells each rank where its next
//! ring neighbour listens as soon as both have checked in.
//!
//! Unlike NCCL's root, which answers each rank over a connection of its own and then forgets it, this one keeps
//! every rank's check-in connection until the rank has joined, so it can judge the whole bootstrap: a rank that
//! never checks in within `COLLSCOPE_TIMEOUT_S`, ranks that disagree on the rank count, a rank checked in twice,
//! a rank that fails or exits while joining (it reports its failure, its connection closes, or the launcher
//! that hosts the root saw it exit). The [`Verdict`] goes to every rank still joining, so all of them end at once
//! with the same named cause instead of each waiting out its own timeout.
//!
//! A check-in may be a stranger's (NCCL's magic is public): one decides nothing alone. Check-ins with different
//! rank counts, and a second one of a rank, wait side by side until every rank of one count is in (the others
//! are then dropped) or the deadline (then the verdict names the disagreement); a rank that fails or leaves
//! before it is paired with a neighbour is withdrawn rather than judged. Handshakes and check-ins arrive side by
//! side, so a connection that sends nothing holds up nobody.

use super::{BootstrapError, Strays};
use crate::socket::{
    addr_from_bytes, addr_string, addr_to_bytes, Listener, Socket, SocketError, ADDR_BYTES, POLL_SLICE,
};
use collscope_debug::Subsys;
use collscope_debug::{nccl_trace, nccl_warn};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a rank sends the root (NCCL's `extInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CheckIn {
    pub rank: u32,
    pub nranks: u32,
    /// Where this rank's previous ring neighbour connects.
    pub ring_addr: SocketAddr,
}

pub(super) const CHECK_IN_BYTES: usize = 8 + ADDR_BYTES;

impl CheckIn {
    pub(super) fn to_bytes(self) -> [u8; CHECK_IN_BYTES] {
        let mut b = [0u8; CHECK_IN_BYTES];
        b[..4].copy_from_slice(&self.rank.to_le_bytes());
        b[4..8].copy_from_slice(&self.nranks.to_le_bytes());
        b[8..].copy_from_slice(&addr_to_bytes(&self.ring_addr));
        b
    }

    pub(super) fn from_bytes(b: &[u8; CHECK_IN_BYTES]) -> Result<Self, BootstrapError> {
        Ok(CheckIn {
            rank: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            nranks: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            ring_addr: addr_from_slice(&b[8..])?,
        })
    }
}

fn addr_from_slice(b: &[u8]) -> Result<SocketAddr, BootstrapError> {
    let a: [u8; ADDR_BYTES] =
        b.try_into().map_err(|_| BootstrapError::Protocol(format!("an address of {} bytes", b.len())))?;
    addr_from_bytes(&a).map_err(|family| BootstrapError::Protocol(format!("unknown address family {family}")))
}

/// `2, 4-7, 9`: ranks in order, runs of three or more as ranges.
fn rank_list(ranks: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        match j - i {
            0 => out.push(ranks[i].to_string()),
            1 => out.extend([ranks[i].to_string(), ranks[j].to_string()]),
            _ => out.push(format!("{}-{}", ranks[i], ranks[j])),
        }
        i = j + 1;
    }
    out.join(", ")
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// What went wrong while the ranks joined, as the root saw it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
pub enum Verdict {
    #[error("{}", missing_text(.root, *.secs, *.nranks, .missing, .arrived, *.other_id))]
    Missing {
        root: String,
        secs: u64,
        /// The rank count the ranks that came gave (none came: unknown).
        nranks: Option<u32>,
        missing: Vec<u32>,
        arrived: Vec<u32>,
        /// Connections refused for presenting another unique id (a rank of another job, or a stale id).
        other_id: u32,
    },
    #[error("the ranks disagree on the number of ranks (WORLD_SIZE): {}", claims_text(.claims))]
    WorldSize {
        /// (rank, the rank count it gave), in check-in order.
        claims: Vec<(u32, u32)>,
    },
    #[error("rank {rank} checked in twice, from {first} and from {second}: two processes were given the same rank")]
    Duplicate { rank: u32, first: String, second: String },
    #[error("rank {rank} closed its connection to the root before the job was up (its process exited or was killed)")]
    Left { rank: u32 },
    #[error("rank {rank} exited before the job was up ({status}, seen by the launcher)")]
    Exited { rank: u32, status: String },
    #[error("rank {rank} failed {reason}")]
    Failed { rank: u32, reason: String },
}

fn missing_text(root: &str, secs: u64, nranks: Option<u32>, missing: &[u32], arrived: &[u32], other: u32) -> String {
    let other = match other {
        0 => String::new(),
        n => format!(
            "; {n} connection{} with another unique id (another job's, or a stale one) refused",
            plural(n as usize)
        ),
    };
    match nranks {
        None => format!("no rank checked in with the root at {root} within {secs} s{other}"),
        Some(n) => format!(
            "rank{} {} never checked in with the root at {root} within {secs} s ({} of {n} did: {}){other}",
            plural(missing.len()),
            rank_list(missing),
            arrived.len(),
            rank_list(arrived)
        ),
    }
}

fn claims_text(claims: &[(u32, u32)]) -> String {
    let mut by_size: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &(rank, n) in claims {
        by_size.entry(n).or_default().push(rank);
    }
    by_size
        .into_iter()
        .map(|(n, mut ranks)| {
            ranks.sort_unstable();
            format!("rank{} {} said {n}", plural(ranks.len()), rank_list(&ranks))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// What travels on a check-in connection after the check-in: root to rank `Next` or `Verdict`, rank to root
/// `Done` or `Failed`. On the wire: kind (1 byte), length (u32 LE), payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Frame {
    /// Where this rank's next ring neighbour listens.
    Next(SocketAddr),
    Verdict(Verdict),
    /// The rank has joined: it needs the root no more.
    Done,
    /// The rank gave up, and why (`while <phase>: <cause>`).
    Failed(String),
}

const FRAME_NEXT: u8 = 1;
const FRAME_VERDICT: u8 = 2;
const FRAME_DONE: u8 = 3;
const FRAME_FAILED: u8 = 4;
/// Largest frame payload accepted (guards against a corrupt length).
const MAX_FRAME: u32 = 1 << 20;
/// How long writing a frame, or reading a check-in that has begun to arrive, may take.
const IO_LIMIT: Duration = Duration::from_secs(5);

impl Frame {
    pub(super) fn send(&self, s: &mut Socket) -> Result<(), SocketError> {
        let (kind, payload) = match self {
            Frame::Next(a) => (FRAME_NEXT, addr_to_bytes(a).to_vec()),
            Frame::Verdict(v) => (FRAME_VERDICT, serde_json::to_vec(v).unwrap_or_default()),
            Frame::Done => (FRAME_DONE, Vec::new()),
            Frame::Failed(why) => (FRAME_FAILED, why.as_bytes().to_vec()),
        };
        let mut b = Vec::with_capacity(5 + payload.len());
        b.push(kind);
        b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        b.extend_from_slice(&payload);
        s.send_timeout(&b, IO_LIMIT, None)
    }

    pub(super) fn recv(s: &mut Socket, timeout: Duration, abort: Option<&AtomicBool>) -> Result<Frame, BootstrapError> {
        let mut head = [0u8; 5];
        s.recv_timeout(&mut head, timeout, abort)?;
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]);
        if len > MAX_FRAME {
            return Err(BootstrapError::Protocol(format!("a {len}-byte message from the root link")));
        }
        let mut payload = vec![0u8; len as usize];
        s.recv_timeout(&mut payload, IO_LIMIT, abort)?;
        Ok(match head[0] {
            FRAME_NEXT => Frame::Next(addr_from_slice(&payload)?),
            FRAME_VERDICT => Frame::Verdict(
                serde_json::from_slice(&payload)
                    .map_err(|e| BootstrapError::Protocol(format!("unreadable verdict from the root: {e}")))?,
            ),
            FRAME_DONE => Frame::Done,
            FRAME_FAILED => Frame::Failed(String::from_utf8_lossy(&payload).into_owned()),
            k => return Err(BootstrapError::Protocol(format!("unknown message kind {k} on the root link"))),
        })
    }
}

/// A rank process that ended, as the launcher hosting the root saw it.
#[derive(Debug, Clone)]
pub(super) struct RankExit {
    rank: u32,
    status: String,
}

/// The launcher's handle on the root it hosts: it reports rank processes that ended, so the others learn at
/// once that a rank which never checked in (or has not finished joining) is gone.
#[derive(Debug, Clone)]
pub struct RootHandle {
    pub(super) exits: mpsc::Sender<RankExit>,
}

impl RootHandle {
    /// Tells the root that `rank`'s process ended with `status`; nothing once the root is finished.
    pub fn rank_exited(&self, rank: u32, status: impl std::fmt::Display) {
        let _ = self.exits.send(RankExit { rank, status: status.to_string() });
    }
}

/// One rank's check-in connection.
struct Link {
    ring: SocketAddr,
    /// `None` once it closed after the rank joined.
    sock: Option<Socket>,
    done: bool,
    /// A neighbour was told this rank's ring address, or this rank its neighbour's: from then on its failure
    /// is the job's. Before, it may be a stranger's check-in, and leaving only withdraws it.
    paired: bool,
}

/// A connection whose check-in is still arriving.
struct Arriving {
    sock: Socket,
    got: Vec<u8>,
    deadline: Instant,
}

/// Most connections whose check-in is still arriving (ranks send theirs right after the handshake, so more are
/// strangers: past it the oldest is dropped), and most strays kept to be told the verdict.
const MAX_ARRIVING: usize = 64;
/// How soon the root looks again while its listener is handshaking (those bytes wake no poll of the root's).
const HANDSHAKE_SLICE: Duration = Duration::from_millis(5);

struct Root {
    listener: Listener,
    timeout: Duration,
    deadline: Instant,
    exits: mpsc::Receiver<RankExit>,
    /// By (the rank count it gave, rank): check-ins that disagree on the count wait side by side until every
    /// rank of one count is in; only then are the others strays. So a stranger's check-in decides nothing.
    links: BTreeMap<(u32, u32), Link>,
    /// The count whose ranks all checked in.
    nranks: Option<u32>,
    arriving: Vec<Arriving>,
    /// A second check-in of a rank already in: (rank, first, second), and its connection.
    dupes: Vec<(u32, String, String, Socket)>,
    /// Check-ins that are no rank's link (out of range, another count once one is complete): told the verdict.
    strays: Vec<Socket>,
    /// Check-ins dropped.
    dropped: Strays,
}

/// Serves one communicator's check-ins on `listener` until every rank has joined, or a verdict was given and
/// the deadline passed. Runs on its own thread.
pub(super) fn serve(listener: Listener, timeout: Duration, exits: mpsc::Receiver<RankExit>) {
    let mut root = Root {
        listener,
        timeout,
        deadline: Instant::now() + timeout,
        exits,
        links: BTreeMap::new(),
        nranks: None,
        arriving: Vec::new(),
        dupes: Vec::new(),
        strays: Vec::new(),
        dropped: Strays::new("Bootstrap Root"),
    };
    if let Some(v) = root.judge() {
        nccl_warn!("Bootstrap Root : {v}");
        root.announce(&v);
        root.linger(&v);
    }
}

impl Root {
    /// Runs the check-ins; `None` once every rank joined.
    fn judge(&mut self) -> Option<Verdict> {
        loop {
            if let Some(v) = self.exited() {
                return Some(v);
            }
            if let Some(n) = self.nranks {
                if self.links.range((n, 0)..=(n, u32::MAX)).all(|(_, l)| l.done) {
                    return None;
                }
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if self.nranks.is_none() && left.is_zero() {
                return Some(self.missing());
            }
            let slice = if self.listener.handshaking() { HANDSHAKE_SLICE } else { POLL_SLICE };
            let readable = self.wait(if self.nranks.is_some() { slice } else { left.min(slice) });
            self.accept();
            for i in (0..self.arriving.len()).rev() {
                if let Some(v) = self.arrive(i) {
                    return Some(v);
                }
            }
            for key in readable {
                if let Some(v) = self.hear(key) {
                    return Some(v);
                }
            }
        }
    }

    /// Sleeps until a connection or a check-in arrives, a link has something to read, or `max` passes; the
    /// links with something to read.
    fn wait(&self, max: Duration) -> Vec<(u32, u32)> {
        let open: Vec<((u32, u32), &Socket)> =
            self.links.iter().filter_map(|(k, l)| l.sock.as_ref().map(|s| (*k, s))).collect();
        let mut fds = vec![PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
        fds.extend(self.arriving.iter().map(|a| PollFd::new(a.sock.stream().as_fd(), PollFlags::POLLIN)));
        let first_link = fds.len();
        fds.extend(open.iter().map(|(_, s)| PollFd::new(s.stream().as_fd(), PollFlags::POLLIN)));
        let ms = PollTimeout::try_from(max.as_millis().max(1) as i32).unwrap_or(PollTimeout::ZERO);
        if poll(&mut fds, ms).is_err() {
            return Vec::new();
        }
        let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        open.iter().zip(&fds[first_link..]).filter(|(_, fd)| ready(fd)).map(|((k, _), _)| *k).collect()
    }

    /// The first rank process the launcher saw end before it joined.
    fn exited(&mut self) -> Option<Verdict> {
        while let Ok(e) = self.exits.try_recv() {
            if !self.links.iter().any(|((n, r), l)| *r == e.rank && l.done && Some(*n) == self.nranks) {
                return Some(Verdict::Exited { rank: e.rank, status: e.status });
            }
        }
        None
    }

    /// At the deadline, with no rank count complete: a rank given twice, ranks that disagree on the count, or
    /// the ranks that never came.
    fn missing(&self) -> Verdict {
        if let Some((rank, first, second, _)) = self.dupes.first() {
            return Verdict::Duplicate { rank: *rank, first: first.clone(), second: second.clone() };
        }
        let counts: std::collections::BTreeSet<u32> = self.links.keys().map(|(n, _)| *n).collect();
        if counts.len() > 1 {
            return Verdict::WorldSize { claims: self.links.keys().map(|(n, r)| (*r, *n)).collect() };
        }
        let nranks = counts.first().copied();
        let arrived: Vec<u32> = self.links.keys().map(|(_, r)| *r).collect();
        let missing = nranks.map_or_else(Vec::new, |n| (0..n).filter(|r| !arrived.contains(r)).collect());
        Verdict::Missing {
            root: addr_string(&self.listener.addr()),
            secs: self.timeout.as_secs(),
            nranks,
            missing,
            arrived,
            other_id: self.listener.refused(),
        }
    }

    /// Takes the connections that finished their handshake; their check-ins arrive side by side.
    fn accept(&mut self) {
        while let Ok(sock) = self.listener.accept(Duration::ZERO, None) {
            if sock.stream().set_nonblocking(true).is_err() {
                continue;
            }
            if self.arriving.len() >= MAX_ARRIVING {
                let old = self.arriving.remove(0);
                self.drop_stray(&old.sock, "it sent no check-in");
            }
            let deadline = Instant::now() + IO_LIMIT;
            self.arriving.push(Arriving { sock, got: Vec::with_capacity(CHECK_IN_BYTES), deadline });
        }
    }

    fn drop_stray(&self, sock: &Socket, why: &str) {
        self.dropped.drop(&sock.peer(), why);
    }

    /// Reads what arrived of the `i`-th arriving check-in; a whole one is taken in.
    fn arrive(&mut self, i: usize) -> Option<Verdict> {
        let a = &mut self.arriving[i];
        let mut b = [0u8; CHECK_IN_BYTES];
        let want = CHECK_IN_BYTES - a.got.len();
        let why = match (&mut a.sock.stream()).read(&mut b[..want]) {
            Ok(0) => "it closed before checking in",
            Ok(n) => {
                a.got.extend_from_slice(&b[..n]);
                if a.got.len() < CHECK_IN_BYTES {
                    return None;
                }
                let a = self.arriving.remove(i);
                let _ = a.sock.stream().set_nonblocking(false);
                b.copy_from_slice(&a.got);
                return match CheckIn::from_bytes(&b) {
                    Ok(info) => self.check_in(a.sock, info),
                    Err(e) => {
                        self.drop_stray(&a.sock, &e.to_string());
                        None
                    }
                };
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                if Instant::now() < a.deadline {
                    return None;
                }
                "it sent no check-in in time"
            }
            Err(_) => "its connection failed",
        };
        let a = self.arriving.remove(i);
        self.drop_stray(&a.sock, why);
        None
    }

    /// Takes a check-in: a rank's link, or a stray.
    fn check_in(&mut self, sock: Socket, info: CheckIn) -> Option<Verdict> {
        let CheckIn { rank, nranks: n, ring_addr } = info;
        if rank >= n || self.nranks.is_some_and(|c| c != n) {
            let why = format!("rank {rank} of {n} is no rank of this job");
            self.drop_stray(&sock, &why);
            if self.strays.len() < MAX_ARRIVING {
                self.strays.push(sock);
            }
            return None;
        }
        if let Some(first) = self.links.get(&(n, rank)) {
            let first = first.sock.as_ref().map_or_else(|| "an earlier connection".into(), |s| addr_string(&s.peer()));
            let second = addr_string(&sock.peer());
            self.drop_stray(&sock, &format!("rank {rank} checked in already, from {first}"));
            if self.dupes.len() < MAX_ARRIVING {
                self.dupes.push((rank, first, second, sock));
            }
            return None;
        }
        self.links.insert((n, rank), Link { ring: ring_addr, sock: Some(sock), done: false, paired: false });
        let count = self.links.range((n, 0)..=(n, u32::MAX)).count();
        nccl_trace!(Subsys::BOOTSTRAP, "Received connect from rank {rank} total {count}/{n}");
        // Answer as soon as a pair is known, like NCCL, so early ranks start connecting their ring.
        let (prev, next) = ((rank + n - 1) % n, (rank + 1) % n);
        let mut answers = Vec::new();
        if prev != rank && self.links.contains_key(&(n, prev)) {
            answers.push((prev, ring_addr));
        }
        if let Some(nx) = self.links.get(&(n, next)) {
            answers.push((rank, nx.ring));
        }
        // Rank `to` connects to the rank listening at `addr`: both are relied on from now on.
        let paired: Vec<u32> = answers.iter().flat_map(|&(to, _)| [to, if to == rank { next } else { rank }]).collect();
        for r in paired {
            if let Some(l) = self.links.get_mut(&(n, r)) {
                l.paired = true;
            }
        }
        for (to, addr) in answers {
            let sent = self.links.get_mut(&(n, to)).and_then(|l| l.sock.as_mut()).map(|s| Frame::Next(addr).send(s));
            if !matches!(sent, Some(Ok(()))) {
                return Some(Verdict::Left { rank: to });
            }
        }
        if count == n as usize {
            self.complete(n);
        }
        None
    }

    /// Every rank of count `n` checked in: check-ins of other counts, and second ones, were strangers'.
    fn complete(&mut self, n: u32) {
        self.nranks = Some(n);
        let others: Vec<(u32, u32)> = self.links.keys().filter(|(c, _)| *c != n).copied().collect();
        for key in others {
            if let Some(sock) = self.links.remove(&key).and_then(|l| l.sock) {
                self.drop_stray(&sock, &format!("rank {} of {}: the job has {n} ranks", key.1, key.0));
            }
        }
        for (rank, first, second, mut sock) in std::mem::take(&mut self.dupes) {
            let _ = Frame::Verdict(Verdict::Duplicate { rank, first, second }).send(&mut sock);
        }
    }

    /// Reads what the rank of `key` sent: it joined, it failed, or its connection closed.
    fn hear(&mut self, key: (u32, u32)) -> Option<Verdict> {
        let rank = key.1;
        let link = self.links.get_mut(&key)?;
        let sock = link.sock.as_mut()?;
        let verdict = match Frame::recv(sock, IO_LIMIT, None) {
            Ok(Frame::Done) => {
                link.done = true;
                return None;
            }
            Err(_) if link.done => {
                link.sock = None;
                return None;
            }
            Ok(Frame::Failed(reason)) => Verdict::Failed { rank, reason },
            Ok(other) => Verdict::Failed { rank, reason: format!("with an unexpected message {other:?}") },
            Err(BootstrapError::Socket(SocketError::Closed { .. })) => Verdict::Left { rank },
            Err(e) => Verdict::Failed { rank, reason: format!("on its connection to the root: {e}") },
        };
        if link.paired {
            return Some(verdict);
        }
        // Nobody relies on it yet: withdrawn, as if it never checked in (a stranger's, or a rank that may
        // come again).
        if let Some(sock) = self.links.remove(&key).and_then(|l| l.sock) {
            self.drop_stray(&sock, &format!("withdrawn before it was paired: {verdict}"));
        }
        None
    }

    /// Sends the verdict to every rank still joining, rank 0 last: when the root lives in rank 0's process,
    /// that process ends on it, and the others must have it by then.
    fn announce(&mut self, v: &Verdict) {
        let joining = self.links.values_mut().rev().filter(|l| !l.done).filter_map(|l| l.sock.as_mut());
        let dupes = self.dupes.iter_mut().map(|d| &mut d.3);
        for s in self.strays.iter_mut().chain(dupes).chain(joining) {
            let _ = Frame::Verdict(v.clone()).send(s);
        }
    }

    /// Until the deadline, ranks that check in late hear the verdict instead of waiting for their own timeout.
    fn linger(&mut self, v: &Verdict) {
        while let Some(left) = self.deadline.checked_duration_since(Instant::now()).filter(|l| !l.is_zero()) {
            if let Ok(mut s) = self.listener.accept(left.min(POLL_SLICE), None) {
                let _ = Frame::Verdict(v.clone()).send(&mut s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists_fold_runs_and_verdicts_read_well() {
        assert_eq!(rank_list(&[]), "");
        assert_eq!(rank_list(&[2]), "2");
        assert_eq!(rank_list(&[0, 1, 3, 4, 5, 6, 9]), "0, 1, 3-6, 9");
        let v = Verdict::Missing {
            root: "127.0.0.1<5>".into(),
            secs: 5,
            nranks: Some(3),
            missing: vec![2],
            arrived: vec![0, 1],
            other_id: 1,
        };
        let t = v.to_string();
        assert!(
            t.starts_with("rank 2 never checked in with the root at 127.0.0.1<5> within 5 s (2 of 3 did: 0, 1)"),
            "{t}"
        );
        assert!(t.contains("1 connection with another unique id"), "{t}");
        let w = Verdict::WorldSize { claims: vec![(0, 2), (1, 3), (2, 3)] }.to_string();
        assert!(w.contains("rank 0 said 2, ranks 1, 2 said 3"), "{w}");
    }

    #[test]
    fn frames_round_trip() {
        let l = Listener::bind_ip("127.0.0.1".parse().unwrap(), 7, crate::socket::SocketType::Bootstrap).unwrap();
        let addr = l.addr();
        let frames = vec![
            Frame::Next(addr),
            Frame::Verdict(Verdict::Left { rank: 3 }),
            Frame::Done,
            Frame::Failed("while x: y".into()),
        ];
        let sent = frames.clone();
        let t = std::thread::spawn(move || {
            let mut s = Socket::connect(addr, 7, crate::socket::SocketType::Bootstrap, Duration::from_secs(5)).unwrap();
            for f in &sent {
                f.send(&mut s).unwrap();
            }
        });
        let mut s = l.accept(Duration::from_secs(5), None).unwrap();
        for f in frames {
            assert_eq!(Frame::recv(&mut s, Duration::from_secs(5), None).unwrap(), f);
        }
        t.join().unwrap();
    }
}
