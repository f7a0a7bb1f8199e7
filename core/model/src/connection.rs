//! How each rank reaches each peer on each channel.

use super::names::Transport;
use super::Snapshot;
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
    /// The NET device's name where the source knows it (`mlx5_0`, `eth0`).
    #[serde(default)]
    pub nic: Option<String>,
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
            nic: None,
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

/// One directed edge of a ring or tree, `src -> dst` on `channel`, as a snapshot knows it: the connection each end
/// set up and what each end counted. The views read edges through [`Snapshot::edge`], never the lists.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Edge<'a> {
    /// The sender's connection (its `[send]` line, or a P2P/SHM line naming both ends).
    pub send: Option<&'a Connection>,
    /// The receiver's (its `[receive]` line).
    pub recv: Option<&'a Connection>,
    /// The bytes the sender counted sent on it.
    pub sent: Option<&'a ChannelTraffic>,
    /// The bytes the receiver counted received on it.
    pub received: Option<&'a ChannelTraffic>,
}

impl<'a> Edge<'a> {
    /// The connection that names the edge's transport: the sender's (its NIC, GDR and PXN are the sending
    /// side's), else the receiver's.
    pub fn connection(&self) -> Option<&'a Connection> {
        self.send.or(self.recv)
    }
}

impl Snapshot {
    /// The edge `src -> dst` on `channel`.
    pub fn edge(&self, channel: u32, src: u32, dst: u32) -> Edge<'_> {
        let on = |c: &&Connection| c.channel == channel && c.src == src && c.dst == dst;
        let end = |rank, peer, direction| {
            self.traffic.iter().find(|t| (t.rank, t.channel, t.peer, t.direction) == (rank, channel, peer, direction))
        };
        Edge {
            send: self.connections.iter().filter(on).find(|c| c.direction != Direction::Recv),
            recv: self.connections.iter().filter(on).find(|c| c.direction == Direction::Recv),
            sent: end(src, dst, Direction::Send),
            received: end(dst, src, Direction::Recv),
        }
    }
}

/// One rank's traffic on one channel, summed over a call's steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelTraffic {
    pub rank: u32,
    pub channel: u32,
    pub peer: u32,
    /// `Send` or `Recv` as seen from `rank`.
    pub direction: Direction,
    /// How the channel reaches the peer; `None` lets telemetry take it from the connection records.
    pub transport: Option<Transport>,
    pub bytes: u64,
    /// Of `bytes`, those no connection buffer carried: read where the sender had them or written where the
    /// receiver wanted them (threads' P2P, registered SHM windows, NET sending from or receiving into the user's
    /// buffer). The rest went through the slots, a copy on each side. `None` where the source does not tell (NCCL's
    /// profiler plugin).
    #[serde(default)]
    pub in_place_bytes: Option<u64>,
    /// Seconds the transfer took (first step posted to last step done).
    pub seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Source;

    #[test]
    fn an_edge_has_each_ends_connection_and_count() {
        let mut s = Snapshot::new(Source::Runtime);
        let send = Connection { gdrdma: Some(true), ..Connection::net(1, 3, 4, Direction::Send, "IB", 0) };
        let recv = Connection { gdrdma: Some(false), ..Connection::net(1, 3, 4, Direction::Recv, "IB", 1) };
        let other = Connection::new(0, 3, 4, Direction::Both, Transport::P2p);
        s.connections = vec![other.clone(), recv.clone(), send.clone()];
        let end = |rank, peer, direction, bytes| ChannelTraffic {
            rank,
            channel: 1,
            peer,
            direction,
            transport: Some(Transport::Net),
            bytes,
            in_place_bytes: None,
            seconds: 0.0,
        };
        s.traffic = vec![end(4, 3, Direction::Recv, 7), end(3, 4, Direction::Send, 9), end(4, 3, Direction::Send, 1)];
        let e = s.edge(1, 3, 4);
        assert_eq!((e.send, e.recv, e.connection()), (Some(&send), Some(&recv), Some(&send)));
        assert_eq!((e.sent.map(|t| t.bytes), e.received.map(|t| t.bytes)), (Some(9), Some(7)));
        // Only the receiver's line: it names the transport.
        s.connections.retain(|c| c.direction != Direction::Send);
        assert_eq!(s.edge(1, 3, 4).connection(), Some(&recv));
        // The other way is another edge.
        let back = s.edge(1, 4, 3);
        assert!(back.connection().is_none() && back.received.is_none());
        assert_eq!(s.edge(0, 3, 4).connection(), Some(&other));
    }
}
