//! NCCL's init-time graph search and connect phase (NCCL 2.28.9 `src/graph/search.cc`, `connect.cc`,
//! `trees.cc`, `rings.cc`, and the calls in `src/init.cc`).

pub mod connect;
pub mod trees;

pub use connect::{align, connect, CommShape, Connected, Graphs};

use crate::env::EnvError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The caller's topology, graph or communicator shape cannot be used.
    #[error("{0}")]
    Input(String),
    /// A consistency check NCCL also makes failed (`ncclInternalError`).
    #[error("internal error: {0}")]
    Internal(String),
}
