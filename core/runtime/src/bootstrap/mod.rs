//! The out-of-band channel ranks use to find each other and swap connection handles (NCCL 2.28.9
//! `src/bootstrap.cc`): allgather, tagged send/recv, barrier. This module has the trait and the in-process one
//! for ranks that are threads; [`tcp`] is the one across processes and hosts (a root, a unique id).

pub mod tcp;

use crate::error::{Result, RuntimeError};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Tags at or above this value are the bootstrap's own (allgather, barrier); callers use lower ones.
pub const RESERVED_TAG_BASE: u64 = 1 << 62;

/// What every bootstrap offers. `send` must not wait for the matching `recv` (it queues), so that ranks can
/// post all their sends before their receives; `recv` and the collectives wait at most `timeout`.
pub trait Bootstrap: Send + Sync {
    fn rank(&self) -> u32;
    fn nranks(&self) -> u32;
    /// Everyone's `mine`, indexed by rank.
    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;
    fn send(&self, peer: u32, tag: u64, data: &[u8]) -> Result<()>;
    fn recv(&self, peer: u32, tag: u64) -> Result<Vec<u8>>;
    /// `recv` that gives up after `timeout` with `None`, so callers can poll for an abort meanwhile. The
    /// default waits as `recv` does (its own timeout and abort rules); bootstraps with a mailbox override it.
    fn recv_timeout(&self, peer: u32, tag: u64, _timeout: Duration) -> Result<Option<Vec<u8>>> {
        self.recv(peer, tag).map(Some)
    }
    fn barrier(&self) -> Result<()> {
        self.all_gather(&[]).map(|_| ())
    }
}

/// Messages that arrived for one rank, by (sender, tag), with a timed wait. Bootstraps whose messages
/// arrive on a receiving thread (TCP, the threads bootstrap) deposit them here.
/// Queued messages by (sender, tag).
type Queues = HashMap<(u32, u64), VecDeque<Vec<u8>>>;

#[derive(Default)]
pub struct Mailbox {
    queues: Mutex<Queues>,
    arrived: Condvar,
}

impl Mailbox {
    pub fn deliver(&self, from: u32, tag: u64, data: Vec<u8>) {
        let mut q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        q.entry((from, tag)).or_default().push_back(data);
        self.arrived.notify_all();
    }

    /// The oldest message from `from` with `tag`, waiting up to `timeout` for it.
    pub fn take(&self, me: u32, from: u32, tag: u64, timeout: Duration) -> Result<Vec<u8>> {
        self.take_within(from, tag, timeout).ok_or_else(|| {
            RuntimeError::Bootstrap(format!(
                "rank {me} timed out after {} s waiting for a message from rank {from} (tag {tag:#x})",
                timeout.as_secs()
            ))
        })
    }

    /// The oldest message from `from` with `tag` if one arrives within `timeout`.
    pub fn take_within(&self, from: u32, tag: u64, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        let mut q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(msg) = q.get_mut(&(from, tag)).and_then(VecDeque::pop_front) {
                return Some(msg);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            q = self.arrived.wait_timeout(q, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }
}

/// Allgather over `send`/`recv` with the reserved tag of the `seq`-th allgather, for bootstraps without a
/// faster collective path.
pub fn all_gather_p2p(b: &dyn Bootstrap, seq: u64, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    let tag = RESERVED_TAG_BASE + seq;
    for peer in (0..b.nranks()).filter(|&p| p != b.rank()) {
        b.send(peer, tag, mine)?;
    }
    (0..b.nranks()).map(|peer| if peer == b.rank() { Ok(mine.to_vec()) } else { b.recv(peer, tag) }).collect()
}

/// Ranks as threads of one process: each rank has a mailbox the others deliver into.
pub struct ThreadBootstrap {
    rank: u32,
    boxes: Arc<Vec<Mailbox>>,
    timeout: Duration,
    /// Sequence number of this rank's last allgather, to keep consecutive ones apart.
    gathers: Mutex<u64>,
}

impl ThreadBootstrap {
    /// One bootstrap per rank, all connected to each other.
    pub fn group(nranks: u32, timeout: Duration) -> Vec<ThreadBootstrap> {
        let boxes = Arc::new((0..nranks).map(|_| Mailbox::default()).collect::<Vec<_>>());
        (0..nranks)
            .map(|rank| ThreadBootstrap { rank, boxes: boxes.clone(), timeout, gathers: Mutex::new(0) })
            .collect()
    }

    fn check_peer(&self, peer: u32) -> Result<()> {
        if peer >= self.nranks() {
            return Err(RuntimeError::Bootstrap(format!("peer {peer} is out of range for {} ranks", self.nranks())));
        }
        Ok(())
    }
}

impl Bootstrap for ThreadBootstrap {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn nranks(&self) -> u32 {
        self.boxes.len() as u32
    }

    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let seq = {
            let mut g = self.gathers.lock().unwrap_or_else(|p| p.into_inner());
            *g += 1;
            *g
        };
        all_gather_p2p(self, seq, mine)
    }

    fn send(&self, peer: u32, tag: u64, data: &[u8]) -> Result<()> {
        self.check_peer(peer)?;
        self.boxes[peer as usize].deliver(self.rank, tag, data.to_vec());
        Ok(())
    }

    fn recv(&self, peer: u32, tag: u64) -> Result<Vec<u8>> {
        self.check_peer(peer)?;
        self.boxes[self.rank as usize].take(self.rank, peer, tag, self.timeout)
    }

    fn recv_timeout(&self, peer: u32, tag: u64, timeout: Duration) -> Result<Option<Vec<u8>>> {
        self.check_peer(peer)?;
        Ok(self.boxes[self.rank as usize].take_within(peer, tag, timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allgather_send_recv_and_barrier_between_threads() {
        let boots = ThreadBootstrap::group(3, Duration::from_secs(10));
        let out: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = boots
                .iter()
                .map(|b| {
                    s.spawn(move || {
                        let all = b.all_gather(&[b.rank() as u8; 2]).unwrap();
                        let again = b.all_gather(&[10 + b.rank() as u8]).unwrap();
                        b.send((b.rank() + 1) % 3, 7, &[b.rank() as u8]).unwrap();
                        let got = b.recv((b.rank() + 2) % 3, 7).unwrap();
                        b.barrier().unwrap();
                        (all, again, got)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (r, (all, again, got)) in out.into_iter().enumerate() {
            assert_eq!(all, vec![vec![0, 0], vec![1, 1], vec![2, 2]]);
            assert_eq!(again, vec![vec![10], vec![11], vec![12]]);
            assert_eq!(got, vec![((r + 2) % 3) as u8]);
        }
    }

    #[test]
    fn recv_times_out_naming_the_peer() {
        let boots = ThreadBootstrap::group(2, Duration::from_millis(20));
        let e = boots[0].recv(1, 3).unwrap_err().to_string();
        assert!(e.contains("from rank 1"), "{e}");
        assert!(boots[0].send(5, 0, &[]).is_err());
    }
}
