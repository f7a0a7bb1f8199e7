//! The telemetry state: the model as last known, folded from events by the model's one fold
//! (`Snapshot::apply_within`, bounded by [`Bounds`]), the metrics derived from the same events, and the live
//! event stream. Events from the runtime and snapshots from a followed log both land here.

use crate::labels::{self, CommNames};
use crate::otel::Otel;
use crate::prom;
use crate::sink::Calls;
use crate::store::Store;
use collscope_model::observe::{CallTotals, CommRecords};
use collscope_model::{
    Algorithm, Applied, Bounds, ChannelTraffic, Collective, Connection, Direction, DumpReason, Event, KernelChannel,
    OpRecord, ProfilerCounters, Protocol, ProxyOp, ProxyWait, RankDump, RankSummary, Snapshot, Source, Transport,
};
use rustc_hash::FxHashMap;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::broadcast;

/// Live events buffered per subscriber before a slow one starts missing some.
const EVENT_BUFFER: usize = 4096;

/// How far into each list of a followed source's snapshots the state has already taken events.
#[derive(Debug, Default, Clone, Copy)]
struct Ingested {
    ops: usize,
    proxy: usize,
    decisions: usize,
    warnings: usize,
    connections: usize,
    communicators: usize,
    findings: usize,
}

/// (rank, channel, peer, sends): how a rank's channel reaches a peer in one direction.
type LinkKey = (u32, u32, u32, bool);

/// The directions a connection record covers, as seen from the rank that owns each end.
fn link_keys(c: &Connection) -> Vec<LinkKey> {
    let (rank, peer) = labels::connection_ends(c);
    match c.direction {
        Direction::Send => vec![(rank, c.channel, peer, true)],
        Direction::Recv => vec![(rank, c.channel, peer, false)],
        Direction::Both => vec![(c.src, c.channel, c.dst, true), (c.dst, c.channel, c.src, false)],
    }
}

pub struct State {
    /// The model as known now; records past `bounds` go and `collscope_dropped_records_total` (stage
    /// "history") rises.
    snap: Snapshot,
    bounds: Bounds,
    /// Transports by channel end, from the connection records, for traffic that does not name one.
    links: HashMap<LinkKey, Transport>,
    /// Every metric's series, read by both exports.
    store: Store,
    otel: Option<Otel>,
    events: broadcast::Sender<Arc<Event>>,
    facts_dirty: bool,
    queue_drops_seen: u64,
    ingested: Ingested,
    /// Read positions in each communicator's records, by records id.
    cursors: HashMap<u64, Cursor>,
    /// Each recent proxy sub-operation as last reported, by (rank, seq, channel, peer, send): the runtime
    /// reports one while it runs and when it ends, and the counters take only what changed.
    proxy_seen: FxHashMap<(u32, u64, u32, u32, bool), SeenProxy>,
    /// The `comm_name` label values handed out.
    comm_names: CommNames,
    /// A finding that calls for a dump arrived (a timeout, a peer's failure) and none was written since.
    dump_due: Option<DumpReason>,
}

/// What the next report of a proxy sub-operation is measured against, kept without an allocation: collscope's
/// runtime reports every operation, up to twice (while it runs and when it ends).
#[derive(Clone, Copy)]
struct SeenProxy {
    n_steps: u64,
    posted: u64,
    transmitted: u64,
    done: u64,
    /// Seconds by [`ProxyWait::index`].
    waits: [f64; ProxyWait::ALL.len()],
}

impl From<&ProxyOp> for SeenProxy {
    fn from(p: &ProxyOp) -> Self {
        let mut waits = [0.0; ProxyWait::ALL.len()];
        for &(w, secs) in &p.waits {
            waits[w.index()] = secs;
        }
        SeenProxy { n_steps: p.n_steps, posted: p.posted, transmitted: p.transmitted, done: p.done, waits }
    }
}

/// Sub-operations remembered for their next report; past it, those of calls 64 or more before the newest go.
const PROXY_SEEN: usize = 4096;

/// What `now` adds to `before` (the same sub-operation's last report, if any): steps and wait seconds.
fn proxy_delta<'a>(now: &'a ProxyOp, before: Option<&SeenProxy>) -> Cow<'a, ProxyOp> {
    let Some(b) = before else { return Cow::Borrowed(now) };
    Cow::Owned(ProxyOp {
        posted: now.posted.saturating_sub(b.posted),
        transmitted: now.transmitted.saturating_sub(b.transmitted),
        done: now.done.saturating_sub(b.done),
        waits: now.waits.iter().map(|&(w, t)| (w, (t - b.waits[w.index()]).max(0.0))).collect(),
        ..*now
    })
}

