//! The TCP bootstrap network (NCCL 2.28.9 `src/bootstrap.cc`): one rank creates a unique id (its root's
//! address and a random magic) and hands it to the others out of band; every rank checks in with the root,
//! which wires the ranks into a TCP ring; the ring carries AllGather and barriers, and point-to-point messages
//! go over short-lived connections to each rank's peer listener, matched by (peer, tag).
//!
//! Joining ends within `COLLSCOPE_TIMEOUT_S`, with an error that names the rank(s) at fault and where this rank
//! was waiting ([`Phase`]): each rank keeps its check-in connection to the root until it has joined, and the
//! root's [`Verdict`] (ranks that never came, disagree on the rank count, or died while joining) reaches every
//! rank still joining. Joining ends with a direct connection between every pair of ranks ([`MESH_TAG`]), which
//! the liveness watchdog then watches, so a rank that dies at any later point is noticed too.
//!
//! Every listener may hear strangers (NCCL's magic is public; `COLLSCOPE_BOOTSTRAP_SECRET` makes it private):
//! handshakes, check-ins, ring greetings and message headers are read side by side with short limits, so an
//! idle connection holds up nobody; what a peer listener keeps for a claimed sender is capped (`MAX_MESSAGE`,
//! `INBOX_BYTES`, `INBOX_MESSAGES`, `STREAMS_PER_RANK`); anything not the job's is dropped and counted, never
//! fatal. Every wait of `init` comes from one deadline, `COLLSCOPE_TIMEOUT_S` after it started.

mod root;
mod unique_id;

pub use root::{RootHandle, Verdict};
pub use unique_id::{UniqueId, UniqueIdError, UNIQUE_ID_BYTES};

use crate::socket::{
    addr_from_bytes, addr_string, addr_to_bytes, find_interfaces, random_u64, IfSpec, Listener, NetIf, Socket,
    SocketError, SocketFamily, SocketType, ADDR_BYTES, POLL_SLICE,
};
use collscope_debug::env::{Env, EnvError};
use collscope_debug::Subsys;
use collscope_debug::{nccl_info, nccl_warn};
use root::{CheckIn, Frame, RankExit};
use std::fmt;
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often a rank still looking for the root says so, instead of waiting out `COLLSCOPE_TIMEOUT_S` silently
/// (a root not up yet, or one whose process ended, taking its verdict with it).
const NO_ROOT_WARN_EVERY: Duration = Duration::from_secs(5);
/// The bootstrap tag of the connections every pair of ranks keeps for liveness.
pub const MESH_TAG: u64 = 0x4c49_5645;
/// How long past its own deadline, or its own failure, a checked-in rank waits for the root's verdict, which
/// is more precise (the root's deadline started with the root, maybe after this rank's; a failure seen here
/// may be a peer ending on the verdict, or a peer's death the root has heard of too).
const VERDICT_GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error(transparent)]
    UniqueId(#[from] UniqueIdError),
    #[error("NCCL_COMM_ID='{value}': {problem}")]
    CommId { value: String, problem: SocketError },
    #[error("COLLSCOPE_BOOTSTRAP_SECRET is set but empty: give every rank the same non-empty secret, or unset it")]
    Secret,
    #[error("no usable bootstrap interface found{0}")]
    NoInterface(String),
    #[error("bootstrap protocol error: {0}")]
    Protocol(String),
    #[error("bootstrap protocol error: {what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("rank {rank} is out of range for {nranks} ranks")]
    BadRank { rank: u32, nranks: u32 },
    #[error("bootstrap {op} rank {peer} (tag {tag:#x}) failed: {source}")]
    Peer {
        op: &'static str,
        peer: u32,
        tag: u64,
        #[source]
        source: SocketError,
    },
    #[error("{op} rank {peer} over the bootstrap ring failed: {source}")]
    Ring {
        op: &'static str,
        peer: u32,
        #[source]
        source: SocketError,
    },
    #[error(transparent)]
    Join(Box<JoinError>),
}

/// A rank that could not join: where it was and why.
#[derive(Debug, thiserror::Error)]
#[error("rank {rank} of {nranks}, while {phase}: {cause}")]
pub struct JoinError {
    pub rank: u32,
    pub nranks: u32,
    pub phase: Phase,
    pub cause: JoinCause,
}

/// Where a joining rank was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Connecting to the root and checking in.
    Root { addr: String },
    /// Checked in, waiting for the root to name where its next ring neighbour listens.
    Pairing { next: u32 },
    /// Connecting to its next ring neighbour and accepting its previous one.
    Ring { next: u32, prev: u32 },
    /// Gathering every rank's address around the ring.
    AllGather { next: u32, prev: u32 },
    /// Connecting to every other rank directly.
    Mesh,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Phase::Root { addr } => write!(f, "connecting to the bootstrap root at {addr}"),
            Phase::Pairing { next } => write!(f, "waiting for the root to pair it with rank {next}"),
            Phase::Ring { next, prev } => write!(f, "connecting its ring to rank {next} and from rank {prev}"),
            Phase::AllGather { next, prev } => {
                write!(f, "exchanging addresses over the ring (to rank {next}, from rank {prev})")
            }
            Phase::Mesh => write!(f, "connecting to every other rank"),
        }
    }
}

/// Why a rank could not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinCause {
    #[error("the root reports that {0}")]
    Verdict(Verdict),
    #[error("the root at {addr} closed its connection: the process hosting it (rank 0, or the launcher) is gone")]
    RootGone { addr: String },
    #[error(
        "no root answered within {secs} s (rank 0, or the launcher, hosts it: is it running, at that address? A \
         process that hosted it and ended, e.g. rank 0 on a verdict, took its verdict with it); last attempt: {last}"
    )]
    NoRoot { secs: u64, last: String },
    #[error("rank {next} had not checked in with the root after {secs} s")]
    Unpaired { next: u32, secs: u64 },
    #[error("{0}")]
    Other(Box<BootstrapError>),
}

impl From<BootstrapError> for JoinCause {
    fn from(e: BootstrapError) -> Self {
        JoinCause::Other(Box::new(e))
    }
}

impl From<SocketError> for JoinCause {
    fn from(e: SocketError) -> Self {
        JoinCause::Other(Box::new(e.into()))
    }
}

/// The bootstrap interface of this process, chosen once (NCCL's `bootstrapNetInit`).
static BOOTSTRAP_IF: OnceLock<NetIf> = OnceLock::new();

/// Chooses (once per process) and prints the bootstrap interface: `Bootstrap: Using eth0:10.0.0.1<0>`. `root` is
/// the unique id's root when this process joins one: a root on loopback (a launcher on this host) makes it lo.
pub fn bootstrap_interface(env: &Env, root: Option<SocketAddr>) -> Result<NetIf, BootstrapError> {
    if let Some(i) = BOOTSTRAP_IF.get() {
        return Ok(i.clone());
    }
    let chosen = choose_interface(env, root)?;
    let i = BOOTSTRAP_IF.get_or_init(|| chosen);
    nccl_info!(Subsys::BOOTSTRAP, "Bootstrap: Using {}:{}", i.name, addr_string(&i.addr));
    Ok(i.clone())
}

/// The bootstrap interface as the shared model records it (`Bootstrap: Using eth0:10.0.0.1<0>`).
pub fn model_interface(i: &NetIf, rank: Option<u32>) -> collscope_model::BootstrapInterface {
    collscope_model::BootstrapInterface {
        name: i.name.clone(),
        address: addr_string(&i.addr),
        host: Some(collscope_debug::sys::hostname()),
        rank,
    }
}

/// The unique id `NCCL_COMM_ID` names, if set (its host resolved), with `COLLSCOPE_BOOTSTRAP_SECRET` mixed into
/// NCCL's public magic when set, so only processes given the secret get past the handshake.
fn comm_id(env: &Env) -> Result<Option<UniqueId>, BootstrapError> {
    // Read from the process, never through `Env`, which logs and publishes the values it hands out.
    comm_id_with(
        env,
        collscope_debug::params::process_path(SECRET_VAR).as_deref().map(std::os::unix::ffi::OsStrExt::as_bytes),
    )
}

