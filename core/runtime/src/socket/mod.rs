//! TCP sockets with NCCL's connection handshake (NCCL 2.28.9 `src/misc/socket.cc`): the connecting side sends
//! a 64-bit magic and the socket type; the accepting side checks both. Unlike NCCL, which silently drops a peer
//! with the wrong magic, the acceptor answers with one status byte so the stray peer gets an error naming the
//! cause. Every connect, accept and receive has a deadline.

mod iface;

pub use iface::{find_interfaces, list_interfaces, select_interfaces, IfSpec, NetIf, SocketFamily};

use collscope_debug::Subsys;
use collscope_debug::{nccl_info, nccl_warn};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// NCCL's `NCCL_MAGIC` ("Nickel atomic number is 28"), used when the id comes from `NCCL_COMM_ID`.
pub const NCCL_MAGIC: u64 = 0x0280_0280_0280_0280;

/// What a socket is for (NCCL's `ncclSocketType`); both ends must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum SocketType {
    Bootstrap = 1,
    Proxy = 2,
    NetSocket = 3,
    NetIb = 4,
}

impl SocketType {
    fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(SocketType::Bootstrap),
            2 => Some(SocketType::Proxy),
            3 => Some(SocketType::NetSocket),
            4 => Some(SocketType::NetIb),
            _ => None,
        }
    }
}

const ACK_OK: u8 = 1;
const ACK_WRONG_MAGIC: u8 = 2;
const ACK_WRONG_TYPE: u8 = 3;

/// How long an accepted connection may take to send its magic before it is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Granularity of waits that also watch an abort flag.
pub const POLL_SLICE: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("connect to {addr} failed after {secs:.1} s: {last}")]
    ConnectTimeout { addr: String, secs: f64, last: String },
    #[error("peer {addr} refused the connection: wrong magic (the unique id belongs to another job or is stale)")]
    WrongMagic { addr: String },
    #[error("peer {addr} refused the connection: socket type mismatch (expected {expected:?})")]
    WrongType { addr: String, expected: SocketType },
    #[error("connection closed by remote peer {addr}")]
    Closed { addr: String },
    #[error("timed out after {secs:.1} s waiting to {what} {addr}")]
    Timeout { what: &'static str, addr: String, secs: f64 },
    #[error("{what} {addr} failed: {source}")]
    Io {
        what: &'static str,
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("'{input}' is not a valid address: expected <ipv4>:<port>, [<ipv6>]:<port> or <hostname>:<port>")]
    BadAddress { input: String },
    #[error("the host '{host}' of '{input}' could not be resolved: {source}")]
    Unresolved {
        host: String,
        input: String,
        #[source]
        source: io::Error,
    },
    #[error("{addr} refused the connection: nothing listens there any more (its process exited)")]
    Refused { addr: String },
    #[error("operation on {addr} aborted")]
    Aborted { addr: String },
}

/// NCCL's `ncclSocketToString`: `address<port>`.
pub fn addr_string(addr: &SocketAddr) -> String {
    format!("{}<{}>", addr.ip(), addr.port())
}

/// NCCL's `ncclSocketGetAddrFromString`: `<ipv4>:<port>`, `[<ipv6>]:<port>` or `<hostname>:<port>`.
pub fn parse_addr(s: &str) -> Result<SocketAddr, SocketError> {
    let bad = || SocketError::BadAddress { input: s.to_string() };
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    // A host name: resolve it, preferring IPv4 as getaddrinfo's default order usually does.
    let unresolved = |source| SocketError::Unresolved { host: host.to_string(), input: s.to_string(), source };
    let addrs: Vec<SocketAddr> = s.to_socket_addrs().map_err(unresolved)?.collect();
    let none = || unresolved(io::Error::new(io::ErrorKind::NotFound, "no address found"));
    addrs.iter().find(|a| a.is_ipv4()).or(addrs.first()).copied().ok_or_else(none)
}

/// Bytes an address takes on the wire: family (2 or 10, LE), port (BE), 16 address bytes, IPv6 scope id (LE).
pub const ADDR_BYTES: usize = 24;

