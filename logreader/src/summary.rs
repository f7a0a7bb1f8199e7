//! Short answers other tools ask of a snapshot read from a log.

use collscope_model::{Snapshot, Transport};
use std::collections::BTreeSet;

/// The transports the connection lines show, as `P2P/IPC`, `P2P/CUMEM`, `P2P/direct pointer`, `SHM`, `NET/IB`,
/// `NET/Socket`, plus `NVLS` when NVLS was set up.
pub fn transports_seen(s: &Snapshot) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for c in &s.connections {
        let label = match c.transport {
            Transport::P2p => {
                let mode = c.mode.as_deref().unwrap_or("");
                format!("P2P/{}", mode.split('/').next().unwrap_or(mode))
            }
            Transport::Net | Transport::CollNet => {
                format!("{}/{}", c.transport, c.net.as_deref().unwrap_or("?"))
            }
            t => t.to_string(),
        };
        out.insert(label);
    }
    if s.channels.nvls.is_some_and(|n| n > 0) || s.log.as_ref().is_some_and(|l| l.nvls_used) {
        out.insert("NVLS".to_string());
    }
    out
}

/// GPUDirect RDMA across the NET connections: `Some(true)` when every one uses it, `Some(false)` when any does
/// not, `None` without NET connections.
pub fn gdrdma(s: &Snapshot) -> Option<bool> {
    let mut net = s.connections.iter().filter(|c| c.transport == Transport::Net).peekable();
    net.peek()?;
    Some(net.all(|c| c.gdrdma == Some(true)))
}
