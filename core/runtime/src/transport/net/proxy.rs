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
//! the time spent waiting in each state. A step belongs to one call from its first state to its last: the
//! sender's proxy takes the call running when it picks the step up and the header carries it to the receiver,
//! so both ends count a step under the same call however far the ranks have moved on, and NCCL's order
//! (done <= transmitted <= posted <= steps, `src/proxy.cc`) holds for every sub-operation. A failed connection
//! aborts the communicator naming the peer rank.

use super::api::{Comm, NetError};
use crate::observe::records::Records;
use crate::profiler::net::{NetSteps, Wait};
use crate::profiler::Ctrl;
use crate::sync::doorbell::{Doorbell, FdWait, Wake};
use crate::sync::wait::AbortHandle;
use crate::transport::conn::{ConnMem, Direct, NCCL_STEPS};
use collscope_debug::Subsys;
use collscope_debug::{nccl_info, nccl_warn};
use collscope_model::{Protocol, ProxyOp, ProxyWait};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

const HEADER_BYTES: usize = 16;
/// Tags of the two messages of a step; a network that matches tags (NET/IB) catches a header/body mix-up.
const HEADER_TAG: u32 = 0;
const BODY_TAG: u32 = 1;

/// A step's header: the protocol id (byte 0), the call the step belongs to (bytes 1..8) and its length (8..16).
fn header(proto: Protocol, seq: u64, bytes: usize) -> [u8; HEADER_BYTES] {
    let mut h = [0u8; HEADER_BYTES];
    h[..8].copy_from_slice(&((seq << 8) | proto.id() as u64).to_le_bytes());
    h[8..].copy_from_slice(&(bytes as u64).to_le_bytes());
    h
}

/// The call a received header names.
fn header_seq(h: &[u8; HEADER_BYTES]) -> u64 {
    u64::from_le_bytes(h[..8].try_into().unwrap_or_default()) >> 8
}

/// What stops a connection: the network, or a step that does not fit.
#[derive(Debug, thiserror::Error)]
enum ProxyError {
    #[error(transparent)]
    Net(#[from] NetError),
    #[error("NET/{net} : step {step} from {peer} carries unknown protocol id {id}")]
    Protocol { net: &'static str, peer: String, step: u64, id: u8 },
    #[error(
        "NET/{net} : peer {peer} message truncated : receiving {got} bytes instead of {cap}. If you believe your \
         network is in a healthy state, there may be a mismatch in collective sizes or environment settings \
         (e.g. NCCL_PROTO, NCCL_ALGO) between ranks"
    )]
    Truncated { net: &'static str, peer: String, got: usize, cap: usize },
}

/// Identifies one connection in the proxy's records.
#[derive(Debug, Clone, Copy)]
struct ConnId {
    channel: u32,
    peer: u32,
    send: bool,
    /// The network's name (`Socket`, `IB`), for messages.
    net: &'static str,
}

/// Per-operation accounting of one connection.
struct Stats {
    rank: u32,
    id: ConnId,
    records: Arc<OnceLock<Arc<Records>>>,
    /// The profiler plugin's view of the connection's steps.
    prof: NetSteps,
}

impl Stats {
    /// The call the rank is running: the one a step the proxy picks up now belongs to.
    fn current_seq(&self) -> u64 {
        self.records.get().map_or(0, |r| r.current_seq())
    }

    /// Updates the sub-operation of call `seq` on this connection.
    fn record(&self, seq: u64, f: impl FnOnce(&mut ProxyOp)) {
        let Some(records) = self.records.get() else { return };
        let key = ProxyOp {
            rank: self.rank,
            seq,
            channel: self.id.channel,
            peer: self.id.peer,
            send: self.id.send,
            n_steps: 0,
            posted: 0,
            transmitted: 0,
            done: 0,
            waits: Vec::new(),
            started_us: None,
            updated_us: None,
        };
        records.update_proxy(&key, f);
    }

