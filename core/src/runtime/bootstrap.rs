//! The out-of-band channel ranks use to find each other and swap connection handles (NCCL 2.28.9
//! `src/bootstrap.cc`): allgather, tagged send/recv, barrier. The TCP implementation lives with the NET
//! transport; this module has the trait and the in-process one for ranks that are threads.

use super::error::{Result, RuntimeError};
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
    fn barrier(&self) -> Result<()> {
        self.all_gather(&[]).map(|_| ())
    }
}

type Key = (u32, u32, u64);

struct Mailboxes {
    queues: Mutex<HashMap<Key, VecDeque<Vec<u8>>>>,
    arrived: Condvar,
}

/// Ranks as threads of one process: messages go through shared mailboxes keyed by (from, to, tag).
pub struct ThreadBootstrap {
    rank: u32,
    nranks: u32,
    boxes: Arc<Mailboxes>,
    timeout: Duration,
    /// Sequence number of this rank's next allgather, to keep consecutive ones apart.
    gathers: Mutex<u64>,
}

impl ThreadBootstrap {
    /// One bootstrap per rank, all connected to each other.
    pub fn group(nranks: u32, timeout: Duration) -> Vec<ThreadBootstrap> {
        let boxes = Arc::new(Mailboxes { queues: Mutex::default(), arrived: Condvar::new() });
        (0..nranks)
            .map(|rank| ThreadBootstrap { rank, nranks, boxes: boxes.clone(), timeout, gathers: Mutex::new(0) })
            .collect()
    }

    fn check_peer(&self, peer: u32) -> Result<()> {
        if peer >= self.nranks {
            return Err(RuntimeError::Bootstrap(format!("peer {peer} is out of range for {} ranks", self.nranks)));
        }
        Ok(())
    }
}

impl Bootstrap for ThreadBootstrap {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn nranks(&self) -> u32 {
        self.nranks
    }

    fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let seq = {
            let mut g = self.gathers.lock().unwrap_or_else(|p| p.into_inner());
            *g += 1;
            *g
        };
        let tag = RESERVED_TAG_BASE + seq;
        for peer in (0..self.nranks).filter(|&p| p != self.rank) {
            self.send(peer, tag, mine)?;
        }
        (0..self.nranks).map(|peer| if peer == self.rank { Ok(mine.to_vec()) } else { self.recv(peer, tag) }).collect()
    }

    fn send(&self, peer: u32, tag: u64, data: &[u8]) -> Result<()> {
        self.check_peer(peer)?;
        let mut q = self.boxes.queues.lock().unwrap_or_else(|p| p.into_inner());
        q.entry((self.rank, peer, tag)).or_default().push_back(data.to_vec());
        self.boxes.arrived.notify_all();
        Ok(())
    }

    fn recv(&self, peer: u32, tag: u64) -> Result<Vec<u8>> {
        self.check_peer(peer)?;
        let deadline = Instant::now() + self.timeout;
        let key = (peer, self.rank, tag);
        let mut q = self.boxes.queues.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(msg) = q.get_mut(&key).and_then(VecDeque::pop_front) {
                return Ok(msg);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(RuntimeError::Bootstrap(format!(
                    "rank {} timed out after {} s waiting for a message from rank {peer} (tag {tag:#x})",
                    self.rank,
                    self.timeout.as_secs()
                )));
            }
            q = self.boxes.arrived.wait_timeout(q, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
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