pub fn addr_to_bytes(addr: &SocketAddr) -> [u8; ADDR_BYTES] {
    let mut b = [0u8; ADDR_BYTES];
    b[2..4].copy_from_slice(&addr.port().to_be_bytes());
    match addr {
        SocketAddr::V4(a) => {
            b[..2].copy_from_slice(&2u16.to_le_bytes());
            b[4..8].copy_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            b[..2].copy_from_slice(&10u16.to_le_bytes());
            b[4..20].copy_from_slice(&a.ip().octets());
            b[20..24].copy_from_slice(&a.scope_id().to_le_bytes());
        }
    }
    b
}

/// The address in `b`, or the unknown family it names.
pub fn addr_from_bytes(b: &[u8; ADDR_BYTES]) -> Result<SocketAddr, u16> {
    let family = u16::from_le_bytes([b[0], b[1]]);
    let port = u16::from_be_bytes([b[2], b[3]]);
    match family {
        2 => Ok(SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::new(b[4], b[5], b[6], b[7])), port)),
        10 => {
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[4..20]);
            let scope = u32::from_le_bytes([b[20], b[21], b[22], b[23]]);
            Ok(SocketAddr::V6(std::net::SocketAddrV6::new(std::net::Ipv6Addr::from(o), port, 0, scope)))
        }
        _ => Err(family),
    }
}

/// A value no other call returns, in this process or another, without I/O: std's `RandomState` keys are seeded
/// from the OS per process, and a counter and the time keep calls apart (communicator nonces, segment names).
pub fn nonce_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.finish()
}