    fn wait(&self, seq: u64, state: ProxyWait, since: Instant) {
        let secs = since.elapsed().as_secs_f64();
        self.record(seq, |o| match o.waits.iter_mut().find(|(w, _)| *w == state) {
            Some((_, t)) => *t += secs,
            None => o.waits.push((state, secs)),
        });
    }
}

/// The step headers of a connection, one per slot, registered once: a step's header stays untouched until
/// its send completes, and at most `NCCL_STEPS` steps are in flight.
type Headers = Box<[[u8; HEADER_BYTES]; NCCL_STEPS as usize]>;

/// A step the send side handed to the network.
struct InFlight<C: Comm> {
    /// The header's send, `None` once complete.
    head: Option<C::Request>,
    /// The body's send, `None` until the network took it.
    body: Option<C::Request>,
    since: Instant,
    /// The call the step belongs to.
    seq: u64,
    /// Sent from the user's buffer rather than the slot.
    direct: bool,
}

/// Tells the rank, once the connection's network is gone, that no transfer touches its buffers any more.
/// Declared after the network in a connection, so it drops after it (helper threads joined).
struct LetGo(Arc<ConnMem>);

impl LetGo {
    /// Lets steps of `mem` travel between the user's buffers and `net` when it takes any memory.
    fn new<C: Comm>(net: &C, mem: &Arc<ConnMem>) -> LetGo {
        if net.any_memory() {
            mem.allow_direct(Direct::NetAnyMemory);
        }
        LetGo(mem.clone())
    }
}

impl Drop for LetGo {
    fn drop(&mut self) {
        self.0.close_direct();
    }
}

struct SendConn<C: Comm> {
    net: C,
    _let_go: LetGo,
    mem: Arc<ConnMem>,
    headers: Headers,
    /// Registrations: each protocol's buffer by protocol id, then the headers (`MR_HEADERS`).
    mrs: Vec<C::Mr>,
    /// Next step to take from the rank.
    next: u64,
    inflight: VecDeque<InFlight<C>>,
    /// When the proxy started waiting for the rank to post `next`.
    idle_since: Instant,
    stats: Stats,
}

enum RecvState<C: Comm> {
    /// Waiting for the rank to free the next slot.
    Credit,
    Header(C::Request),
    /// The step's body: its receive (`None` until the network took it), protocol, length, and the user's
    /// buffer it lands in when the rank asked for it there (Simple).
    Body(Option<C::Request>, Protocol, usize, Option<UserPtr>),
}

/// An address in the rank's buffer, which the rank keeps alive until the step arrived or the connection let go.
#[derive(Clone, Copy)]
struct UserPtr(*mut u8);
// SAFETY: only the proxy writes through it, while the rank waits for the step (see `ConnMem::take_want`).
unsafe impl Send for UserPtr {}

struct RecvConn<C: Comm> {
    net: C,
    _let_go: LetGo,
    mem: Arc<ConnMem>,
    header: Box<[u8; HEADER_BYTES]>,
    /// Landing area for LL/LL128 steps, whose flags must be stored after their data; sized for the largest.
    staging: Vec<u8>,
    /// Registrations of the header, the staging area and the Simple buffer.
    mrs: Vec<C::Mr>,
    step: u64,
    state: RecvState<C>,
    since: Instant,
    /// Steps the rank has consumed, as last seen.
    consumed: u64,
    /// The call of each step in flight, by slot (from its header).
    seqs: [u64; NCCL_STEPS as usize],
    stats: Stats,
}

/// Where the send side's header registration sits in its list, after one per protocol.
const MR_HEADERS: usize = Protocol::ALL.len();
/// The receive side's registrations.
const MR_HEADER: usize = 0;
const MR_STAGING: usize = 1;
const MR_SIMPLE: usize = 2;

impl<C: Comm> SendConn<C> {
    fn new(mut net: C, mem: Arc<ConnMem>, stats: Stats) -> Result<Self, NetError> {
        let mut headers: Headers = Box::new([[0u8; HEADER_BYTES]; NCCL_STEPS as usize]);
        let sizes = mem.sizes();
        let mut mrs =
            Protocol::ALL.iter().map(|&p| net.reg_mr(mem.slot(p, 0), sizes.of(p))).collect::<Result<Vec<_>, _>>()?;
        mrs.push(net.reg_mr(headers.as_mut_ptr().cast(), std::mem::size_of_val(&*headers))?);
        Ok(SendConn {
            _let_go: LetGo::new(&net, &mem),
            net,
            mem,
            headers,
            mrs,
            next: 0,
            inflight: VecDeque::new(),
            idle_since: Instant::now(),
            stats,
        })
    }

