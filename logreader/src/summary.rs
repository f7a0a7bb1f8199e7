//! Short answers other tools ask of a snapshot read from a log.

use collscope_model::{Snapshot, Transport};
use std::collections::BTreeSet;

/// The transports the connection lines show, as `P2P/IPC`, `P2P/CUMEM`, `P2P/direct pointer`, `SHM`, `NET/IB`,
/// `NET/Socket`, plus `NVLS` when NVLS was set up (inferred connections are not shown by any line).
pub fn transports_seen(s: &Snapshot) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for c in s.connections.iter().filter(|c| !c.inferred) {
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

/// GPUDirect RDMA across the printed NET connections: `Some(true)` when every one uses it, `Some(false)` when any
/// does not, `None` without NET connections (an inferred one says nothing of GDR).
pub fn gdrdma(s: &Snapshot) -> Option<bool> {
    let mut net = s.connections.iter().filter(|c| c.transport == Transport::Net && !c.inferred).peekable();
    net.peek()?;
    Some(net.all(|c| c.gdrdma == Some(true)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{Connection, Direction, Source};

    #[test]
    fn inferred_connections_show_no_transport_and_say_nothing_of_gdr() {
        let mut s = Snapshot::new(Source::Log { files: vec![] });
        s.connections.push(Connection { inferred: true, ..Connection::net(0, 7, 8, Direction::Send, "IB", 0) });
        assert!(transports_seen(&s).is_empty());
        assert_eq!(gdrdma(&s), None, "no printed NET connection");
        s.connections.push(Connection { gdrdma: Some(true), ..Connection::net(0, 8, 7, Direction::Send, "IB", 0) });
        assert_eq!(transports_seen(&s).into_iter().collect::<Vec<_>>(), ["NET/IB"]);
        assert_eq!(gdrdma(&s), Some(true), "the inferred one does not make it a mix");
    }
}
