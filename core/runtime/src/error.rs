//! The runtime's typed errors: each names what failed and where.

use collscope_debug::env::EnvError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// A bootstrap operation's own error (`bootstrap::tcp::BootstrapError`), boxed so this file names no
    /// module of the runtime.
    #[error("bootstrap: {source}")]
    BootstrapFailed {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("bootstrap: {what}: {source}")]
    PeerInfo {
        what: String,
        #[source]
        source: serde_json::Error,
    },
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
    Topo(#[source] collscope_nccl::topo::TopoError),
    #[error("shared memory segment {name}: {op} failed: {source}")]
    Shm { name: String, op: &'static str, source: std::io::Error },
    #[error("no transport connects rank {from} to rank {to} (P2P and SHM disabled or not applicable, no NET)")]
    NoTransport { from: u32, to: u32 },
    #[error("transport {transport}: {msg}")]
    Transport { transport: &'static str, msg: String },
    #[error("transport {transport}: {what}: {source}")]
    TransportIo {
        transport: &'static str,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A transport's own error (NET's `NetError`, its proxy's `AddError`), boxed as for `BootstrapFailed`.
    #[error("transport {transport}: {source}")]
    TransportFailed {
        transport: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{coll} #{seq} failed: {source}")]
    OpFailed { coll: collscope_model::Collective, seq: u64, source: Box<RuntimeError> },
    #[error("{what}: {detail}")]
    Mismatch { what: &'static str, detail: String },
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

impl RuntimeError {
    /// A call that timed out or lost its transport, as a finding of the rank it failed on (a call aborted for
    /// a dead peer is the peer's finding, made by the liveness watch).
    pub fn finding(&self, op: &collscope_model::OpRecord) -> Option<collscope_model::Finding> {
        let (code, fix) = match self {
            RuntimeError::Timeout { .. } => (
                "call_timeout",
                "The rank it waited for is stopped, hung or much slower: look at its state (the job view's \
                 rank_not_arrived), or raise COLLSCOPE_TIMEOUT_S",
            ),
            RuntimeError::Transport { .. }
            | RuntimeError::TransportIo { .. }
            | RuntimeError::TransportFailed { .. } => (
                "transport_error",
                "Check the link between the ranks (interfaces, firewall, NCCL_SOCKET_IFNAME) and the peer's own output",
            ),
            _ => return None,
        };
        Some(collscope_model::Finding {
            code: code.into(),
            severity: collscope_model::Severity::Error,
            rank: Some(op.rank),
            comm: None,
            title: format!("{} #{} failed on rank {}", op.coll, op.seq, op.rank),
            detail: format!("{} #{} ({} bytes): {self}", op.coll, op.seq, op.bytes),
            evidence: Vec::new(),
            fix: fix.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{Collective, DataType, OpRecord};

    #[test]
    fn a_timeout_is_a_finding_of_its_call_and_an_abort_is_not() {
        let op = OpRecord::started(1, 7, Collective::AllReduce, DataType::F32, 256, 0);
        let e = RuntimeError::Timeout { rank: 1, secs: 5, what: "credit from rank 2".into() };
        let f = e.finding(&op).expect("a finding");
        assert_eq!((f.code.as_str(), f.rank), ("call_timeout", Some(1)));
        assert_eq!(f.title, "AllReduce #7 failed on rank 1");
        assert!(f.detail.contains("1024 bytes") && f.detail.contains("credit from rank 2"), "{}", f.detail);
        let abort = RuntimeError::Aborted { rank: 1, what: "x".into(), reason: "rank 2 closed".into() };
        assert!(abort.finding(&op).is_none());
    }
}
