//! What a metrics backend receives. The state calls every backend (Prometheus, OpenTelemetry) through this trait,
//! so both export the same facts with the same labels and only their naming differs.

use crate::labels;
use collscope_model::observe::{CallTotals, DURATION_BOUNDS_NS};
use collscope_model::{
    Algorithm, ChannelTraffic, Collective, CommProgress, Decision, KernelChannel, OpRecord, OpState, ProfilerCounters,
    Protocol, ProxyOp, RankSummary, Snapshot, Warning,
};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Calls of one kind (collective, algorithm, protocol, size bucket, rank) finished since the last report: one
/// call a log reported, or the difference between two reads of the runtime's running totals.
#[derive(Debug, Clone, PartialEq)]
pub struct Calls {
    pub coll: Collective,
    pub algo: Option<Algorithm>,
    pub proto: Option<Protocol>,
    pub size_bucket: &'static str,
    pub rank: u32,
    /// The communicator's `comm_name` label value ([`labels::CommNames`]).
    pub comm_name: Arc<str>,
    pub ok: u64,
    pub failed: u64,
    /// Bytes of the successful calls.
    pub bytes: u64,
    /// The successful calls whose duration is known, as (how many, their seconds), each entry inside one
    /// duration-histogram bucket, so observing its mean that many times gives the histogram true counts and sum.
    pub durations: Vec<(u64, f64)>,
    /// Bandwidths of the latest successful call (GB/s).
    pub busbw_gbps: Option<f64>,
    pub algbw_gbps: Option<f64>,
}

impl Calls {
    /// One call, as a log (or a test) reports it.
    pub fn of(op: &OpRecord, comm_name: Arc<str>) -> Self {
        let ok = op.state != OpState::Failed;
        Calls {
            coll: op.coll,
            algo: op.algo,
            proto: op.proto,
            size_bucket: labels::size_bucket(op.bytes),
            rank: op.rank,
            comm_name,
            ok: u64::from(ok),
            failed: u64::from(!ok),
            bytes: if ok { op.bytes } else { 0 },
            durations: op.duration_us.filter(|_| ok).map(|us| vec![(1, us * 1e-6)]).unwrap_or_default(),
            busbw_gbps: op.busbw_gbps.filter(|_| ok),
            algbw_gbps: op.algbw_gbps.filter(|_| ok),
        }
    }

    /// What `now` added to `before` (the same cell of the same rank, read earlier; `None` the first time).
    pub fn since(rank: u32, comm_name: Arc<str>, before: Option<&CallTotals>, now: &CallTotals) -> Self {
        let sub = |f: fn(&CallTotals) -> u64| f(now).saturating_sub(before.map_or(0, f));
        let durations: Vec<(u64, f64)> = (0..DURATION_BOUNDS_NS.len() + 1)
            .filter_map(|i| {
                let (n0, ns0) = before.map_or((0, 0), |b| b.durations[i]);
                let (n, ns) = now.durations[i];
                (n > n0).then(|| (n - n0, ns.saturating_sub(ns0) as f64 * 1e-9))
            })
            .collect();
        let ok: u64 = durations.iter().map(|(n, _)| n).sum();
        Calls {
            coll: now.coll,
            algo: now.algo,
            proto: now.proto,
            size_bucket: labels::size_bucket_label(now.size_bucket),
            rank,
            comm_name,
            ok,
            failed: sub(|t| t.failed),
            bytes: sub(|t| t.bytes),
            durations,
            busbw_gbps: Some(now.busbw_gbps).filter(|_| ok > 0),
            algbw_gbps: Some(now.algbw_gbps).filter(|_| ok > 0),
        }
    }
}

pub trait MetricSink {
    /// Calls finished (reported by a log, or summed by the runtime).
    fn calls(&mut self, c: &Calls);
    /// Calls enqueued but not finished, on one rank, changed by `delta`.
    fn in_flight(&mut self, rank: u32, delta: i64);
    /// The tuner chose (`coll`, `algo`, `proto`) `n` more times on `rank`.
    fn decided(&mut self, coll: Collective, algo: Algorithm, proto: Protocol, rank: Option<u32>, n: u64);
    /// One decision a log reported.
    fn decision(&mut self, d: &Decision) {
        self.decided(d.coll, d.algo, d.proto, d.rank, 1);
    }
    fn traffic(&mut self, t: &ChannelTraffic);
    /// `p` carries the steps and waits since the last report of the sub-operations it covers; `finished`: how
    /// many of them ended now (one report covers one; a [`collscope_model::ProxyTally`] several).
    fn proxy(&mut self, p: &ProxyOp, finished: u64);
    fn error(&mut self, w: &Warning);
    /// `n` more records were dropped at `stage` ("queue": the runtime's queue was full; "history": the oldest
    /// kept record went to make room).
    fn dropped(&mut self, stage: &'static str, n: u64);
    /// `k` carries what one channel's GPU time and calls grew by since its last report.
    fn kernel_channel(&mut self, k: &KernelChannel);
    /// `c` carries what the profiler plugin's counters grew by since their last report; `disabled` is its state.
    fn profiler(&mut self, c: &ProfilerCounters);
    /// The facts that are states, not counts (connections, communicators, init timings, findings): replaced
    /// as a whole from the snapshot.
    fn facts(&mut self, snap: &Snapshot);
    /// Each rank's progress per communicator now (the oldest call in flight, the latest completion), replaced as a
    /// whole: what hang and no-progress alerts read.
    fn progress(&mut self, ranks: &[RankSummary]);
}

/// The `comm` label of a communicator's progress.
pub fn comm_label(p: &CommProgress) -> &str {
    p.comm.as_deref().unwrap_or("unknown")
}

/// The profiler plugin's counters as (reason, count) of [`crate::catalogue::PROFILER_LOST`].
pub fn lost_events(c: &ProfilerCounters) -> [(&'static str, u64); 5] {
    [
        ("no_free_event", c.dropped_events),
        ("ring_full", c.dropped_records),
        ("orphan", c.orphan_events),
        ("unsupported", c.unsupported_calls),
        ("misused", c.misused_handles),
    ]
}

/// The proxy thread's time as (state, seconds) of [`crate::catalogue::PROXY_THREAD_SECONDS`].
pub fn proxy_thread(c: &ProfilerCounters) -> [(&'static str, f64); 4] {
    [
        ("sleep", c.proxy_sleep_seconds),
        ("idle", c.proxy_idle_seconds),
        ("active", c.proxy_active_seconds),
        ("append", c.proxy_append_seconds),
    ]
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
