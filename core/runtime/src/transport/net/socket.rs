//! NET/Socket, the TCP network plugin (NCCL 2.28.9 `src/transport/net_socket.cc`): a connection is one control
//! socket plus `NCCL_SOCKET_NTHREADS` x `NCCL_NSOCKS_PERTHREAD` data sockets. Each message sends its size (and,
//! when small, its bytes: `NCCL_SOCKET_INLINE`) on the control socket; larger payloads are cut into tasks of at
//! least `NCCL_SOCKET_MIN_TASKSIZE` dealt round-robin to the data sockets, each driven by a helper thread. With no
//! data sockets the caller's `test` moves the bytes on the control socket. Requests complete in posting order.
//!
//! Each step thus costs a few small system calls (size, step header, size, payload). Tried and not kept: the size
//! and payload in one `writev`, and small reads through a 256-byte stash. `sendto` calls fell from 1252 to 911 for
//! six 16 MiB AllReduce calls at 4 ranks, but reads that found nothing rose (3789 to 4906), and the calls' time
//! did not move (three paired runs on 2 cores): most system calls are the proxy's reads that find nothing yet,
//! and most of the time is the kernel's copies.

use super::api;
use crate::profiler::net::{NetEvent, NetParent};
use crate::socket::{
    addr_from_bytes, addr_string, addr_to_bytes, find_interfaces, random_u64, IfSpec, Listener, NetIf, Socket,
    SocketError, SocketFamily, SocketType, ADDR_BYTES,
};
use collscope_debug::env::{Env, EnvError};
use collscope_debug::Subsys;
use collscope_debug::{nccl_info, nccl_warn};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// NCCL's `MAX_IFS`, `MAX_SOCKETS` and `MAX_THREADS`.
const MAX_IFS: usize = 16;
const MAX_SOCKETS: usize = 64;
const MAX_THREADS: usize = 16;
/// Size of the message-length field on the control socket (NCCL's `SOCKET_CTRL_SIZE`).
const CTRL_SIZE: usize = 4;

