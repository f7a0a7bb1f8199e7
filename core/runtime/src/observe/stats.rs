//! Running totals of one rank's calls and channel traffic, kept by the data path while telemetry is on and
//! read by telemetry whenever it likes. A call costs a few plain stores into memory only this rank writes:
//! no event is built, no lock taken, no other thread woken, so telemetry's price does not grow with the call
//! rate. Telemetry turns the totals into counters and histograms by difference between two reads. What a read
//! gives ([`CallTotals`], [`TrafficTotals`]) and the buckets are the contract's (`collscope_model::observe`).

use collscope_model::observe::{duration_bucket, size_bucket, CallTotals, TrafficTotals, DURATIONS, SIZE_BOUNDS};
use collscope_model::{Algorithm, Collective, Direction, OpRecord, OpState, Protocol};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const SIZES: usize = SIZE_BOUNDS.len() + 1;

/// (peer, direction) pairs one channel keeps apart; rings use two, double binary trees at most eight.
const PEER_SLOTS: usize = 8;

/// Adds to a total that only one thread writes (the rank calling, or the channel's thread): a load and a
/// store, without the locked read-modify-write an atomic add would cost. Readers see each field whole.
#[inline]
fn bump(a: &AtomicU64, v: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

const ALGOS: usize = Algorithm::ALL.len() + 1;
const PROTOS: usize = Protocol::ALL.len() + 1;

/// Totals of one (collective, algorithm, protocol, size bucket).
#[derive(Default)]
struct Cell {
    failed: AtomicU64,
    bytes: AtomicU64,
    /// Per duration bucket of the successful calls: how many, and their nanoseconds.
    durations: [(AtomicU64, AtomicU64); DURATIONS],
    /// Bandwidths of the latest successful call, as f64 bits (GB/s).
    busbw: AtomicU64,
    algbw: AtomicU64,
}

/// Bytes and busy time of one channel towards one peer in one direction.
struct Slot {
    /// `peer << 1 | sent`, or `u64::MAX` while free.
    key: AtomicU64,
    bytes: AtomicU64,
    /// Of `bytes`, those moved without a slot.
    in_place: AtomicU64,
    nanos: AtomicU64,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            key: AtomicU64::new(u64::MAX),
            bytes: AtomicU64::new(0),
            in_place: AtomicU64::new(0),
            nanos: AtomicU64::new(0),
        }
    }
}

pub struct CallStats {
    cells: Box<[OnceLock<Box<Cell>>]>,
    started: AtomicU64,
    finished: AtomicU64,
    channels: Box<[[Slot; PEER_SLOTS]]>,
    /// Traffic that found its channel's slots full (or a channel past the table), so totals stay honest.
    overflow: AtomicU64,
}

impl CallStats {
    pub fn new(nchannels: usize) -> Self {
        CallStats {
            cells: (0..Collective::ALL.len() * ALGOS * PROTOS * SIZES).map(|_| OnceLock::new()).collect(),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            channels: (0..nchannels).map(|_| Default::default()).collect(),
            overflow: AtomicU64::new(0),
        }
    }

    fn index(coll: Collective, algo: Option<Algorithm>, proto: Option<Protocol>, size: usize) -> usize {
        let a = algo.map_or(ALGOS - 1, Algorithm::id);
        let p = proto.map_or(PROTOS - 1, Protocol::id);
        ((coll.id() * ALGOS + a) * PROTOS + p) * SIZES + size
    }

    fn key_of(i: usize) -> (Collective, Option<Algorithm>, Option<Protocol>, usize) {
        let (rest, size) = (i / SIZES, i % SIZES);
        let (rest, p) = (rest / PROTOS, rest % PROTOS);
        let (c, a) = (rest / ALGOS, rest % ALGOS);
        (Collective::ALL[c], Algorithm::from_id(a), Protocol::from_id(p), size)
    }

    /// A call began (only its rank's thread calls this, and `finish`).
    #[inline]
    pub fn begin(&self) {
        bump(&self.started, 1);
    }

    /// A call ended; `rec` carries its outcome, plan and timings.
    pub fn finish(&self, rec: &OpRecord, nanos: u64) {
        bump(&self.finished, 1);
        let i = Self::index(rec.coll, rec.algo, rec.proto, size_bucket(rec.bytes));
        let cell = self.cells[i].get_or_init(Box::default);
        if rec.state == OpState::Failed {
            bump(&cell.failed, 1);
            return;
        }
        bump(&cell.bytes, rec.bytes);
        let (n, ns) = &cell.durations[duration_bucket(nanos)];
        bump(n, 1);
        bump(ns, nanos);
        cell.busbw.store(rec.busbw_gbps.unwrap_or(0.0).to_bits(), Ordering::Relaxed);
        cell.algbw.store(rec.algbw_gbps.unwrap_or(0.0).to_bits(), Ordering::Relaxed);
    }