    fn progress(&mut self) -> Result<bool, ProxyError> {
        let mut moved = false;
        // transmitted: steps the rank posted go to the network, at most NCCL_STEPS at a time. A network may
        // refuse a send until the receiver is ready (NET/IB's clear-to-send); the step then waits here.
        loop {
            if let Some(f) = self.inflight.back_mut().filter(|f| f.body.is_none()) {
                let step = self.next - 1;
                let Some((proto, bytes)) = self.mem.posted(step) else { break };
                let Some(mut req) = self.net.isend(bytes.as_ptr(), bytes.len(), BODY_TAG, &self.mrs[proto.id()])?
                else {
                    self.stats.prof.state(step, Wait::SendPeer, 0);
                    break;
                };
                if let Some(parent) = self.stats.prof.net_parent(step) {
                    self.net.profile(&mut req, parent);
                }
                f.body = Some(req);
                self.stats.prof.state(step, Wait::Send, bytes.len());
                moved = true;
            }
            if self.inflight.len() as u64 >= NCCL_STEPS {
                break;
            }
            let Some((proto, bytes)) = self.mem.posted(self.next) else {
                self.stats.prof.state(self.next, Wait::SendGpu, 0);
                break;
            };
            let direct = proto == Protocol::Simple && bytes.as_ptr() != self.mem.slot(proto, self.next).cast_const();
            let seq = self.stats.current_seq();
            let h = &mut self.headers[(self.next % NCCL_STEPS) as usize];
            *h = header(proto, seq, bytes.len());
            let Some(head) = self.net.isend(h.as_ptr(), HEADER_BYTES, HEADER_TAG, &self.mrs[MR_HEADERS])? else {
                self.stats.prof.state(self.next, Wait::SendPeer, 0);
                break;
            };
            self.stats.wait(seq, ProxyWait::WaitingForData, self.idle_since);
            self.inflight.push_back(InFlight { head: Some(head), body: None, since: Instant::now(), seq, direct });
            self.next += 1;
            self.idle_since = Instant::now();
            self.stats.record(seq, |o| {
                o.n_steps += 1;
                o.posted += 1;
                o.transmitted += 1;
            });
            moved = true;
        }
        // done: completed sends, oldest first, give the slot back to the rank.
        while let Some(f) = self.inflight.front_mut() {
            if let Some(head) = f.head.as_mut() {
                if self.net.test(head)?.is_none() {
                    break;
                }
                f.head = None;
            }
            let Some(body) = f.body.as_mut() else { break };
            if self.net.test(body)?.is_none() {
                break;
            }
            let (since, seq) = (f.since, f.seq);
            self.inflight.pop_front();
            let done = self.next - self.inflight.len() as u64;
            self.mem.publish_head(done);
            self.stats.prof.done(done - 1);
            self.stats.wait(seq, ProxyWait::WaitingForSendCompletion, since);
            self.stats.record(seq, |o| o.done += 1);
            moved = true;
        }
        Ok(moved)
    }
}

impl<C: Comm> RecvConn<C> {
    fn new(mut net: C, mem: Arc<ConnMem>, stats: Stats) -> Result<Self, NetError> {
        let sizes = mem.sizes();
        let stage =
            [Protocol::Ll, Protocol::Ll128].iter().map(|&p| sizes.of(p)).max().unwrap_or(0) / NCCL_STEPS as usize;
        let mut header = Box::new([0u8; HEADER_BYTES]);
        let mut staging = vec![0u8; stage];
        let mrs = vec![
            net.reg_mr(header.as_mut_ptr(), HEADER_BYTES)?,
            net.reg_mr(staging.as_mut_ptr(), staging.len())?,
            net.reg_mr(mem.slot(Protocol::Simple, 0), sizes.of(Protocol::Simple))?,
        ];
        Ok(RecvConn {
            _let_go: LetGo::new(&net, &mem),
            net,
            mem,
            header,
            staging,
            mrs,
            step: 0,
            state: RecvState::Credit,
            since: Instant::now(),
            consumed: 0,
            seqs: [0; NCCL_STEPS as usize],
            stats,
        })
    }