fn comm_id_with(env: &Env, secret: Option<&[u8]>) -> Result<Option<UniqueId>, BootstrapError> {
    let Some(value) = env.str("NCCL_COMM_ID") else { return Ok(None) };
    let id = UniqueId::from_comm_id(value).map_err(|problem| {
        nccl_warn!("Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> or [<ipv6>]:<port> or <hostname>:<port>");
        BootstrapError::CommId { value: value.into(), problem }
    })?;
    match secret {
        None => {
            nccl_info!(
                Subsys::BOOTSTRAP,
                "Bootstrap: NCCL_COMM_ID with NCCL's public magic: any local process can join or disturb the job; set {SECRET_VAR} to the same value in every rank to refuse them"
            );
            Ok(Some(id))
        }
        Some([]) => Err(BootstrapError::Secret),
        Some(secret) => Ok(Some(UniqueId { magic: mix_secret(id.magic, secret), ..id })),
    }
}

/// The job secret every rank of an `NCCL_COMM_ID`, torchrun, MPI or Slurm launch should be given.
const SECRET_VAR: &str = "COLLSCOPE_BOOTSTRAP_SECRET";

/// `magic` with `secret` mixed in (64-bit FNV-1a over both: stable across builds, so every rank agrees).
fn mix_secret(magic: u64, secret: &[u8]) -> u64 {
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in magic.to_le_bytes().iter().chain(secret) {
        h = (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME);
    }
    h
}

fn choose_interface(env: &Env, root: Option<SocketAddr>) -> Result<NetIf, BootstrapError> {
    let family = env.parsed::<SocketFamily>("NCCL_SOCKET_FAMILY")?;
    let remote = match comm_id(env)? {
        Some(id) => Some((id.addr, "NCCL_COMM_ID")),
        None => root.filter(|a| a.ip().is_loopback()).map(|a| (a, "the bootstrap root")),
    };
    if let Some((remote, named)) = remote {
        let all = crate::socket::list_interfaces();
        let subnet = crate::socket::select_interfaces(&all, None, Some(&remote), family, 1);
        // A loopback NCCL_COMM_ID matches lo's subnet; a remote one needs an interface on its subnet.
        let pick = subnet
            .into_iter()
            .find(|i| i.addr.is_ipv4() == remote.is_ipv4())
            .or_else(|| all.into_iter().find(|i| i.addr.ip() == remote.ip()));
        return pick.ok_or_else(|| {
            nccl_warn!("NET/Socket : No usable listening interface found");
            BootstrapError::NoInterface(format!(" in the subnet of {named}={}", addr_string(&remote)))
        });
    }
    let spec = env.parsed::<IfSpec>("NCCL_SOCKET_IFNAME")?;
    if let Some(s) = env.str("NCCL_SOCKET_IFNAME") {
        nccl_info!(Subsys::NET, "NCCL_SOCKET_IFNAME set to {s}");
    }
    find_interfaces(spec.as_ref(), None, family, 1).into_iter().next().ok_or_else(|| {
        nccl_warn!("Bootstrap : no socket interface found");
        BootstrapError::NoInterface(match env.str("NCCL_SOCKET_IFNAME") {
            Some(s) => format!(" matching NCCL_SOCKET_IFNAME={s}"),
            None => String::new(),
        })
    })
}

/// Limit for each bootstrap wait: `COLLSCOPE_TIMEOUT_S`, as for every other wait.
pub fn timeout(env: &Env) -> Result<Duration, BootstrapError> {
    Ok(crate::sync::wait::timeout_from_env(env)?)
}

impl UniqueId {
    /// NCCL's `ncclGetUniqueId`: a random magic and a root listening on the bootstrap interface, serving
    /// check-ins on a background thread. With `NCCL_COMM_ID` set, the id names that address and NCCL's magic,
    /// and rank 0's `TcpBootstrap::init` starts the root there instead.
    pub fn create(env: &Env) -> Result<UniqueId, BootstrapError> {
        Self::host(env, false).map(|(id, _)| id)
    }

    /// [`UniqueId::create`] for a launcher, with a handle to tell the root which rank processes ended (it
    /// reaches nothing when `NCCL_COMM_ID` puts the root in rank 0). `local`: every rank runs on this host, so the
    /// root listens on loopback (and so do the ranks' listeners: see [`TcpBootstrap::init`]).
    pub fn host(env: &Env, local: bool) -> Result<(UniqueId, RootHandle), BootstrapError> {
        let (exits, heard) = mpsc::channel();
        let handle = RootHandle { exits };
        if let Some(id) = comm_id(env)? {
            return Ok((id, handle));
        }
        let ip = if local { std::net::Ipv4Addr::LOCALHOST.into() } else { bootstrap_interface(env, None)?.addr.ip() };
        let magic = random_u64().map_err(|source| BootstrapError::Io { what: "cannot read /dev/urandom", source })?;
        let listener = Listener::bind_ip(ip, magic, SocketType::Bootstrap)?;
        let id = UniqueId { magic, addr: listener.addr() };
        start_root(listener, timeout(env)?, heard)?;
        Ok((id, handle))
    }
}

fn start_root(listener: Listener, timeout: Duration, exits: mpsc::Receiver<RankExit>) -> Result<(), BootstrapError> {
    std::thread::Builder::new()
        .name("collscope BootstrapR".into())
        .spawn(move || root::serve(listener, timeout, exits))
        .map(|_| ())
        .map_err(|source| BootstrapError::Io { what: "cannot start the root thread", source })
}

/// Header of every point-to-point bootstrap connection: sender rank, kind, tag.
const HEADER_BYTES: usize = 16;
/// A whole message follows (length, bytes); the acceptor reads it at once, so `send` never waits for `recv`.
const KIND_MESSAGE: u32 = 0;
/// The connection itself is handed over (`connect`/`accept`).
const KIND_STREAM: u32 = 1;
/// What the acceptor answers once a message is queued; a message it drops gets no answer, only the close.
const MESSAGE_TAKEN: u8 = 1;

/// Largest point-to-point message a rank takes from a peer: collscope's are transport handles of a few hundred
/// bytes; 16 MiB leaves room for other users while bounding what one connection can make a rank hold.
const MAX_MESSAGE: u64 = 16 << 20;
/// Largest AllGather slice taken from the ring neighbour (a corrupt length, not a stranger: the ring is wired by
/// the root); like every message it is read as it arrives, so a claimed length allocates nothing.
const MAX_RING_MESSAGE: u64 = 1 << 32;
/// How much of a message is read (and allocated) at a time.
const READ_CHUNK: usize = 1 << 20;
/// Bytes of unclaimed messages held (and being read) at once: four of the largest. A message past it is
/// dropped, once messages unclaimed for longer than `COLLSCOPE_TIMEOUT_S` went first.
const INBOX_BYTES: usize = 64 << 20;
/// Unclaimed messages held at once: connection setup sends one handle per channel (NCCL's `MAXCHANNELS`, 64),
/// direction and peer, so this holds setup with 32 peers at once.
const INBOX_MESSAGES: usize = 4096;
/// Unclaimed lasting connections held per rank of the job: collscope opens one per pair of ranks (the liveness
/// mesh); more are strangers' descriptors.
const STREAMS_PER_RANK: usize = 4;
/// Connections whose header and message are read at once, each on its own thread, so a slow sender delays
/// nobody; past it new ones wait in the listener (a rank's peers send a few at a time).
const MAX_READERS: usize = 16;
/// How soon the acceptor looks again while every reader is busy.
const READER_WAIT: Duration = Duration::from_millis(10);
/// How long a handshaken connection may take to send its header.
const HEADER_LIMIT: Duration = Duration::from_secs(5);

