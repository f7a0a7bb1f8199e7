//! How each rank reaches each peer on each channel.

use super::names::Transport;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Send,
    Recv,
    /// A line that names both ends without `[send]`/`[receive]` (P2P and SHM lines).
    Both,
}

/// GPUDirect RDMA state of a NET connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GdrState {
    /// The NIC reads/writes GPU memory directly (`/GDRDMA`).
    Enabled,
    /// Staged through host memory although the buffers live on a GPU.
    Disabled,
    /// The buffers are host memory (collscope on CPUs): GDR does not apply.
    HostMemory,
}

/// `Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read` and `Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Connection {
    pub channel: u32,
    pub src: u32,
    pub dst: u32,
    pub direction: Direction,
    pub transport: Transport,
    /// What follows the transport: "IPC", "IPC/read", "CUMEM", "direct pointer", "direct/direct", "IB/0".
    pub mode: Option<String>,
    /// "IB", "Socket", or a plugin's name, for NET.
    pub net: Option<String>,
    /// NET device index.
    pub device: Option<u32>,
    /// `true` for `/GDRDMA`, `false` for a NET line without it, `None` where it does not apply.
    pub gdrdma: Option<bool>,
    /// PXN: the rank whose NIC carries the traffic (`NET/IB/0(1)`).
    pub proxy_rank: Option<u32>,
    /// Shared buffers (`/Shared`).
    #[serde(default)]
    pub shared: bool,
    /// Communicator this connection belongs to.
    pub comm: Option<String>,
    /// Concluded from what the log does say (a ring edge between hosts is NET), not printed by NCCL.
    #[serde(default)]
    pub inferred: bool,
}

impl Connection {
    /// A connection of which only its channel, ends, direction and transport are known yet; the rest is filled by
    /// whoever knows it (the transport's setup, the rest of a log line).
    pub fn new(channel: u32, src: u32, dst: u32, direction: Direction, transport: Transport) -> Self {
        Connection {
            channel,
            src,
            dst,
            direction,
            transport,
            mode: None,
            net: None,
            device: None,
            gdrdma: None,
            proxy_rank: None,
            shared: false,
            comm: None,
            inferred: false,
        }
    }

    /// A NET connection through device `device` of network `net`, as NCCL's `NET/{net}/{device}` says it.
    pub fn net(channel: u32, src: u32, dst: u32, direction: Direction, net: &str, device: u32) -> Self {
        Connection {
            mode: Some(format!("{net}/{device}")),
            net: Some(net.to_string()),
            device: Some(device),
            ..Connection::new(channel, src, dst, direction, Transport::Net)
        }
    }
}
