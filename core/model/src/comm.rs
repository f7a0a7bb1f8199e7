//! Communicators and the ranks in them.

use serde::{Deserialize, Serialize};

/// One communicator as one rank sees it (NCCL's `ncclComm`), or as a log's `Init COMPLETE` line reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Communicator {
    /// The comm pointer NCCL prints (`comm 0x55d3c8a0`), or collscope's own handle.
    pub comm: Option<String>,
    /// `commId 0x...` / `commHash`.
    pub comm_id: Option<String>,
    /// The name the communicator was given: NCCL's `comm->config.commName` (handed to the profiler's `init`, NCCL
    /// 2.28.9 `src/plugin/profiler.cc`), the runtime's `CommOptions::name`; `None` when unnamed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
    pub nnodes: Option<u32>,
    /// Ranks on this rank's node.
    pub local_ranks: Option<u32>,
    pub local_rank: Option<u32>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    /// CUDA device (`cudaDev`), -1 for host memory.
    pub cuda_dev: Option<i32>,
    /// PCI bus id of the device (`nvmlDev`/`busId`).
    pub bus_id: Option<String>,
    pub version: Option<String>,
    pub init: InitTimings,
    pub state: CommState,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommState {
    #[default]
    Unknown,
    Initializing,
    Ready,
    Failed,
    Destroyed,
}

/// Init timings in seconds, as NCCL's `Init timings - ncclCommInitRank: rank ... total X (kernels Y, alloc Z,
/// bootstrap ..., allgathers ..., topo ..., graphs ..., connections ..., rest ...)` line reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InitTimings {
    pub total: Option<f64>,
    /// Phase name to seconds, in the order they ran.
    pub phases: Vec<(String, f64)>,
}