/// What `now` (a channel's totals) adds to `before` (its totals as kept); a late report, behind them, adds nothing.
fn kernel_growth(now: &KernelChannel, before: Option<&KernelChannel>) -> KernelChannel {
    let (calls, secs) = before.map_or((0, 0.0), |b| (b.calls, b.gpu_seconds));
    if calls > now.calls {
        return KernelChannel { calls: 0, gpu_seconds: 0.0, ..now.clone() };
    }
    KernelChannel { calls: now.calls - calls, gpu_seconds: (now.gpu_seconds - secs).max(0.0), ..now.clone() }
}

/// What `now` (the profiler plugin's totals) adds to `before`; `disabled` as it is now.
fn profiler_growth(now: &ProfilerCounters, before: Option<&ProfilerCounters>) -> ProfilerCounters {
    let b = before.cloned().unwrap_or_default();
    let secs = |n: f64, b: f64| (n - b).max(0.0);
    ProfilerCounters {
        dropped_events: now.dropped_events.saturating_sub(b.dropped_events),
        dropped_records: now.dropped_records.saturating_sub(b.dropped_records),
        orphan_events: now.orphan_events.saturating_sub(b.orphan_events),
        unsupported_calls: now.unsupported_calls.saturating_sub(b.unsupported_calls),
        misused_handles: now.misused_handles.saturating_sub(b.misused_handles),
        disabled: now.disabled,
        proxy_sleep_seconds: secs(now.proxy_sleep_seconds, b.proxy_sleep_seconds),
        proxy_idle_seconds: secs(now.proxy_idle_seconds, b.proxy_idle_seconds),
        proxy_active_seconds: secs(now.proxy_active_seconds, b.proxy_active_seconds),
        proxy_append_seconds: secs(now.proxy_append_seconds, b.proxy_append_seconds),
        proxy_appended_ops: now.proxy_appended_ops.saturating_sub(b.proxy_appended_ops),
    }
}

/// Microseconds since the UNIX epoch, the clock of the model's call times.
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// How far telemetry has read one communicator's records: the last operation taken and the totals as last
/// read, so the next read reports only what changed.
#[derive(Debug, Default)]
struct Cursor {
    seq: u64,
    in_flight: u64,
    calls: HashMap<(Collective, Option<Algorithm>, Option<Protocol>, usize), CallTotals>,
    /// (bytes, of them in place, nanoseconds) per (channel, peer, direction), as last read.
    traffic: HashMap<(u32, u32, Direction), (u64, u64, u64)>,
}

impl State {
    pub fn new(source: Source, bounds: Bounds, otel: Option<Otel>) -> Self {
        let mut store = Store::new();
        // A log has no runtime queue and no profiler plugin: their families stay out of its exposition.
        let log = matches!(source, Source::Log { .. });
        if log {
            for m in crate::catalogue::PROCESS_ONLY {
                store.reset(m);
            }
        }
        // The stages exist from the start, so a rate of drops reads 0 rather than nothing.
        for stage in if log { &["history"][..] } else { &["queue", "history"] } {
            store.dropped(stage, 0);
        }
        State {
            snap: Snapshot::new(source),
            bounds,
            links: HashMap::new(),
            store,
            otel,
            events: broadcast::channel(EVENT_BUFFER).0,
            facts_dirty: true,
            queue_drops_seen: 0,
            ingested: Ingested::default(),
            cursors: HashMap::new(),
            proxy_seen: FxHashMap::default(),
            comm_names: CommNames::default(),
            dump_due: None,
        }
    }

    /// Live events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }

    /// Folds `ev` into the model; what the bounds pushed out counts as dropped history.
    fn fold(&mut self, ev: &Event) -> Applied {
        let out = self.snap.apply_within(ev, &self.bounds);
        if out.evicted > 0 {
            self.store.dropped("history", out.evicted as u64);
        }
        if let Some(stall) = &out.stall {
            self.store.stall(stall);
        }
        self.facts_dirty |= out.facts_changed;
        out
    }

    fn publish(&self, ev: Event) {
        // No subscriber is not an error: the stream is for whoever listens.
        if self.events.receiver_count() > 0 {
            let _ = self.events.send(Arc::new(ev));
        }
    }

    fn learn_links(&mut self, c: &Connection) {
        for k in link_keys(c) {
            self.links.insert(k, c.transport);
        }
    }