/// Fills 8 bytes from the kernel's random source (NCCL's `getRandomData`).
pub fn random_u64() -> io::Result<u64> {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// A connected, handshaken TCP socket.
#[derive(Debug)]
pub struct Socket {
    stream: TcpStream,
    peer: SocketAddr,
}

impl Socket {
    /// Connects to `addr`, retrying refused or unreachable attempts until `timeout` (NCCL retries
    /// `NCCL_SOCKET_RETRY_CNT` times), then performs the magic/type handshake.
    pub fn connect(addr: SocketAddr, magic: u64, ty: SocketType, timeout: Duration) -> Result<Socket, SocketError> {
        Self::connect_inner(addr, magic, ty, timeout, None)
    }

    /// [`Socket::connect`] to a peer known to listen already (its address came from the peer after it bound
    /// it): a refused connection means its process is gone, so it fails at once instead of retrying; waiting
    /// for the peer to accept also ends when `abort` is raised.
    pub fn connect_listening(
        addr: SocketAddr,
        magic: u64,
        ty: SocketType,
        timeout: Duration,
        abort: Option<&AtomicBool>,
    ) -> Result<Socket, SocketError> {
        Self::connect_inner(addr, magic, ty, timeout, Some(abort))
    }

    /// `listening`: `Some(abort)` when the peer listens already (see [`Socket::connect_listening`]).
    fn connect_inner(
        addr: SocketAddr,
        magic: u64,
        ty: SocketType,
        timeout: Duration,
        listening: Option<Option<&AtomicBool>>,
    ) -> Result<Socket, SocketError> {
        let start = Instant::now();
        let mut sleep = Duration::from_millis(10);
        let stream = loop {
            let left = timeout.saturating_sub(start.elapsed()).max(Duration::from_millis(1));
            match TcpStream::connect_timeout(&addr, left) {
                Ok(s) => break s,
                Err(e) if listening.is_some() && e.kind() == io::ErrorKind::ConnectionRefused => {
                    return Err(SocketError::Refused { addr: addr_string(&addr) })
                }
                Err(e) if start.elapsed() + sleep < timeout && retryable(&e) => {
                    std::thread::sleep(sleep);
                    sleep = (sleep * 2).min(Duration::from_millis(200));
                }
                Err(e) => {
                    return Err(SocketError::ConnectTimeout {
                        addr: addr_string(&addr),
                        secs: start.elapsed().as_secs_f64(),
                        last: e.to_string(),
                    })
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let mut s = Socket { stream, peer: addr };
        let mut hello = [0u8; 12];
        hello[..8].copy_from_slice(&magic.to_le_bytes());
        hello[8..].copy_from_slice(&(ty as u32).to_le_bytes());
        s.send(&hello)?;
        let mut ack = [0u8; 1];
        s.recv_timeout(&mut ack, timeout.saturating_sub(start.elapsed()).max(HANDSHAKE_TIMEOUT), listening.flatten())?;
        match ack[0] {
            ACK_OK => Ok(s),
            ACK_WRONG_MAGIC => Err(SocketError::WrongMagic { addr: addr_string(&addr) }),
            _ => Err(SocketError::WrongType { addr: addr_string(&addr), expected: ty }),
        }
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.stream.local_addr().ok()
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// A second handle on the same connection (one thread reads while another writes).
    pub fn try_clone(&self) -> Result<Socket, SocketError> {
        let stream = self.stream.try_clone().map_err(|e| self.io_err("duplicate the connection to", e))?;
        Ok(Socket { stream, peer: self.peer })
    }

    fn io_err(&self, what: &'static str, e: io::Error) -> SocketError {
        match e.kind() {
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
                SocketError::Closed { addr: addr_string(&self.peer) }
            }
            _ => SocketError::Io { what, addr: addr_string(&self.peer), source: e },
        }
    }

    /// Sends all of `buf` (blocking; the kernel buffers what the peer has not read yet).
    pub fn send(&mut self, buf: &[u8]) -> Result<(), SocketError> {
        let _ = self.stream.set_write_timeout(None);
        self.stream.write_all(buf).map_err(|e| self.io_err("send to", e))
    }

    /// Sends all of `buf`, giving up after `timeout` or when `abort` is raised.
    pub fn send_timeout(
        &mut self,
        buf: &[u8],
        timeout: Duration,
        abort: Option<&AtomicBool>,
    ) -> Result<(), SocketError> {
        let start = Instant::now();
        let mut off = 0;
        self.stream.set_write_timeout(Some(POLL_SLICE)).map_err(|e| self.io_err("send to", e))?;
        while off < buf.len() {
            match self.stream.write(&buf[off..]) {
                Ok(0) => return Err(SocketError::Closed { addr: addr_string(&self.peer) }),
                Ok(n) => off += n,
                Err(e) if is_timeout(&e) => self.check_wait(start, timeout, abort, "send to")?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_err("send to", e)),
            }
        }
        Ok(())
    }

    /// Receives exactly `buf.len()` bytes within `timeout`, stopping early when `abort` is raised.
    pub fn recv_timeout(
        &mut self,
        buf: &mut [u8],
        timeout: Duration,
        abort: Option<&AtomicBool>,
    ) -> Result<(), SocketError> {
        let start = Instant::now();
        let mut off = 0;
        self.stream.set_read_timeout(Some(POLL_SLICE)).map_err(|e| self.io_err("receive from", e))?;
        while off < buf.len() {
            match self.stream.read(&mut buf[off..]) {
                Ok(0) => return Err(SocketError::Closed { addr: addr_string(&self.peer) }),
                Ok(n) => off += n,
                Err(e) if is_timeout(&e) => self.check_wait(start, timeout, abort, "receive from")?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io_err("receive from", e)),
            }
        }
        Ok(())
    }

    fn check_wait(
        &self,
        start: Instant,
        timeout: Duration,
        abort: Option<&AtomicBool>,
        what: &'static str,
    ) -> Result<(), SocketError> {
        if abort.is_some_and(|a| a.load(Ordering::Acquire)) {
            return Err(SocketError::Aborted { addr: addr_string(&self.peer) });
        }
        if start.elapsed() >= timeout {
            return Err(SocketError::Timeout { what, addr: addr_string(&self.peer), secs: timeout.as_secs_f64() });
        }
        Ok(())
    }

    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

fn retryable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::TimedOut
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::AddrNotAvailable
    ) || e.raw_os_error() == Some(nix::libc::EHOSTUNREACH)
        || e.raw_os_error() == Some(nix::libc::ENETUNREACH)
}

/// A listening socket that accepts only peers presenting its magic and type.
#[derive(Debug)]
pub struct Listener {
    inner: TcpListener,
    addr: SocketAddr,
    magic: u64,
    ty: SocketType,
    /// Peers refused for presenting another magic.
    refused: AtomicU32,
    /// Peers refused for presenting the right magic with another socket type (logged once).
    wrong_type: AtomicU32,
    /// Connections still handshaking, polled together so a silent one holds up nobody.
    pending: Mutex<Vec<Handshake>>,
}

/// An accepted connection whose magic and type have not all arrived yet.
#[derive(Debug)]
struct Handshake {
    stream: TcpStream,
    peer: SocketAddr,
    hello: [u8; 12],
    got: usize,
    deadline: Instant,
}

/// Most connections handshaking at once on one listener: a rank's peers connect a few at a time, so more are
/// strangers; past it the oldest is dropped (its deadline is nearest) so a flood cannot hold descriptors.
const MAX_HANDSHAKES: usize = 64;

impl std::os::fd::AsFd for Listener {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.inner)
    }
}

