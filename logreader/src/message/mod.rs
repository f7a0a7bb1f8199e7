//! What one NCCL message says, as a typed event. Dispatch looks at the message's first bytes first, so each
//! family's parser (hand-written for the frequent ones, a regex for the rest) runs only on its candidates.
//! Formats follow NCCL 2.28.9 and the older forms seen in real logs (2.4 to 2.27).

pub mod setup;
pub mod tuning;

/// Connection, ring and tree lines: the contract's grammar, which the runtime writes with.
pub use collscope_model::lines as conn;
use collscope_model::{ChannelCounts, Graph, GraphChannel, NetDevice, PluginNote};

pub use conn::{RingOrder, TreeEntry};
pub use setup::{CommInfo, CommInit, GdrLine, PathLine};
pub use tuning::{CollLine, DecisionLine, TableLine};

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Version(String),
    Bootstrap {
        name: String,
        address: String,
    },
    /// `NET/IB : Using [0]mlx5_0:1/IB ...; OOB ib0:10.0.0.1<0>` and `NET/Socket : Using [0]eth0:10.0.0.1<0>`.
    NetUsing {
        net: String,
        devices: Vec<NetDevice>,
    },
    /// `NET/IB : No device found.`
    NetNoDevice(String),
    /// `Using network IB`.
    UsingNetwork(String),
    /// A line from a network plugin that names itself (`NET/OFI Selected Provider is efa`).
    NetPluginActive(String),
    Plugin(PluginNote),
    Gdr(GdrLine),
    Graph(Graph),
    GraphChannel(GraphChannel),
    /// `Could not find a path for pattern 4, falling back to simple order`.
    SearchFallback(u32),
    Conn(collscope_model::Connection),
    RingOrder(RingOrder),
    /// (channel, prev, rank, next).
    RingNeighbours(u32, u32, u32, u32),
    Trees(Vec<TreeEntry>),
    ChannelCounts(ChannelCounts),
    ThreadThresholds(String),
    ConnectedRings {
        pxn: Option<bool>,
        gdr: Option<bool>,
    },
    ConnectedTrees,
    /// NVLS set up or used (`NVLS comm ...`, `Connected NVLS tree`); `false` for "not available".
    Nvls(bool),
    CommInit(CommInit),
    CommInfo(CommInfo),
    InitTimings {
        rank: u32,
        nranks: u32,
        total: f64,
        phases: Vec<(String, f64)>,
    },
    Table(TableLine),
    MatrixStart,
    Decision(DecisionLine),
    Coll(CollLine),
    Env {
        name: String,
        value: String,
    },
    TopoSystem {
        max_bw: f64,
        total_bw: f64,
    },
    /// A node of the topology print: `+ PCI[24.0] - GPU/0-1b000 (0)`.
    TopoNode(String),
    Path(PathLine),
    /// `P2P is disabled between connected GPUs 0 and 1`.
    P2pDisabled(String),
    /// `Disabling LL128 over all PxN connections (PXB and C2C)`.
    Ll128Disabled(String),
    /// `User asked for a minimum of 64 channels, limiting to 32`.
    ChannelsLimited(String),
    /// `init.cc:1089 -> 2`: an error code passed up the stack.
    ErrorTrace {
        location: String,
        code: i32,
    },
    /// Understood, nothing to keep.
    Known,
}

/// Parses one NCCL INFO/TRACE message. `None` means not understood.
pub fn parse(msg: &str) -> Option<Event> {
    let first = *msg.as_bytes().first()?;
    match first {
        b'C' => {
            if msg.starts_with("Channel ") || msg.starts_with("CollNet ") {
                if let Some(c) = conn::connection(msg) {
                    return Some(Event::Conn(c));
                }
                if let Some(r) = conn::ring_order(msg) {
                    return Some(Event::RingOrder(r));
                }
            }
            if msg.starts_with("Connected") {
                return setup::connected(msg);
            }
            setup::misc(msg)
        }
        b'R' if msg.starts_with("Ring ") => conn::connection(msg)
            .map(Event::Conn)
            .or_else(|| conn::ring_neighbours(msg).map(|(c, p, r, n)| Event::RingNeighbours(c, p, r, n))),
        b'T' if msg.starts_with("Trees") => conn::trees(msg).map(Event::Trees),
        b'T' if msg.starts_with("Tree ") => conn::tree(msg).map(|t| Event::Trees(vec![t])),
        b'N' if msg.starts_with("NCCL version ") => Some(Event::Version(setup::version(msg)?)),
        b'N' if msg.starts_with("NCCL_") => setup::env(msg).or_else(|| setup::misc(msg)),
        b'0'..=b'9' if msg.contains(" Bytes -> Algo ") => tuning::decision(msg).map(Event::Decision),
        _ => {
            if let Some((name, rest)) = split_colon(msg) {
                if rest.starts_with("opCount ") {
                    return tuning::coll(msg).map(Event::Coll);
                }
                if rest.starts_with(|c: char| c.is_ascii_digit()) && !name.contains(' ') {
                    return tuning::decision(msg).map(Event::Decision);
                }
            }
            if msg.contains(" |") {
                if let Some(t) = tuning::table_line(msg) {
                    return Some(Event::Table(t));
                }
            }
            setup::misc(msg)
        }
    }
}

/// `name: rest` at the first `": "` (a byte search: this runs on every COLL and TUNING line).
pub(crate) fn split_colon(msg: &str) -> Option<(&str, &str)> {
    let b = msg.as_bytes();
    memchr::memchr_iter(b':', b).find(|&i| b.get(i + 1) == Some(&b' ')).map(|i| (&msg[..i], &msg[i + 2..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_reaches_each_family() {
        assert!(matches!(parse("Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"), Some(Event::Conn(_))));
        assert!(matches!(parse("Channel 00/02 :    0   1"), Some(Event::RingOrder(_))));
        assert!(matches!(parse("Ring 00 : 7 -> 0 -> 1"), Some(Event::RingNeighbours(0, 7, 0, 1))));
        assert!(matches!(parse("Trees [0] 1/8/-1->0->-1"), Some(Event::Trees(_))));
        assert!(matches!(parse("NCCL version 2.28.9+cuda12.9"), Some(Event::Version(v)) if v == "2.28.9+cuda12.9"));
        assert!(matches!(parse("NCCL_IB_DISABLE set by environment to 0."), Some(Event::Env { .. })));
        assert!(matches!(parse("AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x2 count 1 datatype 7 op 0 root 0 comm 0x3 [nranks=2] stream 0x4"), Some(Event::Coll(_))));
        assert!(matches!(
            parse("Broadcast: 8 Bytes -> Algo Ring proto LL channel{Lo..Hi}={0..0}"),
            Some(Event::Decision(_))
        ));
        assert!(matches!(parse("    AllReduce |    6.3/  14.5 |"), Some(Event::Table(_))));
        assert!(matches!(parse("Connected all trees"), Some(Event::ConnectedTrees)));
        assert_eq!(parse("Frobnicating the widgets"), None);
        assert_eq!(parse(""), None);
    }
}
