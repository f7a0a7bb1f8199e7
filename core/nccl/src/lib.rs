//! NCCL 2.28.9's model of a machine, as pure functions of their inputs (topology XML, a sysfs root, the
//! environment): what NCCL decides at init before any byte moves.
//!
//! ```text
//! topo (detect / XML / preset -> Topology, paths, P2P and GDR checks) -> graph (search, connect, rings,
//! trees) -> tuning (latency/bandwidth table, per-call choice) -> explain (all of it as a model `Snapshot`,
//! plus why cells are off, refused calls and what forcing costs)
//! ```
//!
//! Depends on collscope-model (the types it fills) and collscope-debug (NCCL's INFO lines, the environment);
//! never on the runtime, which calls into it.

pub mod explain;
pub mod graph;
pub mod replay;
pub mod topo;
pub mod tuning;
pub mod upgrade;
pub mod version;
pub mod whatif;

pub use explain::{explain, ExplainError, Explained, Extras};
pub use version::{NcclVersion, VersionError, VersionProfile};