    fn progress(&mut self) -> Result<bool, ProxyError> {
        let mut moved = false;
        // done: steps the rank released, each under its own call (runs of one call in one update).
        let consumed = self.mem.head().load(Ordering::Acquire);
        while self.consumed < consumed {
            let seq = self.seqs[(self.consumed % NCCL_STEPS) as usize];
            let mut n = 0;
            while self.consumed < consumed && self.seqs[(self.consumed % NCCL_STEPS) as usize] == seq {
                self.stats.prof.done(self.consumed);
                self.consumed += 1;
                n += 1;
            }
            self.stats.record(seq, |o| o.done += n);
            moved = true;
        }
        loop {
            match &mut self.state {
                RecvState::Credit => {
                    if self.consumed + NCCL_STEPS <= self.step {
                        return Ok(moved);
                    }
                    let h = self.header.as_mut_ptr();
                    let Some(req) = self.net.irecv(h, HEADER_BYTES, HEADER_TAG, &self.mrs[MR_HEADER])? else {
                        return Ok(moved);
                    };
                    self.state = RecvState::Header(req);
                    self.since = Instant::now();
                    self.stats.prof.state(self.step, Wait::Recv, 0);
                }
                RecvState::Header(req) => {
                    if self.net.test(req)?.is_none() {
                        return Ok(moved);
                    }
                    let h = &self.header;
                    let net = self.stats.id.net;
                    let proto = Protocol::from_id(h[0] as usize).ok_or_else(|| ProxyError::Protocol {
                        net,
                        peer: self.net.peer(),
                        step: self.step,
                        id: h[0],
                    })?;
                    let len = u64::from_le_bytes(h[8..].try_into().unwrap_or_default()) as usize;
                    let cap = self.mem.sizes().of(proto) / NCCL_STEPS as usize;
                    if len > cap {
                        return Err(ProxyError::Truncated { net, peer: self.net.peer(), got: len, cap });
                    }
                    // posted: the header names the step's call; its body's receive is posted next.
                    let seq = header_seq(h);
                    self.seqs[(self.step % NCCL_STEPS) as usize] = seq;
                    self.stats.record(seq, |o| {
                        o.n_steps += 1;
                        o.posted += 1;
                    });
                    // A Simple step the rank already waits for lands straight in its buffer.
                    let at = (proto == Protocol::Simple).then(|| self.mem.take_want(self.step, len)).flatten();
                    self.state = RecvState::Body(None, proto, len, at.map(UserPtr));
                }
                RecvState::Body(req @ None, proto, len, at) => {
                    let (dst, mr) = match (*proto, *at) {
                        (Protocol::Simple, Some(UserPtr(p))) => (p, &self.mrs[MR_SIMPLE]),
                        (Protocol::Simple, None) => (self.mem.slot(*proto, self.step), &self.mrs[MR_SIMPLE]),
                        _ => (self.staging.as_mut_ptr(), &self.mrs[MR_STAGING]),
                    };
                    let Some(mut r) = self.net.irecv(dst, *len, BODY_TAG, mr)? else { return Ok(moved) };
                    if let Some(parent) = self.stats.prof.net_parent(self.step) {
                        self.net.profile(&mut r, parent);
                    }
                    *req = Some(r);
                }
                RecvState::Body(Some(req), proto, _, at) => {
                    let Some(n) = self.net.test(req)? else { return Ok(moved) };
                    self.stats.prof.state(self.step, Wait::RecvFlush, n);
                    let proto = *proto;
                    if proto == Protocol::Simple {
                        self.mem.landed(self.step, n, at.map(|p| p.0));
                    } else {
                        self.mem.deposit(self.step, proto, &self.staging[..n]);
                    }
                    self.stats.prof.state(self.step, Wait::RecvGpu, n);
                    let seq = self.seqs[(self.step % NCCL_STEPS) as usize];
                    self.step += 1;
                    self.state = RecvState::Credit;
                    self.stats.wait(seq, ProxyWait::WaitingForRecv, self.since);
                    self.stats.record(seq, |o| o.transmitted += 1);
                    moved = true;
                }
            }
        }
    }
}

/// Deregisters a connection's buffers before its comm closes (`deregMr` then `closeSend`/`closeRecv`).
fn deregister<C: Comm>(net: &mut C, id: ConnId, mrs: Vec<C::Mr>) {
    for mr in mrs {
        if let Err(e) = net.dereg_mr(mr) {
            nccl_warn!("NET/{} : deregMr on the connection with rank {} failed: {e}", id.net, id.peer);
        }
    }
}

impl<C: Comm> Drop for SendConn<C> {
    fn drop(&mut self) {
        let mrs: Vec<C::Mr> = self.mrs.drain(..).collect();
        deregister(&mut self.net, self.stats.id, mrs);
    }
}

impl<C: Comm> Drop for RecvConn<C> {
    fn drop(&mut self) {
        let mrs: Vec<C::Mr> = self.mrs.drain(..).collect();
        deregister(&mut self.net, self.stats.id, mrs);
    }
}

/// One connection as the progress loop sees it, whatever network carries it.
trait Conn: Send {
    fn id(&self) -> ConnId;
    fn progress(&mut self) -> Result<bool, ProxyError>;
    /// Whether bytes are on their way right now (the proxy should not sleep).
    fn busy(&self) -> bool;
    /// Whether nothing the rank posted is still waiting for the network.
    fn drained(&self) -> bool;
    /// Whether a transfer in flight reads or writes the user's buffer (the rank waits for it to end).
    fn on_user_memory(&self) -> bool;
    /// Adds the descriptors the connection waits on to `out`; false when it waits on something that offers
    /// none (the proxy must look again soon). Waiting for the rank needs none: the rank rings the doorbell.
    fn wait_fds(&self, out: &mut Vec<FdWait>) -> bool;
}

impl<C: Comm> Conn for SendConn<C> {
    fn id(&self) -> ConnId {
        self.stats.id
    }
    fn progress(&mut self) -> Result<bool, ProxyError> {
        SendConn::progress(self)
    }
    fn busy(&self) -> bool {
        !self.inflight.is_empty()
    }
    fn drained(&self) -> bool {
        self.inflight.is_empty() && self.mem.posted(self.next).is_none()
    }
    fn on_user_memory(&self) -> bool {
        self.inflight.iter().any(|f| f.direct)
    }
    fn wait_fds(&self, out: &mut Vec<FdWait>) -> bool {
        if self.inflight.back().is_some_and(|f| f.body.is_none()) {
            return false; // the network turned the body down for now
        }
        // Sends complete oldest first: the oldest unfinished one is what progress waits for.
        match self.inflight.front().and_then(|f| f.head.as_ref().or(f.body.as_ref())) {
            None => true,
            Some(req) => wake_on(self.net.wake(req), out),
        }
    }
}

impl<C: Comm> Conn for RecvConn<C> {
    fn id(&self) -> ConnId {
        self.stats.id
    }
    fn progress(&mut self) -> Result<bool, ProxyError> {
        RecvConn::progress(self)
    }
    fn busy(&self) -> bool {
        match &self.state {
            RecvState::Credit => false,
            RecvState::Header(req) => self.net.in_progress(req),
            RecvState::Body(..) => true,
        }
    }
    fn drained(&self) -> bool {
        true
    }
    fn on_user_memory(&self) -> bool {
        matches!(self.state, RecvState::Body(_, _, _, Some(_)))
    }
    fn wait_fds(&self, out: &mut Vec<FdWait>) -> bool {
        let req = match &self.state {
            // Out of credit: the rank's release rings. With credit, the network turned the receive down.
            RecvState::Credit => return self.consumed + NCCL_STEPS <= self.step,
            RecvState::Header(req) | RecvState::Body(Some(req), ..) => req,
            RecvState::Body(None, ..) => return false,
        };
        wake_on(self.net.wake(req), out)
    }
}

/// Notes what wakes the proxy for one request; false when nothing will.
fn wake_on(wake: Wake, out: &mut Vec<FdWait>) -> bool {
    match wake {
        Wake::Fd(w) => {
            out.push(w);
            true
        }
        Wake::Bell => true,
        Wake::Poll => false,
    }
}

enum Cmd {
    Add(u64, Box<dyn Conn>),
    Remove(u64),
}

/// One rank's proxy thread and the connections it drives.
pub(crate) struct Proxy {
    rank: u32,
    tx: Mutex<mpsc::Sender<Cmd>>,
    /// Taken by the thread when it starts.
    rx: Mutex<Option<mpsc::Receiver<Cmd>>>,
    next_id: AtomicU64,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    records: Arc<OnceLock<Arc<Records>>>,
    abort: Arc<OnceLock<AbortHandle>>,
    /// Wakes the thread from its idle sleep: rung by the ranks' counter updates and by commands.
    bell: Arc<Doorbell>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Proxy(rank {})", self.rank)
    }
}