    /// Takes one live event into the metrics, the histories and the event stream.
    pub fn apply(&mut self, mut ev: Event) {
        if let Event::Traffic(t) = &mut ev {
            if t.transport.is_none() {
                let key = (t.rank, t.channel, t.peer, t.direction != Direction::Recv);
                t.transport = self.links.get(&key).copied();
            }
        }
        match &ev {
            Event::OpCompleted(op) => {
                let calls = Calls::of(op, self.comm_names.label(op.comm.as_deref()));
                self.store.calls(&calls);
                // The runtime's (and NCCL's, through the profiler plugin) calls carry the tuner's choice.
                if let (true, Some(algo), Some(proto)) = (self.calls_carry_choice(), op.algo, op.proto) {
                    self.store.decided(op.coll, algo, proto, Some(op.rank), 1);
                }
                self.span(op);
            }
            Event::Proxy(p) => {
                let key = (p.rank, p.seq, p.channel, p.peer, p.send);
                if self.proxy_seen.len() >= PROXY_SEEN {
                    self.proxy_seen.retain(|k, _| k.1 + 64 >= p.seq);
                }
                let before = self.proxy_seen.insert(key, SeenProxy::from(p));
                let delta = proxy_delta(p, before.as_ref());
                // It counts as an operation, and becomes a span event, once: when it is first seen finished.
                let finished = p.done >= p.n_steps && before.is_none_or(|b| b.done < b.n_steps);
                self.store.proxy(&delta, u64::from(finished));
                if let (true, Some(o)) = (finished, self.otel.as_mut()) {
                    o.proxy_event(p);
                }
            }
            // Finished operations, each reported once: their sums go to the counters as they are, and the newest
            // becomes its call's span event.
            Event::ProxyTally(t) => {
                self.store.proxy(&t.sum, t.ops);
                if let Some(o) = self.otel.as_mut() {
                    o.proxy_event(&t.last);
                }
            }
            Event::Traffic(t) => self.store.traffic(t),
            Event::Connection(c) => self.learn_links(c),
            // The runtime's calls count its choices (above); its decisions (one per size) only fill the model.
            Event::Decision(d) if !self.calls_carry_choice() => self.store.decision(d),
            Event::KernelChannel(k) => {
                let grown = kernel_growth(k, self.snap.kernel_channel(k));
                self.store.kernel_channel(&grown);
            }
            Event::Profiler(c) => {
                let grown = profiler_growth(c, self.snap.profiler.as_ref());
                self.store.profiler(&grown);
            }
            Event::Warning(w) => self.store.error(w),
            Event::Finding(f) => self.dump_due = self.dump_due.or(DumpReason::of_finding(f)),
            Event::OpEnqueued(_)
            | Event::Communicator(_)
            | Event::Decision(_)
            | Event::InitFacts(_)
            | Event::Endpoints(_)
            | Event::Snapshot => {}
        }
        let out = self.fold(&ev);
        // The in-flight gauge follows the calls the model holds as enqueued.
        let was_in_flight = out.replaced.is_some_and(|s| s.in_flight());
        match &ev {
            Event::OpEnqueued(op) if !was_in_flight => self.store.in_flight(op.rank, 1),
            Event::OpCompleted(op) if was_in_flight => self.store.in_flight(op.rank, -1),
            _ => {}
        }
        for &rank in &out.evicted_in_flight {
            self.store.in_flight(rank, -1);
        }
        self.publish(ev);
    }

    /// Whether completed calls carry the tuner's choice (live sources do; a log's decisions are its own lines).
    fn calls_carry_choice(&self) -> bool {
        matches!(self.snap.source, Source::Runtime | Source::Profiler)
    }

    /// A finished call's span.
    fn span(&mut self, op: &OpRecord) {
        if let Some(o) = self.otel.as_mut() {
            o.span(op);
        }
    }

    /// Reads a communicator's records: what its running totals gained since the last read goes to the metrics,
    /// its operations not seen yet to the histories, spans and event stream (operations its ring dropped
    /// before this read count as dropped at the "queue" stage), and its traffic as events.
    pub fn absorb(&mut self, r: &dyn CommRecords) {
        let mut cur = self.cursors.remove(&r.id()).unwrap_or_default();
        let rank = r.rank();
        let comm_name = self.comm_names.label(r.name());
        for now in r.calls() {
            let key = (now.coll, now.algo, now.proto, now.size_bucket);
            let calls = Calls::since(rank, comm_name.clone(), cur.calls.get(&key), &now);
            if calls.ok + calls.failed > 0 {
                self.store.calls(&calls);
                if let (Some(algo), Some(proto)) = (now.algo, now.proto) {
                    self.store.decided(now.coll, algo, proto, Some(rank), calls.ok + calls.failed);
                }
            }
            cur.calls.insert(key, now);
        }
        let in_flight = r.in_flight();
        let delta = in_flight as i64 - cur.in_flight as i64;
        if delta != 0 {
            self.store.in_flight(rank, delta);
            cur.in_flight = in_flight;
        }
        for t in r.traffic_totals() {
            let (bytes, in_place, nanos) = cur
                .traffic
                .insert((t.channel, t.peer, t.direction), (t.bytes, t.in_place, t.nanos))
                .unwrap_or_default();
            if t.bytes > bytes {
                let traffic = ChannelTraffic {
                    rank,
                    channel: t.channel,
                    peer: t.peer,
                    direction: t.direction,
                    transport: None,
                    bytes: t.bytes - bytes,
                    in_place_bytes: Some(t.in_place.saturating_sub(in_place)),
                    seconds: t.nanos.saturating_sub(nanos) as f64 * 1e-9,
                };
                self.apply(Event::Traffic(traffic));
            }
        }
        let fresh = r.ops_after(cur.seq);
        if fresh.missed > 0 {
            self.store.dropped("queue", fresh.missed);
        }
        if let Some(last) = fresh.ops.last() {
            cur.seq = last.seq;
        }
        for op in fresh.ops {
            self.span(&op);
            let ev = Event::OpCompleted(op);
            self.fold(&ev);
            self.publish(ev);
        }
        self.track_running(r, cur.seq);
        self.cursors.insert(r.id(), cur);
    }

