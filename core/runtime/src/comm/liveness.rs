//! Peer liveness (in the spirit of NCCL's RAS keep-alives, `src/ras/`): every rank keeps one TCP connection to
//! every other rank, made while the TCP bootstrap joined them, and a watchdog thread that sends a heartbeat each
//! second and watches them. A peer whose connection closes (its process died: the kernel closes its sockets) or
//! stays silent past the timeout is declared dead: the failure is recorded and the bootstrap's and the
//! communicator's abort flags raised, so every wait in the runtime gives up. The watch starts before the
//! communicator is built, so a peer that dies while it is being set up is named too. A rank that leaves cleanly
//! says goodbye first.

use crate::bootstrap::tcp::{BootstrapError, TcpBootstrap};
use crate::observe::recorder;
use crate::observe::records::Records;
use crate::socket::Socket;
use crate::sync::wait::{AbortHandle, DEFAULT_TIMEOUT_S};
use collscope_debug::env::{Env, EnvError};
use collscope_debug::Subsys;
use collscope_debug::{nccl_info, nccl_warn};
use collscope_model::observe::CommRecords;
use collscope_model::{Event, Finding, Severity, Warning};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Default silence after which a peer is declared dead and the communicator aborted (`COLLSCOPE_PEER_TIMEOUT`,
/// seconds): a peer that died closes its connection and is named at once, so silence is a stopped, hung or cut
/// off process, which may come back. NCCL 2.28.9's RAS warns after 5 s of silence and declares a peer dead after
/// 60 s (`RAS_KEEPALIVE_TIMEOUT_WARN`, `RAS_PEER_DEAD_TIMEOUT`, src/ras/ras_internal.h) but never aborts; the
/// abort is PyTorch's watchdog's, at its timeout: so the same as a collective's, [`DEFAULT_TIMEOUT_S`].
pub(crate) const DEFAULT_PEER_TIMEOUT_S: i64 = DEFAULT_TIMEOUT_S;
const HEARTBEAT: u8 = 1;
const GOODBYE: u8 = 2;
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// Why a peer is considered gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rank {rank} {cause}")]
pub struct PeerFailure {
    pub rank: u32,
    pub cause: String,
}

struct Shared {
    /// This rank.
    rank: u32,
    failure: Mutex<Option<PeerFailure>>,
    /// The bootstrap's flag, so its waits end too.
    abort: Arc<AtomicBool>,
    /// The communicator's, once it exists.
    comm: OnceLock<AbortHandle>,
    /// The communicator's calls, to say which one the failure interrupted.
    calls: OnceLock<Arc<Records>>,
    stop: AtomicBool,
    /// Whether stopping says goodbye (a clean leave) or just closes (a failed rank: peers must notice).
    goodbye: AtomicBool,
}

/// Finding codes: a peer whose connection closed (its process ended), and one that went silent (stopped,
/// hung or cut off).
const EXITED: &str = "peer_exited";
const SILENT: &str = "peer_unresponsive";

impl Shared {
    fn fail(&self, rank: u32, code: &str, cause: String) {
        let mut f = self.failure.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            nccl_warn!("Peer rank {rank} {cause}; aborting the communicator");
            let failure = PeerFailure { rank, cause };
            recorder::record(|| Event::Warning(self.warning(&failure)));
            recorder::record(|| Event::Finding(self.finding(&failure, code)));
            if let Some(comm) = self.comm.get() {
                comm.abort(failure.to_string());
            }
            *f = Some(failure);
        }
        self.abort.store(true, Ordering::Release);
    }

    fn warning(&self, failure: &PeerFailure) -> Warning {
        Warning {
            rank: Some(failure.rank),
            host: None,
            line: None,
            text: format!("rank {} lost {failure}", self.rank),
            class: "peer".into(),
            source: None,
        }
    }

    /// The failure as a finding about the peer, with the call this rank was in.
    fn finding(&self, failure: &PeerFailure, code: &str) -> Finding {
        let call = match self.calls.get().and_then(|c| c.in_progress()) {
            Some(op) => format!(" while in {} #{} ({} bytes)", op.coll, op.seq, op.bytes),
            None => String::new(),
        };
        Finding {
            code: code.into(),
            severity: Severity::Error,
            rank: Some(failure.rank),
            comm: None,
            title: failure.to_string(),
            detail: format!(
                "rank {} lost rank {}{call}: {}; its communicator was aborted, so every call in flight fails",
                self.rank, failure.rank, failure.cause
            ),
            evidence: Vec::new(),
            fix: format!(
                "Read rank {}'s own output and exit status (killed by a signal, out of memory, a crash); a rank \
                 that is only slow or paused: raise COLLSCOPE_PEER_TIMEOUT",
                failure.rank
            ),
        }
    }
}

/// The watchdog of one rank.
pub(crate) struct Liveness {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Liveness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Liveness(failure: {:?})", self.failure())
    }
}

/// `COLLSCOPE_PEER_TIMEOUT` in seconds.
pub(crate) fn peer_timeout(env: &Env) -> Result<Duration, EnvError> {
    env.seconds("COLLSCOPE_PEER_TIMEOUT", DEFAULT_PEER_TIMEOUT_S)
}