enum Payload {
    Message(Vec<u8>),
    Stream(Socket),
}

/// Something a peer sent that nobody has claimed yet (NCCL's `unexConn`).
struct Unexpected {
    peer: u32,
    tag: u64,
    payload: Payload,
    arrived: Instant,
}

/// What the acceptor received, waiting to be claimed by (peer, tag), within the caps above.
#[derive(Default)]
struct Queue {
    items: Vec<Unexpected>,
    /// Bytes of the messages held and of those being read.
    bytes: usize,
    messages: usize,
    streams: usize,
}

#[derive(Default)]
struct Inbox {
    queue: Mutex<Queue>,
    arrived: Condvar,
}

impl Queue {
    /// Makes room for a message of `len` bytes, dropping messages unclaimed for longer than `stale` first;
    /// whether it fits.
    fn reserve(&mut self, len: usize, stale: Duration) -> bool {
        let fits = |q: &Queue| q.bytes + len <= INBOX_BYTES && q.messages < INBOX_MESSAGES;
        if !fits(self) {
            let before = self.items.len();
            let (mut bytes, mut messages) = (self.bytes, self.messages);
            self.items.retain(|u| match &u.payload {
                Payload::Message(m) if u.arrived.elapsed() > stale => {
                    (bytes, messages) = (bytes - m.len(), messages - 1);
                    false
                }
                _ => true,
            });
            (self.bytes, self.messages) = (bytes, messages);
            if self.items.len() < before {
                nccl_warn!("Bootstrap: dropped {} message(s) unclaimed for over {stale:?}", before - self.items.len());
            }
        }
        let ok = fits(self);
        if ok {
            self.bytes += len;
            self.messages += 1;
        }
        ok
    }

    /// Gives back a reservation whose message never came.
    fn release(&mut self, len: usize) {
        self.bytes -= len;
        self.messages -= 1;
    }

    fn take(&mut self, i: usize) -> Payload {
        let u = self.items.remove(i);
        match &u.payload {
            Payload::Message(m) => self.release(m.len()),
            Payload::Stream(_) => self.streams -= 1,
        }
        u.payload
    }
}

/// Connections dropped for not being what the job expects: counted, the first logged as a WARN.
#[derive(Debug)]
pub(super) struct Strays {
    place: &'static str,
    count: std::sync::atomic::AtomicU32,
}

impl Strays {
    pub(super) const fn new(place: &'static str) -> Self {
        Strays { place, count: std::sync::atomic::AtomicU32::new(0) }
    }

    /// Counts and logs one: `from` and why it was dropped.
    pub(super) fn drop(&self, from: &SocketAddr, why: &str) {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let (place, from) = (self.place, addr_string(from));
        if n == 1 {
            nccl_warn!("{place}: dropping a connection from {from}: {why} (further ones are logged at INFO)");
        } else {
            nccl_info!(Subsys::BOOTSTRAP, "{place}: dropping a connection from {from}: {why} ({n} so far)");
        }
    }

    pub(super) fn count(&self) -> u32 {
        self.count.load(Ordering::Relaxed)
    }
}

/// What the acceptor and its readers share.
struct Acceptor {
    inbox: Arc<Inbox>,
    nranks: u32,
    /// Every rank's peer listener, once gathered: a sender must connect from the address its rank announced.
    peers: Arc<OnceLock<Vec<SocketAddr>>>,
    stop: Arc<AtomicBool>,
    timeout: Duration,
    readers: std::sync::atomic::AtomicUsize,
    strays: Strays,
}

struct Ring {
    next: Socket,
    prev: Socket,
}

/// One rank's view of the TCP bootstrap network.
pub struct TcpBootstrap {
    rank: u32,
    nranks: u32,
    magic: u64,
    timeout: Duration,
    /// Every rank's peer listener.
    peers: Arc<OnceLock<Vec<SocketAddr>>>,
    listen_addr: SocketAddr,
    ring: Mutex<Ring>,
    acceptor_state: Arc<Acceptor>,
    /// A connection to every other rank, made while joining, for the liveness watchdog.
    mesh: Mutex<Vec<(u32, Socket)>>,
    /// Raised by the failure watchdog: every wait gives up.
    abort: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    acceptor: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for TcpBootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TcpBootstrap(rank {} of {}, listening on {})", self.rank, self.nranks, self.listen_addr)
    }
}

/// This rank's check-in connection while it joins.
struct RootLink {
    sock: Socket,
    addr: String,
}

impl RootLink {
    /// Connects to the root (retrying until `timeout`: it may not be up yet) and checks in.
    fn check_in(id: &UniqueId, info: CheckIn, timeout: Duration) -> Result<RootLink, JoinCause> {
        let addr = addr_string(&id.addr);
        let deadline = Instant::now() + timeout;
        let mut sock = loop {
            let slice = left(deadline).min(NO_ROOT_WARN_EVERY);
            match Socket::connect(id.addr, id.magic, SocketType::Bootstrap, slice) {
                Ok(s) => break s,
                Err(SocketError::ConnectTimeout { last, .. }) if left(deadline).is_zero() => {
                    return Err(JoinCause::NoRoot { secs: timeout.as_secs(), last })
                }
                Err(SocketError::ConnectTimeout { last, .. }) => nccl_warn!(
                    "Bootstrap: no root at {addr} yet after {:.0} s ({last}); rank {} waits {:.0} s more",
                    (timeout - left(deadline)).as_secs_f64(),
                    info.rank,
                    left(deadline).as_secs_f64()
                ),
                Err(other) => return Err(other.into()),
            }
        };
        sock.send_timeout(&info.to_bytes(), timeout, None)?;
        Ok(RootLink { sock, addr })
    }

