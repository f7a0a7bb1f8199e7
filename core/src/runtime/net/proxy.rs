//! The proxy thread that drives a rank's NET connections (NCCL 2.28.9 `src/proxy.cc` progress loop, and
//! `src/transport/net.cc` `sendProxyProgress`/`recvProxyProgress`). The rank writes and reads its connection
//! memory exactly as over P2P/SHM; the proxy moves steps between that memory and the network:
//!
//! - send side: a step the rank posted (`tail`) is sent as a 16-byte header (protocol, bytes) and the slot's
//!   bytes; when the network has finished with it the slot goes back to the rank (`head`, the credit).
//! - receive side: once the rank freed the slot (`head`), the proxy receives the header, then the bytes straight
//!   into the slot (Simple) or into a staging buffer whose LL/LL128 lines are stored flag-last (`deposit`), and
//!   publishes the step (`tail`).
//!
//! Each step's states are counted per sub-operation (`posted`, `transmitted`, `done`) in `model::ProxyOp`, with
//! the time spent waiting in each state. A failed connection aborts the communicator naming the peer rank.

use super::socket::{NetComm, NetError, Request};
use crate::debug::Subsys;
use crate::model::{Protocol, ProxyOp, ProxyWait};
use crate::nccl_info;
use crate::runtime::conn::{ConnMem, NCCL_STEPS};
use crate::runtime::record::Records;
use crate::runtime::wait::AbortHandle;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const HEADER_BYTES: usize = 16;

fn header(proto: Protocol, bytes: usize) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[0] = proto.id() as u8;
    h[8..].copy_from_slice(&(bytes as u64).to_le_bytes());
    h
}

/// Identifies one connection in the proxy's records.
#[derive(Debug, Clone, Copy)]
struct ConnId {
    channel: u32,
    peer: u32,
    send: bool,
}

/// Per-operation accounting of one connection.
struct Stats {
    rank: u32,
    id: ConnId,
    records: Arc<OnceLock<Arc<Records>>>,
}

impl Stats {
    fn record(&self, f: impl FnOnce(&mut ProxyOp)) {
        let Some(records) = self.records.get() else { return };
        let key = ProxyOp {
            rank: self.rank,
            seq: records.current_seq(),
            channel: self.id.channel,
            peer: self.id.peer,
            send: self.id.send,
            n_steps: 0,
            posted: 0,
            transmitted: 0,
            done: 0,
            waits: Vec::new(),
        };
        records.update_proxy(&key, f);
    }

    fn wait(&self, state: ProxyWait, since: Instant) {
        let secs = since.elapsed().as_secs_f64();
        self.record(|o| match o.waits.iter_mut().find(|(w, _)| *w == state) {
            Some((_, t)) => *t += secs,
            None => o.waits.push((state, secs)),
        });
    }
}

/// A step the send side handed to the network.
struct InFlight {
    /// The header's bytes, kept alive until the network has sent them.
    _header: Box<[u8; HEADER_BYTES]>,
    head_req: Request,
    head_done: bool,
    body: Request,
    since: Instant,
}

struct SendConn {
    net: NetComm,
    mem: Arc<ConnMem>,
    /// Next step to take from the rank.
    next: u64,
    inflight: VecDeque<InFlight>,
    /// When the proxy started waiting for the rank to post `next`.
    idle_since: Instant,
    stats: Stats,
}

enum RecvState {
    /// Waiting for the rank to free the next slot.
    Credit,
    Header(Box<[u8; HEADER_BYTES]>, Request),
    Body(Request, Protocol),
}

struct RecvConn {
    net: NetComm,
    mem: Arc<ConnMem>,
    step: u64,
    state: RecvState,
    since: Instant,
    /// Landing area for LL/LL128 steps, whose flags must be stored after their data.
    staging: Vec<u8>,
    /// Steps the rank has consumed, as last seen.
    consumed: u64,
    stats: Stats,
}