#[derive(Debug, thiserror::Error)]
pub(crate) enum NetError {
    #[error(transparent)]
    Socket(#[from] SocketError),
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("NET/Socket : no interface found{0}")]
    NoInterface(String),
    #[error("NET/Socket : device {dev} does not exist ({ndev} devices)")]
    BadDevice { dev: usize, ndev: usize },
    #[error(
        "NET/Socket : peer {peer} message truncated : receiving {got} bytes instead of {cap}. If you believe your \
         socket network is in a healthy state, there may be a mismatch in collective sizes or environment settings \
         (e.g. NCCL_PROTO, NCCL_ALGO) between ranks"
    )]
    Truncated { peer: String, got: usize, cap: usize },
    #[error("NET/Socket : connection handle is malformed: {0}")]
    BadHandle(String),
    #[error("NET/Socket : socket progress error with {peer}: {msg}")]
    Progress { peer: String, msg: String },
    #[error("NET/Socket : socket progress error with {peer}: {what}: {source}")]
    Thread {
        peer: String,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl From<NetError> for api::NetError {
    fn from(e: NetError) -> Self {
        match e {
            NetError::Env(e) => api::NetError::Env(e),
            e @ NetError::Socket(SocketError::Closed { .. }) => api::NetError::PeerClosed(Box::new(e)),
            e => api::NetError::Failed(Box::new(e)),
        }
    }
}

/// The process's NET/Socket devices and socket layout (`ncclNetSocketInit`, `ncclNetSocketGetNsockNthread`).
#[derive(Debug, Clone)]
pub(crate) struct NetSocket {
    pub devices: Vec<NetIf>,
    pub nthreads: usize,
    pub nsocks_per_thread: usize,
    pub inline_size: usize,
    pub min_task_size: usize,
}

static NET_SOCKET: OnceLock<NetSocket> = OnceLock::new();

impl NetSocket {
    /// Finds the devices once per process and prints `NET/Socket : Using [0]eth0:10.0.0.1<0> ...`.
    pub(crate) fn init(env: &Env) -> Result<&'static NetSocket, NetError> {
        if let Some(n) = NET_SOCKET.get() {
            return Ok(n);
        }
        let n = Self::discover(env)?;
        let n = NET_SOCKET.get_or_init(|| n);
        let line: String =
            n.devices.iter().enumerate().map(|(i, d)| format!(" [{i}]{}:{}", d.name, addr_string(&d.addr))).collect();
        nccl_info!(Subsys::INIT | Subsys::NET, "NET/Socket : Using{line}");
        if n.nthreads * n.nsocks_per_thread > 0 {
            nccl_info!(
                Subsys::INIT,
                "NET/Socket: Using {} threads and {} sockets per thread",
                n.nthreads,
                n.nsocks_per_thread
            );
        }
        Ok(n)
    }

    /// Reads the environment and this host's interfaces without caching or printing.
    pub(crate) fn discover(env: &Env) -> Result<NetSocket, NetError> {
        let spec = env.parsed::<IfSpec>("NCCL_SOCKET_IFNAME")?;
        let family = env.parsed::<SocketFamily>("NCCL_SOCKET_FAMILY")?;
        let comm_id = env.str("NCCL_COMM_ID").and_then(|s| crate::socket::parse_addr(s).ok());
        let devices = find_interfaces(spec.as_ref(), comm_id.as_ref(), family, MAX_IFS);
        if devices.is_empty() {
            nccl_warn!("NET/Socket : no interface found");
            return Err(NetError::NoInterface(match env.str("NCCL_SOCKET_IFNAME") {
                Some(s) => format!(" matching NCCL_SOCKET_IFNAME={s}"),
                None => String::new(),
            }));
        }
        // -2 means "auto": NCCL tunes for AWS and GCP NICs by PCI vendor and otherwise uses no helper threads.
        let mut nthreads = env.int("NCCL_SOCKET_NTHREADS", -2)?;
        let mut per_thread = env.int("NCCL_NSOCKS_PERTHREAD", -2)?;
        let (auto_nt, auto_ns) = vendor_defaults(&devices[0].name);
        if nthreads == -2 {
            nthreads = auto_nt;
        }
        if per_thread == -2 {
            per_thread = auto_ns;
        }
        let bad = |name: &str, v: i64, max: usize| EnvError {
            name: name.into(),
            value: v.to_string(),
            expected: format!("an integer from 0 to {max}"),
        };
        if !(0..=MAX_THREADS as i64).contains(&nthreads) {
            return Err(bad("NCCL_SOCKET_NTHREADS", nthreads, MAX_THREADS).into());
        }
        if !(0..=MAX_SOCKETS as i64).contains(&per_thread) {
            return Err(bad("NCCL_NSOCKS_PERTHREAD", per_thread, MAX_SOCKETS).into());
        }
        let (nthreads, mut per_thread) = (nthreads as usize, per_thread as usize);
        if nthreads * per_thread > MAX_SOCKETS {
            per_thread = MAX_SOCKETS / nthreads;
            nccl_warn!("NET/Socket : the total number of sockets is greater than the maximum allowed, setting NCCL_NSOCKS_PERTHREAD to {per_thread}");
        }
        let inline_size = env.int("NCCL_SOCKET_INLINE", 128)?.max(0) as usize;
        let min_task_size = env.int("NCCL_SOCKET_MIN_TASKSIZE", 1 << 16)?.max(1) as usize;
        Ok(NetSocket { devices, nthreads, nsocks_per_thread: per_thread, inline_size, min_task_size })
    }

    pub(crate) fn nsocks(&self) -> usize {
        self.nthreads * self.nsocks_per_thread
    }

    /// `ncclNetSocketListen`: a listener on device `dev` and the handle the sender needs to reach it. A thread
    /// accepts the sender's sockets as they come, so neither side's connect waits for the other's accept.
    pub(crate) fn listen(
        &self,
        dev: usize,
        timeout: Duration,
        abort: Arc<AtomicBool>,
    ) -> Result<(NetListener, Handle), NetError> {
        let d = self.devices.get(dev).ok_or(NetError::BadDevice { dev, ndev: self.devices.len() })?;
        let magic = random_u64().unwrap_or(0x564a_b9f2_fc4b_9d6c);
        let listener = Listener::bind_ip(d.addr.ip(), magic, SocketType::NetSocket)?;
        let handle = Handle {
            addr: listener.addr(),
            magic,
            nthreads: self.nthreads as u32,
            nsocks_per_thread: self.nsocks_per_thread as u32,
        };
        let nsocks = self.nsocks();
        let acceptor = std::thread::Builder::new()
            .name("collscope NetAccept".into())
            .spawn(move || accept_all(&listener, nsocks, timeout, &abort))
            .map_err(|source| NetError::Thread {
                peer: addr_string(&handle.addr),
                what: "cannot start acceptor",
                source,
            })?;
        Ok((NetListener { acceptor, layout: self.clone(), handle }, handle))
    }

    /// `ncclNetSocketConnect`: opens the data sockets then the control socket, each announcing its index.
    pub(crate) fn connect(
        &self,
        handle: &Handle,
        timeout: Duration,
        abort: Arc<AtomicBool>,
    ) -> Result<NetComm, NetError> {
        let nsocks = (handle.nthreads * handle.nsocks_per_thread) as usize;
        let mut socks = Vec::with_capacity(nsocks + 1);
        for i in 0..=nsocks {
            let mut s = Socket::connect(handle.addr, handle.magic, SocketType::NetSocket, timeout)?;
            s.send_timeout(&[i as u8], timeout, Some(&abort))?;
            socks.push(s);
        }
        let ctrl = socks.pop().ok_or_else(|| NetError::BadHandle("no control socket".into()))?;
        NetComm::new(ctrl, socks, handle, self)
    }
}