    /// Shows the call a communicator's rank is running (one that hangs stays in the snapshot's calls in
    /// flight until its completion replaces it). `done` is the last finished call read. The in-flight gauge
    /// follows the running totals, not the calls folded here.
    fn track_running(&mut self, r: &dyn CommRecords, done: u64) {
        if let Some(op) = r.in_progress().filter(|op| op.seq > done) {
            if self.snap.op(op.comm.as_deref(), op.rank, op.seq).is_none() {
                let ev = Event::OpEnqueued(op);
                self.fold(&ev);
                self.publish(ev);
            }
        }
    }

    /// Forgets the read positions of communicators other than `live` (by records id).
    pub fn retain_sources(&mut self, live: &[u64]) {
        self.cursors.retain(|id, _| live.contains(id));
    }

    /// Changes facts that have no event of their own (topology, graphs, tuning table, versions).
    pub fn update_facts(&mut self, f: impl FnOnce(&mut Snapshot)) {
        f(&mut self.snap);
        self.facts_dirty = true;
        self.publish(Event::Snapshot);
    }

    /// Takes a snapshot of a source that only grows (a log read from its start): its facts replace the
    /// state's, and what its histories (calls, proxy, decisions, warnings) gained since the last one is folded
    /// in as events. A list that shrank means the
    /// source started over (a new file after rotation), so all of it is new.
    pub fn ingest(&mut self, mut snap: Snapshot) {
        fn fresh(len: usize, seen: &mut usize) -> std::ops::Range<usize> {
            let from = if len < *seen { 0 } else { *seen };
            *seen = len;
            from..len
        }
        // The histories kept so far stay; the source's own are folded in below.
        let ops = std::mem::replace(&mut snap.ops, std::mem::take(&mut self.snap.ops));
        let proxy = std::mem::replace(&mut snap.proxy, std::mem::take(&mut self.snap.proxy));
        let decisions = std::mem::replace(&mut snap.decisions, std::mem::take(&mut self.snap.decisions));
        let warnings = std::mem::replace(&mut snap.warnings, std::mem::take(&mut self.snap.warnings));
        let mut seen = self.ingested;
        let new_connections = fresh(snap.connections.len(), &mut seen.connections);
        let new_communicators = fresh(snap.communicators.len(), &mut seen.communicators);
        let new_findings = fresh(snap.findings.len(), &mut seen.findings);
        for c in &snap.connections[new_connections] {
            self.publish(Event::Connection(c.clone()));
        }
        for c in &snap.communicators[new_communicators] {
            self.publish(Event::Communicator(c.clone()));
        }
        for f in &snap.findings[new_findings] {
            self.publish(Event::Finding(f.clone()));
        }
        self.links.clear();
        for c in &snap.connections {
            self.learn_links(c);
        }
        self.snap = snap;
        self.facts_dirty = true;
        for i in fresh(ops.len(), &mut seen.ops) {
            self.apply(Event::OpCompleted(ops[i].clone()));
        }
        for i in fresh(proxy.len(), &mut seen.proxy) {
            self.apply(Event::Proxy(proxy[i].clone()));
        }
        for i in fresh(decisions.len(), &mut seen.decisions) {
            self.apply(Event::Decision(decisions[i].clone()));
        }
        for i in fresh(warnings.len(), &mut seen.warnings) {
            self.apply(Event::Warning(warnings[i].clone()));
        }
        self.ingested = seen;
        self.publish(Event::Snapshot);
    }