/// What became of a connection's handshake.
enum Hello {
    Waiting,
    Dropped,
    Ready,
}

impl Listener {
    /// Listens on `ip` (port 0 picks a free port, as NCCL does).
    pub fn bind(addr: SocketAddr, magic: u64, ty: SocketType) -> Result<Listener, SocketError> {
        let inner = TcpListener::bind(addr).map_err(|e| SocketError::Io {
            what: "listen on",
            addr: addr_string(&addr),
            source: e,
        })?;
        let addr = inner.local_addr().map_err(|e| SocketError::Io {
            what: "listen on",
            addr: addr_string(&addr),
            source: e,
        })?;
        inner.set_nonblocking(true).map_err(|e| SocketError::Io {
            what: "listen on",
            addr: addr_string(&addr),
            source: e,
        })?;
        Ok(Listener {
            inner,
            addr,
            magic,
            ty,
            refused: AtomicU32::new(0),
            wrong_type: AtomicU32::new(0),
            pending: Mutex::new(Vec::new()),
        })
    }

    /// Binds to `ip` with a free port.
    pub fn bind_ip(ip: IpAddr, magic: u64, ty: SocketType) -> Result<Listener, SocketError> {
        Self::bind(SocketAddr::new(ip, 0), magic, ty)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How many peers were refused for presenting another magic (another job's unique id, or a stale one).
    pub fn refused(&self) -> u32 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Whether connections are handshaking: their bytes wake no poll on the listener itself, so a caller that
    /// polls it should come back soon.
    pub fn handshaking(&self) -> bool {
        !self.pending.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Accepts the next peer with the right magic and type within `timeout`. Others are told why and dropped,
    /// and accepting goes on (NCCL's `socketResetAccept`); handshakes run side by side, each within
    /// `HANDSHAKE_TIMEOUT`, so connections that send nothing delay nobody.
    pub fn accept(&self, timeout: Duration, abort: Option<&AtomicBool>) -> Result<Socket, SocketError> {
        let start = Instant::now();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            loop {
                match self.inner.accept() {
                    Ok((stream, peer)) => {
                        if stream.set_nonblocking(true).is_err() {
                            continue;
                        }
                        let _ = stream.set_nodelay(true);
                        if pending.len() >= MAX_HANDSHAKES {
                            let old = pending.remove(0);
                            nccl_info!(
                                Subsys::NET | Subsys::INIT,
                                "socketAccept: dropping a silent connection from {}",
                                addr_string(&old.peer)
                            );
                        }
                        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
                        pending.push(Handshake { stream, peer, hello: [0; 12], got: 0, deadline });
                    }
                    Err(e) if is_timeout(&e) => break,
                    // A connection reset before it was taken is no error of the listener's.
                    Err(e) if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted) => {}
                    Err(e) => {
                        return Err(SocketError::Io { what: "accept on", addr: addr_string(&self.addr), source: e })
                    }
                }
            }
            let mut i = 0;
            while i < pending.len() {
                match self.advance(&mut pending[i]) {
                    Hello::Waiting => i += 1,
                    Hello::Dropped => drop(pending.remove(i)),
                    Hello::Ready => {
                        let h = pending.remove(i);
                        return Ok(Socket { stream: h.stream, peer: h.peer });
                    }
                }
            }
            if abort.is_some_and(|a| a.load(Ordering::Acquire)) {
                return Err(SocketError::Aborted { addr: addr_string(&self.addr) });
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(SocketError::Timeout {
                    what: "accept a connection on",
                    addr: addr_string(&self.addr),
                    secs: timeout.as_secs_f64(),
                });
            }
            self.wait(&pending, left.min(POLL_SLICE));
        }
    }

    /// Sleeps until a connection or a handshake byte arrives, or `max` passes.
    fn wait(&self, pending: &[Handshake], max: Duration) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds = vec![PollFd::new(self.inner.as_fd(), PollFlags::POLLIN)];
        fds.extend(pending.iter().map(|h| PollFd::new(h.stream.as_fd(), PollFlags::POLLIN)));
        let ms = PollTimeout::try_from(max.as_millis().clamp(1, i32::MAX as u128) as i32).unwrap_or(PollTimeout::ZERO);
        let _ = poll(&mut fds, ms);
    }