    /// The root's answer: where the next ring neighbour listens, or its verdict.
    fn next_ring(&mut self, next: u32, wait: Duration) -> Result<SocketAddr, JoinCause> {
        match Frame::recv(&mut self.sock, wait, None) {
            Ok(Frame::Next(a)) => Ok(a),
            Ok(Frame::Verdict(v)) => Err(JoinCause::Verdict(v)),
            Ok(other) => Err(BootstrapError::Protocol(format!("the root sent {other:?} instead of an address")).into()),
            Err(BootstrapError::Socket(SocketError::Timeout { .. })) => {
                Err(JoinCause::Unpaired { next, secs: wait.saturating_sub(VERDICT_GRACE).as_secs() })
            }
            Err(BootstrapError::Socket(SocketError::Closed { .. })) => {
                Err(JoinCause::RootGone { addr: self.addr.clone() })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Tells the root why this rank gives up, so it can tell the others.
    fn report(&mut self, phase: &Phase, cause: &JoinCause) {
        if !matches!(cause, JoinCause::Verdict(_) | JoinCause::RootGone { .. }) {
            let _ = Frame::Failed(format!("while {phase}: {cause}")).send(&mut self.sock);
        }
    }

    /// Watches the link on a thread from now on: a verdict, or the root going away, raises `abort`.
    fn watch(self, abort: Arc<AtomicBool>) -> Result<RootWatch, BootstrapError> {
        let mut reader = self.sock.try_clone()?;
        let (stop, heard) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(None)));
        let (t_stop, t_heard, addr) = (stop.clone(), heard.clone(), self.addr.clone());
        let thread = std::thread::Builder::new()
            .name("collscope BootstrapW".into())
            .spawn(move || {
                let cause = loop {
                    match Frame::recv(&mut reader, Duration::MAX, Some(&t_stop)) {
                        _ if t_stop.load(Ordering::Acquire) => return,
                        Ok(Frame::Verdict(v)) => break JoinCause::Verdict(v),
                        Ok(_) => continue,
                        Err(_) => break JoinCause::RootGone { addr },
                    }
                };
                *t_heard.lock().unwrap_or_else(|p| p.into_inner()) = Some(cause);
                abort.store(true, Ordering::Release);
            })
            .map_err(|source| BootstrapError::Io { what: "cannot start the root link watcher", source })?;
        Ok(RootWatch { link: self, stop, heard, thread: Some(thread) })
    }
}

/// The root link watched by a thread while the rank connects its ring and mesh.
struct RootWatch {
    link: RootLink,
    stop: Arc<AtomicBool>,
    heard: Arc<Mutex<Option<JoinCause>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RootWatch {
    /// Joined: tells the root, then closes the link. The watcher stops first: the root closes its end once
    /// every rank said so, which must not read as the root going away.
    fn done(mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = Frame::Done.send(&mut self.link.sock);
    }

    /// Failed with `e` while in `phase`: the root's verdict if one comes within `VERDICT_GRACE` (it explains
    /// `e`: a peer that closed on this rank may have just heard it, and a dead peer is judged by the root too),
    /// else `e`, which the root then passes on to the others.
    fn failed(mut self, phase: &Phase, e: BootstrapError) -> JoinCause {
        let t = Instant::now();
        while self.thread.as_ref().is_some_and(|t| !t.is_finished()) && t.elapsed() < VERDICT_GRACE {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.stop_watching();
        let heard = self.heard.lock().unwrap_or_else(|p| p.into_inner()).take();
        heard.unwrap_or_else(|| {
            let cause = JoinCause::from(e);
            self.link.report(phase, &cause);
            cause
        })
    }

    fn stop_watching(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the watcher's read at once instead of at its next poll slice.
        let _ = self.link.sock.stream().shutdown(Shutdown::Read);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RootWatch {
    fn drop(&mut self) {
        self.stop_watching();
    }
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// How long a ring neighbour may take to name itself after its handshake (it does so at once).
const RING_HELLO_LIMIT: Duration = Duration::from_secs(1);

/// Connects to the next rank's ring listener and names this rank.
fn ring_connect(
    addr: SocketAddr,
    magic: u64,
    rank: u32,
    deadline: Instant,
    abort: &AtomicBool,
) -> Result<Socket, BootstrapError> {
    let mut s = Socket::connect_listening(addr, magic, SocketType::Bootstrap, left(deadline), Some(abort))?;
    s.send_timeout(&rank.to_le_bytes(), left(deadline), Some(abort))?;
    Ok(s)
}

/// The previous rank's ring connection; any other on the listener (a stranger who found the port) is dropped.
fn ring_accept(
    listener: &Listener,
    prev: u32,
    deadline: Instant,
    abort: &AtomicBool,
    strays: &Strays,
) -> Result<Socket, BootstrapError> {
    loop {
        let mut s = listener.accept(left(deadline), Some(abort))?;
        let mut who = [0u8; 4];
        match s.recv_timeout(&mut who, RING_HELLO_LIMIT.min(left(deadline)), Some(abort)) {
            Ok(()) if u32::from_le_bytes(who) == prev => return Ok(s),
            Ok(()) => {
                let who = u32::from_le_bytes(who);
                strays
                    .drop(&s.peer(), &format!("it named itself rank {who} on the ring listener of rank {prev}'s next"))
            }
            Err(e) => strays.drop(&s.peer(), &format!("it did not name itself on the ring listener: {e}")),
        }
    }
}

impl TcpBootstrap {
    /// NCCL's `bootstrapInit`: check in with the root, connect the ring, AllGather the peer listeners, then
    /// connect every pair of ranks. All of it ends within `COLLSCOPE_TIMEOUT_S` (a little more when the root
    /// is about to give its verdict), with a [`JoinError`] naming where this rank was and why.
    pub fn init(id: &UniqueId, rank: u32, nranks: u32, env: &Env) -> Result<TcpBootstrap, BootstrapError> {
        if rank >= nranks {
            return Err(BootstrapError::BadRank { rank, nranks });
        }
        let timeout = timeout(env)?;
        let start = Instant::now();
        let deadline = start + timeout;
        let iface = bootstrap_interface(env, Some(id.addr))?;
        if rank == 0 && env.str("NCCL_COMM_ID").is_some() {
            let listener = Listener::bind(id.addr, id.magic, SocketType::Bootstrap)?;
            start_root(listener, timeout, mpsc::channel().1)?;
        }
        // A root on loopback means every rank is on this host: nothing need listen on an outside interface.
        let ip = if id.addr.ip().is_loopback() { id.addr.ip() } else { iface.addr.ip() };
        let ring_listener = Listener::bind_ip(ip, id.magic, SocketType::Bootstrap)?;
        let listener = Listener::bind_ip(ip, id.magic, SocketType::Bootstrap)?;
        let fail = |phase, cause| BootstrapError::Join(Box::new(JoinError { rank, nranks, phase, cause }));
        let (next, prev) = ((rank + 1) % nranks, (rank + nranks - 1) % nranks);

        let info = CheckIn { rank, nranks, ring_addr: ring_listener.addr() };
        let mut link =
            RootLink::check_in(id, info, timeout).map_err(|c| fail(Phase::Root { addr: addr_string(&id.addr) }, c))?;
        let t_send = start.elapsed();
        let next_ring = link.next_ring(next, left(deadline) + VERDICT_GRACE).map_err(|c| {
            link.report(&Phase::Pairing { next }, &c);
            fail(Phase::Pairing { next }, c)
        })?;
        let t_recv = start.elapsed();

        let abort = Arc::new(AtomicBool::new(false));
        let watch = link.watch(abort.clone())?;
        // Connect to next and accept prev concurrently: with two ranks each is the other's both.
        let ring = std::thread::scope(|s| {
            let c = s.spawn(|| ring_connect(next_ring, id.magic, rank, deadline, &abort));
            let prev = ring_accept(&ring_listener, prev, deadline, &abort, &Strays::new("Bootstrap ring"));
            let next = c.join().map_err(|_| BootstrapError::Protocol("ring connect thread panicked".into()))?;
            Ok::<_, BootstrapError>(Ring { next: next?, prev: prev? })
        });
        let ring = match ring {
            Ok(r) => r,
            Err(e) => {
                let phase = Phase::Ring { next, prev };
                return Err(fail(phase.clone(), watch.failed(&phase, e)));
            }
        };
        let t_ring = start.elapsed();

        let stop = Arc::new(AtomicBool::new(false));
        let peers = Arc::new(OnceLock::new());
        let listen_addr = listener.addr();
        let state = Arc::new(Acceptor {
            inbox: Arc::new(Inbox::default()),
            nranks,
            peers: peers.clone(),
            stop: stop.clone(),
            timeout,
            readers: Default::default(),
            strays: Strays::new("Bootstrap"),
        });
        let acceptor = {
            let (state, abort) = (state.clone(), abort.clone());
            std::thread::Builder::new()
                .name(format!("collscope Bootstrap{rank}"))
                .spawn(move || accept_loop(listener, &state, &abort))
                .map_err(|source| BootstrapError::Io { what: "cannot start the bootstrap acceptor", source })?
        };
        let mut boot = TcpBootstrap {
            rank,
            nranks,
            magic: id.magic,
            timeout,
            peers,
            listen_addr,
            ring: Mutex::new(ring),
            acceptor_state: state,
            mesh: Mutex::new(Vec::new()),
            abort,
            stop,
            acceptor: Some(acceptor),
        };
        if let Err(e) = boot.gather_peers(left(deadline)) {
            let phase = Phase::AllGather { next, prev };
            return Err(fail(phase.clone(), watch.failed(&phase, e)));
        }
        match boot.connect_mesh(deadline) {
            Ok(mesh) => *boot.mesh.lock().unwrap_or_else(|p| p.into_inner()) = mesh,
            Err(e) => return Err(fail(Phase::Mesh, watch.failed(&Phase::Mesh, e))),
        }
        watch.done();
        let total = start.elapsed();
        nccl_info!(
            Subsys::BOOTSTRAP | Subsys::PROFILE,
            "Bootstrap timings total {:.6} (create {:.6}, send {:.6}, recv {:.6}, ring {:.6}, delay {:.6})",
            total.as_secs_f64(),
            0.0,
            t_send.as_secs_f64(),
            (t_recv - t_send).as_secs_f64(),
            (t_ring - t_recv).as_secs_f64(),
            0.0
        );
        Ok(boot)
    }

    /// Every rank's peer listener, gathered over the ring within `limit`.
    fn gather_peers(&mut self, limit: Duration) -> Result<(), BootstrapError> {
        let all = self.all_gather_within(&addr_to_bytes(&self.listen_addr), limit)?;
        let peers = all
            .iter()
            .map(|c| {
                let a: [u8; ADDR_BYTES] = c
                    .as_slice()
                    .try_into()
                    .map_err(|_| BootstrapError::Protocol(format!("peer address of {} bytes", c.len())))?;
                addr_from_bytes(&a).map_err(|f| BootstrapError::Protocol(format!("unknown address family {f}")))
            })
            .collect::<Result<_, _>>()?;
        let _ = self.peers.set(peers);
        Ok(())
    }

    /// A connection to every other rank before `deadline`: to each higher rank, from each lower one.
    fn connect_mesh(&self, deadline: Instant) -> Result<Vec<(u32, Socket)>, BootstrapError> {
        let mut mesh = Vec::new();
        for p in self.rank + 1..self.nranks {
            mesh.push((p, self.open(p, MESH_TAG, KIND_STREAM, left(deadline))?));
        }
        for p in 0..self.rank {
            mesh.push((p, self.accept_within(p, MESH_TAG, left(deadline))?));
        }
        Ok(mesh)
    }

    /// The connections to every other rank made while joining (once; later calls get none).
    pub fn take_mesh(&self) -> Vec<(u32, Socket)> {
        std::mem::take(&mut *self.mesh.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// The flag that makes every bootstrap wait give up (raised by the failure watchdog).
    pub fn abort_flag(&self) -> Arc<AtomicBool> {
        self.abort.clone()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Every rank's bootstrap peer listener.
    pub fn peer_addrs(&self) -> &[SocketAddr] {
        self.peers.get().map_or(&[], Vec::as_slice)
    }

    /// How many connections to this rank's peer listener were dropped for not being what the job expects.
    pub fn strays(&self) -> u32 {
        self.acceptor_state.strays.count()
    }

    /// NCCL's `bootstrapAllGather` over the ring: every rank's `mine` (sizes may differ), in rank order.
    pub fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        self.all_gather_within(mine, self.timeout)
    }

    /// [`TcpBootstrap::all_gather`] whose every step ends within `timeout`.
    fn all_gather_within(&self, mine: &[u8], timeout: Duration) -> Result<Vec<Vec<u8>>, BootstrapError> {
        let n = self.nranks as usize;
        let r = self.rank as usize;
        let mut slots: Vec<Vec<u8>> = vec![Vec::new(); n];
        slots[r] = mine.to_vec();
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let Ring { next, prev } = &mut *ring;
        let abort = &*self.abort;
        let (to, from) = ((self.rank + 1) % self.nranks, (self.rank + self.nranks - 1) % self.nranks);
        for i in 0..n.saturating_sub(1) {
            let send_buf = &slots[(r + n - i) % n];
            // Send and receive together so large slices cannot deadlock on full socket buffers.
            let got = std::thread::scope(|s| {
                let sender = s.spawn(|| {
                    next.send_timeout(&(send_buf.len() as u64).to_le_bytes(), timeout, Some(abort))?;
                    next.send_timeout(send_buf, timeout, Some(abort))
                });
                let got = recv_message(prev, MAX_RING_MESSAGE, timeout, abort).map_err(|e| match e {
                    BootstrapError::Socket(source) => BootstrapError::Ring { op: "receive from", peer: from, source },
                    other => other,
                });
                let sent = sender.join().map_err(|_| BootstrapError::Protocol("allgather sender panicked".into()))?;
                sent.map_err(|source| BootstrapError::Ring { op: "send to", peer: to, source })?;
                got
            })?;
            slots[(r + n - i - 1) % n] = got;
        }
        Ok(slots)
    }

    /// A barrier over the ring (an AllGather of nothing).
    pub fn barrier(&self) -> Result<(), BootstrapError> {
        self.all_gather(&[]).map(|_| ())
    }

    /// NCCL's `bootstrapSend`: one connection per message to the peer's listener, whose acceptor reads it
    /// whole, so this returns without waiting for the matching `recv`.
    pub fn send(&self, peer: u32, tag: u64, data: &[u8]) -> Result<(), BootstrapError> {
        if data.len() as u64 > MAX_MESSAGE {
            return Err(BootstrapError::Protocol(format!(
                "a {}-byte bootstrap message to rank {peer} exceeds the {MAX_MESSAGE}-byte limit",
                data.len()
            )));
        }
        let mut s = self.open(peer, tag, KIND_MESSAGE, self.timeout)?;
        let wrap = |source| BootstrapError::Peer { op: "send", peer, tag, source };
        s.send_timeout(&(data.len() as u64).to_le_bytes(), self.timeout, Some(&self.abort)).map_err(wrap)?;
        s.send_timeout(data, self.timeout, Some(&self.abort)).map_err(wrap)?;
        // Wait for the acceptor's word so the message is known to have landed before we return.
        let mut taken = [0u8; 1];
        match s.recv_timeout(&mut taken, self.timeout, Some(&self.abort)) {
            Ok(()) if taken[0] == MESSAGE_TAKEN => Ok(()),
            Err(SocketError::Closed { .. }) => Err(BootstrapError::Protocol(format!(
                "rank {peer} dropped a {}-byte bootstrap message (tag {tag:#x}): its inbox of unclaimed messages is \
                 full ({INBOX_BYTES} bytes, {INBOX_MESSAGES} messages), or it did not take this rank's address as rank {}'s",
                data.len(),
                self.rank
            ))),
            Err(e) => Err(wrap(e)),
            Ok(()) => Err(BootstrapError::Protocol(format!("rank {peer} answered a bootstrap message with {}", taken[0]))),
        }
    }

    /// NCCL's `bootstrapRecv`: the message `peer` sent with `tag`.
    pub fn recv(&self, peer: u32, tag: u64) -> Result<Vec<u8>, BootstrapError> {
        self.recv_within(peer, tag, self.timeout)?.ok_or_else(|| self.timed_out(peer, tag, "receive from"))
    }

    /// `recv` that returns `None` once `timeout` passed without the message.
    pub fn recv_within(&self, peer: u32, tag: u64, timeout: Duration) -> Result<Option<Vec<u8>>, BootstrapError> {
        match self.claim(peer, tag, KIND_MESSAGE, timeout)? {
            None => Ok(None),
            Some(Payload::Message(m)) => Ok(Some(m)),
            Some(Payload::Stream(_)) => {
                Err(BootstrapError::Protocol(format!("rank {peer} sent a stream with tag {tag}")))
            }
        }
    }

    fn timed_out(&self, peer: u32, tag: u64, op: &'static str) -> BootstrapError {
        let addr = addr_string(&self.listen_addr);
        let source = SocketError::Timeout { what: "hear from a peer on", addr, secs: self.timeout.as_secs_f64() };
        BootstrapError::Peer { op, peer, tag, source }
    }

    /// Opens a lasting connection to `peer`, which claims it with `accept(self.rank, tag)`.
    pub fn connect(&self, peer: u32, tag: u64) -> Result<Socket, BootstrapError> {
        self.open(peer, tag, KIND_STREAM, self.timeout)
    }

    /// Claims the lasting connection `peer` opened with `tag`.
    pub fn accept(&self, peer: u32, tag: u64) -> Result<Socket, BootstrapError> {
        self.accept_within(peer, tag, self.timeout)
    }

    fn accept_within(&self, peer: u32, tag: u64, timeout: Duration) -> Result<Socket, BootstrapError> {
        match self.claim(peer, tag, KIND_STREAM, timeout)? {
            None => Err(self.timed_out(peer, tag, "accept from")),
            Some(Payload::Stream(s)) => Ok(s),
            Some(Payload::Message(_)) => {
                Err(BootstrapError::Protocol(format!("rank {peer} sent a message with tag {tag}")))
            }
        }
    }

    fn open(&self, peer: u32, tag: u64, kind: u32, timeout: Duration) -> Result<Socket, BootstrapError> {
        let bad = BootstrapError::BadRank { rank: peer, nranks: self.nranks };
        let addr = *self.peer_addrs().get(peer as usize).ok_or(bad)?;
        let wrap = |source| BootstrapError::Peer { op: "connect to", peer, tag, source };
        let mut s = Socket::connect_listening(addr, self.magic, SocketType::Bootstrap, timeout, Some(&self.abort))
            .map_err(wrap)?;
        let mut hdr = [0u8; HEADER_BYTES];
        hdr[..4].copy_from_slice(&self.rank.to_le_bytes());
        hdr[4..8].copy_from_slice(&kind.to_le_bytes());
        hdr[8..].copy_from_slice(&tag.to_le_bytes());
        s.send_timeout(&hdr, timeout, Some(&self.abort)).map_err(wrap)?;
        Ok(s)
    }

    /// Waits up to `timeout` for what `peer` sent with `tag`; anything else that arrives meanwhile stays queued.
    fn claim(&self, peer: u32, tag: u64, kind: u32, timeout: Duration) -> Result<Option<Payload>, BootstrapError> {
        if peer >= self.nranks {
            return Err(BootstrapError::BadRank { rank: peer, nranks: self.nranks });
        }
        let start = Instant::now();
        let is_kind =
            |p: &Payload| matches!((p, kind), (Payload::Message(_), KIND_MESSAGE) | (Payload::Stream(_), KIND_STREAM));
        let inbox = &self.acceptor_state.inbox;
        let mut queue = inbox.queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(i) = queue.items.iter().position(|u| u.peer == peer && u.tag == tag && is_kind(&u.payload)) {
                return Ok(Some(queue.take(i)));
            }
            if self.abort.load(Ordering::Acquire) {
                let op = if kind == KIND_MESSAGE { "receive from" } else { "accept from" };
                let source = SocketError::Aborted { addr: addr_string(&self.listen_addr) };
                return Err(BootstrapError::Peer { op, peer, tag, source });
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Ok(None);
            }
            queue = inbox.arrived.wait_timeout(queue, left.min(POLL_SLICE)).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

/// A message (length, then bytes) of at most `max` bytes, read as it arrives within `timeout`.
fn recv_message(s: &mut Socket, max: u64, timeout: Duration, abort: &AtomicBool) -> Result<Vec<u8>, BootstrapError> {
    let deadline = Instant::now() + timeout;
    let mut len = [0u8; 8];
    s.recv_timeout(&mut len, timeout, Some(abort))?;
    let len = u64::from_le_bytes(len);
    if len > max {
        return Err(BootstrapError::Protocol(format!("a {len}-byte bootstrap message exceeds {max} bytes")));
    }
    recv_body(s, len as usize, deadline, abort)
}

/// `len` bytes, allocated as they arrive, so a length nobody sends costs nothing.
fn recv_body(s: &mut Socket, len: usize, deadline: Instant, abort: &AtomicBool) -> Result<Vec<u8>, BootstrapError> {
    let mut data = Vec::new();
    while data.len() < len {
        let start = data.len();
        data.resize(start + (len - start).min(READ_CHUNK), 0);
        s.recv_timeout(&mut data[start..], left(deadline), Some(abort))?;
    }
    Ok(data)
}

impl super::Bootstrap for TcpBootstrap {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn nranks(&self) -> u32 {
        self.nranks
    }

    fn all_gather(&self, mine: &[u8]) -> crate::error::Result<Vec<Vec<u8>>> {
        TcpBootstrap::all_gather(self, mine).map_err(into_runtime)
    }

    fn send(&self, peer: u32, tag: u64, data: &[u8]) -> crate::error::Result<()> {
        TcpBootstrap::send(self, peer, tag, data).map_err(into_runtime)
    }

    fn recv(&self, peer: u32, tag: u64) -> crate::error::Result<Vec<u8>> {
        TcpBootstrap::recv(self, peer, tag).map_err(into_runtime)
    }

    fn recv_timeout(&self, peer: u32, tag: u64, timeout: Duration) -> crate::error::Result<Option<Vec<u8>>> {
        self.recv_within(peer, tag, timeout).map_err(into_runtime)
    }

    fn barrier(&self) -> crate::error::Result<()> {
        TcpBootstrap::barrier(self).map_err(into_runtime)
    }
}

fn into_runtime(e: BootstrapError) -> crate::error::RuntimeError {
    match e {
        BootstrapError::Env(e) => crate::error::RuntimeError::Env(e),
        other => crate::error::RuntimeError::BootstrapFailed { source: Box::new(other) },
    }
}

impl Drop for TcpBootstrap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// Accepts peers' connections and hands each to a reader thread of its own (at most `MAX_READERS`).
fn accept_loop(listener: Listener, state: &Arc<Acceptor>, abort: &AtomicBool) {
    while !state.stop.load(Ordering::Acquire) && !abort.load(Ordering::Acquire) {
        // Only this thread adds readers, so a look suffices. A connection waits rather than being lost.
        if state.readers.load(Ordering::Acquire) >= MAX_READERS {
            std::thread::sleep(READER_WAIT);
            continue;
        }
        let s = match listener.accept(POLL_SLICE, Some(&state.stop)) {
            Ok(s) => s,
            Err(SocketError::Timeout { .. } | SocketError::Aborted { .. }) => continue,
            Err(e) => {
                // Out of descriptors, say: the listener stays readable, so do not spin on it.
                nccl_info!(Subsys::BOOTSTRAP, "Bootstrap: dropping a connection: {e}");
                std::thread::sleep(READER_WAIT);
                continue;
            }
        };
        state.readers.fetch_add(1, Ordering::AcqRel);
        let (st, from) = (state.clone(), s.peer());
        let spawned = std::thread::Builder::new().name("collscope BootstrapIn".into()).spawn(move || {
            if let Err(why) = read_one(s, &st) {
                st.strays.drop(&from, &why);
            }
            st.readers.fetch_sub(1, Ordering::AcqRel);
        });
        if spawned.is_err() {
            state.readers.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Reads one connection's header (and message) and queues it, or says why it is not the job's.
fn read_one(mut s: Socket, st: &Acceptor) -> Result<(), String> {
    let mut hdr = [0u8; HEADER_BYTES];
    s.recv_timeout(&mut hdr, HEADER_LIMIT, Some(&st.stop)).map_err(|e| format!("no header: {e}"))?;
    let peer = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let kind = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]);
    let tag = u64::from_le_bytes(hdr[8..].try_into().unwrap_or_default());
    if peer >= st.nranks {
        return Err(format!("it claims to be rank {peer} of a {}-rank job", st.nranks));
    }
    if let Some(announced) = st.peers.get().and_then(|p| p.get(peer as usize)) {
        if announced.ip() != s.peer().ip() {
            return Err(format!("it claims to be rank {peer}, which announced {}", addr_string(announced)));
        }
    }
    let (payload, reply) = match kind {
        KIND_MESSAGE => {
            let mut len = [0u8; 8];
            s.recv_timeout(&mut len, HEADER_LIMIT, Some(&st.stop)).map_err(|e| format!("no length: {e}"))?;
            let len = u64::from_le_bytes(len);
            if len > MAX_MESSAGE {
                return Err(format!("a {len}-byte message from rank {peer} exceeds {MAX_MESSAGE} bytes"));
            }
            let len = len as usize;
            let reserved = st.inbox.queue.lock().unwrap_or_else(|p| p.into_inner()).reserve(len, st.timeout);
            if !reserved {
                return Err(format!(
                    "a {len}-byte message from rank {peer} (tag {tag:#x}) does not fit the inbox of unclaimed \
                     messages ({INBOX_BYTES} bytes, {INBOX_MESSAGES} messages)"
                ));
            }
            match recv_body(&mut s, len, Instant::now() + st.timeout, &st.stop) {
                Ok(m) => (Payload::Message(m), Some(s)),
                Err(e) => {
                    st.inbox.queue.lock().unwrap_or_else(|p| p.into_inner()).release(len);
                    return Err(format!("a message from rank {peer} did not arrive whole: {e}"));
                }
            }
        }
        KIND_STREAM => (Payload::Stream(s), None),
        k => return Err(format!("unknown connection kind {k} from rank {peer}")),
    };
    let mut queue = st.inbox.queue.lock().unwrap_or_else(|p| p.into_inner());
    if matches!(payload, Payload::Stream(_)) {
        if queue.streams >= STREAMS_PER_RANK * st.nranks as usize {
            return Err(format!("{} unclaimed lasting connections are held already", queue.streams));
        }
        queue.streams += 1;
    }
    queue.items.push(Unexpected { peer, tag, payload, arrived: Instant::now() });
    drop(queue);
    st.inbox.arrived.notify_all();
    if let Some(mut s) = reply {
        let _ = s.send_timeout(&[MESSAGE_TAKEN], HEADER_LIMIT, Some(&st.stop));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env {
        Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "20")])
    }

    fn run_ranks<T: Send>(n: u32, f: impl Fn(TcpBootstrap) -> T + Sync) -> Vec<T> {
        let id = UniqueId::create(&env()).unwrap();
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|r| {
                    let f = &f;
                    s.spawn(move || f(TcpBootstrap::init(&id, r, n, &env()).unwrap()))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn ring_allgather_send_recv_and_barrier() {
        for n in [1u32, 2, 3, 5] {
            let out = run_ranks(n, |b| {
                let r = b.rank();
                // Sizes differ per rank; rank 0's slice is big enough to fill socket buffers.
                let mine: Vec<u8> = (0..(1 + r as usize) * 100_000).map(|i| (i as u32 * 7 + r) as u8).collect();
                let all = b.all_gather(&mine).unwrap();
                for (q, slice) in all.iter().enumerate() {
                    assert_eq!(slice.len(), (1 + q) * 100_000);
                    assert_eq!(slice[3], (21 + q) as u8);
                }
                // Everyone sends to everyone with two tags, received in the opposite order.
                for p in 0..n {
                    for tag in [1, 2] {
                        b.send(p, tag, format!("{r}->{p}:{tag}").as_bytes()).unwrap();
                    }
                }
                for p in (0..n).rev() {
                    for tag in [2, 1] {
                        assert_eq!(b.recv(p, tag).unwrap(), format!("{p}->{r}:{tag}").as_bytes());
                    }
                }
                b.barrier().unwrap();
                b.peer_addrs().len()
            });
            assert_eq!(out, vec![n as usize; n as usize]);
        }
    }

    #[test]
    fn the_interface_goes_into_the_model_as_printed() {
        let i = NetIf { name: "eth0".into(), addr: "10.0.0.1:0".parse().unwrap(), netmask: None };
        let m = model_interface(&i, Some(3));
        assert_eq!((m.name.as_str(), m.address.as_str(), m.rank), ("eth0", "10.0.0.1<0>", Some(3)));
    }

    #[test]
    fn stray_rank_with_another_magic_is_refused() {
        let id = UniqueId::create(&env()).unwrap();
        let wrong = UniqueId { magic: id.magic ^ 1, addr: id.addr };
        let e = TcpBootstrap::init(&wrong, 0, 1, &env()).unwrap_err().to_string();
        assert!(e.contains("wrong magic"), "{e}");
        let ok = TcpBootstrap::init(&id, 0, 1, &env()).unwrap();
        assert_eq!(ok.all_gather(b"x").unwrap(), vec![b"x".to_vec()]);
    }

    /// Runs `init` for each (rank, nranks) on its own thread with a `secs` timeout; the errors, in order.
    fn join_all(id: UniqueId, ranks: &[(u32, u32)], secs: &str) -> Vec<String> {
        let e = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", secs)]);
        std::thread::scope(|s| {
            let hs: Vec<_> = ranks
                .iter()
                .map(|&(r, n)| {
                    let e = &e;
                    s.spawn(move || TcpBootstrap::init(&id, r, n, e).map(drop).unwrap_err().to_string())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn a_missing_rank_is_named_to_every_rank_within_the_timeout() {
        let e = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "2")]);
        let started = Instant::now();
        let errs = join_all(UniqueId::create(&e).unwrap(), &[(0, 3), (1, 3)], "2");
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        // Rank 0 knows rank 1's address and waits on its ring; rank 1 waits for the root to pair it.
        assert!(errs[0].contains("rank 0 of 3, while connecting its ring to rank 1 and from rank 2"), "{}", errs[0]);
        assert!(errs[1].contains("rank 1 of 3, while waiting for the root to pair it with rank 2"), "{}", errs[1]);
        for err in &errs {
            assert!(err.contains("rank 2 never checked in") && err.contains("2 of 3 did: 0, 1"), "{err}");
        }
        assert!(matches!(
            TcpBootstrap::init(&UniqueId::create(&e).unwrap(), 2, 2, &e),
            Err(BootstrapError::BadRank { .. })
        ));
        let bad = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "0")]);
        assert!(timeout(&bad).unwrap_err().to_string().contains("COLLSCOPE_TIMEOUT_S"));
    }

    #[test]
    fn ranks_that_disagree_on_the_count_or_share_a_rank_are_told_why() {
        // A check-in may be a stranger's, so disagreements are judged at the deadline, when no count came whole.
        let e = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "2")]);
        let started = Instant::now();
        let errs = join_all(UniqueId::create(&e).unwrap(), &[(0, 2), (1, 3)], "2");
        for err in &errs {
            assert!(err.contains("disagree on the number of ranks"), "{err}");
            assert!(err.contains("rank 0 said 2") && err.contains("rank 1 said 3"), "{err}");
        }
        let errs = join_all(UniqueId::create(&e).unwrap(), &[(1, 3), (1, 3)], "2");
        for err in &errs {
            assert!(err.contains("rank 1 checked in twice"), "{err}");
        }
        assert!(started.elapsed() < Duration::from_secs(9), "each verdict comes within timeout + grace");
    }

    #[test]
    fn no_root_a_rank_that_leaves_and_a_rank_the_launcher_saw_exit_are_named() {
        let e = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "1")]);
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let nowhere = UniqueId { magic: 1, addr: free };
        let err = TcpBootstrap::init(&nowhere, 1, 2, &e).unwrap_err().to_string();
        assert!(
            err.contains("rank 1 of 2, while connecting to the bootstrap root") && err.contains("no root answered"),
            "{err}"
        );

        // "Rank 1" checks in by hand, then its process "dies": the root names it to rank 0 at once.
        let e = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "20")]);
        let id = UniqueId::create(&e).unwrap();
        let started = Instant::now();
        std::thread::scope(|s| {
            let r0 = s.spawn(|| TcpBootstrap::init(&id, 0, 3, &e).map(drop).unwrap_err().to_string());
            let ring = Listener::bind_ip(id.addr.ip(), id.magic, SocketType::Bootstrap).unwrap();
            let mut sock = Socket::connect(id.addr, id.magic, SocketType::Bootstrap, Duration::from_secs(5)).unwrap();
            let info = CheckIn { rank: 1, nranks: 3, ring_addr: ring.addr() };
            sock.send(&info.to_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            drop(sock);
            let err = r0.join().unwrap();
            assert!(err.contains("rank 1 closed its connection to the root"), "{err}");
        });
        assert!(started.elapsed() < Duration::from_secs(10));

        let (id, root) = UniqueId::host(&e, false).unwrap();
        root.rank_exited(1, "exit status: 1");
        let err = TcpBootstrap::init(&id, 0, 2, &e).map(drop).unwrap_err().to_string();
        assert!(err.contains("rank 1 exited before the job was up (exit status: 1"), "{err}");

        // A rank with another job's id is refused, and the root says so when it names the missing rank.
        let e = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "1")]);
        let id = UniqueId::create(&e).unwrap();
        let stray = UniqueId { magic: id.magic ^ 1, addr: id.addr };
        let errs = std::thread::scope(|s| {
            let r0 = s.spawn(|| TcpBootstrap::init(&id, 0, 2, &e).map(drop).unwrap_err().to_string());
            let r1 = TcpBootstrap::init(&stray, 1, 2, &e).map(drop).unwrap_err().to_string();
            [r0.join().unwrap(), r1]
        });
        assert!(errs[0].contains("rank 1 never checked in") && errs[0].contains("another unique id"), "{errs:?}");
        assert!(errs[1].contains("wrong magic"), "{errs:?}");
    }

    #[test]
    fn a_bootstrap_error_keeps_its_causes_as_a_runtime_error() {
        let io = std::io::Error::other("no threads left");
        let e = into_runtime(BootstrapError::Io { what: "cannot start the root thread", source: io });
        let causes: Vec<String> =
            std::iter::successors(std::error::Error::source(&e), |c| c.source()).map(|c| c.to_string()).collect();
        assert_eq!(
            causes,
            ["bootstrap protocol error: cannot start the root thread: no threads left", "no threads left"]
        );
        assert!(e.to_string().starts_with("bootstrap: bootstrap protocol error"), "{e}");
    }

    #[test]
    fn a_local_launchers_root_and_ranks_listen_on_loopback_only() {
        let e = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "10")]);
        let (id, _root) = UniqueId::host(&e, true).unwrap();
        assert!(id.addr.ip().is_loopback(), "{}", id.addr);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..2u32)
                .map(|r| {
                    let e = &e;
                    s.spawn(move || TcpBootstrap::init(&id, r, 2, e).unwrap().peer_addrs().to_vec())
                })
                .collect();
            for h in hs {
                let addrs = h.join().unwrap();
                assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
            }
        });
    }

    /// Runs a job of `n` thread ranks on `id` with a `secs` timeout; each rank's AllGather sum, or its error.
    fn job(id: UniqueId, n: u32, secs: &str) -> Vec<Result<u32, String>> {
        let e = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", secs)]);
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..n)
                .map(|r| {
                    let e = &e;
                    s.spawn(move || {
                        let b = TcpBootstrap::init(&id, r, n, e).map_err(|e| e.to_string())?;
                        let all = b.all_gather(&[r as u8]).map_err(|e| e.to_string())?;
                        Ok(all.iter().map(|x| x[0] as u32).sum())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn a_forged_check_in_is_dropped_and_the_job_completes() {
        let e = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "5")]);
        let id = UniqueId::create(&e).unwrap();
        // A stranger with the magic checks in first as rank 1 of 99, and stays.
        let ring = Listener::bind_ip(id.addr.ip(), id.magic, SocketType::Bootstrap).unwrap();
        let mut forged = Socket::connect(id.addr, id.magic, SocketType::Bootstrap, Duration::from_secs(5)).unwrap();
        forged.send(&CheckIn { rank: 1, nranks: 99, ring_addr: ring.addr() }.to_bytes()).unwrap();
        // Another checks in as rank 5 of 3 and leaves at once.
        let mut out = Socket::connect(id.addr, id.magic, SocketType::Bootstrap, Duration::from_secs(5)).unwrap();
        out.send(&CheckIn { rank: 5, nranks: 3, ring_addr: ring.addr() }.to_bytes()).unwrap();
        drop(out);
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        assert_eq!(job(id, 3, "5"), vec![Ok(3), Ok(3), Ok(3)]);
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        drop(forged);
    }

    #[test]
    fn the_ring_takes_only_its_previous_rank() {
        let l = Listener::bind_ip("127.0.0.1".parse().unwrap(), 3, SocketType::Bootstrap).unwrap();
        let (addr, abort) = (l.addr(), AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_secs(5);
        // Strangers with the magic: one silent, one naming another rank; then the real rank 4.
        let silent =
            std::thread::spawn(move || Socket::connect(addr, 3, SocketType::Bootstrap, Duration::from_secs(5)));
        let other = std::thread::spawn(move || ring_connect(addr, 3, 9, deadline, &AtomicBool::new(false)));
        let real = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            ring_connect(addr, 3, 4, deadline, &AtomicBool::new(false))
        });
        let strays = Strays::new("test ring");
        let s = ring_accept(&l, 4, deadline, &abort, &strays).unwrap();
        let real = real.join().unwrap().unwrap();
        assert_eq!(s.peer(), real.local_addr().unwrap());
        assert_eq!(strays.count(), 2);
        drop((silent.join().unwrap().unwrap(), other.join().unwrap().unwrap()));
    }

    #[test]
    fn idle_connections_to_the_root_do_not_hold_up_the_ranks() {
        let e = Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "5")]);
        let id = UniqueId::create(&e).unwrap();
        let idle: Vec<_> = (0..8).map(|_| std::net::TcpStream::connect(id.addr).unwrap()).collect();
        let started = Instant::now();
        assert_eq!(job(id, 2, "5"), vec![Ok(1), Ok(1)]);
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        drop(idle);
    }

    #[test]
    fn a_secret_keeps_out_ranks_without_it() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let e = Env::from_pairs([("NCCL_COMM_ID", format!("127.0.0.1:{port}")), ("COLLSCOPE_TIMEOUT_S", "2".into())]);
        let with = |secret: &[u8]| comm_id_with(&e, Some(secret));
        let id = with(b"s3cret").unwrap().unwrap();
        assert_ne!(id.magic, crate::socket::NCCL_MAGIC);
        assert_eq!(id.magic, with(b"s3cret").unwrap().unwrap().magic);
        assert_ne!(id.magic, with(b"other").unwrap().unwrap().magic);
        assert!(matches!(with(b""), Err(BootstrapError::Secret)));
        // Rank 0 hosts the root with the secret; a process with NCCL's public magic is refused.
        std::thread::scope(|s| {
            let r0 = s.spawn(|| TcpBootstrap::init(&id, 0, 2, &e).map(drop).unwrap_err().to_string());
            let public = UniqueId { magic: crate::socket::NCCL_MAGIC, ..id };
            let stranger = TcpBootstrap::init(&public, 1, 2, &e).map(drop).unwrap_err().to_string();
            assert!(stranger.contains("wrong magic"), "{stranger}");
            let r0 = r0.join().unwrap();
            assert!(r0.contains("rank 1 never checked in") && r0.contains("another unique id"), "{r0}");
        });
    }

    #[test]
    fn comm_id_starts_the_root_on_rank_zero() {
        // The process's bootstrap interface, as a job without NCCL_COMM_ID chose it (an outside one, if any).
        bootstrap_interface(&Env::default(), None).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let e = Env::from_pairs([("NCCL_COMM_ID", format!("127.0.0.1:{port}")), ("COLLSCOPE_TIMEOUT_S", "20".into())]);
        let id = UniqueId::create(&e).unwrap();
        assert_eq!(id.magic, crate::socket::NCCL_MAGIC);
        let sums: Vec<u32> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u32)
                .map(|r| {
                    let e = &e;
                    s.spawn(move || {
                        let b = TcpBootstrap::init(&id, r, 3, e).unwrap();
                        assert!(b.peer_addrs().iter().all(|a| a.ip().is_loopback()), "{:?}", b.peer_addrs());
                        b.all_gather(&[r as u8]).unwrap().iter().map(|x| x[0] as u32).sum()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(sums, vec![3, 3, 3]);
    }
}
