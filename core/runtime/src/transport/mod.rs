//! Transports connect one direction of one channel-peer pair. Selection follows NCCL 2.28.9
//! (`src/transport.cc` `selectTransport`): the first of P2P, SHM, NET whose `can_connect` accepts the pair.
//!
//! Setup mirrors NCCL's two halves: each side calls its setup (the receiver allocates the landing memory) and
//! produces a handle; the handles are swapped through the bootstrap; each side then connects with the
//! other's handle. A NET transport (TCP with a proxy thread) implements the same trait: its `connect` returns
//! a local [`ConnMem`] that its proxy drains (send side, [`ConnMem::posted`]) or fills (receive side,
//! [`ConnMem::deposit`]), and a guard that keeps the proxy alive.

pub mod conn;
pub(crate) mod net;
pub(crate) mod p2p;
pub mod segment;
pub(crate) mod shm;
pub(crate) mod window;

use crate::error::Result;
use collscope_model::{self as model, Connection};
use conn::{BufSizes, ConnMem};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// What a rank tells the others about itself at init (NCCL's `ncclPeerInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    pub rank: u32,
    pub host: String,
    /// Identifies the host (host name and boot id), as NCCL's `hostHash`.
    pub host_hash: u64,
    /// Identifies the process (host hash, pid and a per-process random value), as NCCL's `pidHash`.
    pub pid_hash: u64,
    /// New at every communicator init: rank 0's tells this communicator from others of the same processes, as
    /// NCCL's `commHash` comes from each communicator's unique id.
    #[serde(default)]
    pub comm_nonce: u64,
    pub pid: u32,
    /// The device index printed in connection lines (`0[0]`): 0 for host memory.
    pub dev: i32,
    /// The cores the rank may run on (its affinity at init): together, the ranks of a host say whether they
    /// outnumber the cores they share.
    #[serde(default)]
    pub cpus: Vec<u32>,
}

/// Which connection is being set up.
#[derive(Debug, Clone)]
pub struct ConnSpec<'a> {
    pub channel: u32,
    /// NCCL's `connIndex` (0 for collectives, 1 for point-to-point).
    pub conn_index: u32,
    pub me: &'a PeerInfo,
    pub peer: &'a PeerInfo,
    pub sizes: BufSizes,
    /// Communicator handle, for the connection record.
    pub comm: Option<String>,
}

/// One side of a connection after setup, before the peer's handle arrived.
pub trait Pending: Send {
    fn connect(self: Box<Self>, peer_handle: &[u8]) -> Result<Established>;
}

/// A connected side.
pub struct Established {
    pub mem: Arc<ConnMem>,
    /// The record the runtime keeps and the log line it prints for it (NCCL's exact format).
    pub record: Connection,
    pub line: Option<String>,
    /// Kept as long as the connection lives (a proxy thread's handle, a socket).
    pub guard: Option<Box<dyn Send + Sync>>,
}

pub trait Transport: Send + Sync {
    fn kind(&self) -> model::Transport;
    /// The network a NET transport runs over, as `Using network <name>` names it; `None` for the others.
    fn network(&self) -> Option<&'static str> {
        None
    }
    fn can_connect(&self, me: &PeerInfo, peer: &PeerInfo) -> bool;
    /// The sending side's setup; returns its pending state and the handle for the receiver.
    fn send_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)>;
    /// The receiving side's setup; returns its pending state and the handle for the sender.
    fn recv_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)>;
}

/// A connection record with the fields every transport fills the same way.
pub fn record(spec: &ConnSpec, src: u32, dst: u32, transport: model::Transport, mode: &str) -> Connection {
    Connection {
        mode: Some(mode.to_string()),
        comm: spec.comm.clone(),
        ..Connection::new(spec.channel, src, dst, model::Direction::Both, transport)
    }
}

/// The receiving end's record of a connection whose line only the sender prints (P2P, SHM): kept by the
/// receiver's rank so its received traffic has a transport and its own connections list the end.
pub fn recv_record(spec: &ConnSpec, transport: model::Transport, mode: &str) -> Connection {
    Connection { direction: model::Direction::Recv, ..record(spec, spec.peer.rank, spec.me.rank, transport, mode) }
}

/// The transports a communicator tries, in NCCL's order, after `NCCL_P2P_DISABLE` / `NCCL_SHM_DISABLE`: as in
/// NCCL 2.28.9, only the value 1 disables either (`src/graph/paths.cc` ncclGetLevel, `src/transport/shm.cc`
/// shmCanConnect, v2.28.9-1), so `topo explain` and a live run choose alike.
pub fn default_chain(
    env: &collscope_debug::env::Env,
    net: Option<Arc<dyn Transport>>,
) -> Result<Vec<Arc<dyn Transport>>> {
    let mut chain: Vec<Arc<dyn Transport>> = Vec::new();
    if env.int("NCCL_P2P_DISABLE", 0)? != 1 {
        chain.push(Arc::new(p2p::P2pTransport));
    }
    if env.int("NCCL_SHM_DISABLE", 0)? != 1 {
        chain.push(Arc::new(shm::ShmTransport::new()));
    }
    chain.extend(net);
    Ok(chain)
}

/// The first transport of `chain` that connects `me` to `peer`.
pub fn select<'a>(chain: &'a [Arc<dyn Transport>], me: &PeerInfo, peer: &PeerInfo) -> Option<&'a Arc<dyn Transport>> {
    chain.iter().find(|t| t.can_connect(me, peer))
}
