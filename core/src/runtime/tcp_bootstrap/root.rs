//! The bootstrap root (NCCL 2.28.9 `src/bootstrap.cc`, `bootstrapRoot`, single-root case): every rank checks in
//! with its rank, the rank count, an address where the root can answer it, and the address of its ring listener;
//! the root tells each rank where its next ring neighbour listens, as soon as both have checked in.

use super::BootstrapError;
use crate::debug::Subsys;
use crate::runtime::socket::{addr_from_bytes, addr_string, addr_to_bytes, Listener, Socket, SocketType, ADDR_BYTES};
use crate::{nccl_trace, nccl_warn};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// What a rank sends the root (NCCL's `extInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CheckIn {
    pub rank: u32,
    pub nranks: u32,
    /// Where the root sends this rank its ring neighbour.
    pub reply_addr: SocketAddr,
    /// Where this rank's previous ring neighbour connects.
    pub ring_addr: SocketAddr,
}

pub(super) const CHECK_IN_BYTES: usize = 8 + 2 * ADDR_BYTES;

impl CheckIn {
    pub fn to_bytes(self) -> [u8; CHECK_IN_BYTES] {
        let mut b = [0u8; CHECK_IN_BYTES];
        b[..4].copy_from_slice(&self.rank.to_le_bytes());
        b[4..8].copy_from_slice(&self.nranks.to_le_bytes());
        b[8..8 + ADDR_BYTES].copy_from_slice(&addr_to_bytes(&self.reply_addr));
        b[8 + ADDR_BYTES..].copy_from_slice(&addr_to_bytes(&self.ring_addr));
        b
    }

    pub fn from_bytes(b: &[u8; CHECK_IN_BYTES]) -> Result<Self, BootstrapError> {
        let addr = |o: usize| {
            let mut a = [0u8; ADDR_BYTES];
            a.copy_from_slice(&b[o..o + ADDR_BYTES]);
            addr_from_bytes(&a).map_err(|family| BootstrapError::Protocol(format!("unknown address family {family}")))
        };
        Ok(CheckIn {
            rank: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            nranks: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            reply_addr: addr(8)?,
            ring_addr: addr(8 + ADDR_BYTES)?,
        })
    }
}

/// Serves one communicator's check-ins on `listener`, then returns. Runs on its own thread.
pub(super) fn serve(listener: Listener, magic: u64, timeout: Duration) {
    if let Err(e) = run(&listener, magic, timeout) {
        nccl_warn!("Bootstrap Root : {e}");
    }
}

fn run(listener: &Listener, magic: u64, timeout: Duration) -> Result<(), BootstrapError> {
    let deadline = Instant::now() + timeout;
    let mut ranks: Vec<Option<CheckIn>> = Vec::new();
    let mut nranks = 0usize;
    let mut received = 0usize;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut sock = listener.accept(left, None).map_err(|e| {
            let missing: Vec<String> =
                ranks.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(i, _)| i.to_string()).collect();
            BootstrapError::Protocol(format!("{e}; ranks that never checked in: [{}]", missing.join(",")))
        })?;
        let mut b = [0u8; CHECK_IN_BYTES];
        sock.recv_timeout(&mut b, left.max(Duration::from_secs(1)), None)?;
        let info = CheckIn::from_bytes(&b)?;
        if received == 0 {
            nranks = info.nranks as usize;
            ranks = vec![None; nranks];
        }
        if info.nranks as usize != nranks {
            return Err(BootstrapError::Protocol(format!(
                "mismatch in info from procs, nranks {nranks} vs {}",
                info.nranks
            )));
        }
        let r = info.rank as usize;
        if r >= nranks || ranks[r].is_some() {
            return Err(BootstrapError::Protocol(format!("rank {r} of {nranks} ranks has already checked in")));
        }
        ranks[r] = Some(info);
        received += 1;
        nccl_trace!(Subsys::BOOTSTRAP, "Received connect from rank {r} total {received}/{nranks}");
        // Answer as soon as a pair is known, like NCCL, so early ranks start connecting their ring.
        let prev = (r + nranks - 1) % nranks;
        let next = (r + 1) % nranks;
        if let Some(p) = ranks[prev].filter(|_| prev != r) {
            reply(&p.reply_addr, magic, &info.ring_addr, deadline)?;
        }
        if let Some(n) = ranks[next].filter(|_| next != r || nranks == 1) {
            reply(&info.reply_addr, magic, &n.ring_addr, deadline)?;
        }
        if received == nranks {
            return Ok(());
        }
    }
}

fn reply(to: &SocketAddr, magic: u64, next_ring: &SocketAddr, deadline: Instant) -> Result<(), BootstrapError> {
    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
    let mut s = Socket::connect(*to, magic, SocketType::Bootstrap, left)
        .map_err(|e| BootstrapError::Protocol(format!("cannot answer rank at {}: {e}", addr_string(to))))?;
    s.send(&addr_to_bytes(next_ring))?;
    Ok(())
}