/// NCCL reads `/sys/class/net/<dev>/device/vendor`: AWS (0x1d0f) gets 2x8, GCP (0x1ae0) 4x1, others 0x1.
fn vendor_defaults(dev: &str) -> (i64, i64) {
    match std::fs::read_to_string(format!("/sys/class/net/{dev}/device/vendor")).as_deref().map(str::trim) {
        Ok("0x1d0f") => (2, 8),
        Ok("0x1ae0") => (4, 1),
        _ => (0, 1),
    }
}

/// What the receiver publishes so the sender can connect (NCCL's `ncclNetSocketHandle`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handle {
    pub addr: SocketAddr,
    pub magic: u64,
    pub nthreads: u32,
    pub nsocks_per_thread: u32,
}

pub(crate) const HANDLE_BYTES: usize = ADDR_BYTES + 16;

impl Handle {
    pub(crate) fn to_bytes(self) -> [u8; HANDLE_BYTES] {
        let mut b = [0u8; HANDLE_BYTES];
        b[..ADDR_BYTES].copy_from_slice(&addr_to_bytes(&self.addr));
        b[ADDR_BYTES..ADDR_BYTES + 8].copy_from_slice(&self.magic.to_le_bytes());
        b[ADDR_BYTES + 8..ADDR_BYTES + 12].copy_from_slice(&self.nthreads.to_le_bytes());
        b[ADDR_BYTES + 12..].copy_from_slice(&self.nsocks_per_thread.to_le_bytes());
        b
    }

    pub(crate) fn from_bytes(b: &[u8]) -> Result<Handle, NetError> {
        if b.len() != HANDLE_BYTES {
            return Err(NetError::BadHandle(format!("{} bytes, expected {HANDLE_BYTES}", b.len())));
        }
        let mut a = [0u8; ADDR_BYTES];
        a.copy_from_slice(&b[..ADDR_BYTES]);
        let addr = addr_from_bytes(&a).map_err(|f| NetError::BadHandle(format!("address family {f}")))?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let magic = u64::from_le_bytes(b[ADDR_BYTES..ADDR_BYTES + 8].try_into().unwrap_or_default());
        let (nthreads, nsocks_per_thread) = (u32_at(ADDR_BYTES + 8), u32_at(ADDR_BYTES + 12));
        if nthreads as usize > MAX_THREADS || (nthreads * nsocks_per_thread) as usize > MAX_SOCKETS {
            return Err(NetError::BadHandle(format!("{nthreads} threads x {nsocks_per_thread} sockets")));
        }
        Ok(Handle { addr, magic, nthreads, nsocks_per_thread })
    }
}

/// The receiving side's listener (`ncclNetSocketListenComm`), accepting on its own thread.
#[derive(Debug)]
pub(crate) struct NetListener {
    acceptor: std::thread::JoinHandle<Result<Vec<Socket>, NetError>>,
    layout: NetSocket,
    handle: Handle,
}

impl NetListener {
    /// `ncclNetSocketAccept`: the connection once all of the sender's sockets arrived.
    pub(crate) fn accept(self) -> Result<NetComm, NetError> {
        let peer = addr_string(&self.handle.addr);
        let mut socks =
            self.acceptor.join().map_err(|_| NetError::Progress { peer, msg: "acceptor thread panicked".into() })??;
        let ctrl = socks.pop().ok_or_else(|| NetError::BadHandle("no control socket".into()))?;
        NetComm::new(ctrl, socks, &self.handle, &self.layout)
    }
}

