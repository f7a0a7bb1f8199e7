//! What the metrics receive, and where each fact's values go in the [`Store`] that both exports (Prometheus,
//! OpenTelemetry) read, so both export the same facts with the same labels and only their naming differs.

use crate::catalogue as cat;
use crate::labels::{self, CollLabels};
use crate::store::Store;
use collscope_model::observe::{CallTotals, DURATION_BOUNDS_NS};
use collscope_model::{
    Algorithm, ChannelTraffic, Collective, CommProgress, Decision, KernelChannel, OpRecord, OpState, ProfilerCounters,
    Protocol, ProxyOp, RankSummary, Snapshot, Stall, Warning,
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

/// Each fact's update of the store: the one place a metric's value comes from. Both exports read what these
/// write, so a metric is its catalogue entry and its line here.
impl Store {
    /// Calls finished (reported by a log, or summed by the runtime).
    pub fn calls(&mut self, c: &Calls) {
        let l = CollLabels::new(c.coll, c.algo, c.proto, c.size_bucket, c.rank);
        if c.failed > 0 {
            self.add(&cat::COLL_FAILED, &[l.collective, &l.rank], c.failed);
        }
        if c.ok == 0 {
            return;
        }
        let values = [l.collective, l.algorithm, l.protocol, l.size_bucket, &l.rank, &c.comm_name];
        self.add(&cat::COLL_OPS, &values, c.ok);
        self.add(&cat::COLL_BYTES, &values, c.bytes);
        for &(n, secs) in &c.durations {
            self.observe(&cat::COLL_DURATION, &values, secs / n as f64, n);
        }
        let bw = [l.collective, l.size_bucket, &l.rank, &c.comm_name];
        if let Some(gbps) = c.busbw_gbps {
            self.set(&cat::BUSBW, &bw, gbps * 1e9);
        }
        if let Some(gbps) = c.algbw_gbps {
            self.set(&cat::ALGBW, &bw, gbps * 1e9);
        }
    }

    /// Calls enqueued but not finished, on one rank, changed by `delta`.
    pub fn in_flight(&mut self, rank: u32, delta: i64) {
        self.add(&cat::IN_FLIGHT, &[&rank.to_string()], delta);
    }

    /// The tuner chose (`coll`, `algo`, `proto`) `n` more times on `rank`.
    pub fn decided(&mut self, coll: Collective, algo: Algorithm, proto: Protocol, rank: Option<u32>, n: u64) {
        self.add(&cat::DECISIONS, &[coll.as_str(), algo.as_str(), proto.as_str(), &rank_label(rank)], n);
    }

    /// One decision a log reported.
    pub fn decision(&mut self, d: &Decision) {
        self.decided(d.coll, d.algo, d.proto, d.rank, 1);
    }

    pub fn traffic(&mut self, t: &ChannelTraffic) {
        let (rank, channel, peer) = (t.rank.to_string(), t.channel.to_string(), t.peer.to_string());
        let values = [&rank, &channel, &peer, labels::direction(t.direction), labels::transport(t.transport)];
        self.add(&cat::CHANNEL_BYTES, &values, t.bytes);
        if let Some(n) = t.in_place_bytes {
            self.add(&cat::CHANNEL_IN_PLACE_BYTES, &values, n);
        }
        if t.seconds > 0.0 {
            self.add(&cat::CHANNEL_SECONDS, &values, t.seconds);
        }
    }

    /// `p` carries the steps and waits since the last report of the sub-operations it covers; `finished`: how
    /// many of them ended now (one report covers one; a [`collscope_model::ProxyTally`] several).
    pub fn proxy(&mut self, p: &ProxyOp, finished: u64) {
        let rank = p.rank.to_string();
        let dir = labels::send_or_recv(p.send);
        for &(state, secs) in &p.waits {
            if secs > 0.0 {
                self.add(&cat::PROXY_WAIT, &[&rank, dir, labels::wait_state(state)], secs);
            }
        }
        for (stage, n) in [("posted", p.posted), ("transmitted", p.transmitted), ("done", p.done)] {
            self.add(&cat::PROXY_STEPS, &[&rank, dir, stage], n);
        }
        if finished > 0 {
            self.add(&cat::PROXY_OPS, &[&rank, &p.channel.to_string(), &p.peer.to_string(), dir], finished);
        }
    }

    pub fn error(&mut self, w: &Warning) {
        self.add(&cat::ERRORS, &[&w.class, &rank_label(w.rank)], 1u64);
    }

    /// `n` more records were dropped at `stage` ("queue": the runtime's queue was full; "history": the oldest
    /// kept record went to make room).
    pub fn dropped(&mut self, stage: &'static str, n: u64) {
        self.add(&cat::DROPPED, &[stage], n);
    }

    /// A call that stalled and recovered, once.
    pub fn stall(&mut self, s: &Stall) {
        let rank = s.rank.to_string();
        self.add(&cat::STALLS, &[&rank, comm_or_unknown(s.comm.as_deref())], 1u64);
        self.observe(&cat::STALL_SECONDS, &[&rank], s.secs, 1);
    }

    /// `k` carries what one channel's GPU time and calls grew by since its last report.
    pub fn kernel_channel(&mut self, k: &KernelChannel) {
        if k.gpu_seconds > 0.0 {
            self.add(&cat::KERNEL_CHANNEL_SECONDS, &[&k.rank.to_string(), &k.channel.to_string()], k.gpu_seconds);
        }
    }

    /// `c` carries what the profiler plugin's counters grew by since their last report; `disabled` is its state.
    pub fn profiler(&mut self, c: &ProfilerCounters) {
        for (reason, n) in lost_events(c) {
            self.add(&cat::PROFILER_LOST, &[reason], n);
        }
        self.set(&cat::PROFILER_DISABLED, &[], i64::from(c.disabled));
        for (state, secs) in proxy_thread(c) {
            if secs > 0.0 {
                self.add(&cat::PROXY_THREAD_SECONDS, &[state], secs);
            }
        }
        self.add(&cat::PROXY_APPENDED, &[], c.proxy_appended_ops);
    }

    /// Each rank's progress per communicator now (the oldest call in flight, the latest completion), replaced as a
    /// whole: what hang and no-progress alerts read.
    pub fn progress(&mut self, ranks: &[RankSummary]) {
        self.reset(&cat::IN_FLIGHT_AGE);
        self.reset(&cat::LAST_COMPLETION);
        for r in ranks {
            let rank = r.rank.to_string();
            for c in &r.comms {
                let values = [rank.as_str(), comm_label(c)];
                self.set(&cat::IN_FLIGHT_AGE, &values, c.in_flight.as_ref().map_or(0.0, |f| f.age_s));
                if let Some(us) = c.last_completed_us {
                    self.set(&cat::LAST_COMPLETION, &values, us as f64 / 1e6);
                }
            }
        }
    }

    /// The facts that are states, not counts (connections, communicators, init timings, findings): replaced
    /// as a whole from the snapshot.
    pub fn facts(&mut self, snap: &Snapshot) {
        for m in [
            &cat::CONNECTIONS,
            &cat::COMMUNICATOR_INFO,
            &cat::COMMUNICATOR_SIZE,
            &cat::INIT_PHASE,
            &cat::INIT_TOTAL,
            &cat::JOB_INFO,
            &cat::CHANNELS,
            &cat::FINDINGS,
        ] {
            self.reset(m);
        }
        for (k, n) in connection_groups(snap) {
            let values = [&k.rank.to_string(), &k.peer.to_string(), k.direction, k.transport, &k.mode, k.gdrdma];
            self.set(&cat::CONNECTIONS, &values, n);
        }
        for c in &snap.communicators {
            let rank = rank_label(c.rank);
            let comm = opt_label(c.comm.as_ref());
            let nnodes = opt_label(c.nnodes.or(snap.nnodes));
            let version = opt_label(c.version.as_ref().or(snap.nccl_version.as_ref()));
            let info: [&str; 6] = [&comm, &rank, &opt_label(c.nranks), &nnodes, &version, &opt_label(c.host.as_ref())];
            self.set(&cat::COMMUNICATOR_INFO, &info, 1i64);
            if let Some(n) = c.nranks {
                self.set(&cat::COMMUNICATOR_SIZE, &[&comm, &rank, &nnodes, &version], u64::from(n));
            }
            for (phase, secs) in &c.init.phases {
                self.set(&cat::INIT_PHASE, &[&rank, phase], *secs);
            }
            if let Some(total) = c.init.total {
                self.set(&cat::INIT_TOTAL, &[&rank], total);
            }
        }
        let job = [
            labels::source(&snap.source),
            &opt_label(snap.nccl_version.as_ref()),
            &opt_label(snap.network.as_ref()),
            &opt_label(snap.nranks),
            &opt_label(snap.nnodes),
        ];
        self.set(&cat::JOB_INFO, &job, 1i64);
        let ch = &snap.channels;
        for (kind, n) in [("coll", ch.coll), ("collnet", ch.collnet), ("nvls", ch.nvls), ("p2p", ch.p2p)] {
            if let Some(n) = n {
                self.set(&cat::CHANNELS, &[kind], i64::from(n));
            }
        }
        for f in &snap.findings {
            self.add(&cat::FINDINGS, &[f.code.as_str(), f.severity.as_str()], 1i64);
        }
    }
}

/// The `comm` label of a communicator's progress.
pub fn comm_label(p: &CommProgress) -> &str {
    comm_or_unknown(p.comm.as_deref())
}

/// The `comm` label value: the communicator, or `unknown` where the source did not say.
fn comm_or_unknown(comm: Option<&str>) -> &str {
    comm.unwrap_or("unknown")
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
