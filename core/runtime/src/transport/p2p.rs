//! P2P between ranks that are threads of one process: the sender writes straight into the receiver's
//! buffer (NCCL 2.28.9 `src/transport/p2p.cc`, the `P2P/direct pointer` case of same-process peers), and a
//! step that is a plain copy of the sender's buffer is not copied at all: the receiver reads it there
//! (`Direct::P2pRead`).

use super::{record, recv_record, ConnSpec, Established, PeerInfo, Pending, Transport};
use crate::error::{Result, RuntimeError};
use crate::transport::conn::{ConnMem, Direct};
use collscope_model as model;
use collscope_model::lines::ConnLine;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Receive buffers waiting for their sender, by handle. The handle crosses the bootstrap as bytes, as NCCL
/// passes the raw pointer; the registry makes taking it safe.
fn registry() -> &'static Mutex<HashMap<u64, Arc<ConnMem>>> {
    static R: OnceLock<Mutex<HashMap<u64, Arc<ConnMem>>>> = OnceLock::new();
    R.get_or_init(Mutex::default)
}

pub(crate) struct P2pTransport;

struct P2pSend {
    line: String,
    record: model::Connection,
}

struct P2pRecv {
    mem: Arc<ConnMem>,
    record: model::Connection,
}

impl Transport for P2pTransport {
    fn kind(&self) -> model::Transport {
        model::Transport::P2p
    }

    fn can_connect(&self, me: &PeerInfo, peer: &PeerInfo) -> bool {
        me.pid_hash == peer.pid_hash
    }

    fn send_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)> {
        let record = record(spec, spec.me.rank, spec.peer.rank, model::Transport::P2p, "direct pointer");
        let line = ConnLine { conn: &record, conn_index: Some(spec.conn_index), devs: (spec.me.dev, spec.peer.dev) };
        let line = line.to_string();
        Ok((Box::new(P2pSend { line, record }), Vec::new()))
    }

    fn recv_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let mem = Arc::new(ConnMem::anonymous(spec.sizes)?);
        mem.allow_direct(Direct::P2pRead);
        let key = NEXT.fetch_add(1, Ordering::Relaxed);
        registry().lock().unwrap_or_else(|p| p.into_inner()).insert(key, mem.clone());
        let record = recv_record(spec, model::Transport::P2p, "direct pointer");
        Ok((Box::new(P2pRecv { mem, record }), key.to_le_bytes().to_vec()))
    }
}

impl Pending for P2pSend {
    fn connect(self: Box<Self>, peer_handle: &[u8]) -> Result<Established> {
        let key = peer_handle
            .try_into()
            .map(u64::from_le_bytes)
            .map_err(|_| RuntimeError::Transport { transport: "P2P", msg: "malformed receiver handle".into() })?;
        let mem = registry().lock().unwrap_or_else(|p| p.into_inner()).remove(&key).ok_or_else(|| {
            RuntimeError::Transport { transport: "P2P", msg: format!("receiver buffer {key} is not in this process") }
        })?;
        Ok(Established { mem, record: self.record, line: Some(self.line), guard: None })
    }
}

impl Pending for P2pRecv {
    fn connect(self: Box<Self>, _peer_handle: &[u8]) -> Result<Established> {
        Ok(Established { mem: self.mem, record: self.record, line: None, guard: None })
    }
}