/// Takes the sender's data sockets and control socket in whatever order they arrive, placed by their index.
fn accept_all(
    listener: &Listener,
    nsocks: usize,
    timeout: Duration,
    abort: &AtomicBool,
) -> Result<Vec<Socket>, NetError> {
    let mut slots: Vec<Option<Socket>> = (0..=nsocks).map(|_| None).collect();
    for _ in 0..=nsocks {
        let mut s = listener.accept(timeout, Some(abort))?;
        let mut idx = [0u8; 1];
        s.recv_timeout(&mut idx, timeout, Some(abort))?;
        let i = idx[0] as usize;
        match slots.get_mut(i) {
            Some(slot @ None) => *slot = Some(s),
            _ => return Err(NetError::BadHandle(format!("peer sent socket index {i} twice or out of range"))),
        }
    }
    Ok(slots.into_iter().flatten().collect())
}

/// A raw view of a buffer the caller keeps alive until the request completes.
#[derive(Clone, Copy)]
struct RawBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the proxy that posts a request keeps its buffer alive and untouched until `test` reports completion,
// and only one task touches any byte range at a time.
unsafe impl Send for RawBuf {}

const TASK_PENDING: u8 = 0;
const TASK_DONE: u8 = 1;
const TASK_FAILED: u8 = 2;

struct Task {
    sock: usize,
    send: bool,
    buf: RawBuf,
    state: Arc<AtomicU8>,
    /// Where its transfer reports as a profiler NetPlugin event.
    parent: Option<NetParent>,
}

/// One helper thread and its share of the data sockets (`persistentSocketThread`).
struct Helper {
    queue: Option<mpsc::Sender<Task>>,
    thread: Option<std::thread::JoinHandle<()>>,
    error: Arc<Mutex<Option<String>>>,
}

/// An established NET/Socket connection, send or receive side (`ncclNetSocketComm`).
pub(crate) struct NetComm {
    ctrl: Socket,
    peer: SocketAddr,
    helpers: Vec<Helper>,
    nsocks: usize,
    per_thread: usize,
    next_sock: usize,
    inline_size: usize,
    min_task_size: usize,
    /// Raised when the comm is dropped, so helper threads stop waiting on their sockets.
    closing: Arc<AtomicBool>,
    /// The proxy's bell, which helper threads ring after each task.
    bell: Arc<OnceLock<Arc<api::Doorbell>>>,
}

impl std::fmt::Debug for NetComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NetComm(peer {}, {} data sockets)", addr_string(&self.peer), self.nsocks)
    }
}

/// One isend/irecv (`ncclNetSocketRequest`), advanced by `NetComm::test`.
pub(crate) struct Request {
    send: bool,
    buf: RawBuf,
    /// Bytes of the size header (+ inline data) exchanged so far.
    ctrl_off: usize,
    ctrl: [u8; CTRL_SIZE],
    /// The message size, known to the receiver once the header arrived.
    size: Option<usize>,
    /// Payload bytes moved on the control socket.
    offset: usize,
    tasks: Vec<Arc<AtomicU8>>,
    /// Where its transfers report as profiler NetPlugin events, and the one open while the control socket
    /// carries its payload (helper threads report their tasks' own).
    parent: Option<NetParent>,
    event: Option<NetEvent>,
}

impl Request {
    /// Whether bytes of this request have started to move (its size header, at least).
    pub(crate) fn started(&self) -> bool {
        self.ctrl_off > 0
    }
}

impl NetComm {
    fn new(ctrl: Socket, data: Vec<Socket>, handle: &Handle, layout: &NetSocket) -> Result<NetComm, NetError> {
        let closing = Arc::new(AtomicBool::new(false));
        let bell: Arc<OnceLock<Arc<api::Doorbell>>> = Arc::new(OnceLock::new());
        let peer = ctrl.peer();
        ctrl.stream().set_nonblocking(true).map_err(|e| SocketError::Io {
            what: "configure",
            addr: addr_string(&peer),
            source: e,
        })?;
        let per_thread = handle.nsocks_per_thread as usize;
        let mut helpers = Vec::new();
        let mut data = data.into_iter();
        for t in 0..handle.nthreads as usize {
            let socks: Vec<Socket> = data.by_ref().take(per_thread).collect();
            if socks.is_empty() {
                break;
            }
            let (tx, rx) = mpsc::channel::<Task>();
            let error = Arc::new(Mutex::new(None));
            let (err, ab, b) = (error.clone(), closing.clone(), bell.clone());
            let thread = std::thread::Builder::new()
                .name(format!("collscope Sock{t}"))
                .spawn(move || helper_loop(socks, rx, &err, &ab, &b))
                .map_err(|source| NetError::Thread { peer: addr_string(&peer), what: "cannot start helper", source })?;
            helpers.push(Helper { queue: Some(tx), thread: Some(thread), error });
        }
        Ok(NetComm {
            ctrl,
            peer,
            nsocks: helpers.len() * per_thread,
            helpers,
            per_thread,
            next_sock: 0,
            inline_size: layout.inline_size,
            min_task_size: layout.min_task_size,
            closing,
            bell,
        })
    }

