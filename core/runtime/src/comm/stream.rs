//! Whether a call writes the user's destination with streaming stores, past the caches (collscope's choice on
//! host memory; NCCL's GPU kernels have no such question). A call whose buffers on this host fill the
//! last-level cache reads its inputs from memory, and each ordinary store to a destination line first reads it
//! for ownership and then pushes a line someone still needs out of the cache; a streaming store writes the line
//! once and keeps the cache for the slots and the source. Where the destination is read again soon it must stay
//! cached: a peer that reads it in place (P2P read, SHM windows, the NET proxy) keeps ordinary stores, and so
//! does a smaller call, whose destination the next call reads again from cache.
//!
//! Measured on 2 cores (32 MiB L3), SHM rank processes, busbw, this rule against `never`, medians of 5-8
//! interleaved pairs (single pairs vary by a third either way on this host):
//! - AllReduce, 4 ranks: in place 1.13-1.55x from 8 MiB in one set (0.96-1.35x in another), out of place
//!   1.17-1.51x from 4 MiB; 2 ranks: in place 1.09-1.20x from 16 MiB, out of place 1.28-1.77x from 8 MiB;
//!   8 ranks: in place 0.92-0.99x at 4-8 MiB and 1.20-1.33x from 16 MiB, out of place 0.98-1.50x from 2 MiB.
//! - AllGather, 4 ranks: in place 1.25-1.86x from 8 MiB, out of place 1.24-1.69x from 2 MiB.
//!
//! Streaming smaller calls too read 0.54-0.89x in place (2 and 4 ranks, 256 KiB-8 MiB), whose destination the
//! next call reads again; streaming where the peer reads the destination in place (4 threads over P2P) read
//! 0.68-1.07x. Making each result in an L1 spare, so that a reduction with no slot output (ReduceScatter's last
//! step) or a step into a peer's exposed destination could stream too, read 0.87-1.32x against making it in the
//! slot (AllReduce, ReduceScatter, 4 threads); 4 threads streaming their writes into the peers' exposed
//! destinations (which the peers then read from memory to pass on) 0.99-1.18x from 8 MiB, and 4 threads
//! sending through slots instead of P2P reads so that they stream like processes 0.84-1.03x in place: none
//! kept. Threads and processes then move alike at these sizes, what memory allows.

use crate::transport::PeerInfo;
use collscope_debug::env::{Env, EnvError};
use collscope_debug::sys::Cache;

/// The variable that overrides the rule: `auto` (the default), `always` or `never`.
pub(super) const STREAM_VAR: &str = "COLLSCOPE_STREAM_STORES";

/// When calls write their destination with streaming stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StreamStores {
    /// When the buffers of a call of the `sharing` local ranks that run under this rank's last-level cache (on
    /// average) fill its `llc` bytes.
    Auto {
        llc: u64,
        sharing: u64,
    },
    Always,
    Never,
}

impl StreamStores {
    /// The rule `env` asks for; `auto` measures this rank's last-level cache (`cache`, `None` when the host
    /// does not say: then never) against the local ranks that run under it.
    pub(super) fn from_env(
        env: &Env,
        cache: Option<Cache>,
        peers: &[PeerInfo],
        me: &PeerInfo,
    ) -> Result<Self, EnvError> {
        match env.str(STREAM_VAR) {
            None | Some("auto") => {}
            Some("always") => return Ok(StreamStores::Always),
            Some("never") => return Ok(StreamStores::Never),
            Some(other) => {
                return Err(EnvError {
                    name: STREAM_VAR.into(),
                    value: other.into(),
                    expected:
                        "auto (streaming stores when a call's buffers fill the last-level cache), always or never"
                            .into(),
                })
            }
        }
        let Some(cache) = cache else { return Ok(StreamStores::Never) };
        // Each local rank counts for the share of its cores that sit under this cache (a rank pinned there is
        // one, an unpinned rank on a host of several last-level caches a fraction; one whose cores are unknown
        // is one), so that many unpinned ranks spread over several caches do not count against each.
        let share = |p: &PeerInfo| match p.cpus.len() {
            0 => 1.0,
            n => p.cpus.iter().filter(|c| cache.cpus.contains(c)).count() as f64 / n as f64,
        };
        let sharing: f64 = peers.iter().filter(|p| p.host_hash == me.host_hash).map(share).sum();
        Ok(StreamStores::Auto { llc: cache.bytes, sharing: (sharing.ceil() as u64).max(1) })
    }