enum Conn {
    Send(SendConn),
    Recv(RecvConn),
}

impl SendConn {
    fn progress(&mut self) -> Result<bool, NetError> {
        let mut moved = false;
        // transmitted: steps the rank posted go to the network, at most NCCL_STEPS at a time.
        while (self.inflight.len() as u64) < NCCL_STEPS {
            let Some((proto, bytes)) = self.mem.posted(self.next) else { break };
            self.stats.wait(ProxyWait::WaitingForData, self.idle_since);
            let header = Box::new(header(proto, bytes.len()));
            let head_req = self.net.isend(header.as_ptr(), HEADER_BYTES);
            let body = self.net.isend(bytes.as_ptr(), bytes.len());
            self.inflight.push_back(InFlight {
                _header: header,
                head_req,
                head_done: false,
                body,
                since: Instant::now(),
            });
            self.next += 1;
            self.idle_since = Instant::now();
            self.stats.record(|o| {
                o.n_steps += 1;
                o.posted += 1;
                o.transmitted += 1;
            });
            moved = true;
        }
        // done: completed sends, oldest first, give the slot back to the rank.
        while let Some(f) = self.inflight.front_mut() {
            if !f.head_done {
                if self.net.test(&mut f.head_req)?.is_none() {
                    break;
                }
                f.head_done = true;
            }
            if self.net.test(&mut f.body)?.is_none() {
                break;
            }
            let since = f.since;
            self.inflight.pop_front();
            let done = self.next - self.inflight.len() as u64;
            self.mem.publish_head(done);
            self.stats.wait(ProxyWait::WaitingForSendCompletion, since);
            self.stats.record(|o| o.done += 1);
            moved = true;
        }
        Ok(moved)
    }
}

impl RecvConn {
    fn progress(&mut self) -> Result<bool, NetError> {
        let mut moved = false;
        let consumed = self.mem.head().load(Ordering::Acquire);
        if consumed > self.consumed {
            let n = consumed - self.consumed;
            self.consumed = consumed;
            self.stats.record(|o| o.done += n);
            moved = true;
        }
        loop {
            match &mut self.state {
                RecvState::Credit => {
                    if self.consumed + NCCL_STEPS <= self.step {
                        return Ok(moved);
                    }
                    let mut h = Box::new([0u8; HEADER_BYTES]);
                    let req = self.net.irecv(h.as_mut_ptr(), HEADER_BYTES);
                    self.state = RecvState::Header(h, req);
                    self.since = Instant::now();
                    self.stats.record(|o| {
                        o.n_steps += 1;
                        o.posted += 1;
                    });
                }
                RecvState::Header(h, req) => {
                    if self.net.test(req)?.is_none() {
                        return Ok(moved);
                    }
                    let proto = Protocol::from_id(h[0] as usize).ok_or_else(|| NetError::Progress {
                        peer: self.net.peer().to_string(),
                        msg: format!("step {} carries unknown protocol id {}", self.step, h[0]),
                    })?;
                    let len = u64::from_le_bytes(h[8..].try_into().unwrap_or_default()) as usize;
                    let cap = self.mem.sizes().of(proto) / NCCL_STEPS as usize;
                    if len > cap {
                        return Err(NetError::Truncated { peer: self.net.peer().to_string(), got: len, cap });
                    }
                    let dst = if proto == Protocol::Simple {
                        self.mem.slot(proto, self.step)
                    } else {
                        self.staging.resize(cap.max(self.staging.len()), 0);
                        self.staging.as_mut_ptr()
                    };
                    let req = self.net.irecv(dst, len);
                    self.state = RecvState::Body(req, proto);
                }
                RecvState::Body(req, proto) => {
                    let Some(n) = self.net.test(req)? else { return Ok(moved) };
                    let proto = *proto;
                    if proto == Protocol::Simple {
                        self.mem.set_info(self.step, proto, n);
                        self.mem.publish_tail(self.step + 1);
                    } else {
                        self.mem.deposit(self.step, proto, &self.staging[..n]);
                    }
                    self.step += 1;
                    self.state = RecvState::Credit;
                    self.stats.wait(ProxyWait::WaitingForRecv, self.since);
                    self.stats.record(|o| o.transmitted += 1);
                    moved = true;
                }
            }
        }
    }
}

