//! Registering shared-memory buffers with a communicator (NCCL 2.28.9 `ncclCommWindowRegister` and
//! `ncclCommWindowDeregister`): every rank registers one buffer at a time, in the same order between the same
//! calls; each process maps the buffers of the peers it reaches through SHM, and those connections then read
//! and write steps in the windows as P2P threads do ([`crate::transport::window`]).

use super::Comm;
use crate::error::{Result, RuntimeError};
use crate::transport::conn::Direct;
use crate::transport::window::{ConnWindows, SharedBuf, WindowList};
use collscope_debug::{nccl_info, Subsys};
use collscope_model as model;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The buffers a communicator's ranks registered, as this process sees them.
#[derive(Default)]
pub(crate) struct Windows {
    own: Arc<WindowList>,
    /// By rank: the peers this rank reaches through SHM.
    peers: FxHashMap<u32, Arc<WindowList>>,
    /// Registrations so far, the same count on every rank: names the next one.
    count: u64,
}

impl Windows {
    /// What an SHM connection with `peer` translates through.
    pub(crate) fn conn(&mut self, peer: u32) -> ConnWindows {
        ConnWindows { own: self.own.clone(), peer: self.peers.entry(peer).or_default().clone() }
    }

    /// Whether the ranks registered a buffer already: from then on SHM connections use their windows.
    pub(crate) fn in_use(&self) -> bool {
        self.count > 0
    }
}

/// A buffer registered with a communicator; hand it back to [`Comm::deregister`].
#[derive(Debug)]
#[must_use = "a registration holds the buffer's mappings until it is deregistered"]
pub struct Registration {
    id: u64,
    /// The communicator's own window list: names the communicator it belongs to.
    comm: usize,
}

/// What a rank tells the others about the buffer it registers: where its process holds it open, and where it
/// lies there.
#[derive(Serialize, Deserialize)]
struct Posted {
    pid: u32,
    fd: i32,
    base: u64,
    len: u64,
}

impl Comm {
    /// Registers `buf` (a collective: every rank registers one buffer, between the same calls). Afterwards calls
    /// whose buffers lie in registered ones move their steps without staging them in the connections' slots where
    /// the peer is a process of this host. The communicator keeps the memory mapped until [`Comm::deregister`].
    pub fn register(&mut self, buf: &SharedBuf) -> Result<Registration> {
        let id = self.windows.count;
        let mine = Posted { pid: std::process::id(), fd: buf.fd(), base: buf.base(), len: buf.len() as u64 };
        let blob = serde_json::to_vec(&mine)
            .map_err(|source| RuntimeError::PeerInfo { what: "this rank's registered buffer".into(), source })?;
        let all = self.boot.all_gather(&blob)?;
        self.windows.count += 1;
        self.windows.own.add_own(id, buf);
        let mapped = self.map_peers(id, &all);
        // Every rank mapped what it could before any may deregister and drop its buffer; one that failed still
        // joins, so none waits for it.
        self.boot.barrier()?;
        let mapped = mapped?;
        nccl_info!(
            Subsys::REG,
            "Registered window {id}: {} bytes at {:#x}, mapped that of {mapped} peers on this host",
            buf.len(),
            buf.base()
        );
        for ch in self.channels.iter().chain(std::iter::once(&self.p2p)) {
            let mems = ch.send.values().map(|e| &e.mem).chain(ch.recv.values().map(|e| &e.mem));
            mems.filter(|m| m.windows().is_some()).for_each(|m| m.allow_direct(Direct::ShmWindows));
        }
        Ok(Registration { id, comm: Arc::as_ptr(&self.windows.own) as usize })
    }

    /// Maps the buffers of registration `id` that the SHM peers posted (`all`, by rank); returns how many.
    fn map_peers(&mut self, id: u64, all: &[Vec<u8>]) -> Result<usize> {
        let me = &self.peers[self.rank as usize];
        let mut mapped = 0;
        for (r, b) in all.iter().enumerate() {
            let peer = &self.peers[r];
            let shm = crate::transport::select(&self.chain, me, peer).map(|t| t.kind());
            if r == self.rank as usize || shm != Some(model::Transport::Shm) {
                continue;
            }
            let p: Posted = serde_json::from_slice(b).map_err(|source| RuntimeError::PeerInfo {
                what: format!("rank {r}'s registered buffer is described wrongly"),
                source,
            })?;
            self.windows.peers.entry(r as u32).or_default().add_peer(id, (p.pid, p.fd), p.base, p.len)?;
            mapped += 1;
        }
        Ok(mapped)
    }

    /// Ends a registration (every rank ends the same one, between the same calls): calls no longer use that
    /// buffer in place, and this process unmaps its peers' buffers of it. A registration of another
    /// communicator is refused.
    pub fn deregister(&mut self, reg: Registration) -> Result<()> {
        if reg.comm != Arc::as_ptr(&self.windows.own) as usize {
            return Err(RuntimeError::Mismatch {
                what: "registration",
                detail: format!("window {} was registered with another communicator", reg.id),
            });
        }
        self.windows.own.remove(reg.id);
        self.windows.peers.values().for_each(|w| w.remove(reg.id));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::comm::{Comm, CommOptions};
    use crate::transport::window::SharedBuf;
    use collscope_debug::env::Env;

    #[test]
    fn a_registration_ends_only_on_its_own_communicator() {
        let opts = CommOptions { env: Env::from_pairs(Vec::<(&str, &str)>::new()), net: None, name: None };
        let mut a = Comm::init_threads(1, opts.clone()).unwrap().remove(0);
        let mut b = Comm::init_threads(1, opts).unwrap().remove(0);
        let buf = SharedBuf::new(4096).unwrap();
        let (ra, rb) = (a.register(&buf).unwrap(), b.register(&buf).unwrap());
        let e = b.deregister(ra).unwrap_err().to_string();
        assert!(e.contains("window 0 was registered with another communicator"), "{e}");
        b.deregister(rb).unwrap();
        assert!(b.windows.own.owners(buf.as_slice::<u8>().as_ptr(), 1).is_none());
        assert!(a.windows.own.owners(buf.as_slice::<u8>().as_ptr(), 1).is_some(), "a's window stays");
    }
}
