//! What the graph search and connect phases decide: graphs per pattern, channel counts, rings and trees.

use super::topology::PathType;
use serde::{Deserialize, Serialize};

/// NCCL's graph search patterns (`NCCL_TOPO_PATTERN_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    BalancedTree = 1,
    SplitTree = 2,
    Tree = 3,
    Ring = 4,
    Nvls = 5,
    CollnetDirect = 6,
}

impl Pattern {
    pub const ALL: [Pattern; 6] = [
        Pattern::BalancedTree,
        Pattern::SplitTree,
        Pattern::Tree,
        Pattern::Ring,
        Pattern::Nvls,
        Pattern::CollnetDirect,
    ];

    pub fn id(self) -> u8 {
        self as u8
    }

    pub fn from_id(id: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.id() == id)
    }
}

/// One channel of a graph: the GPUs (by rank) in order inside the node, and the NET devices used to enter and
/// leave the node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphChannel {
    pub intra: Vec<i32>,
    pub inter: Vec<i64>,
}

/// A graph found by the search (`Pattern 4, crossNic 0, nChannels 12, bw 20.000000/20.000000, type NVL/PIX,
/// sameChannels 1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Graph {
    pub pattern: Pattern,
    pub n_channels: u32,
    pub bw_intra: f64,
    pub bw_inter: f64,
    pub type_intra: PathType,
    pub type_inter: PathType,
    pub same_channels: bool,
    pub cross_nic: u32,
    #[serde(default)]
    pub channels: Vec<GraphChannel>,
    /// The host that printed it, for graphs read from a log (each node searches its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// `%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, %d p2p channels per peer`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChannelCounts {
    pub coll: Option<u32>,
    pub collnet: Option<u32>,
    pub nvls: Option<u32>,
    pub p2p: Option<u32>,
    pub p2p_per_peer: Option<u32>,
}

/// One channel's ring: the full rank order (`Channel 00/24 :    0   1   2 ...`), and, where a rank printed it,
/// that rank's neighbours (`Ring 00 : 7 -> 0 -> 1`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ring {
    pub channel: u32,
    /// Rank order around the ring; empty when only neighbour lines were seen.
    pub order: Vec<u32>,
    /// The order was cut short in the log (`...`).
    #[serde(default)]
    pub truncated: bool,
    /// (prev, rank, next) triples as individual ranks reported them.
    #[serde(default)]
    pub neighbours: Vec<(u32, u32, u32)>,
}

/// One rank's place in one channel's tree (`Trees [0] 1/2/-1->0->-1`, `Tree 0 : -1 -> 0 -> 1/8/-1`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tree {
    pub channel: u32,
    pub rank: u32,
    /// -1 for the root.
    pub up: i32,
    /// Up to three children, -1 for none (NCCL_MAX_TREE_ARITY 3).
    pub down: Vec<i32>,
}