enum Cmd {
    Add(u64, Box<Conn>),
    Remove(u64),
}

/// One rank's proxy thread and the connections it drives.
pub struct Proxy {
    rank: u32,
    tx: Mutex<mpsc::Sender<Cmd>>,
    /// Taken by the thread when it starts.
    rx: Mutex<Option<mpsc::Receiver<Cmd>>>,
    next_id: AtomicU64,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    records: Arc<OnceLock<Arc<Records>>>,
    abort: Arc<OnceLock<AbortHandle>>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Proxy(rank {})", self.rank)
    }
}

impl Proxy {
    /// The proxy of `rank`; its thread starts with the first connection.
    pub fn new(rank: u32) -> Arc<Proxy> {
        let (tx, rx) = mpsc::channel();
        Arc::new(Proxy {
            rank,
            tx: Mutex::new(tx),
            rx: Mutex::new(Some(rx)),
            next_id: AtomicU64::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            thread: Mutex::new(None),
            records: Arc::new(OnceLock::new()),
            abort: Arc::new(OnceLock::new()),
        })
    }

    fn ensure_thread(&self) -> std::io::Result<()> {
        let Some(rx) = self.rx.lock().unwrap_or_else(|p| p.into_inner()).take() else { return Ok(()) };
        let (st, ab, rank) = (self.stop.clone(), self.abort.clone(), self.rank);
        let t = std::thread::Builder::new()
            .name(format!("collscope Proxy{rank}"))
            .spawn(move || run(rank, &rx, &st, &ab))?;
        *self.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        Ok(())
    }

    /// Ties the proxy to its communicator: sub-operations go to `records`, a failed connection aborts `abort`.
    /// Called once the communicator exists, before its first connection.
    pub fn attach(&self, records: Arc<Records>, abort: AbortHandle) {
        let _ = self.records.set(records);
        let _ = self.abort.set(abort);
    }

    fn add(self: &Arc<Self>, conn: Conn) -> std::io::Result<ProxyGuard> {
        self.ensure_thread()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let _ = self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(Cmd::Add(id, Box::new(conn)));
        Ok(ProxyGuard { id, proxy: self.clone() })
    }

    fn stats(&self, channel: u32, peer: u32, send: bool) -> Stats {
        Stats { rank: self.rank, id: ConnId { channel, peer, send }, records: self.records.clone() }
    }

    /// Drives the send side of a connection to `peer`: `mem` is what the rank writes into.
    pub fn add_send(
        self: &Arc<Self>,
        net: NetComm,
        mem: Arc<ConnMem>,
        channel: u32,
        peer: u32,
    ) -> std::io::Result<ProxyGuard> {
        let stats = self.stats(channel, peer, true);
        self.add(Conn::Send(SendConn {
            net,
            mem,
            next: 0,
            inflight: VecDeque::new(),
            idle_since: Instant::now(),
            stats,
        }))
    }