    /// `ncclNetSocketIsend`. The caller keeps `data` alive and unchanged until `test` returns `Some`.
    pub(crate) fn isend(&mut self, data: *const u8, size: usize) -> Request {
        let mut ctrl = [0u8; CTRL_SIZE];
        ctrl.copy_from_slice(&(size as u32).to_le_bytes());
        Request {
            send: true,
            buf: RawBuf { ptr: data as *mut u8, len: size },
            ctrl_off: 0,
            ctrl,
            size: Some(size),
            offset: 0,
            tasks: Vec::new(),
            parent: None,
            event: None,
        }
    }

    /// `ncclNetSocketIrecv` into at most `cap` bytes. The caller keeps `data` alive until `test` returns `Some`.
    pub(crate) fn irecv(&mut self, data: *mut u8, cap: usize) -> Request {
        Request {
            send: false,
            buf: RawBuf { ptr: data, len: cap },
            ctrl_off: 0,
            ctrl: [0; CTRL_SIZE],
            size: None,
            offset: 0,
            tasks: Vec::new(),
            parent: None,
            event: None,
        }
    }

    /// `ncclNetSocketTest`: advances `req` without blocking; `Some(size)` once it is complete. Requests of one
    /// comm must be tested oldest first, as NCCL's proxy does.
    pub(crate) fn test(&mut self, req: &mut Request) -> Result<Option<usize>, NetError> {
        if req.ctrl_off < CTRL_SIZE {
            let mut ctrl = req.ctrl;
            let moved = self.progress(req.send, &mut ctrl, &mut req.ctrl_off)?;
            req.ctrl = ctrl;
            if !moved {
                return Ok(None);
            }
            if !req.send {
                let got = u32::from_le_bytes(req.ctrl) as usize;
                if got > req.buf.len {
                    return Err(NetError::Truncated { peer: addr_string(&self.peer), got, cap: req.buf.len });
                }
                req.size = Some(got);
            }
        }
        let size = req.size.unwrap_or(0);
        // Small messages travel inline on the control socket; large ones are dealt out to the data sockets.
        if req.tasks.is_empty() && (self.nsocks == 0 || size <= self.inline_size) {
            // NCCL's socket plugin reports the payload's transfer on the control socket (2.28.9
            // `ncclNetSocketTest`): started once the size is known, stopped when the payload is through.
            if let (None, Some(p)) = (&req.event, &req.parent) {
                use std::os::fd::AsRawFd;
                req.event = Some(p.socket(self.ctrl.stream().as_raw_fd(), req.send, size));
            }
            if req.offset < size {
                // SAFETY: see `RawBuf`; `size` fits in the buffer (checked above for receives).
                let buf = unsafe { std::slice::from_raw_parts_mut(req.buf.ptr, size) };
                if !self.progress(req.send, buf, &mut req.offset)? {
                    return Ok(None);
                }
            }
            req.event = None;
            return Ok(Some(size));
        }
        if req.tasks.is_empty() {
            let task = self.min_task_size.max(size.div_ceil(self.nsocks));
            let mut off = 0;
            while off < size {
                let len = task.min(size - off);
                // SAFETY: `off + len <= size`, inside the caller's buffer.
                let ptr = unsafe { req.buf.ptr.add(off) };
                req.tasks.push(self.post_task(req.send, RawBuf { ptr, len }, req.parent.clone())?);
                off += len;
            }
        }
        let mut done = 0;
        for t in &req.tasks {
            match t.load(Ordering::Acquire) {
                TASK_DONE => done += 1,
                TASK_FAILED => return Err(self.helper_error()),
                _ => {}
            }
        }
        Ok((done == req.tasks.len()).then_some(size))
    }