impl Liveness {
    /// Starts watching the connections `boot` made to every other rank while joining. A failure ends
    /// `boot`'s waits, and the communicator's once [`Liveness::attach`] gave it.
    pub(crate) fn start(boot: &TcpBootstrap, timeout: Duration) -> Result<Liveness, BootstrapError> {
        let peers = boot.take_mesh();
        for (p, s) in &peers {
            s.stream().set_nonblocking(true).map_err(|e| BootstrapError::Protocol(format!("rank {p}: {e}")))?;
        }
        let shared = Arc::new(Shared {
            rank: boot.rank(),
            failure: Mutex::new(None),
            abort: boot.abort_flag(),
            comm: OnceLock::new(),
            calls: OnceLock::new(),
            stop: AtomicBool::new(false),
            goodbye: AtomicBool::new(false),
        });
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("collscope Liveness{}", boot.rank()))
            .spawn(move || watch(peers, &sh, timeout))
            .map_err(|source| BootstrapError::Io { what: "cannot start the liveness watchdog", source })?;
        Ok(Liveness { shared, thread: Some(thread) })
    }

    /// From now on a failure also aborts `comm`; at once if a peer already failed.
    pub(crate) fn attach(&self, comm: AbortHandle) {
        comm.watched();
        let comm = self.shared.comm.get_or_init(|| comm);
        if let Some(f) = self.failure() {
            comm.abort(f.to_string());
        }
    }

    /// From now on a failure names the call of `calls` it interrupted.
    pub(crate) fn watch_calls(&self, calls: Arc<Records>) {
        let _ = self.shared.calls.set(calls);
    }

    /// The first peer found dead, if any.
    pub(crate) fn failure(&self) -> Option<PeerFailure> {
        self.shared.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The first peer found dead, waiting up to `max` for one.
    pub(crate) fn await_failure(&self, max: Duration) -> Option<PeerFailure> {
        let t = Instant::now();
        loop {
            let f = self.failure();
            if f.is_some() || t.elapsed() >= max {
                return f;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Says goodbye to every peer and stops the watchdog. Dropping instead closes the connections without a
    /// goodbye, which the peers treat as this rank failing.
    pub(crate) fn close(mut self) {
        self.shared.goodbye.store(true, Ordering::Release);
        self.stop_thread();
    }

    fn stop_thread(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

struct Peer {
    rank: u32,
    sock: Socket,
    last_heard: Instant,
    gone: bool,
}

fn watch(peers: Vec<(u32, Socket)>, shared: &Shared, timeout: Duration) {
    let now = Instant::now();
    let mut peers: Vec<Peer> =
        peers.into_iter().map(|(rank, sock)| Peer { rank, sock, last_heard: now, gone: false }).collect();
    let mut last_beat = now - HEARTBEAT_EVERY;
    while !shared.stop.load(Ordering::Acquire) {
        if last_beat.elapsed() >= HEARTBEAT_EVERY {
            for p in peers.iter_mut().filter(|p| !p.gone) {
                // A full send buffer only means the peer is slow to read; silence is judged on its side.
                let _ = p.sock.stream().write(&[HEARTBEAT]);
            }
            last_beat = Instant::now();
        }
        wait_any(&peers, Duration::from_millis(200));
        for p in peers.iter_mut().filter(|p| !p.gone) {
            match read_news(&p.sock) {
                Ok(News::Heard) => p.last_heard = Instant::now(),
                Ok(News::Nothing) => {}
                Ok(News::Goodbye) => {
                    nccl_info!(Subsys::INIT, "Peer rank {} left the communicator", p.rank);
                    p.gone = true;
                }
                Err(cause) => {
                    p.gone = true;
                    shared.fail(p.rank, EXITED, cause);
                }
            }
            if !p.gone && p.last_heard.elapsed() > timeout {
                p.gone = true;
                shared.fail(p.rank, SILENT, format!("sent no keep-alive for {:.1} s", timeout.as_secs_f64()));
            }
        }
    }
    if shared.goodbye.load(Ordering::Acquire) {
        for p in peers.iter().filter(|p| !p.gone) {
            let _ = p.sock.stream().write(&[GOODBYE]);
        }
    }
}

enum News {
    Nothing,
    Heard,
    Goodbye,
}

const CLOSED: &str = "closed its connection (process exited or was killed)";

fn read_news(sock: &Socket) -> Result<News, String> {
    let mut buf = [0u8; 64];
    let mut news = News::Nothing;
    loop {
        match sock.stream().read(&mut buf) {
            Ok(0) => {
                return match news {
                    News::Goodbye => Ok(News::Goodbye),
                    _ => Err(CLOSED.into()),
                }
            }
            Ok(n) => {
                news = if buf[..n].contains(&GOODBYE) { News::Goodbye } else { News::Heard };
                if matches!(news, News::Goodbye) {
                    return Ok(news);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(news),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe) => {
                return Err(CLOSED.into())
            }
            Err(e) => return Err(format!("lost its connection ({e})")),
        }
    }
}

fn wait_any(peers: &[Peer], timeout: Duration) {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds: Vec<PollFd> =
        peers.iter().filter(|p| !p.gone).map(|p| PollFd::new(p.sock.stream().as_fd(), PollFlags::POLLIN)).collect();
    if fds.is_empty() {
        std::thread::sleep(timeout);
        return;
    }
    let ms = PollTimeout::try_from(timeout.as_millis() as i32).unwrap_or(PollTimeout::ZERO);
    let _ = poll(&mut fds, ms);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::tcp::UniqueId;

    fn env() -> Env {
        Env::from_pairs([("COLLSCOPE_TIMEOUT_S", "20")])
    }

    #[test]
    fn a_vanished_peer_is_named_and_a_clean_exit_is_not_a_failure() {
        let id = UniqueId::create(&env()).unwrap();
        let results: Vec<Option<PeerFailure>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u32)
                .map(|r| {
                    s.spawn(move || {
                        let boot = TcpBootstrap::init(&id, r, 3, &env()).unwrap();
                        match r {
                            // Rank 2 "dies": it joins the mesh, then its sockets close without a goodbye.
                            2 => {
                                let mesh = boot.take_mesh();
                                assert_eq!(mesh.iter().map(|(p, _)| *p).collect::<Vec<_>>(), [0, 1]);
                                boot.barrier().unwrap();
                                drop(mesh);
                                None
                            }
                            _ => {
                                let comm = AbortHandle::default();
                                let live = Liveness::start(&boot, Duration::from_secs(8)).unwrap();
                                // Rank 0's communicator exists before the failure, rank 1's only after it.
                                if r == 0 {
                                    live.attach(comm.clone());
                                }
                                boot.barrier().unwrap();
                                let t = Instant::now();
                                while live.failure().is_none() && t.elapsed() < Duration::from_secs(10) {
                                    std::thread::sleep(Duration::from_millis(20));
                                }
                                assert!(boot.abort_flag().load(Ordering::Acquire));
                                live.attach(comm.clone());
                                assert!(comm.reason().unwrap_or_default().contains("rank 2 closed"));
                                live.failure()
                            }
                        }
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for f in &results[..2] {
            let f = f.as_ref().expect("failure noticed");
            assert_eq!(f.rank, 2);
            assert!(f.to_string().contains("rank 2 closed its connection"), "{f}");
        }
    }

    #[test]
    fn a_stopped_peer_is_named_within_the_peer_timeout() {
        // Rank 2 is "stopped" (SIGSTOP): its connections stay open and it sends nothing.
        let id = UniqueId::create(&env()).unwrap();
        let peer_timeout = Duration::from_secs(2);
        let noticed: Vec<Option<Duration>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3u32)
                .map(|r| {
                    s.spawn(move || {
                        let boot = TcpBootstrap::init(&id, r, 3, &env()).unwrap();
                        if r == 2 {
                            let mesh = boot.take_mesh();
                            boot.barrier().unwrap();
                            std::thread::sleep(peer_timeout * 2);
                            drop(mesh);
                            return None;
                        }
                        let live = Liveness::start(&boot, peer_timeout).unwrap();
                        boot.barrier().unwrap();
                        let t = Instant::now();
                        let f = live.await_failure(peer_timeout * 2).expect("the stopped rank is named");
                        assert!(f.rank == 2 && f.cause.contains("sent no keep-alive"), "{f}");
                        Some(t.elapsed())
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for t in noticed.into_iter().flatten() {
            assert!(t <= peer_timeout + Duration::from_secs(1), "named after {t:?}");
        }
    }

    #[test]
    fn goodbyes_end_the_watch_quietly() {
        let id = UniqueId::create(&env()).unwrap();
        std::thread::scope(|s| {
            for r in 0..2u32 {
                s.spawn(move || {
                    let boot = TcpBootstrap::init(&id, r, 2, &env()).unwrap();
                    let live = Liveness::start(&boot, Duration::from_secs(8)).unwrap();
                    boot.barrier().unwrap();
                    if r == 0 {
                        live.close();
                    } else {
                        std::thread::sleep(Duration::from_millis(600));
                        assert_eq!(live.failure(), None);
                        assert!(!boot.abort_flag().load(Ordering::Acquire));
                    }
                });
            }
        });
        assert!(peer_timeout(&Env::from_pairs([("COLLSCOPE_PEER_TIMEOUT", "-1")])).is_err());
    }

    #[test]
    fn a_silent_peer_and_a_waiting_call_are_given_pytorchs_ten_minutes_unless_set() {
        let unset = Env::from_pairs(Vec::<(String, String)>::new());
        let ten_minutes = Duration::from_secs(600);
        assert_eq!(peer_timeout(&unset).unwrap(), ten_minutes);
        assert_eq!(crate::sync::wait::timeout_from_env(&unset).unwrap(), ten_minutes);
        let set = Env::from_pairs([("COLLSCOPE_PEER_TIMEOUT", "45")]);
        assert_eq!(peer_timeout(&set).unwrap(), Duration::from_secs(45));
    }
}
