//! SHM between processes on one host (NCCL 2.28.9 `src/transport/shm.cc`): the receiver creates a POSIX shared
//! memory segment holding the connection, the sender maps it and unlinks the name at once, so once both sides
//! mapped it nothing is left in /dev/shm. Names carry the creator's pid and a random value; a segment whose
//! creator died before its peer mapped it is removed by the next process that starts the transport, and by
//! the creator's own drop otherwise.

use super::segment::{create_segment, open_segment, shm_err, sweep_stale_segments};
use super::{record, recv_record, ConnSpec, Established, PeerInfo, Pending, Transport};
use crate::error::{Result, RuntimeError};
use crate::transport::conn::ConnMem;
use collscope_debug::{nccl_trace, Subsys};
use collscope_model as model;
use collscope_model::lines::ConnLine;
use nix::sys::mman::shm_unlink;
use std::sync::{Arc, Once};

pub(crate) struct ShmTransport;

impl ShmTransport {
    pub(crate) fn new() -> Self {
        static SWEEP: Once = Once::new();
        SWEEP.call_once(sweep_stale_segments);
        ShmTransport
    }
}

impl Default for ShmTransport {
    fn default() -> Self {
        Self::new()
    }
}

struct ShmSend {
    record: model::Connection,
    line: String,
    sizes: crate::transport::conn::BufSizes,
}

struct ShmRecv {
    mem: Arc<ConnMem>,
    record: model::Connection,
}

impl Transport for ShmTransport {
    fn kind(&self) -> model::Transport {
        model::Transport::Shm
    }

    fn can_connect(&self, me: &PeerInfo, peer: &PeerInfo) -> bool {
        me.host_hash == peer.host_hash
    }

    fn send_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)> {
        let record = record(spec, spec.me.rank, spec.peer.rank, model::Transport::Shm, "direct/direct");
        // NCCL's SHM line has no connIndex (`src/transport/shm.cc`).
        let line = ConnLine { conn: &record, conn_index: None, devs: (spec.me.dev, spec.peer.dev) }.to_string();
        Ok((Box::new(ShmSend { record, line, sizes: spec.sizes }), Vec::new()))
    }

    fn recv_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)> {
        let (map, guard) = create_segment(spec.sizes.region_bytes())?;
        let name = guard.as_str().to_string();
        let mem = ConnMem::from_map(map, spec.sizes, Some(Box::new(guard)));
        let record = recv_record(spec, model::Transport::Shm, "direct/direct");
        Ok((Box::new(ShmRecv { mem: Arc::new(mem), record }), name.into_bytes()))
    }
}

impl Pending for ShmSend {
    fn connect(self: Box<Self>, peer_handle: &[u8]) -> Result<Established> {
        let name = std::str::from_utf8(peer_handle)
            .map_err(|_| RuntimeError::Transport { transport: "SHM", msg: "malformed segment name".into() })?;
        let m = open_segment(name, self.sizes.region_bytes())?;
        // Both sides have it mapped now: the name is no longer needed.
        shm_unlink(name).map_err(|e| shm_err(name, "shm_unlink", e))?;
        nccl_trace!(Subsys::SHM, "Mapped and unlinked shared memory segment {name}");
        let mem = ConnMem::from_map(m, self.sizes, None);
        Ok(Established { mem: Arc::new(mem), record: self.record, line: Some(self.line), guard: None })
    }
}

impl Pending for ShmRecv {
    fn connect(self: Box<Self>, _peer_handle: &[u8]) -> Result<Established> {
        Ok(Established { mem: self.mem, record: self.record, line: None, guard: None })
    }
}