    fn post_task(&mut self, send: bool, buf: RawBuf, parent: Option<NetParent>) -> Result<Arc<AtomicU8>, NetError> {
        let sock = self.next_sock;
        self.next_sock = (self.next_sock + 1) % self.nsocks;
        let state = Arc::new(AtomicU8::new(TASK_PENDING));
        let helper = &self.helpers[sock / self.per_thread];
        let task = Task { sock: sock % self.per_thread, send, buf, state: state.clone(), parent };
        helper.queue.as_ref().and_then(|q| q.send(task).ok()).ok_or_else(|| self.helper_error())?;
        Ok(state)
    }

    fn helper_error(&self) -> NetError {
        let msg = self
            .helpers
            .iter()
            .find_map(|h| h.error.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .unwrap_or_else(|| "helper thread stopped".into());
        NetError::Progress { peer: addr_string(&self.peer), msg }
    }

    /// Moves what the kernel accepts right now; true once `buf` is complete.
    fn progress(&mut self, send: bool, buf: &mut [u8], off: &mut usize) -> Result<bool, NetError> {
        let mut stream = self.ctrl.stream();
        while *off < buf.len() {
            let r = if send { stream.write(&buf[*off..]) } else { stream.read(&mut buf[*off..]) };
            match r {
                Ok(0) => return Err(SocketError::Closed { addr: addr_string(&self.peer) }.into()),
                Ok(n) => *off += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(closed_or_io(e, &self.peer).into()),
            }
        }
        Ok(true)
    }
}

fn closed_or_io(e: io::Error, peer: &SocketAddr) -> SocketError {
    match e.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof => {
            SocketError::Closed { addr: addr_string(peer) }
        }
        _ => SocketError::Io { what: "transfer with", addr: addr_string(peer), source: e },
    }
}

impl Drop for NetComm {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Release);
        for h in &mut self.helpers {
            h.queue = None;
        }
        self.ctrl.shutdown();
        for h in &mut self.helpers {
            if let Some(t) = h.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// Runs tasks in posting order; each blocks on its socket until done, the peer fails, or the comm closes. Every
/// outcome rings the proxy's bell, if it gave one.
fn helper_loop(
    mut socks: Vec<Socket>,
    rx: mpsc::Receiver<Task>,
    error: &Mutex<Option<String>>,
    abort: &AtomicBool,
    bell: &OnceLock<Arc<api::Doorbell>>,
) {
    let ring = || {
        if let Some(b) = bell.get() {
            b.ring();
        }
    };
    const FOREVER: Duration = Duration::from_secs(u64::MAX / 4);
    while let Ok(task) = rx.recv() {
        let Some(s) = socks.get_mut(task.sock) else { break };
        // NCCL's helper threads report each task's transfer on its socket (2.28.9 `persistentSocketThread`).
        let event = task.parent.as_ref().map(|p| {
            use std::os::fd::AsRawFd;
            p.socket(s.stream().as_raw_fd(), task.send, task.buf.len)
        });
        // SAFETY: see `RawBuf`.
        let buf = unsafe { std::slice::from_raw_parts_mut(task.buf.ptr, task.buf.len) };
        let r = if task.send {
            s.send_timeout(buf, FOREVER, Some(abort))
        } else {
            s.recv_timeout(buf, FOREVER, Some(abort))
        };
        drop(event);
        match r {
            Ok(()) => {
                task.state.store(TASK_DONE, Ordering::Release);
                ring();
            }
            Err(e) => {
                *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
                task.state.store(TASK_FAILED, Ordering::Release);
                // Fail everything queued behind it as well.
                for t in rx.try_iter() {
                    t.state.store(TASK_FAILED, Ordering::Release);
                }
                ring();
                return;
            }
        }
    }
}

/// NET/Socket behind the network interface the proxy drives: thin calls into the methods above.
impl api::Net for NetSocket {
    type Listener = NetListener;
    type Comm = NetComm;

    fn name(&self) -> &'static str {
        "Socket"
    }

    fn listen(&self, dev: usize, ctl: &api::SetupCtl) -> Result<(NetListener, Vec<u8>), api::NetError> {
        let (l, h) = NetSocket::listen(self, dev, ctl.timeout, ctl.abort.clone())?;
        Ok((l, h.to_bytes().to_vec()))
    }

    fn connect(&self, _dev: usize, handle: &[u8], ctl: &api::SetupCtl) -> Result<NetComm, api::NetError> {
        let handle = Handle::from_bytes(handle)?;
        Ok(NetSocket::connect(self, &handle, ctl.timeout, ctl.abort.clone())?)
    }
}

