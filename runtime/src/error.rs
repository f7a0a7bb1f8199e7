//! The runtime's typed errors: each names what failed and where.

use collscope_debug::env::EnvError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    #[error("rank {rank}: timed out after {secs} s waiting for {what} (set COLLSCOPE_TIMEOUT_S to wait longer)")]
    Timeout { rank: u32, secs: u64, what: String },
    #[error("rank {rank}: aborted while waiting for {what}: {reason}")]
    Aborted { rank: u32, what: String, reason: String },
    #[error("{coll}: count {count} of {dtype} overflows the addressable size")]
    CountOverflow { coll: String, count: usize, dtype: String },
    #[error("{coll}: {buffer} buffer has {got} elements, expected {expected}")]
    SizeMismatch { coll: String, buffer: &'static str, got: usize, expected: usize },
    #[error("{what}: rank {got} is out of range for {nranks} ranks")]
    BadRank { what: &'static str, got: usize, nranks: u32 },
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("NCCL_TOPO_FILE: {0}")]
    Topo(collscope_nccl::topo::TopoError),
    #[error("shared memory segment {name}: {op} failed: {source}")]
    Shm { name: String, op: &'static str, source: std::io::Error },
    #[error("no transport connects rank {from} to rank {to} (P2P and SHM disabled or not applicable, no NET)")]
    NoTransport { from: u32, to: u32 },
    #[error("transport {transport}: {msg}")]
    Transport { transport: &'static str, msg: String },
    #[error("{coll} #{seq} failed: {source}")]
    OpFailed { coll: collscope_model::Collective, seq: u64, source: Box<RuntimeError> },
    #[error("{what}: {detail}")]
    Mismatch { what: &'static str, detail: String },
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
