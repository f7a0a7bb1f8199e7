//! The network interface the proxy drives, after NCCL's net plugin API (NCCL 2.28.9
//! `src/include/plugin/net/net_v11.h`, `ncclNet_t`): the receiver listens and publishes a handle, which the
//! bootstrap carries to the sender; the sender connects with it, the receiver accepts. Buffers are registered
//! once (`regMr`) and every transfer is an `isend`/`irecv` returning a request that `test` completes. Closing a
//! comm or a listener is dropping it. NET/Socket ([`super::socket`]) and NET/IB ([`super::ib`]) implement it,
//! so the proxy's progress loop ([`super::proxy`]) is the same for both, as NCCL's `net.cc` is.

pub(crate) use crate::profiler::net::NetParent;
pub(crate) use crate::sync::doorbell::{Doorbell, FdWait, Wake};
use collscope_debug::env::EnvError;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// Bounds on connection setup: how long to wait for the peer, and a flag that abandons the wait.
#[derive(Debug, Clone)]
pub(crate) struct SetupCtl {
    pub timeout: Duration,
    pub abort: Arc<AtomicBool>,
}

/// A network: its devices, listen and connect (`ncclNet_t` `listen`/`connect`).
pub(crate) trait Net: Send + Sync + 'static {
    type Listener: Listen<Comm = Self::Comm>;
    type Comm: Comm;

    /// The network's name as NCCL prints it (`via NET/<name>/<dev>`, `Using network <name>`).
    fn name(&self) -> &'static str;

    /// Starts accepting one connection on device `dev`; the handle bytes travel to the sender.
    fn listen(&self, dev: usize, ctl: &SetupCtl) -> Result<(Self::Listener, Vec<u8>), NetError>;

    /// Connects to the receiver that published `handle`; returns the send side.
    fn connect(&self, dev: usize, handle: &[u8], ctl: &SetupCtl) -> Result<Self::Comm, NetError>;
}

/// The receiver's half of connection setup (`ncclNet_t` `accept`).
pub(crate) trait Listen: Send + 'static {
    type Comm;

    /// The receive side, once the sender has connected.
    fn accept(self) -> Result<Self::Comm, NetError>;
}

/// One established connection, send or receive side (`ncclNet_t` `regMr`, `deregMr`, `isend`, `irecv`, `test`).
pub(crate) trait Comm: Send + 'static {
    /// An outstanding transfer, advanced by [`Comm::test`].
    type Request: Send;
    /// A registered buffer (`mhandle`).
    type Mr: Send;

    /// The peer, for messages.
    fn peer(&self) -> String;

    /// Registers `size` bytes at `data` for transfers; the caller keeps them alive until [`Comm::dereg_mr`].
    fn reg_mr(&mut self, data: *mut u8, size: usize) -> Result<Self::Mr, NetError>;

    fn dereg_mr(&mut self, mr: Self::Mr) -> Result<(), NetError>;

    /// Sends `size` bytes at `data` (inside `mr`). `None` when the network cannot take it yet (NET/IB: the
    /// receiver has not posted its buffer); call again later. The caller keeps the bytes unchanged until
    /// [`Comm::test`] reports completion.
    fn isend(
        &mut self,
        data: *const u8,
        size: usize,
        tag: u32,
        mr: &Self::Mr,
    ) -> Result<Option<Self::Request>, NetError>;

    /// Receives at most `size` bytes into `data` (inside `mr`); `None` as for [`Comm::isend`].
    fn irecv(&mut self, data: *mut u8, size: usize, tag: u32, mr: &Self::Mr)
        -> Result<Option<Self::Request>, NetError>;

    /// Advances `req` without blocking: `Some(bytes)` once it completed. Requests of one comm complete in the
    /// order they were posted; test them oldest first.
    fn test(&mut self, req: &mut Self::Request) -> Result<Option<usize>, NetError>;

    /// Whether bytes of `req` are known to be moving (the proxy keeps spinning rather than backing off).
    fn in_progress(&self, req: &Self::Request) -> bool;

    /// What tells the proxy that [`Comm::test`] can move `req` further (a descriptor, a ring of the bell given
    /// to [`Comm::set_bell`], or nothing: the proxy then looks again soon instead of sleeping).
    fn wake(&self, req: &Self::Request) -> Wake;

    /// Whether `isend`/`irecv` take any memory of this process, registered or not (NET/Socket: sockets read
    /// and write plain memory). The proxy then moves Simple steps straight from and into the user's buffers,
    /// passing the connection buffer's registration, which such a network ignores.
    fn any_memory(&self) -> bool {
        false
    }

    /// The proxy's bell, for a network whose own threads move bytes (NET/Socket helpers) to ring when they
    /// finish. Networks without such threads ignore it.
    fn set_bell(&mut self, _bell: std::sync::Arc<Doorbell>) {}

    /// Where `req`'s transfers report as profiler NetPlugin events (NCCL's `phandle` of `isend`/`irecv`), given
    /// right after posting it when the plugin asked for them. Networks without such events ignore it.
    fn profile(&mut self, _req: &mut Self::Request, _parent: NetParent) {}
}

/// A network failure, from whichever network carried it. The interface names no network: each converts its own
/// errors into these (`From` beside its error type), telling apart what the transport above acts on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NetError {
    /// A parameter of the network is malformed.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The peer closed the connection (it exited or was killed) rather than the network failing.
    #[error(transparent)]
    PeerClosed(Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

impl NetError {
    /// Whether the peer closed the connection (it exited or was killed) rather than the network failing.
    pub(crate) fn peer_closed(&self) -> bool {
        matches!(self, NetError::PeerClosed(_))
    }
}