impl api::Listen for NetListener {
    type Comm = NetComm;

    fn accept(self) -> Result<NetComm, api::NetError> {
        Ok(NetListener::accept(self)?)
    }
}

/// Sockets need no registration: the memory handle is empty.
impl api::Comm for NetComm {
    type Request = Request;
    type Mr = ();

    fn peer(&self) -> String {
        addr_string(&self.peer)
    }

    fn reg_mr(&mut self, _data: *mut u8, _size: usize) -> Result<(), api::NetError> {
        Ok(())
    }

    fn dereg_mr(&mut self, _mr: ()) -> Result<(), api::NetError> {
        Ok(())
    }

    fn isend(&mut self, data: *const u8, size: usize, _tag: u32, _mr: &()) -> Result<Option<Request>, api::NetError> {
        Ok(Some(NetComm::isend(self, data, size)))
    }

    fn irecv(&mut self, data: *mut u8, size: usize, _tag: u32, _mr: &()) -> Result<Option<Request>, api::NetError> {
        Ok(Some(NetComm::irecv(self, data, size)))
    }

    fn test(&mut self, req: &mut Request) -> Result<Option<usize>, api::NetError> {
        Ok(NetComm::test(self, req)?)
    }

    fn in_progress(&self, req: &Request) -> bool {
        req.started()
    }

    fn profile(&mut self, req: &mut Request, parent: NetParent) {
        req.parent = Some(parent);
    }

    /// The control socket carries the size header and inline or helper-less payloads; helper threads ring the
    /// bell when they finish a task.
    fn wake(&self, req: &Request) -> api::Wake {
        use std::os::fd::AsRawFd;
        if req.tasks.is_empty() {
            api::Wake::Fd(api::FdWait { fd: self.ctrl.stream().as_raw_fd(), writable: req.send })
        } else if self.bell.get().is_some() {
            api::Wake::Bell
        } else {
            api::Wake::Poll
        }
    }

    fn set_bell(&mut self, bell: Arc<api::Doorbell>) {
        let _ = self.bell.set(bell);
    }

    fn any_memory(&self) -> bool {
        true
    }
}