    /// Reads what arrived of `h`'s magic and type; once whole, checks them and answers.
    fn advance(&self, h: &mut Handshake) -> Hello {
        let why = loop {
            match (&h.stream).read(&mut h.hello[h.got..]) {
                Ok(0) => break "closed before sending a valid magic",
                Ok(n) => {
                    h.got += n;
                    if h.got == h.hello.len() {
                        return self.check(h);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => {
                    if Instant::now() < h.deadline {
                        return Hello::Waiting;
                    }
                    break "sent no valid magic in time";
                }
                Err(_) => break "failed before sending a valid magic",
            }
        };
        nccl_info!(Subsys::NET | Subsys::INIT, "socketFinalizeAccept: {} {why}", addr_string(&h.peer));
        Hello::Dropped
    }

    fn check(&self, h: &mut Handshake) -> Hello {
        let magic = u64::from_le_bytes(h.hello[..8].try_into().unwrap_or_default());
        let ty = u32::from_le_bytes(h.hello[8..].try_into().unwrap_or_default());
        let peer = addr_string(&h.peer);
        // One byte into an empty send buffer: a nonblocking write takes it whole.
        let answer = |ack: u8| (&h.stream).write(&[ack]).is_ok_and(|n| n == 1);
        if magic != self.magic {
            nccl_info!(Subsys::NET | Subsys::INIT, "socketFinalizeAccept: didn't receive a valid magic from {peer}");
            self.refused.fetch_add(1, Ordering::Relaxed);
            answer(ACK_WRONG_MAGIC);
            return Hello::Dropped;
        }
        if SocketType::from_u32(ty) != Some(self.ty) {
            if self.wrong_type.fetch_add(1, Ordering::Relaxed) == 0 {
                nccl_warn!(
                    "socketFinalizeAccept: dropping {peer} on {}: wrong socket type {ty} != {} (further ones are dropped silently)",
                    addr_string(&self.addr),
                    self.ty as u32
                );
            }
            answer(ACK_WRONG_TYPE);
            return Hello::Dropped;
        }
        if !answer(ACK_OK) || h.stream.set_nonblocking(false).is_err() {
            return Hello::Dropped;
        }
        Hello::Ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const LO: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    #[test]
    fn handshake_accepts_the_right_magic_and_refuses_the_wrong_one() {
        let l = Listener::bind_ip(LO, 42, SocketType::Bootstrap).unwrap();
        let addr = l.addr();
        let t = std::thread::spawn(move || {
            let bad = Socket::connect(addr, 7, SocketType::Bootstrap, Duration::from_secs(5)).unwrap_err();
            assert!(matches!(bad, SocketError::WrongMagic { .. }), "{bad}");
            assert!(bad.to_string().contains("wrong magic"));
            let mut good = Socket::connect(addr, 42, SocketType::Bootstrap, Duration::from_secs(5)).unwrap();
            good.send(b"hello").unwrap();
        });
        let mut s = l.accept(Duration::from_secs(5), None).unwrap();
        let mut buf = [0u8; 5];
        s.recv_timeout(&mut buf, Duration::from_secs(5), None).unwrap();
        assert_eq!(&buf, b"hello");
        t.join().unwrap();
        let mut b = [0u8; 1];
        assert!(matches!(s.recv_timeout(&mut b, Duration::from_secs(5), None), Err(SocketError::Closed { .. })));
    }

    #[test]
    fn waits_end_with_timeouts_or_aborts() {
        let l = Listener::bind_ip(LO, 1, SocketType::NetSocket).unwrap();
        let e = l.accept(Duration::from_millis(50), None).unwrap_err();
        assert!(e.to_string().contains("timed out"), "{e}");
        let abort = AtomicBool::new(true);
        assert!(matches!(l.accept(Duration::from_secs(60), Some(&abort)), Err(SocketError::Aborted { .. })));
        let addr = l.addr();
        drop(l);
        let e = Socket::connect(addr, 1, SocketType::NetSocket, Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, SocketError::ConnectTimeout { .. }), "{e}");
        let started = Instant::now();
        let e = Socket::connect_listening(addr, 1, SocketType::NetSocket, Duration::from_secs(30), None).unwrap_err();
        assert!(matches!(e, SocketError::Refused { .. }) && started.elapsed() < Duration::from_secs(5), "{e}");
    }

    #[test]
    fn wrong_type_is_refused_and_accepting_goes_on() {
        let l = Listener::bind_ip(LO, 5, SocketType::NetSocket).unwrap();
        let addr = l.addr();
        let t = std::thread::spawn(move || {
            let wrong = Socket::connect(addr, 5, SocketType::Proxy, Duration::from_secs(5));
            (wrong, Socket::connect(addr, 5, SocketType::NetSocket, Duration::from_secs(5)).map(drop))
        });
        assert!(l.accept(Duration::from_secs(5), None).is_ok());
        let (wrong, right) = t.join().unwrap();
        assert!(matches!(wrong, Err(SocketError::WrongType { .. })), "{wrong:?}");
        assert!(right.is_ok());
        assert_eq!(l.wrong_type.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn silent_connections_do_not_hold_up_a_handshake() {
        let l = Listener::bind_ip(LO, 9, SocketType::Bootstrap).unwrap();
        let addr = l.addr();
        let silent: Vec<_> = (0..MAX_HANDSHAKES + 8).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let started = Instant::now();
        let t = std::thread::spawn(move || Socket::connect(addr, 9, SocketType::Bootstrap, Duration::from_secs(5)));
        l.accept(Duration::from_secs(5), None).unwrap();
        assert!(started.elapsed() < HANDSHAKE_TIMEOUT, "{:?}", started.elapsed());
        assert!(t.join().unwrap().is_ok());
        assert!(l.pending.lock().unwrap().len() <= MAX_HANDSHAKES);
        drop(silent);
    }

    #[test]
    fn addresses_print_and_parse_like_nccl() {
        assert_eq!(addr_string(&"10.0.0.1:0".parse().unwrap()), "10.0.0.1<0>");
        assert_eq!(parse_addr("10.1.2.3:5000").unwrap(), "10.1.2.3:5000".parse().unwrap());
        assert_eq!(parse_addr("[::1]:80").unwrap().port(), 80);
        assert_eq!(parse_addr("localhost:81").unwrap().port(), 81);
        for bad in ["10.1.2.3", "host:", ":5", "1.2.3.4:99999"] {
            let e = parse_addr(bad).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("<port>"), "{e}");
        }
        // `.invalid` never resolves (RFC 2606).
        let e = parse_addr("no-such-host.invalid:29500").unwrap_err();
        assert!(matches!(e, SocketError::Unresolved { .. }), "{e}");
        assert!(e.to_string().contains("'no-such-host.invalid'") && e.to_string().contains("resolved"), "{e}");
    }
}