impl Proxy {
    /// The proxy of `rank`; its thread starts with the first connection. Fails only without an eventfd.
    pub(crate) fn new(rank: u32) -> std::io::Result<Arc<Proxy>> {
        let (tx, rx) = mpsc::channel();
        Ok(Arc::new(Proxy {
            rank,
            tx: Mutex::new(tx),
            rx: Mutex::new(Some(rx)),
            next_id: AtomicU64::new(0),
            stop: Arc::new(AtomicBool::new(false)),
            thread: Mutex::new(None),
            records: Arc::new(OnceLock::new()),
            abort: Arc::new(OnceLock::new()),
            bell: Arc::new(Doorbell::new()?),
        }))
    }

    fn send_cmd(&self, cmd: Cmd) {
        let _ = self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(cmd);
        self.bell.ring();
    }

    fn ensure_thread(&self) -> std::io::Result<()> {
        let Some(rx) = self.rx.lock().unwrap_or_else(|p| p.into_inner()).take() else { return Ok(()) };
        let (st, ab, bell, rank) = (self.stop.clone(), self.abort.clone(), self.bell.clone(), self.rank);
        let records = self.records.clone();
        let t = std::thread::Builder::new()
            .name(format!("collscope Proxy{rank}"))
            .spawn(move || run(rank, &rx, &st, &ab, &bell, &records))?;
        *self.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
        Ok(())
    }

    /// Ties the proxy to its communicator: sub-operations go to `records`, a failed connection aborts `abort`.
    /// Called once the communicator exists, before its first connection.
    pub(crate) fn attach(&self, records: Arc<Records>, abort: AbortHandle) {
        let _ = self.records.set(records);
        let _ = self.abort.set(abort);
    }

