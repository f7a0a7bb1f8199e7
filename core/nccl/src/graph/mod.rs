//! NCCL's init-time graph search and connect phase (NCCL 2.28.9 `src/graph/search.cc`, `connect.cc`,
//! `trees.cc`, `rings.cc`, and the calls in `src/init.cc`).
//!
//! ```
//! use collscope_nccl::{graph, topo};
//! use collscope_debug::env::Env;
//! let xml = topo::load(&topo::TopoSource::Preset("dgx-a100".into())).unwrap();
//! let machine = topo::build(&xml, &topo::TopoEnv::default()).unwrap();
//! let plan = graph::plan(&machine, 1, &Env::default()).unwrap();
//! assert_eq!((plan.ring.graph.n_channels, plan.ring.graph.bw_intra), (12, 20.0));
//! assert_eq!(plan.connected.counts.coll, Some(24));
//! plan.emit(); // NCCL's INFO lines through the logger
//! ```
//!
//! [`plan`] runs the whole init sequence for `nnodes` identical nodes (one rank per GPU); [`compute`] runs one
//! `ncclTopoCompute`; [`connect()`] connects already-known graphs (from a log, say).

pub mod compute;
pub mod connect;
pub mod plan;
pub mod search;
pub mod system;
#[cfg(test)]
pub(crate) mod testing;
pub mod transports;
pub mod trees;
pub mod xml;

pub use compute::{compute, Request};
pub use connect::{align, connect, CommShape, Connected, Graphs};
pub use plan::{plan, Plan};
pub use transports::{Connections, Edge};

use collscope_debug::env::EnvError;
use collscope_model::Graph;

/// NCCL's `MAXCHANNELS` (`src/include/device.h`): channels a graph can have.
pub const MAX_CHANNELS: usize = 64;

/// A computed graph with what the search needs to print and dump it (the result of [`compute()`], the input of
/// [`xml::graphs_xml`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    pub id: u32,
    pub graph: Graph,
    pub latency_inter: f64,
    /// INFO lines: the search's own (fallback, XML load) and `ncclTopoPrintGraph`'s.
    pub lines: Vec<InfoLine>,
}

impl Found {
    /// A graph the search did not run: NCCL's zeroed `struct ncclTopoGraph` (dumped empty, tuned as off).
    pub fn none(id: u32, pattern: collscope_model::Pattern) -> Self {
        Found {
            id,
            graph: Graph {
                pattern,
                n_channels: 0,
                bw_intra: 0.0,
                bw_inter: 0.0,
                type_intra: collscope_model::PathType::LOC,
                type_inter: collscope_model::PathType::LOC,
                same_channels: false,
                cross_nic: 0,
                channels: Vec::new(),
                host: None,
            },
            latency_inter: 0.0,
            lines: Vec::new(),
        }
    }
}
use collscope_debug::Subsys;

/// One INFO line NCCL prints during init, with its subsystem, so callers can log it or show it.
#[derive(Debug, Clone, PartialEq)]
pub struct InfoLine {
    pub subsys: Subsys,
    pub text: String,
}

impl InfoLine {
    pub fn graph(text: String) -> Self {
        InfoLine { subsys: Subsys::GRAPH, text }
    }
    pub fn init(text: String) -> Self {
        InfoLine { subsys: Subsys::INIT, text }
    }
    pub fn env(text: String) -> Self {
        InfoLine { subsys: Subsys::ENV, text }
    }
    pub fn graph_env(text: String) -> Self {
        InfoLine { subsys: Subsys::GRAPH | Subsys::ENV, text }
    }
    /// Prints it through collscope's NCCL-format logger.
    pub fn emit(&self) {
        collscope_debug::nccl_info!(self.subsys, "{}", self.text);
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The caller's topology, graph file or communicator shape cannot be used.
    #[error("{0}")]
    Input(String),
    /// A consistency check NCCL also makes failed (`ncclInternalError`).
    #[error("internal error: {0}")]
    Internal(String),
}
