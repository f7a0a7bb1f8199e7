//! What diagnosis quotes: the lines of a log (or the decisions of a live job) behind each kind of fact, kept
//! apart from the model so that the same rules run on a log, on a live job and on a modelled machine.

use super::diag::LineRef;
use std::collections::BTreeMap;

/// The kinds of fact a finding cites.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cite {
    /// A NET connection without GPUDirect RDMA.
    NetNoGdr,
    /// A NET/Socket connection.
    NetSocket,
    /// An SHM connection.
    Shm,
    /// `Connected all rings, use ring PXN x GDR 0`: NCCL chose not to use GPUDirect RDMA.
    RingNoGdr,
    /// The bootstrap interface.
    Bootstrap,
    /// A line that says why GPUDirect RDMA is off (a plugin's "disabling GDR", `GDR 0` on a device line, no
    /// peer-memory module).
    GdrOff,
    /// A network that found no device (`NET/IB : No device found.`).
    NetNoDevice,
    /// A network plugin that was looked for and not found.
    PluginMissing,
    /// P2P reported disabled between GPUs.
    P2pDisabled,
    Ll128Disabled,
    /// Channels limited by NCCL (not by the environment).
    ChannelsLimited,
    /// Graph search fell back to a simple order.
    SearchFallback,
    /// The tuning table.
    Table,
    /// A variable set by the environment.
    Env(String),
    /// An NCCL version, as printed.
    Version(String),
    /// A communicator's init start, by its index in the snapshot's communicators.
    InitStart(usize),
    /// A peer process went away: `[Service thread] Connection closed by localRank 1`.
    PeerClosed,
}

/// The file name of a quote that no log holds: a decision collscope's runtime made while it ran.
pub const LIVE: &str = "live";

/// The quotes behind a snapshot's facts, by kind (at most [`Evidence::MAX_PER_KIND`] each), and what the source
/// saw that the model does not hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    quotes: BTreeMap<Cite, Vec<LineRef>>,
    /// A link left a node (a NET connection, a graph reaching a NET): more than one node, even where the node
    /// count was not printed.
    pub multi_node: bool,
}

impl Evidence {
    pub const MAX_PER_KIND: usize = 5;

    /// The quotes of one kind, oldest first.
    pub fn get(&self, cite: &Cite) -> &[LineRef] {
        self.quotes.get(cite).map_or(&[], Vec::as_slice)
    }

    /// Keeps `line` as a quote of `cite`, unless it has enough already; `make` runs only when it is kept.
    pub fn add(&mut self, cite: Cite, make: impl FnOnce() -> LineRef) {
        match self.quotes.get_mut(&cite) {
            Some(list) if list.len() >= Self::MAX_PER_KIND => {}
            Some(list) => list.push(make()),
            None => {
                self.quotes.insert(cite, vec![make()]);
            }
        }
    }

    /// Quotes a live job's decision, described by `text`.
    pub fn add_live(&mut self, cite: Cite, text: impl Into<String>) {
        self.add(cite, || LineRef { file: LIVE.to_string(), line: 0, text: text.into() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_bounded_number_of_quotes_per_kind() {
        let mut e = Evidence::default();
        for i in 0..8 {
            e.add(Cite::Shm, || LineRef { file: "a.log".into(), line: i, text: format!("line {i}") });
        }
        e.add_live(Cite::NetNoGdr, "rank 0 channel 0 NET/IB/0 without GDRDMA");
        assert_eq!(e.get(&Cite::Shm).len(), Evidence::MAX_PER_KIND);
        assert_eq!(e.get(&Cite::Shm)[4].line, 4, "the oldest are kept");
        assert_eq!(e.get(&Cite::NetNoGdr)[0].file, LIVE);
        assert!(e.get(&Cite::Table).is_empty());
    }
}