    /// The runtime queue's drop counter, as read now (it only rises).
    pub fn note_queue_drops(&mut self, total: u64) {
        let new = total.saturating_sub(self.queue_drops_seen);
        if new > 0 {
            self.queue_drops_seen = total;
            self.store.dropped("queue", new);
        }
    }

    /// Brings the fact metrics up to date and lets the span exporter end spans; call once per drain.
    pub fn tick(&mut self) {
        self.refresh_facts();
        if let Some(o) = self.otel.as_mut() {
            self.store.progress(&RankSummary::of(&self.snap, now_us()));
            o.push(&mut self.store);
            o.tick();
        }
    }

    fn refresh_facts(&mut self) {
        if self.facts_dirty {
            self.facts_dirty = false;
            let snap = std::mem::replace(&mut self.snap, Snapshot::new(Source::Runtime));
            self.store.facts(&snap);
            self.snap = snap;
        }
    }

    /// The model as known now.
    pub fn snapshot(&self) -> Snapshot {
        self.snap.clone()
    }

    /// Why the ranks should write their dumps, if a finding since the last call asked for it.
    pub fn take_dump_due(&mut self) -> Option<DumpReason> {
        self.dump_due.take()
    }

    /// Each rank's dump from the model as it is now.
    pub fn dumps(&self, reason: DumpReason) -> Vec<RankDump> {
        RankDump::of(&self.snap, reason, now_us())
    }

    /// The Prometheus exposition, facts brought up to date first.
    pub fn metrics_text(&mut self) -> Result<String, prometheus::Error> {
        self.refresh_facts();
        self.store.progress(&RankSummary::of(&self.snap, now_us()));
        prom::encode(&self.store)
    }