/// NET/Socket's row in [`super::NETWORKS`]: always built, and it finds a device on any host with an interface.
pub(crate) const NETWORK: super::Network = super::Network {
    name: "Socket",
    unbuilt: None,
    found: |_| Ok(true),
    missing: "no interface found",
    open: |env, rank, timeout| {
        let net = NetSocket::init(env).map_err(|e| super::net_err(e.into()))?;
        super::open(net, rank, timeout)
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(env: &Env) -> (NetComm, NetComm) {
        let net = NetSocket::discover(env).unwrap();
        let abort = Arc::new(AtomicBool::new(false));
        let (l, h) = net.listen(0, Duration::from_secs(10), abort.clone()).unwrap();
        let h = Handle::from_bytes(&h.to_bytes()).unwrap();
        let send = net.connect(&h, Duration::from_secs(10), abort).unwrap();
        (send, l.accept().unwrap())
    }

    fn transfer(send: &mut NetComm, recv: &mut NetComm, sizes: &[usize]) {
        let msgs: Vec<Vec<u8>> = sizes.iter().map(|&n| (0..n).map(|i| (i * 31 + n) as u8).collect()).collect();
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n + 10]).collect();
        let mut sreqs: Vec<Request> = msgs.iter().map(|m| send.isend(m.as_ptr(), m.len())).collect();
        let mut rreqs: Vec<Request> = bufs.iter_mut().map(|b| recv.irecv(b.as_mut_ptr(), b.len())).collect();
        let (mut si, mut ri) = (0, 0);
        let start = std::time::Instant::now();
        while si < sreqs.len() || ri < rreqs.len() {
            if si < sreqs.len() && send.test(&mut sreqs[si]).unwrap().is_some() {
                si += 1;
            }
            if ri < rreqs.len() {
                if let Some(n) = recv.test(&mut rreqs[ri]).unwrap() {
                    assert_eq!(n, sizes[ri]);
                    ri += 1;
                }
            }
            assert!(start.elapsed() < Duration::from_secs(30), "transfer stalled");
        }
        for (m, b) in msgs.iter().zip(&bufs) {
            assert_eq!(&b[..m.len()], &m[..]);
        }
    }

    #[test]
    fn messages_arrive_whole_with_and_without_helper_threads() {
        let sizes = [0, 1, 100, 128, 129, 70_000, 1 << 20, 3 << 20 | 5];
        let (mut s, mut r) = pair(&Env::default());
        transfer(&mut s, &mut r, &sizes);
        let env = Env::from_pairs([("NCCL_SOCKET_NTHREADS", "2"), ("NCCL_NSOCKS_PERTHREAD", "2")]);
        let (mut s, mut r) = pair(&env);
        assert_eq!(s.nsocks, 4);
        transfer(&mut s, &mut r, &sizes);
    }

    #[test]
    fn helper_threads_ring_the_proxy_bell_when_a_transfer_finishes() {
        use api::Comm as _;
        let env = Env::from_pairs([("NCCL_SOCKET_NTHREADS", "1"), ("NCCL_NSOCKS_PERTHREAD", "1")]);
        let (mut s, mut r) = pair(&env);
        let bell = Arc::new(api::Doorbell::new().unwrap());
        r.set_bell(bell.clone());
        let data = vec![5u8; 1 << 20];
        let mut buf = vec![0u8; 1 << 20];
        let mut rreq = r.irecv(buf.as_mut_ptr(), buf.len());
        let mut sreq = s.isend(data.as_ptr(), data.len());
        // The size header crosses; the payload then belongs to the helpers, and the receive waits on the bell.
        let start = std::time::Instant::now();
        while rreq.tasks.is_empty() {
            let _ = s.test(&mut sreq).unwrap();
            assert!(r.test(&mut rreq).unwrap().is_none() || !rreq.tasks.is_empty());
            assert!(start.elapsed() < Duration::from_secs(30), "the size header never arrived");
        }
        assert_eq!(r.wake(&rreq), api::Wake::Bell);
        assert_eq!(s.wake(&sreq), api::Wake::Poll, "no bell given to the sender");
        while s.test(&mut sreq).unwrap().is_none() {
            assert!(start.elapsed() < Duration::from_secs(30), "the send never finished");
        }
        bell.arm();
        if r.test(&mut rreq).unwrap().is_none() {
            let t = std::time::Instant::now();
            bell.sleep(&[], Duration::from_secs(20));
            assert!(t.elapsed() < Duration::from_secs(10), "the helper did not ring");
        } else {
            bell.disarm();
        }
        while r.test(&mut rreq).unwrap().is_none() {
            assert!(start.elapsed() < Duration::from_secs(30), "the receive never finished");
        }
        assert!(buf.iter().all(|&b| b == 5));
    }

    #[test]
    fn truncation_and_peer_loss_are_errors() {
        let (mut s, mut r) = pair(&Env::default());
        let data = [7u8; 64];
        let mut sreq = s.isend(data.as_ptr(), data.len());
        let mut small = [0u8; 16];
        let mut rreq = r.irecv(small.as_mut_ptr(), small.len());
        while s.test(&mut sreq).unwrap().is_none() {}
        let e = loop {
            match r.test(&mut rreq) {
                Ok(None) => continue,
                Ok(Some(_)) => panic!("truncated receive completed"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(e.contains("receiving 64 bytes instead of 16"), "{e}");
        let (s, mut r) = pair(&Env::default());
        drop(s);
        let mut buf = [0u8; 8];
        let mut rreq = r.irecv(buf.as_mut_ptr(), 8);
        let e = loop {
            match r.test(&mut rreq) {
                Ok(None) => continue,
                Ok(Some(_)) => panic!("received from a closed peer"),
                Err(e) => break e.to_string(),
            }
        };
        assert!(e.contains("closed by remote peer"), "{e}");
    }

    #[test]
    fn bad_settings_are_named() {
        let env = Env::from_pairs([("NCCL_SOCKET_NTHREADS", "99")]);
        let e = NetSocket::discover(&env).unwrap_err().to_string();
        assert!(e.contains("NCCL_SOCKET_NTHREADS='99'"), "{e}");
        let env = Env::from_pairs([("NCCL_SOCKET_IFNAME", "=nosuchif0")]);
        let e = NetSocket::discover(&env).unwrap_err().to_string();
        assert!(e.contains("no interface found matching NCCL_SOCKET_IFNAME==nosuchif0"), "{e}");
        assert!(Handle::from_bytes(&[0u8; 3]).is_err());
    }
}