    /// Drives the receive side of a connection from `peer`: `mem` is what the rank reads from.
    pub fn add_recv(
        self: &Arc<Self>,
        net: NetComm,
        mem: Arc<ConnMem>,
        channel: u32,
        peer: u32,
    ) -> std::io::Result<ProxyGuard> {
        let stats = self.stats(channel, peer, false);
        self.add(Conn::Recv(RecvConn {
            net,
            mem,
            step: 0,
            state: RecvState::Credit,
            since: Instant::now(),
            staging: Vec::new(),
            consumed: 0,
            stats,
        }))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// Keeps a connection on the proxy; dropping it removes the connection (and closes its sockets).
pub struct ProxyGuard {
    id: u64,
    proxy: Arc<Proxy>,
}

impl Drop for ProxyGuard {
    fn drop(&mut self) {
        let _ = self.proxy.tx.lock().unwrap_or_else(|p| p.into_inner()).send(Cmd::Remove(self.id));
    }
}

/// How long a leaving connection may take to hand its last steps to the network.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

impl Conn {
    /// Whether bytes are on their way right now (the proxy should not sleep).
    fn busy(&self) -> bool {
        match self {
            Conn::Send(s) => !s.inflight.is_empty(),
            Conn::Recv(r) => match &r.state {
                RecvState::Credit => false,
                RecvState::Header(_, req) => req.started(),
                RecvState::Body(..) => true,
            },
        }
    }

    /// Whether nothing the rank posted is still waiting for the network.
    fn drained(&self) -> bool {
        match self {
            Conn::Send(s) => s.inflight.is_empty() && s.mem.posted(s.next).is_none(),
            Conn::Recv(_) => true,
        }
    }
}

struct Entry {
    id: u64,
    conn: Conn,
    /// Set when the owner let go: the connection finishes its sends (as `ncclCommDestroy` waits for the
    /// proxy), then closes.
    leaving: Option<Instant>,
}

fn run(rank: u32, rx: &mpsc::Receiver<Cmd>, stop: &AtomicBool, abort: &OnceLock<AbortHandle>) {
    let mut conns: Vec<Entry> = Vec::new();
    let mut idle_rounds = 0u32;
    loop {
        for cmd in rx.try_iter() {
            match cmd {
                Cmd::Add(id, c) => conns.push(Entry { id, conn: *c, leaving: None }),
                Cmd::Remove(id) => {
                    for e in conns.iter_mut().filter(|e| e.id == id) {
                        e.leaving = Some(Instant::now());
                    }
                }
            }
        }
        conns.retain(|e| e.leaving.is_none_or(|t| !e.conn.drained() && t.elapsed() < DRAIN_LIMIT));
        if stop.load(Ordering::Acquire) && conns.iter().all(|e| e.leaving.is_some()) && conns.is_empty() {
            return;
        }
        let mut moved = false;
        let mut failed = None;
        for (i, e) in conns.iter_mut().enumerate() {
            let (r, peer, channel, dir) = match &mut e.conn {
                Conn::Send(s) => (s.progress(), s.stats.id.peer, s.stats.id.channel, "send to"),
                Conn::Recv(r) => (r.progress(), r.stats.id.peer, r.stats.id.channel, "receive from"),
            };
            match r {
                Ok(m) => moved |= m,
                Err(err) => {
                    let reason = match err {
                        NetError::Socket(crate::runtime::socket::SocketError::Closed { .. }) => {
                            format!("rank {peer} closed its NET/Socket connection (channel {channel}, {dir}); it exited or was killed")
                        }
                        other => format!("NET/Socket {dir} rank {peer} on channel {channel} failed: {other}"),
                    };
                    nccl_info!(Subsys::NET | Subsys::PROXY, "Proxy of rank {rank}: {reason}");
                    if let (None, Some(a)) = (e.leaving, abort.get()) {
                        a.abort(reason);
                    }
                    failed = Some(i);
                    break;
                }
            }
        }
        if let Some(i) = failed {
            conns.remove(i);
        }
        // While bytes are in flight keep going (yielding the core); when idle, back off so ranks sharing the
        // core run: yield first (a step is usually microseconds away), then sleep.
        if moved {
            idle_rounds = 0;
        } else if conns.iter().any(|e| e.conn.busy()) {
            idle_rounds = 0;
            std::thread::yield_now();
        } else {
            idle_rounds = idle_rounds.saturating_add(1);
            if idle_rounds < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(if idle_rounds < 10_000 { 20 } else { 500 }));
            }
        }
    }
}