    fn add(self: &Arc<Self>, conn: Box<dyn Conn>) -> std::io::Result<ProxyGuard> {
        self.ensure_thread()?;
        if let Some(r) = self.records.get() {
            r.ready_proxy_ring();
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.send_cmd(Cmd::Add(id, conn));
        Ok(ProxyGuard { id, proxy: self.clone() })
    }

    fn stats(&self, net: &'static str, mem: &Arc<ConnMem>, channel: u32, peer: u32, send: bool) -> Stats {
        let prof = NetSteps::new(self.records.get().and_then(|r| r.profiler()), Arc::as_ptr(mem) as usize);
        Stats { rank: self.rank, id: ConnId { channel, peer, send, net }, records: self.records.clone(), prof }
    }

    /// Drives the send side of a connection to `peer` over `net` (network `net_name`): `mem` is what the rank
    /// writes into; its buffers are registered with the network here.
    pub(crate) fn add_send<C: Comm>(
        self: &Arc<Self>,
        net_name: &'static str,
        mut net: C,
        mem: Arc<ConnMem>,
        channel: u32,
        peer: u32,
    ) -> Result<ProxyGuard, AddError> {
        mem.ring_on_update(self.bell.clone());
        net.set_bell(self.bell.clone());
        let stats = self.stats(net_name, &mem, channel, peer, true);
        let conn = SendConn::new(net, mem, stats)?;
        Ok(self.add(Box::new(conn))?)
    }

    /// Drives the receive side of a connection from `peer`: `mem` is what the rank reads from.
    pub(crate) fn add_recv<C: Comm>(
        self: &Arc<Self>,
        net_name: &'static str,
        mut net: C,
        mem: Arc<ConnMem>,
        channel: u32,
        peer: u32,
    ) -> Result<ProxyGuard, AddError> {
        mem.ring_on_update(self.bell.clone());
        net.set_bell(self.bell.clone());
        let stats = self.stats(net_name, &mem, channel, peer, false);
        let conn = RecvConn::new(net, mem, stats)?;
        Ok(self.add(Box::new(conn))?)
    }
}

/// Why a connection could not join the proxy.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AddError {
    #[error("cannot register the connection's buffers: {0}")]
    Register(#[from] NetError),
    #[error("cannot start the proxy thread: {0}")]
    Thread(#[from] std::io::Error),
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.bell.ring();
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// Keeps a connection on the proxy; dropping it removes the connection (and closes its sockets).
pub(crate) struct ProxyGuard {
    id: u64,
    proxy: Arc<Proxy>,
}

impl Drop for ProxyGuard {
    fn drop(&mut self) {
        self.proxy.send_cmd(Cmd::Remove(self.id));
    }
}

/// How long a leaving connection may take to hand its last steps to the network.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

struct Entry {
    id: u64,
    conn: Box<dyn Conn>,
    /// Set when the owner let go: the connection finishes its sends (as `ncclCommDestroy` waits for the
    /// proxy), then closes.
    leaving: Option<Instant>,
}

/// Rounds with nothing moved that the proxy yields through before it sleeps: a step is usually microseconds away.
const SPIN_ROUNDS: u32 = 16;
/// Longest idle sleep: rings and ready sockets end it sooner, this bounds how late a leaving connection's
/// drain limit is noticed.
const IDLE_SLEEP: Duration = Duration::from_millis(50);
/// Nap when a connection waits on something without a descriptor and nothing is in flight.
const NAP: Duration = Duration::from_micros(20);

fn run(
    rank: u32,
    rx: &mpsc::Receiver<Cmd>,
    stop: &AtomicBool,
    abort: &OnceLock<AbortHandle>,
    bell: &Doorbell,
    records: &OnceLock<Arc<Records>>,
) {
    let profiler = || records.get().and_then(|r| r.profiler());
    let mut conns: Vec<Entry> = Vec::new();
    let mut idle_rounds = 0u32;
    // The profiler's ProxyCtrl Idle/Active: reported when a round's outcome differs from the last one's.
    let mut last_idle = false;
    let mut fds = Vec::new();
    loop {
        // Past the spinning rounds, count as sleeping before this last look, so no ring is missed.
        let armed = idle_rounds >= SPIN_ROUNDS;
        if armed {
            bell.arm();
        }
        for cmd in rx.try_iter() {
            match cmd {
                Cmd::Add(id, conn) => conns.push(Entry { id, conn, leaving: None }),
                Cmd::Remove(id) => {
                    for e in conns.iter_mut().filter(|e| e.id == id) {
                        e.leaving = Some(Instant::now());
                    }
                }
            }
        }
        conns.retain(|e| e.leaving.is_none_or(|t| !e.conn.drained() && t.elapsed() < DRAIN_LIMIT));
        // An aborted communicator's rank returns: connections still moving its buffers close first, so nothing
        // touches them afterwards (the rank waits for that, see `Prims::finish`).
        if abort.get().is_some_and(AbortHandle::is_aborted) {
            conns.retain(|e| !e.conn.on_user_memory());
        }
        if stop.load(Ordering::Acquire) && conns.is_empty() {
            return;
        }
        let mut moved = false;
        let mut failed = None;
        for (i, e) in conns.iter_mut().enumerate() {
            let ConnId { peer, channel, send, net } = e.conn.id();
            let dir = if send { "send to" } else { "receive from" };
            match e.conn.progress() {
                Ok(m) => moved |= m,
                Err(err) => {
                    let reason = match err {
                        ProxyError::Net(n) if n.peer_closed() => {
                            format!("rank {peer} closed its NET/{net} connection (channel {channel}, {dir}); it exited, was killed or aborted")
                        }
                        other => format!("NET/{net} {dir} rank {peer} on channel {channel} failed: {other}"),
                    };
                    nccl_info!(Subsys::NET | Subsys::PROXY, "Proxy of rank {rank}: {reason}");
                    if let (None, Some(a)) = (e.leaving, abort.get()) {
                        a.abort_seen(reason);
                    }
                    failed = Some(i);
                    break;
                }
            }
        }
        if let Some(i) = failed {
            conns.remove(i);
            moved = true;
        }
        if moved == last_idle {
            last_idle = !moved;
            if let Some(p) = profiler() {
                drop(p.ctrl(if moved { Ctrl::Active } else { Ctrl::Idle }));
            }
        }
        if moved {
            bell.disarm();
            idle_rounds = 0;
            continue;
        }
        idle_rounds = idle_rounds.saturating_add(1);
        if !armed {
            std::thread::yield_now();
            continue;
        }
        // Nothing moves: sleep until a socket is ready or a rank or helper thread rings, unless a connection
        // waits on something that cannot wake the proxy (NET/IB completions): then look again soon.
        fds.clear();
        if conns.iter().all(|e| e.conn.wait_fds(&mut fds)) {
            let prof = profiler();
            let sleep = prof.as_ref().and_then(|p| p.ctrl(Ctrl::Sleep));
            bell.sleep(&fds, IDLE_SLEEP);
            if let Some(e) = sleep {
                e.then(Ctrl::Wakeup);
            }
        } else {
            bell.disarm();
            if conns.iter().any(|e| e.conn.busy()) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(NAP);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::records::OP_RING;
    use crate::transport::conn::{BufSizes, RecvEnd, SendEnd};
    use crate::transport::net::api::{Listen, Net, SetupCtl};
    use crate::transport::net::socket::NetSocket;
    use collscope_debug::env::Env;

    /// NET/Socket that turns down every other `isend`/`irecv`, as NET/IB turns down a send until the receiver's
    /// clear-to-send arrived: real sockets carry the bytes, the proxy must retry what was refused.
    struct Refusing<C> {
        inner: C,
        refuse: bool,
        /// Whether refusals happen at all (false: a plain pass-through).
        turns: bool,
    }

    impl<C: Comm> Refusing<C> {
        fn turn(&mut self) -> bool {
            self.refuse = !self.refuse;
            self.turns && self.refuse
        }
    }

    impl<C: Comm> Comm for Refusing<C> {
        type Request = C::Request;
        type Mr = C::Mr;
        fn peer(&self) -> String {
            self.inner.peer()
        }
        fn reg_mr(&mut self, data: *mut u8, size: usize) -> Result<C::Mr, NetError> {
            self.inner.reg_mr(data, size)
        }
        fn dereg_mr(&mut self, mr: C::Mr) -> Result<(), NetError> {
            self.inner.dereg_mr(mr)
        }
        fn isend(&mut self, d: *const u8, n: usize, tag: u32, mr: &C::Mr) -> Result<Option<C::Request>, NetError> {
            if self.turn() {
                return Ok(None);
            }
            self.inner.isend(d, n, tag, mr)
        }
        fn irecv(&mut self, d: *mut u8, n: usize, tag: u32, mr: &C::Mr) -> Result<Option<C::Request>, NetError> {
            if self.turn() {
                return Ok(None);
            }
            self.inner.irecv(d, n, tag, mr)
        }
        fn test(&mut self, req: &mut C::Request) -> Result<Option<usize>, NetError> {
            self.inner.test(req)
        }
        fn in_progress(&self, req: &C::Request) -> bool {
            self.inner.in_progress(req)
        }
        fn wake(&self, req: &C::Request) -> Wake {
            self.inner.wake(req)
        }
        fn set_bell(&mut self, bell: Arc<Doorbell>) {
            self.inner.set_bell(bell);
        }
        fn any_memory(&self) -> bool {
            self.inner.any_memory()
        }
    }

    fn fill(step: u64) -> Vec<u8> {
        (0..100 + 37 * step as usize).map(|i| (i as u64 * 7 + step) as u8).collect()
    }

    /// A connection over real sockets driven by one proxy: its two ends, and the guards that keep it.
    fn connected(env: &Env, refuse: bool) -> (SendEnd, RecvEnd, [ProxyGuard; 2]) {
        let net = NetSocket::discover(env).unwrap();
        let ctl = SetupCtl { timeout: Duration::from_secs(10), abort: Arc::new(AtomicBool::new(false)) };
        let (listener, handle) = Net::listen(&net, 0, &ctl).unwrap();
        let send = Net::connect(&net, 0, &handle, &ctl).unwrap();
        let recv = Listen::accept(listener).unwrap();
        let sizes = BufSizes { simple: 8 * 4096, ll: 8 * 1024, ll128: 8 * 2048 };
        let (smem, rmem) = (Arc::new(ConnMem::anonymous(sizes).unwrap()), Arc::new(ConnMem::anonymous(sizes).unwrap()));
        let proxy = Proxy::new(0).unwrap();
        let s = proxy.add_send("Socket", Refusing { inner: send, refuse, turns: refuse }, smem.clone(), 0, 1).unwrap();
        let r = proxy.add_recv("Socket", Refusing { inner: recv, refuse, turns: refuse }, rmem.clone(), 0, 0).unwrap();
        (SendEnd::new(smem, 1), RecvEnd { mem: rmem, peer: 0, step: 0 }, [s, r])
    }

    /// Moves `steps` steps from a sender's region to a receiver's through one proxy over real sockets, checking
    /// every byte. `refuse`: the network turns down every other transfer. `gap`: the sender idles that long
    /// before each step, so the proxy has gone to sleep and must be woken. `env` sets up NET/Socket.
    fn carry(env: &Env, steps: u64, refuse: bool, gap: Duration) {
        let (mut tx, mut rx, _guards) = connected(env, refuse);
        let start = Instant::now();
        while rx.step < steps {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "stalled at step {} sent, {} received",
                tx.step,
                rx.step
            );
            if tx.step < steps && tx.has_credit() {
                std::thread::sleep(gap);
                let bytes = fill(tx.step);
                // SAFETY: the slot is the sender's until the step is posted, and large enough.
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), tx.mem.slot(Protocol::Simple, tx.step), bytes.len())
                };
                tx.post(Protocol::Simple, bytes.len());
            }
            if rx.has_data() {
                let want = fill(rx.step);
                assert_eq!(rx.mem.step_info(rx.step), (Some(Protocol::Simple), want.len()));
                // SAFETY: the step was published; the slot is the receiver's until released.
                let got = unsafe { std::slice::from_raw_parts(rx.mem.slot(Protocol::Simple, rx.step), want.len()) };
                assert_eq!(got, &want[..], "step {}", rx.step);
                rx.release();
            }
            std::thread::yield_now();
        }
    }

    #[test]
    fn steps_cross_a_network_that_defers_transfers_in_order() {
        carry(&Env::default(), 3 * NCCL_STEPS + 1, true, Duration::ZERO);
    }

    #[test]
    fn steps_posted_while_the_proxy_sleeps_all_arrive() {
        // 20 ms between steps: far past the proxy's spinning rounds, so every step finds it asleep in poll, and,
        // with helper threads, waiting for their ring.
        carry(&Env::default(), NCCL_STEPS + 2, false, Duration::from_millis(20));
        let helpers = Env::from_pairs([("NCCL_SOCKET_NTHREADS", "2"), ("NCCL_NSOCKS_PERTHREAD", "1")]);
        carry(&helpers, NCCL_STEPS + 2, false, Duration::from_millis(20));
    }

    /// Waits (bounded) until `ready`.
    fn until(what: &str, mut ready: impl FnMut() -> bool) {
        let start = Instant::now();
        while !ready() {
            assert!(start.elapsed() < Duration::from_secs(30), "{what} never happened");
            std::thread::yield_now();
        }
    }

    #[test]
    fn direct_steps_go_from_and_into_the_users_buffers() {
        // With and without helper threads, and with a network that defers transfers.
        let helpers = Env::from_pairs([("NCCL_SOCKET_NTHREADS", "2"), ("NCCL_NSOCKS_PERTHREAD", "1")]);
        for (env, refuse) in [(Env::default(), false), (helpers, false), (Env::default(), true)] {
            let (mut tx, mut rx, _guards) = connected(&env, refuse);
            assert!(
                [&tx.mem, &rx.mem].iter().all(|m| m.direct() == Direct::NetAnyMemory),
                "NET/Socket takes any memory"
            );
            let steps = 2 * NCCL_STEPS + 1;
            let src: Vec<Vec<u8>> = (0..steps).map(fill).collect();
            let mut dst: Vec<Vec<u8>> = src.iter().map(|b| vec![0u8; b.len()]).collect();
            for s in 0..steps as usize {
                // Asked for before it was sent: the proxy finds the want when the header arrives.
                rx.want(0, dst[s].as_mut_ptr(), dst[s].len());
                until("credit", || tx.has_credit());
                tx.post_at(src[s].as_ptr(), src[s].len());
                until("the step", || rx.has_data());
                assert_eq!(
                    rx.payload(Protocol::Simple, src[s].len()),
                    Some(dst[s].as_ptr()),
                    "step {s} went through the slot"
                );
                assert_eq!(dst[s], src[s], "step {s}");
                rx.release();
                until("the send's completion", || tx.sent());
            }
            // A step longer than the room asked for lands in the slot, where the rank refuses it by its size.
            let mut small = [0u8; 10];
            rx.want(0, small.as_mut_ptr(), small.len());
            tx.post_at(src[0].as_ptr(), src[0].len());
            until("the long step", || rx.has_data());
            assert!(rx.payload(Protocol::Simple, src[0].len()) != Some(small.as_ptr()) && small == [0; 10]);
            assert_eq!(rx.mem.step_info(rx.step), (Some(Protocol::Simple), src[0].len()));
            assert!(rx.unwant(), "every want is settled");
        }
    }

    #[test]
    fn an_aborted_communicators_proxy_lets_go_of_a_buffer_it_receives_into() {
        let net = NetSocket::discover(&Env::default()).unwrap();
        let ctl = SetupCtl { timeout: Duration::from_secs(10), abort: Arc::new(AtomicBool::new(false)) };
        let (listener, handle) = Net::listen(&net, 0, &ctl).unwrap();
        let mut send = Net::connect(&net, 0, &handle, &ctl).unwrap();
        let recv = Listen::accept(listener).unwrap();
        let mem = Arc::new(ConnMem::anonymous(BufSizes { simple: 8 * 4096, ll: 8 * 1024, ll128: 8 * 2048 }).unwrap());
        let proxy = Proxy::new(0).unwrap();
        let (records, abort) = (Arc::new(Records::new(0, 2, 1, None)), AbortHandle::default());
        proxy.attach(records.clone(), abort.clone());
        assert_eq!(records.proxy_ring_capacity(), 0, "no NET connection, no ring");
        let _guard = proxy.add_recv("Socket", recv, mem.clone(), 0, 1).unwrap();
        assert!(records.proxy_ring_capacity() >= OP_RING, "the ring is made before the proxy's first step");
        let rx = RecvEnd { mem, peer: 1, step: 0 };
        let mut buf = vec![0u8; 100];
        rx.want(0, buf.as_mut_ptr(), buf.len());
        // A peer that sends a step's header and never its body: the proxy waits to receive it into `buf`.
        let h = header(Protocol::Simple, 0, buf.len());
        let mut req = send.isend(h.as_ptr(), h.len());
        until("the header's send", || send.test(&mut req).unwrap().is_some());
        until("the header's arrival", || records.proxy_ops().iter().any(|o| o.posted == 1));
        assert!(!rx.unwant(), "the proxy took the want: the buffer is still its");
        abort.abort("a peer failed");
        rx.mem.wake_proxy();
        until("the proxy letting go", || rx.unwant());
        assert!(!rx.has_data() && buf.iter().all(|&b| b == 0));
    }
}