    /// Channel `channel` moved `bytes` to (`sent`) or from `peer` in `nanos` (only that channel's thread calls
    /// this for a given channel).
    pub fn traffic(&self, channel: u32, peer: u32, sent: bool, bytes: u64, in_place: u64, nanos: u64) {
        let key = (u64::from(peer) << 1) | u64::from(sent);
        let Some(slots) = self.channels.get(channel as usize) else {
            bump(&self.overflow, bytes);
            return;
        };
        for s in slots {
            let k = s.key.load(Ordering::Relaxed);
            if k == u64::MAX {
                // Claim the free slot; its totals start at zero, so a reader that sees the key reads true sums.
                s.key.store(key, Ordering::Release);
            } else if k != key {
                continue;
            }
            bump(&s.bytes, bytes);
            bump(&s.in_place, in_place);
            bump(&s.nanos, nanos);
            return;
        }
        bump(&self.overflow, bytes);
    }

    /// Calls begun and not finished.
    pub fn in_flight(&self) -> u64 {
        let finished = self.finished.load(Ordering::Relaxed);
        self.started.load(Ordering::Relaxed).saturating_sub(finished)
    }

    /// Every cell that saw a call.
    pub fn calls(&self) -> Vec<CallTotals> {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let bits = |a: &AtomicU64| f64::from_bits(load(a));
        (self.cells.iter().enumerate())
            .filter_map(|(i, c)| c.get().map(|c| (i, c)))
            .map(|(i, c)| {
                let (coll, algo, proto, size_bucket) = Self::key_of(i);
                CallTotals {
                    coll,
                    algo,
                    proto,
                    size_bucket,
                    failed: load(&c.failed),
                    bytes: load(&c.bytes),
                    durations: std::array::from_fn(|d| (load(&c.durations[d].0), load(&c.durations[d].1))),
                    busbw_gbps: bits(&c.busbw),
                    algbw_gbps: bits(&c.algbw),
                }
            })
            .collect()
    }

    /// Every (channel, peer, direction) that moved data.
    pub fn traffic_totals(&self) -> Vec<TrafficTotals> {
        let mut out = Vec::new();
        for (ch, slots) in self.channels.iter().enumerate() {
            for s in slots {
                let key = s.key.load(Ordering::Acquire);
                if key == u64::MAX {
                    break;
                }
                out.push(TrafficTotals {
                    channel: ch as u32,
                    peer: (key >> 1) as u32,
                    direction: if key & 1 == 1 { Direction::Send } else { Direction::Recv },
                    bytes: s.bytes.load(Ordering::Relaxed),
                    in_place: s.in_place.load(Ordering::Relaxed),
                    nanos: s.nanos.load(Ordering::Relaxed),
                });
            }
        }
        out
    }

    /// Bytes moved that no channel slot could hold.
    pub fn overflow_bytes(&self) -> u64 {
        self.overflow.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::DataType;

    fn rec(coll: Collective, bytes: u64, state: OpState) -> OpRecord {
        OpRecord {
            algo: Some(Algorithm::Ring),
            proto: Some(Protocol::Simple),
            state,
            algbw_gbps: Some(2.0),
            busbw_gbps: Some(3.0),
            ..OpRecord::started(0, 1, coll, DataType::F32, bytes / 4, 0)
        }
    }

    #[test]
    fn calls_land_in_their_cells_with_durations_and_failures_apart() {
        let s = CallStats::new(2);
        for (coll, bytes, ns, state) in [
            (Collective::AllReduce, 1 << 20, 500, OpState::Completed),
            (Collective::AllReduce, 1 << 20, 3000, OpState::Completed),
            (Collective::AllReduce, 1 << 20, 3000, OpState::Failed),
            (Collective::AllGather, 8, 10, OpState::Completed),
        ] {
            s.begin();
            s.finish(&rec(coll, bytes, state), ns);
        }
        s.begin();
        assert_eq!(s.in_flight(), 1);
        let calls = s.calls();
        assert_eq!(calls.len(), 2);
        let ar = calls.iter().find(|c| c.coll == Collective::AllReduce).expect("allreduce cell");
        assert_eq!((ar.algo, ar.proto, ar.size_bucket), (Some(Algorithm::Ring), Some(Protocol::Simple), 3));
        assert_eq!((ar.failed, ar.bytes), (1, 2 << 20));
        assert_eq!(ar.durations[0], (1, 500));
        assert_eq!(ar.durations[1], (1, 3000));
        assert_eq!((ar.busbw_gbps, ar.algbw_gbps), (3.0, 2.0));
    }

    #[test]
    fn traffic_is_kept_per_channel_peer_and_direction() {
        let s = CallStats::new(1);
        s.traffic(0, 3, true, 100, 100, 7);
        s.traffic(0, 3, true, 50, 0, 1);
        s.traffic(0, 3, false, 10, 4, 2);
        s.traffic(5, 1, true, 9, 0, 9);
        let t = s.traffic_totals();
        let (send, recv) = (Direction::Send, Direction::Recv);
        assert_eq!(
            t,
            [
                TrafficTotals { channel: 0, peer: 3, direction: send, bytes: 150, in_place: 100, nanos: 8 },
                TrafficTotals { channel: 0, peer: 3, direction: recv, bytes: 10, in_place: 4, nanos: 2 },
            ]
        );
        assert_eq!(s.overflow_bytes(), 9, "a channel past the table is counted, not lost");
    }
}
