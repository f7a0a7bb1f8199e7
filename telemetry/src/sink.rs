//! What a metrics backend receives. The state calls every backend (Prometheus, OpenTelemetry) through this trait,
//! so both export the same facts with the same labels and only their naming differs.

use crate::labels;
use collscope_core::model::{ChannelTraffic, Decision, OpRecord, ProxyOp, Snapshot, Warning};
use std::collections::BTreeMap;

pub trait MetricSink {
    /// A call finished (or a log reported it).
    fn collective(&mut self, op: &OpRecord);
    /// Calls enqueued but not finished, on one rank, changed by `delta`.
    fn in_flight(&mut self, rank: u32, delta: i64);
    fn decision(&mut self, d: &Decision);
    fn traffic(&mut self, t: &ChannelTraffic);
    fn proxy(&mut self, p: &ProxyOp);
    fn error(&mut self, w: &Warning);
    /// `n` more records were dropped at `stage` ("queue": the runtime's queue was full; "history": the oldest
    /// kept record went to make room).
    fn dropped(&mut self, stage: &'static str, n: u64);
    /// The facts that are states, not counts (connections, communicators, init timings, findings): replaced
    /// as a whole from the snapshot.
    fn facts(&mut self, snap: &Snapshot);
}

/// One row of the connection facts: how many channels connect `rank` to `peer` this way.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ConnectionKey {
    pub rank: u32,
    pub peer: u32,
    pub direction: &'static str,
    pub transport: &'static str,
    pub mode: String,
    pub gdrdma: &'static str,
}

/// Connections grouped by everything but the channel, with their channel counts.
pub fn connection_groups(snap: &Snapshot) -> BTreeMap<ConnectionKey, u64> {
    let mut groups = BTreeMap::new();
    for c in &snap.connections {
        let (rank, peer) = labels::connection_ends(c);
        let key = ConnectionKey {
            rank,
            peer,
            direction: labels::direction(c.direction),
            transport: c.transport.as_str(),
            mode: c.mode.clone().unwrap_or_default(),
            gdrdma: labels::gdrdma(c, &snap.source),
        };
        *groups.entry(key).or_insert(0) += 1;
    }
    groups
}

/// A label value for an optional rank.
pub fn rank_label(rank: Option<u32>) -> String {
    rank.map_or_else(|| "unknown".to_string(), |r| r.to_string())
}

/// A label value for an optional fact.
pub fn opt_label<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(String::new, |v| v.to_string())
}
