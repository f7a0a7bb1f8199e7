//! What a running process hands telemetry: the plain data of the runtime's observe seam and the two traits
//! telemetry reads it through. The runtime implements them (its recorder and each communicator's records);
//! telemetry takes a `&dyn Feed` the binary gives it, so it never builds the runtime.
//!
//! A [`Feed`] is the process's side: a bounded queue of the rare events that are not calls (connections,
//! communicators, proxy operations, warnings) and the list of its communicators' [`CommRecords`]. Each of those
//! keeps running totals of calls ([`CallTotals`]) and channel traffic ([`TrafficTotals`]), and a ring of recent
//! operations ([`NewOps`]); telemetry turns the totals into counters and histograms by difference between two
//! reads.

use crate::connection::Direction;
use crate::events::Event;
use crate::names::{Algorithm, Collective, Protocol};
use crate::ops::OpRecord;
use std::collections::VecDeque;
use std::sync::Arc;

/// Events a feed keeps between two drains when telemetry names no capacity.
pub const DEFAULT_CAPACITY: usize = 1 << 16;

/// Upper bounds of the message-size buckets, in bytes; a size lands in the first bound it does not exceed,
/// or past the last one.
pub const SIZE_BOUNDS: [u64; 9] =
    [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30];

/// Upper bounds of the duration histogram in nanoseconds: 1 us to about 4 s in steps of 4.
pub const DURATION_BOUNDS_NS: [u64; 12] = {
    let mut b = [1000u64; 12];
    let mut i = 1;
    while i < b.len() {
        b[i] = b[i - 1] * 4;
        i += 1;
    }
    b
};
/// Duration buckets: one per bound of [`DURATION_BOUNDS_NS`], then the open-ended one.
pub const DURATIONS: usize = DURATION_BOUNDS_NS.len() + 1;

pub fn size_bucket(bytes: u64) -> usize {
    SIZE_BOUNDS.iter().position(|b| bytes <= *b).unwrap_or(SIZE_BOUNDS.len())
}

pub fn duration_bucket(ns: u64) -> usize {
    DURATION_BOUNDS_NS.iter().position(|b| ns <= *b).unwrap_or(DURATION_BOUNDS_NS.len())
}

/// The totals of one (collective, algorithm, protocol, size bucket), as read.
#[derive(Debug, Clone, PartialEq)]
pub struct CallTotals {
    pub coll: Collective,
    pub algo: Option<Algorithm>,
    pub proto: Option<Protocol>,
    /// Index into [`SIZE_BOUNDS`] (its length for the open-ended last bucket).
    pub size_bucket: usize,
    pub failed: u64,
    pub bytes: u64,
    /// (calls, nanoseconds) per duration bucket of [`DURATION_BOUNDS_NS`], then the open-ended one.
    pub durations: [(u64, u64); DURATIONS],
    pub busbw_gbps: f64,
    pub algbw_gbps: f64,
}

/// Bytes and busy time of one channel towards one peer in one direction, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrafficTotals {
    pub channel: u32,
    pub peer: u32,
    pub direction: Direction,
    pub bytes: u64,
    /// Of `bytes`, those no connection buffer carried ([`crate::ChannelTraffic::in_place_bytes`]).
    pub in_place: u64,
    pub nanos: u64,
}

/// Operations a reader had not seen yet, and how many it missed because the ring had moved past them.
#[derive(Debug, Default)]
pub struct NewOps {
    pub ops: Vec<OpRecord>,
    pub missed: u64,
}

/// One communicator's records, read whenever the reader likes; the data path never waits for a reader.
pub trait CommRecords: Send + Sync {
    /// Unique in the process, so a reader can tell these records from those of an earlier communicator.
    fn id(&self) -> u64;
    fn rank(&self) -> u32;
    /// The communicator's name, given to its operations.
    fn name(&self) -> Option<&str>;
    /// Every (collective, algorithm, protocol, size bucket) that saw a call.
    fn calls(&self) -> Vec<CallTotals>;
    /// Calls begun and not finished.
    fn in_flight(&self) -> u64;
    /// Every (channel, peer, direction) that moved data.
    fn traffic_totals(&self) -> Vec<TrafficTotals>;
    /// The kept operations numbered after `seq`, oldest first.
    fn ops_after(&self, seq: u64) -> NewOps;
    /// The call the rank has begun and not finished, if any.
    fn in_progress(&self) -> Option<OpRecord>;
}

/// The process's side of telemetry: a bounded queue of events and the list of its communicators' records.
pub trait Feed: Send + Sync {
    /// Starts keeping events, at most `capacity` (at least 1) between drains.
    fn enable(&self, capacity: usize);
    /// Stops keeping events; those queued stay until drained.
    fn disable(&self);
    /// Moves every queued event into `out`, oldest first.
    fn drain_into(&self, out: &mut VecDeque<Event>);
    /// Events let go because the queue was full, since the process started.
    fn dropped(&self) -> u64;
    /// Every listed communicator's records (those of communicators gone are handed out one last time).
    fn sources(&self) -> Vec<Arc<dyn CommRecords>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_their_bounds() {
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(1024), 0);
        assert_eq!(size_bucket(1025), 1);
        assert_eq!(size_bucket(u64::MAX), SIZE_BOUNDS.len());
        assert_eq!(DURATION_BOUNDS_NS[1], 4000);
        assert_eq!(duration_bucket(999), 0);
        assert_eq!(duration_bucket(4001), 2);
        assert_eq!(duration_bucket(u64::MAX), DURATION_BOUNDS_NS.len());
    }
}