    /// Whether a call that reads and writes `touched` bytes of this rank's buffers streams its destination.
    pub(super) fn streams(self, touched: u64) -> bool {
        match self {
            StreamStores::Auto { llc, sharing } => touched.saturating_mul(sharing) >= llc,
            StreamStores::Always => true,
            StreamStores::Never => false,
        }
    }
}

/// The bytes of user memory a call covers: its source and destination, once where they overlap (in place).
pub(super) fn touched(src: *const u8, src_len: usize, dst: *const u8, dst_len: usize) -> u64 {
    let (s0, d0) = (src as usize, dst as usize);
    let (s1, d1) = (s0 + src_len, d0 + dst_len);
    let bytes = if s0 < d1 && d0 < s1 { s1.max(d1) - s0.min(d0) } else { src_len + dst_len };
    bytes as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(rank: u32, host_hash: u64, cpus: Vec<u32>) -> PeerInfo {
        PeerInfo { rank, host: "h".into(), host_hash, pid_hash: rank as u64, comm_nonce: 0, pid: rank, dev: 0, cpus }
    }

    #[test]
    fn ranks_stream_when_their_buffers_fill_the_cache_they_share() {
        let cache = || Some(Cache { bytes: 32 << 20, cpus: vec![0, 1] });
        // One rank on this cache's cores, one whose cores are unknown, one on another cache's cores, one on
        // another host: two share it.
        let peers = [peer(0, 7, vec![0]), peer(1, 7, vec![]), peer(2, 7, vec![2, 3]), peer(3, 9, vec![0])];
        let rule = StreamStores::from_env(&Env::from_pairs::<&str, &str>([]), cache(), &peers, &peers[0]).unwrap();
        assert_eq!(rule, StreamStores::Auto { llc: 32 << 20, sharing: 2 });
        assert!(!rule.streams((16 << 20) - 1) && rule.streams(16 << 20));
        // Eight unpinned ranks on a host of four caches of two cores each: two to a cache.
        let spread: Vec<PeerInfo> = (0..8).map(|r| peer(r, 7, (0..8).collect())).collect();
        let rule = StreamStores::from_env(&Env::from_pairs::<&str, &str>([]), cache(), &spread, &spread[0]).unwrap();
        assert_eq!(rule, StreamStores::Auto { llc: 32 << 20, sharing: 2 });
        let never = StreamStores::from_env(&Env::from_pairs::<&str, &str>([]), None, &peers, &peers[0]).unwrap();
        assert!(!never.streams(u64::MAX), "a host that does not describe its caches");
        for (value, want) in [("always", StreamStores::Always), ("never", StreamStores::Never)] {
            let env = Env::from_pairs([(STREAM_VAR, value)]);
            assert_eq!(StreamStores::from_env(&env, cache(), &peers, &peers[0]).unwrap(), want);
        }
        let e = StreamStores::from_env(&Env::from_pairs([(STREAM_VAR, "yes")]), cache(), &peers, &peers[0]);
        let msg = e.unwrap_err().to_string();
        assert!(msg.contains(STREAM_VAR) && msg.contains("yes") && msg.contains("always"), "{msg}");
    }

    #[test]
    fn in_place_buffers_count_once() {
        let buf = [0u8; 64];
        let p = buf.as_ptr();
        assert_eq!(touched(p, 64, p, 64), 64, "AllReduce in place");
        // AllGather in place: this rank's block inside the destination.
        assert_eq!(touched(p.wrapping_add(16), 16, p, 64), 64);
        assert_eq!(touched(p, 16, p.wrapping_add(32), 32), 48, "apart");
    }
}