    /// The OTel pipeline, for shutting it down outside the server's runtime.
    pub fn take_otel(&mut self) -> Option<Otel> {
        if let Some(o) = self.otel.as_mut() {
            o.push(&mut self.store);
        }
        self.otel.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collscope_model::{
        Algorithm, Collective, Communicator, Connection, DataType, Decision, Direction, InitTimings, OpState, Protocol,
        ProxyOp, ProxyWait, Transport,
    };

    pub(crate) fn op(rank: u32, seq: u64, bytes: u64, state: OpState) -> OpRecord {
        OpRecord {
            comm: Some("0x1".into()),
            rank,
            seq,
            coll: Collective::AllReduce,
            count: bytes / 4,
            datatype: DataType::F32,
            op: None,
            root: None,
            peer: None,
            bytes,
            algo: Some(Algorithm::Ring),
            proto: Some(Protocol::Simple),
            n_channels: Some(2),
            state,
            enqueued_us: Some(1_000),
            started_us: Some(1_010),
            completed_us: (state == OpState::Completed).then_some(1_510),
            duration_us: (state == OpState::Completed).then_some(500.0),
            algbw_gbps: (state == OpState::Completed).then_some(2.0),
            busbw_gbps: (state == OpState::Completed).then_some(3.0),
        }
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    fn state(limits: Bounds) -> State {
        State::new(Source::Runtime, limits, None)
    }

    #[test]
    fn totals_from_the_profiler_plugin_count_what_they_grew_by() {
        let mut st = State::new(Source::Profiler, Bounds::default(), None);
        let k = |calls, gpu_seconds| {
            Event::KernelChannel(collscope_model::KernelChannel {
                comm: Some("c".into()),
                rank: 1,
                channel: 2,
                calls,
                gpu_seconds,
            })
        };
        st.apply(k(1, 0.25));
        st.apply(k(3, 0.75));
        st.apply(k(2, 0.5)); // late: less than already counted
        let p = |sleep, dropped| {
            Event::Profiler(ProfilerCounters {
                proxy_sleep_seconds: sleep,
                dropped_records: dropped,
                ..Default::default()
            })
        };
        st.apply(p(0.5, 1));
        st.apply(p(1.5, 4));
        st.apply(Event::OpCompleted(op(1, 1, 1 << 20, OpState::Completed)));
        let text = st.metrics_text().unwrap();
        assert_eq!(value(&text, "collscope_kernel_channel_seconds_total{channel=\"2\",rank=\"1\"}"), Some(0.75));
        assert_eq!(value(&text, "collscope_proxy_thread_seconds_total{state=\"sleep\"}"), Some(1.5));
        assert_eq!(value(&text, "collscope_profiler_events_lost_total{reason=\"ring_full\"}"), Some(4.0));
        assert_eq!(value(&text, "collscope_profiler_disabled"), Some(0.0));
        let d = "{algorithm=\"Ring\",collective=\"AllReduce\",protocol=\"Simple\",rank=\"1\"}";
        assert_eq!(value(&text, &format!("collscope_tuning_decisions_total{d}")), Some(1.0), "NCCL's choice, per call");
    }

    #[test]
    fn completed_calls_become_counters_histograms_and_bandwidth_gauges() {
        let mut st = state(Bounds::default());
        st.apply(Event::OpEnqueued(op(0, 1, 1 << 20, OpState::Enqueued)));
        let text = st.metrics_text().unwrap();
        assert_eq!(value(&text, "collscope_collectives_in_flight{rank=\"0\"}"), Some(1.0));
        st.apply(Event::OpCompleted(op(0, 1, 1 << 20, OpState::Completed)));
        st.apply(Event::OpCompleted(op(0, 2, 1 << 20, OpState::Completed)));
        let text = st.metrics_text().unwrap();
        let l =
            "{algorithm=\"Ring\",collective=\"AllReduce\",comm_name=\"0x1\",protocol=\"Simple\",rank=\"0\",size_bucket=\"256KiB-1MiB\"}";
        assert_eq!(value(&text, &format!("collscope_collective_operations_total{l}")), Some(2.0));
        assert_eq!(value(&text, &format!("collscope_collective_bytes_total{l}")), Some(2.0 * (1 << 20) as f64));
        assert_eq!(value(&text, &format!("collscope_collective_duration_seconds_count{l}")), Some(2.0));
        assert_eq!(value(&text, &format!("collscope_collective_duration_seconds_sum{l}")), Some(0.001));
        let bw = "{collective=\"AllReduce\",comm_name=\"0x1\",rank=\"0\",size_bucket=\"256KiB-1MiB\"}";
        assert_eq!(value(&text, &format!("collscope_collective_bus_bandwidth_bytes_per_second{bw}")), Some(3e9));
        assert_eq!(value(&text, "collscope_collectives_in_flight{rank=\"0\"}"), Some(0.0));
        assert_eq!(st.snapshot().ops.len(), 2);
    }

    #[test]
    fn each_communicator_has_its_oldest_call_in_flight_and_its_last_completion_as_gauges() {
        let mut st = state(Bounds::default());
        st.apply(Event::OpCompleted(op(0, 1, 8, OpState::Completed)));
        st.apply(Event::OpEnqueued(op(0, 2, 8, OpState::Enqueued)));
        st.apply(Event::OpCompleted(op(1, 1, 8, OpState::Completed)));
        let text = st.metrics_text().unwrap();
        let age = |text: &str, rank: u32| {
            value(text, &format!("collscope_collective_in_flight_oldest_age_seconds{{comm=\"0x1\",rank=\"{rank}\"}}"))
        };
        // Rank 0 began call 2 at 1 ms past the epoch: decades ago. Rank 1 has nothing in flight: 0, not absent,
        // so an alert sees the rank the others wait for.
        assert!(age(&text, 0).is_some_and(|s| s > 1e9), "{text}");
        assert_eq!(age(&text, 1), Some(0.0), "{text}");
        let done = "collscope_collective_last_completion_timestamp_seconds{comm=\"0x1\",rank=\"1\"}";
        assert_eq!(value(&text, done), Some(0.00151), "{text}");
        st.apply(Event::OpCompleted(op(0, 2, 8, OpState::Completed)));
        let text = st.metrics_text().unwrap();
        assert_eq!(age(&text, 0), Some(0.0), "{text}");
    }

    #[test]
    fn a_call_that_stalled_and_recovered_is_counted_once_with_its_seconds_and_kept_past_the_history() {
        let mut st = state(Bounds::histories(1));
        let mut stalled = op(2, 5, 8, OpState::Completed);
        stalled.completed_us = Some(1_010 + 7_500_000);
        st.apply(Event::OpEnqueued(op(2, 5, 8, OpState::Enqueued)));
        st.apply(Event::OpCompleted(stalled.clone()));
        // Reported again (a re-read): still one stall.
        st.apply(Event::OpCompleted(stalled));
        for seq in 6..10 {
            st.apply(Event::OpCompleted(op(2, seq, 8, OpState::Completed)));
        }
        let text = st.metrics_text().unwrap();
        assert_eq!(value(&text, "collscope_collective_stalls_total{comm=\"0x1\",rank=\"2\"}"), Some(1.0), "{text}");
        assert_eq!(value(&text, "collscope_collective_stall_seconds_sum{rank=\"2\"}"), Some(7.5), "{text}");
        assert_eq!(value(&text, "collscope_collective_stall_seconds_bucket{rank=\"2\",le=\"5\"}"), Some(0.0));
        assert_eq!(value(&text, "collscope_collective_stall_seconds_bucket{rank=\"2\",le=\"10\"}"), Some(1.0));
        let snap = st.snapshot();
        assert_eq!(snap.ops.len(), 1, "the stalled call left the history");
        assert_eq!(snap.stalls.iter().map(|s| (s.seq, s.secs)).collect::<Vec<_>>(), [(5, 7.5)]);
    }

    #[test]
    fn histories_are_bounded_and_evictions_are_counted() {
        let mut st = state(Bounds::histories(3));
        for seq in 0..5 {
            st.apply(Event::OpCompleted(op(1, seq, 8, OpState::Completed)));
        }
        let snap = st.snapshot();
        assert_eq!(snap.ops.iter().map(|o| o.seq).collect::<Vec<_>>(), [2, 3, 4]);
        st.note_queue_drops(7);
        st.note_queue_drops(7);
        let text = st.metrics_text().unwrap();
        assert_eq!(value(&text, "collscope_dropped_records_total{stage=\"history\"}"), Some(2.0));
        assert_eq!(value(&text, "collscope_dropped_records_total{stage=\"queue\"}"), Some(7.0));
    }

    #[test]
    fn a_sub_operation_reported_while_it_runs_counts_its_steps_once() {
        let mut st = state(Bounds::default());
        let report = |done, peer_wait| {
            Event::Proxy(ProxyOp {
                rank: 0,
                seq: 3,
                channel: 0,
                peer: 1,
                send: false,
                n_steps: 8,
                posted: 8,
                transmitted: 8,
                done,
                waits: vec![(ProxyWait::WaitingForRecv, peer_wait)],
                started_us: Some(1),
                updated_us: Some(2),
            })
        };
        st.apply(report(5, 0.5));
        st.apply(report(8, 0.75));
        st.apply(report(8, 0.75));
        let text = st.metrics_text().unwrap();
        let steps = |stage: &str| {
            value(&text, &format!("collscope_proxy_steps_total{{direction=\"recv\",rank=\"0\",stage=\"{stage}\"}}"))
        };
        assert_eq!((steps("posted"), steps("done")), (Some(8.0), Some(8.0)));
        let wait = "collscope_proxy_wait_seconds_total{direction=\"recv\",rank=\"0\",state=\"waiting_for_recv\"}";
        assert_eq!(value(&text, wait), Some(0.75));
        let ops = "collscope_proxy_operations_total{channel=\"0\",direction=\"recv\",peer=\"1\",rank=\"0\"}";
        assert_eq!(value(&text, ops), Some(1.0), "{text}");
        assert_eq!(st.snapshot().proxy.len(), 1);
    }

    #[test]
    fn a_proxy_operation_reported_while_it_runs_and_when_it_ends_counts_once_by_difference() {
        let mut st = state(Bounds::default());
        let report = |done: u64, peer_wait: f64| ProxyOp {
            rank: 0,
            seq: 3,
            channel: 0,
            peer: 1,
            send: true,
            n_steps: 4,
            posted: 4,
            transmitted: done,
            done,
            waits: vec![(ProxyWait::WaitingForPeer, peer_wait)],
            started_us: None,
            updated_us: None,
        };
        st.apply(Event::Proxy(report(1, 0.5)));
        st.apply(Event::Proxy(report(4, 0.75)));
        st.apply(Event::Proxy(report(4, 0.75)));
        let text = st.metrics_text().unwrap();
        let series =
            |name: &str, labels: &str| value(&text, &format!("{name}{{direction=\"send\",rank=\"0\",{labels}}}"));
        assert_eq!(series("collscope_proxy_wait_seconds_total", "state=\"waiting_for_peer\""), Some(0.75));
        assert_eq!(series("collscope_proxy_steps_total", "stage=\"posted\""), Some(4.0));
        assert_eq!(series("collscope_proxy_steps_total", "stage=\"done\""), Some(4.0));
        let ops = "collscope_proxy_operations_total{channel=\"0\",direction=\"send\",peer=\"1\",rank=\"0\"}";
        assert_eq!(value(&text, ops), Some(1.0), "finished once");
    }

    #[test]
    fn proxy_traffic_connections_and_init_facts_are_exported() {
        let mut st = state(Bounds::default());
        st.apply(Event::Proxy(ProxyOp {
            rank: 0,
            seq: 1,
            channel: 1,
            peer: 1,
            send: true,
            n_steps: 8,
            posted: 8,
            transmitted: 8,
            done: 8,
            waits: vec![(ProxyWait::WaitingForPeer, 0.25), (ProxyWait::WaitingForData, 0.0)],
            started_us: None,
            updated_us: None,
        }));
        st.apply(Event::Traffic(collscope_model::ChannelTraffic {
            rank: 0,
            channel: 1,
            peer: 1,
            direction: Direction::Send,
            transport: Some(Transport::Net),
            bytes: 4096,
            in_place_bytes: None,
            seconds: 0.5,
        }));
        let conn = Connection::net(0, 0, 1, Direction::Send, "Socket", 0);
        st.apply(Event::Connection(conn.clone()));
        st.apply(Event::Connection(conn.clone()));
        st.apply(Event::Connection(Connection { channel: 1, ..conn }));
        st.apply(Event::Communicator(Communicator {
            rank: Some(0),
            nranks: Some(2),
            nnodes: Some(1),
            version: Some("2.28.9".into()),
            init: InitTimings { total: Some(0.5), phases: vec![("bootstrap".into(), 0.25)] },
            ..Default::default()
        }));
        let snap = st.snapshot();
        assert_eq!((snap.nranks, snap.nnodes, snap.nccl_version.as_deref()), (Some(2), Some(1), Some("2.28.9")));
        let text = st.metrics_text().unwrap();
        let wait = "collscope_proxy_wait_seconds_total{direction=\"send\",rank=\"0\",state=\"waiting_for_peer\"}";
        assert_eq!(value(&text, wait), Some(0.25));
        assert!(!text.contains("state=\"waiting_for_data\""), "zero waits add no series");
        assert_eq!(
            value(&text, "collscope_proxy_steps_total{direction=\"send\",rank=\"0\",stage=\"done\"}"),
            Some(8.0)
        );
        let ch = "{channel=\"1\",direction=\"send\",peer=\"1\",rank=\"0\",transport=\"NET\"}";
        assert_eq!(value(&text, &format!("collscope_channel_bytes_total{ch}")), Some(4096.0));
        // Traffic without a transport takes it from the connection of the same channel end.
        st.apply(Event::Traffic(collscope_model::ChannelTraffic {
            rank: 0,
            channel: 0,
            peer: 1,
            direction: Direction::Send,
            transport: None,
            bytes: 10,
            in_place_bytes: None,
            seconds: 0.0,
        }));
        let text = st.metrics_text().unwrap();
        let ch0 = "{channel=\"0\",direction=\"send\",peer=\"1\",rank=\"0\",transport=\"NET\"}";
        assert_eq!(value(&text, &format!("collscope_channel_bytes_total{ch0}")), Some(10.0));
        let c = "collscope_connection_channels{direction=\"send\",gdrdma=\"host_memory\",mode=\"Socket/0\",peer=\"1\",rank=\"0\",transport=\"NET\"}";
        assert_eq!(value(&text, c), Some(2.0), "the duplicate connection counts once");
        assert_eq!(value(&text, "collscope_init_phase_seconds{phase=\"bootstrap\",rank=\"0\"}"), Some(0.25));
        assert_eq!(value(&text, "collscope_init_seconds{rank=\"0\"}"), Some(0.5));
    }

    #[test]
    fn ingesting_a_growing_snapshot_counts_only_what_is_new_and_restarts_after_a_shrink() {
        let mut st = state(Bounds::default());
        let mut rx = st.subscribe();
        let mut snap = Snapshot::new(Source::Log { files: vec!["a.log".into()] });
        snap.nccl_version = Some("2.18.3".into());
        snap.decisions.push(Decision {
            coll: Collective::AllReduce,
            bytes: 8,
            algo: Algorithm::Tree,
            proto: Protocol::Ll,
            n_channels: 1,
            time_us: None,
            runner_up: None,
            reason: None,
            datatype: None,
            rank: Some(0),
        });
        st.ingest(snap.clone());
        snap.decisions.push(snap.decisions[0].clone());
        st.ingest(snap.clone());
        let text = st.metrics_text().unwrap();
        let d =
            "collscope_tuning_decisions_total{algorithm=\"Tree\",collective=\"AllReduce\",protocol=\"LL\",rank=\"0\"}";
        assert_eq!(value(&text, d), Some(2.0));
        assert!(text.contains("nccl_version=\"2.18.3\""), "{text}");
        snap.decisions.truncate(1);
        st.ingest(snap);
        assert_eq!(value(&st.metrics_text().unwrap(), d), Some(3.0), "a shrunk list is a new file: all of it is new");
        let mut kinds = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            kinds.push(ev.kind());
        }
        assert_eq!(kinds, ["decision", "snapshot", "decision", "snapshot", "decision", "snapshot"]);
    }

    #[test]
    fn failed_calls_count_as_failures_not_operations() {
        let mut st = state(Bounds::default());
        st.apply(Event::OpCompleted(op(2, 9, 64, OpState::Failed)));
        let text = st.metrics_text().unwrap();
        assert_eq!(value(&text, "collscope_collective_failures_total{collective=\"AllReduce\",rank=\"2\"}"), Some(1.0));
        assert!(!text.contains("collscope_collective_operations_total{"));
    }
}
