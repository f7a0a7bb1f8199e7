//! The one fold of live events into a snapshot: `Snapshot::apply`. The TUI and telemetry both call it, so a
//! job looks the same whichever of them shows it. The rules:
//! - calls are upserted by (comm, rank, seq): a call's completion replaces its enqueued record in place;
//! - proxy progress is upserted by (rank, channel, peer, direction): the latest sub-operation of each link;
//! - connections are kept once each (another rank's, from a job view, too: [`Snapshot::merge_rank_edges`]);
//!   communicators are upserted by (comm, rank) and fill the job's facts
//!   (nranks and nnodes the largest reported, the NCCL version the first reported, hosts in order seen);
//! - findings are keyed by what identifies them: the code plus the subject their title and detail name, so
//!   two ranks' findings of one code both show and a repeated one replaces its earlier report;
//! - a rank's init facts fill the job's facts: rings merge by channel (the longest order, each rank's
//!   neighbours once), trees are upserted by (channel, rank) (another rank's from a job view too), topologies
//!   by host, graphs are kept once each, channel counts take the largest reported, tuning cells are set, the
//!   versions and network the first reported;
//! - decisions and warnings are appended;
//! - kernel channels are upserted by (comm, rank, channel): totals, so a report with fewer calls than the kept
//!   one is late and changes nothing; the profiler plugin's counters replace the last ones;
//! - traffic is summed by channel end (rank, channel, peer, direction): bytes, bytes moved in place and seconds
//!   add up, a transport named once stays; rates are the reader's (the TUI's edges, telemetry's counters);
//! - a call that completed after `job::STALL_AFTER_S` or more is kept as a stall, once per (comm, rank, seq),
//!   after it leaves the calls;
//! - every list is bounded ([`Bounds`]); past its bound the oldest records go.

use super::comm::Communicator;
use super::connection::Connection;
use super::diag::Finding;
use super::events::{Event, InitFacts};
use super::graph::ChannelCounts;
use super::graph::Tree;
use super::job::{RankEdges, Stall, MAX_STALLS, STALL_KEEP_US};
use super::ops::{KernelChannel, OpRecord, OpState, ProxyOp};
use super::ChannelTraffic;
use super::Snapshot;

/// Calls kept (finished and in flight).
pub const MAX_OPS: usize = 4096;
/// Proxy links (rank, channel, peer, direction) kept.
pub const MAX_PROXY: usize = 4096;
/// Tuning decisions kept.
pub const MAX_DECISIONS: usize = 4096;
/// Warnings kept.
pub const MAX_WARNINGS: usize = 4096;
/// Channel connections kept: 64 channels, both directions, to a few peers, for each of 128 local ranks.
pub const MAX_CONNECTIONS: usize = 65536;
/// Communicators (one per comm and rank) kept.
pub const MAX_COMMUNICATORS: usize = 4096;
/// Findings kept.
pub const MAX_FINDINGS: usize = 1024;
/// Host names kept.
pub const MAX_HOSTS: usize = 4096;
/// Init facts: rings (one per channel: NCCL's `MAXCHANNELS` is 64, 2.28.9 `src/include/device.h`, with room for
/// other builds), tree places (channel, rank), graphs and host topologies kept.
pub const MAX_RINGS: usize = 1024;
pub const MAX_TREES: usize = 65536;
pub const MAX_GRAPHS: usize = 1024;
pub const MAX_TOPOLOGIES: usize = 1024;
/// Channel ends (rank, channel, peer, direction) whose traffic totals are kept, as many as connections.
pub const MAX_TRAFFIC: usize = MAX_CONNECTIONS;
/// Kernel channels (comm, rank, channel) kept: 64 channels of 128 local ranks.
pub const MAX_KERNEL_CHANNELS: usize = 8192;

// A log's bounds, which the log reader keeps to (`logreader/src/job`): a log holds every rank's lines of a whole
// job rather than one process's live view, so its lists are longer; and the reader keeps the *first* records up
// to them and says how many it left out, where `Snapshot::apply` drops the oldest (a log's first lines, init and
// the first failure, matter most; a live view's newest). Rings share `MAX_RINGS`; graphs, channel counts and
// tuning cells go through `Snapshot::apply`.
/// A log's warnings listed (each repeated line at most 64 times).
pub const LOG_MAX_WARNINGS: usize = 10_000;
/// A log's distinct decisions (collective, size, algorithm, protocol, rank), their repeats counted.
pub const LOG_MAX_DECISIONS: usize = 100_000;
/// A log's hosts listed: five times the hosts of a 100,000-GPU job at 8 GPUs a host. Past it hosts are counted, not
/// listed, and a warning says how many.
pub const LOG_MAX_HOSTS: usize = 65_536;
/// A log's communicator rows (one per rank that prints it): 16,384 ranks with 8 communicators each. Past it they are
/// counted, not kept (about 450 bytes each, so the table stays under 60 MB).
pub const LOG_MAX_COMMUNICATORS: usize = 131_072;
/// A log's rows of each per-rank table (ring neighbours, tree places, connections): 16,384 ranks x 64 channels.
pub const LOG_MAX_ROWS: usize = 1 << 20;

/// A list past its bound is cut to `bound - bound / SLACK`, so a list at its bound is not shifted on every
/// event (a cut costs the length of the list; this spreads it over `bound / SLACK` events).
const SLACK: usize = 16;

/// How many records each list of a snapshot keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub ops: usize,
    pub proxy: usize,
    pub decisions: usize,
    pub warnings: usize,
    pub connections: usize,
    pub communicators: usize,
    pub findings: usize,
    pub hosts: usize,
}

impl Bounds {
    pub const DEFAULT: Bounds = Bounds {
        ops: MAX_OPS,
        proxy: MAX_PROXY,
        decisions: MAX_DECISIONS,
        warnings: MAX_WARNINGS,
        connections: MAX_CONNECTIONS,
        communicators: MAX_COMMUNICATORS,
        findings: MAX_FINDINGS,
        hosts: MAX_HOSTS,
    };

    /// `n` (at least 1) records of each history (calls, proxy links, decisions, warnings); the lists of facts
    /// keep their default bounds.
    pub fn histories(n: usize) -> Self {
        let n = n.max(1);
        Bounds { ops: n, proxy: n, decisions: n, warnings: n, ..Bounds::DEFAULT }
    }
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds::DEFAULT
    }
}

/// What applying one event changed, for readers that keep metrics beside the snapshot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applied {
    /// Records of the histories (calls, proxy links, decisions, warnings) dropped to stay within the bounds.
    pub evicted: usize,
    /// The ranks of calls still in flight among the dropped calls.
    pub evicted_in_flight: Vec<u32>,
    /// For a call event: the state of the record it replaced; `None` when it was appended.
    pub replaced: Option<OpState>,
    /// Whether the facts changed (connections, communicators, findings, nranks, nnodes, hosts, version).
    pub facts_changed: bool,
    /// A completed call kept as a stall for the first time (what a stall counter counts).
    pub stall: Option<Stall>,
}

impl KernelChannel {
    /// The same channel of the same rank and communicator.
    pub fn same_channel(&self, other: &KernelChannel) -> bool {
        self.channel == other.channel && self.rank == other.rank && self.comm == other.comm
    }
}

impl OpState {
    /// Enqueued or started: the call has no outcome yet.
    pub fn in_flight(self) -> bool {
        matches!(self, OpState::Enqueued | OpState::Started)
    }
}

impl Finding {
    /// Whether `other` is the same finding: the same code about the same subject (its title and detail name
    /// the ranks, devices and links it is about).
    pub fn same_as(&self, other: &Finding) -> bool {
        self.code == other.code && self.title == other.title && self.detail == other.detail
    }
}

impl ChannelTraffic {
    /// The same end of the same channel: (rank, channel, peer, direction).
    pub fn same_end(&self, other: &ChannelTraffic) -> bool {
        (self.rank, self.channel, self.peer, self.direction) == (other.rank, other.channel, other.peer, other.direction)
    }
}

impl Snapshot {
    /// The running totals of `t`'s channel end, once traffic was folded in.
    pub fn traffic_total(&self, t: &ChannelTraffic) -> Option<&ChannelTraffic> {
        self.traffic.iter().find(|o| o.same_end(t))
    }

    fn add_traffic(&mut self, t: &ChannelTraffic) {
        let Some(total) = self.traffic.iter_mut().find(|o| o.same_end(t)) else {
            push_bounded(&mut self.traffic, t.clone(), MAX_TRAFFIC);
            return;
        };
        total.bytes = total.bytes.saturating_add(t.bytes);
        total.in_place_bytes = match (total.in_place_bytes, t.in_place_bytes) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
        total.seconds += t.seconds;
        total.transport = total.transport.or(t.transport);
    }

    /// Applies one event within the default [`Bounds`].
    pub fn apply(&mut self, event: &Event) -> Applied {
        self.apply_within(event, &Bounds::DEFAULT)
    }

    /// Applies one event, keeping each list within `bounds` (see the module's rules).
    pub fn apply_within(&mut self, event: &Event, bounds: &Bounds) -> Applied {
        let mut out = Applied::default();
        match event {
            Event::OpEnqueued(op) | Event::OpCompleted(op) => {
                self.upsert_op(op, bounds.ops, &mut out);
                if let Some(stall) = Stall::of(op).filter(|s| !self.stalls.iter().any(|o| o.same_call(s))) {
                    keep_stall(&mut self.stalls, stall.clone());
                    out.stall = Some(stall);
                }
            }
            Event::Proxy(p) => self.upsert_proxy(p, bounds.proxy, &mut out),
            Event::ProxyTally(t) => self.upsert_proxy(&t.last, bounds.proxy, &mut out),
            Event::Traffic(t) => self.add_traffic(t),
            Event::Snapshot => {}
            Event::Connection(c) => out.facts_changed |= self.add_connection(c, bounds.connections),
            Event::Communicator(c) => {
                self.upsert_communicator(c, bounds);
                out.facts_changed = true;
            }
            Event::Decision(d) => out.evicted += push_bounded(&mut self.decisions, d.clone(), bounds.decisions),
            Event::InitFacts(f) => {
                self.apply_init_facts(f);
                out.facts_changed = true;
            }
            Event::Warning(w) => out.evicted += push_bounded(&mut self.warnings, w.clone(), bounds.warnings),
            Event::Endpoints(e) => {
                self.endpoints = e.iter().take(super::job::MAX_JOB_RANKS).cloned().collect();
                out.facts_changed = true;
            }
            Event::KernelChannel(k) => match self.kernel_channels.iter_mut().find(|o| o.same_channel(k)) {
                Some(existing) if existing.calls <= k.calls => existing.clone_from(k),
                Some(_) => {}
                None => _ = push_bounded(&mut self.kernel_channels, k.clone(), MAX_KERNEL_CHANNELS),
            },
            Event::Profiler(c) => self.profiler = Some(c.clone()),
            Event::Finding(f) => {
                match self.findings.iter_mut().find(|o| o.same_as(f)) {
                    Some(existing) => existing.clone_from(f),
                    None => _ = push_bounded(&mut self.findings, f.clone(), bounds.findings),
                }
                out.facts_changed = true;
            }
        }
        out
    }

    /// The kept totals of `k`'s channel (same comm, rank and channel), if any.
    pub fn kernel_channel(&self, k: &KernelChannel) -> Option<&KernelChannel> {
        self.kernel_channels.iter().find(|o| o.same_channel(k))
    }

    /// The call `seq` of `rank` in communicator `comm`, newest first.
    pub fn op(&self, comm: Option<&str>, rank: u32, seq: u64) -> Option<&OpRecord> {
        self.ops.iter().rev().find(|o| o.seq == seq && o.rank == rank && o.comm.as_deref() == comm)
    }

    /// Each (comm, rank)'s calls are kept in `seq` order, so the scan from the newest stops at that pair's first
    /// smaller `seq`: a new call costs a look at the calls since that pair's last, not at all 4096 kept (the
    /// profiler plugin folds every call of a job). A call that arrives late goes before the pair's later ones.
    fn upsert_op(&mut self, op: &OpRecord, bound: usize, out: &mut Applied) {
        let mut at = self.ops.len();
        for (i, o) in self.ops.iter_mut().enumerate().rev() {
            if o.rank != op.rank || o.comm != op.comm {
                continue;
            }
            match o.seq.cmp(&op.seq) {
                std::cmp::Ordering::Equal => {
                    out.replaced = Some(o.state);
                    o.clone_from(op);
                    return;
                }
                std::cmp::Ordering::Less => break,
                std::cmp::Ordering::Greater => at = i,
            }
        }
        self.ops.insert(at, op.clone());
        let cut = excess(self.ops.len(), bound);
        out.evicted_in_flight = self.ops.range(..cut).filter(|o| o.state.in_flight()).map(|o| o.rank).collect();
        self.ops.drain(..cut);
        out.evicted += cut;
    }

    /// One row per connection: its latest call's sub-operation (a late report of an earlier call's last steps
    /// does not bring that call back).
    fn upsert_proxy(&mut self, p: &ProxyOp, bound: usize, out: &mut Applied) {
        match self.proxy.iter_mut().rev().find(|o| o.same_connection(p)) {
            Some(existing) if existing.seq <= p.seq => existing.clone_from(p),
            Some(_) => {}
            None => out.evicted += push_bounded(&mut self.proxy, p.clone(), bound),
        }
    }

    fn upsert_communicator(&mut self, c: &Communicator, bounds: &Bounds) {
        match self.communicators.iter_mut().find(|o| o.comm == c.comm && o.rank == c.rank) {
            Some(existing) => existing.clone_from(c),
            None => _ = push_bounded(&mut self.communicators, c.clone(), bounds.communicators),
        }
        // The job's facts (what the overview and the job info metric show) follow from its communicators.
        self.nranks = self.nranks.max(c.nranks);
        self.nnodes = self.nnodes.max(c.nnodes);
        if self.nccl_version.is_none() {
            self.nccl_version.clone_from(&c.version);
        }
        if let Some(h) = c.host.as_ref().filter(|h| !self.hosts.contains(h)) {
            push_bounded(&mut self.hosts, h.clone(), bounds.hosts);
        }
    }
}

impl Snapshot {
    /// Keeps `c` once; whether it was new.
    fn add_connection(&mut self, c: &Connection, bound: usize) -> bool {
        if self.connections.contains(c) {
            return false;
        }
        push_bounded(&mut self.connections, c.clone(), bound);
        true
    }

    fn upsert_trees(&mut self, trees: &[Tree]) {
        for t in trees {
            match self.trees.iter_mut().find(|o| o.channel == t.channel && o.rank == t.rank) {
                Some(existing) => existing.clone_from(t),
                None => _ = push_bounded(&mut self.trees, t.clone(), MAX_TREES),
            }
        }
    }

    /// Takes another rank's edges from a job view (its summary): its connections kept once each and its tree
    /// places upserted, as the rank's own events would; its traffic totals are not increments, so they stay
    /// with the job view (the reader takes their rates). Whether anything changed.
    pub fn merge_rank_edges(&mut self, e: &RankEdges) -> bool {
        let mut changed = false;
        for c in &e.connections {
            changed |= self.add_connection(c, MAX_CONNECTIONS);
        }
        let trees_changed = e.trees.iter().any(|t| !self.trees.contains(t));
        self.upsert_trees(&e.trees);
        changed || trees_changed
    }

    fn apply_init_facts(&mut self, f: &InitFacts) {
        if self.collscope_version.is_none() {
            self.collscope_version.clone_from(&f.collscope_version);
        }
        if self.network.is_none() {
            self.network.clone_from(&f.network);
        }
        if let Some(t) = &f.topology {
            match self.topology.iter_mut().find(|o| o.host == t.host) {
                Some(existing) => existing.clone_from(t),
                None => _ = push_bounded(&mut self.topology, t.clone(), MAX_TOPOLOGIES),
            }
        }
        for g in &f.graphs {
            if !self.graphs.contains(g) {
                push_bounded(&mut self.graphs, g.clone(), MAX_GRAPHS);
            }
        }
        let max = |a: Option<u32>, b: Option<u32>| a.max(b);
        let (c, n) = (&self.channels, &f.channels);
        self.channels = ChannelCounts {
            coll: max(c.coll, n.coll),
            collnet: max(c.collnet, n.collnet),
            nvls: max(c.nvls, n.nvls),
            p2p: max(c.p2p, n.p2p),
            p2p_per_peer: max(c.p2p_per_peer, n.p2p_per_peer),
        };
        for r in &f.rings {
            let Some(ring) = self.rings.iter_mut().find(|o| o.channel == r.channel) else {
                push_bounded(&mut self.rings, r.clone(), MAX_RINGS);
                continue;
            };
            if r.order.len() > ring.order.len() {
                ring.order.clone_from(&r.order);
                ring.truncated = r.truncated;
            }
            for n in &r.neighbours {
                if !ring.neighbours.contains(n) {
                    ring.neighbours.push(*n);
                }
            }
        }
        self.upsert_trees(&f.trees);
        for (coll, algos) in &f.tuning {
            let row = self.tuning.entry(*coll).or_default();
            for (algo, protos) in algos {
                row.entry(*algo).or_default().extend(protos);
            }
        }
    }
}

/// How many of the oldest records a list of `len` drops to stay within `bound`.
fn excess(len: usize, bound: usize) -> usize {
    let bound = bound.max(1);
    if len <= bound {
        0
    } else {
        len - (bound - bound / SLACK)
    }
}

/// Adds `stall` to the stalls kept: those that ended [`STALL_KEEP_US`] or more before it are let go (by age: a
/// recovered stall stays visible that long, the clock being the calls' own), then the oldest beyond
/// [`MAX_STALLS`] (by size).
fn keep_stall(stalls: &mut Vec<Stall>, stall: Stall) {
    if let Some(now) = stall.completed_us {
        stalls.retain(|s| s.completed_us.is_none_or(|t| t.saturating_add(STALL_KEEP_US) > now));
    }
    push_bounded(stalls, stall, MAX_STALLS);
}

/// Appends `item`, then drops the oldest past `bound`; how many went.
fn push_bounded<T>(list: &mut Vec<T>, item: T, bound: usize) -> usize {
    list.push(item);
    let cut = excess(list.len(), bound);
    list.drain(..cut);
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Algorithm, ChannelTraffic, Collective, CommState, Connection, DataType, Decision, Direction, Protocol,
        Severity, Source, Transport, Warning,
    };

    fn snap() -> Snapshot {
        Snapshot::new(Source::Runtime)
    }

    fn op(comm: &str, rank: u32, seq: u64, state: OpState) -> OpRecord {
        OpRecord {
            comm: Some(comm.into()),
            state,
            ..OpRecord::started(rank, seq, Collective::AllReduce, DataType::F32, 8, 1)
        }
    }

    fn proxy(rank: u32, channel: u32, send: bool, done: u64) -> ProxyOp {
        ProxyOp {
            rank,
            seq: done,
            channel,
            peer: 1,
            send,
            n_steps: 8,
            posted: 8,
            transmitted: 8,
            done,
            waits: vec![],
            started_us: None,
            updated_us: None,
        }
    }

    fn conn(channel: u32) -> Connection {
        Connection { comm: Some("0x1".into()), ..Connection::net(channel, 0, 1, Direction::Send, "Socket", 0) }
    }

    fn comm(rank: u32, host: &str, state: CommState) -> Communicator {
        Communicator {
            comm: Some("0x1".into()),
            rank: Some(rank),
            nranks: Some(4),
            nnodes: Some(2),
            host: Some(host.into()),
            version: Some(format!("2.28.{rank}")),
            state,
            ..Default::default()
        }
    }

    fn decision(bytes: u64) -> Decision {
        Decision {
            coll: Collective::AllReduce,
            bytes,
            algo: Algorithm::Ring,
            proto: Protocol::Simple,
            n_channels: 2,
            time_us: None,
            runner_up: None,
            reason: None,
            datatype: None,
            rank: Some(0),
        }
    }

    fn warning(text: &str) -> Warning {
        Warning { rank: Some(0), host: None, line: None, text: text.into(), class: "socket".into(), source: None }
    }

    fn finding(code: &str, detail: &str) -> Finding {
        Finding {
            code: code.into(),
            severity: Severity::Warning,
            rank: None,
            comm: None,
            title: "No GPUDirect RDMA".into(),
            detail: detail.into(),
            evidence: vec![],
            fix: "fix".into(),
        }
    }

    #[test]
    fn a_calls_completion_replaces_its_enqueued_record_and_other_calls_append() {
        let mut s = snap();
        assert_eq!(s.apply(&Event::OpEnqueued(op("0x1", 0, 1, OpState::Enqueued))).replaced, None);
        s.apply(&Event::OpEnqueued(op("0x1", 1, 1, OpState::Enqueued)));
        s.apply(&Event::OpEnqueued(op("0x2", 0, 1, OpState::Enqueued)));
        let done = s.apply(&Event::OpCompleted(op("0x1", 0, 1, OpState::Completed)));
        assert_eq!(done.replaced, Some(OpState::Enqueued));
        let seen: Vec<_> = s.ops.iter().map(|o| (o.comm.clone().unwrap(), o.rank, o.state)).collect();
        assert_eq!(
            seen,
            [
                ("0x1".into(), 0, OpState::Completed),
                ("0x1".into(), 1, OpState::Enqueued),
                ("0x2".into(), 0, OpState::Enqueued)
            ]
        );
        assert_eq!(s.op(Some("0x2"), 0, 1).map(|o| o.state), Some(OpState::Enqueued));
        assert!(s.op(Some("0x2"), 0, 2).is_none());
        assert!(!done.facts_changed);
    }

    #[test]
    fn a_call_that_arrives_late_is_found_again_and_kept_in_its_pairs_order() {
        let mut s = snap();
        for seq in [1, 2, 4] {
            s.apply(&Event::OpEnqueued(op("0x1", 0, seq, OpState::Enqueued)));
            s.apply(&Event::OpEnqueued(op("0x1", 1, seq, OpState::Enqueued)));
        }
        // Rank 0's call 3 arrives after its call 4: it goes before 4, and its completion finds it there.
        assert_eq!(s.apply(&Event::OpEnqueued(op("0x1", 0, 3, OpState::Enqueued))).replaced, None);
        let done = s.apply(&Event::OpCompleted(op("0x1", 0, 3, OpState::Completed)));
        assert_eq!(done.replaced, Some(OpState::Enqueued));
        // Call 1 is older than the point where a new call's scan stops, and is still found.
        assert_eq!(s.apply(&Event::OpCompleted(op("0x1", 0, 1, OpState::Completed))).replaced, Some(OpState::Enqueued));
        let rank0: Vec<_> = s.ops.iter().filter(|o| o.rank == 0).map(|o| (o.seq, o.state)).collect();
        assert_eq!(
            rank0,
            [(1, OpState::Completed), (2, OpState::Enqueued), (3, OpState::Completed), (4, OpState::Enqueued)]
        );
        assert_eq!(s.ops.len(), 7, "no call is kept twice");
    }

    #[test]
    fn calls_are_bounded_and_dropped_calls_in_flight_are_reported() {
        let mut s = snap();
        let bounds = Bounds::histories(32);
        s.apply_within(&Event::OpEnqueued(op("0x1", 7, 0, OpState::Enqueued)), &bounds);
        let mut evicted = 0;
        let mut in_flight = vec![];
        for seq in 1..100 {
            let out = s.apply_within(&Event::OpCompleted(op("0x1", 0, seq, OpState::Completed)), &bounds);
            evicted += out.evicted;
            in_flight.extend(out.evicted_in_flight);
            assert!(s.ops.len() <= 32, "{} calls kept", s.ops.len());
        }
        assert!(s.ops.len() >= 32 - 32 / SLACK);
        assert_eq!(s.ops.back().unwrap().seq, 99, "the newest stay");
        assert_eq!(evicted + s.ops.len(), 100);
        assert_eq!(in_flight, [7], "the enqueued call of rank 7 was dropped");
    }

    #[test]
    fn proxy_progress_keeps_the_latest_of_each_link() {
        let mut s = snap();
        s.apply(&Event::Proxy(proxy(0, 0, true, 1)));
        s.apply(&Event::Proxy(proxy(0, 0, false, 2)));
        s.apply(&Event::Proxy(proxy(0, 0, true, 3)));
        s.apply(&Event::Proxy(proxy(0, 1, true, 4)));
        let seen: Vec<_> = s.proxy.iter().map(|p| (p.channel, p.send, p.done)).collect();
        assert_eq!(seen, [(0, true, 3), (0, false, 2), (1, true, 4)]);
        // A late report of an earlier call on a link leaves its latest call's row.
        s.apply(&Event::Proxy(proxy(0, 0, true, 1)));
        assert_eq!((s.proxy[0].seq, s.proxy[0].done), (3, 3));
        let bounds = Bounds::histories(2);
        let out = s.apply_within(&Event::Proxy(proxy(0, 9, true, 5)), &bounds);
        assert_eq!((s.proxy.len(), out.evicted), (2, 2));
    }

    #[test]
    fn traffic_is_summed_by_channel_end_and_the_snapshot_event_changes_nothing() {
        let mut s = snap();
        let t = |direction, transport, bytes, in_place_bytes| ChannelTraffic {
            rank: 0,
            channel: 0,
            peer: 1,
            direction,
            transport,
            bytes,
            in_place_bytes,
            seconds: 0.5,
        };
        assert_eq!(s.apply(&Event::Traffic(t(Direction::Send, None, 10, Some(4)))), Applied::default());
        s.apply(&Event::Traffic(t(Direction::Send, Some(Transport::Shm), 30, Some(1))));
        s.apply(&Event::Traffic(t(Direction::Send, None, 5, None)));
        s.apply(&Event::Traffic(t(Direction::Recv, None, 7, None)));
        let before = s.clone();
        assert_eq!(s.apply(&Event::Snapshot), Applied::default());
        assert_eq!(s, before);
        let sent = ChannelTraffic { seconds: 1.5, ..t(Direction::Send, Some(Transport::Shm), 45, Some(5)) };
        assert_eq!(s.traffic, vec![sent, t(Direction::Recv, None, 7, None)]);
        assert_eq!(s.traffic_total(&t(Direction::Recv, None, 0, None)).map(|t| t.bytes), Some(7));
    }

    #[test]
    fn another_ranks_edges_add_its_connections_and_tree_places_once() {
        let mut s = Snapshot::new(Source::Runtime);
        s.apply(&Event::Connection(conn(0)));
        let tree = |up| crate::Tree { channel: 0, rank: 2, up, down: vec![3] };
        let edges = crate::RankEdges { connections: vec![conn(0), conn(1)], trees: vec![tree(0)], traffic: vec![] };
        assert!(s.merge_rank_edges(&edges));
        assert_eq!((s.connections.clone(), s.trees.clone()), (vec![conn(0), conn(1)], vec![tree(0)]));
        assert!(!s.merge_rank_edges(&edges), "the same edges again change nothing");
        let moved = crate::RankEdges { trees: vec![tree(1)], ..crate::RankEdges::default() };
        assert!(s.merge_rank_edges(&moved));
        assert_eq!(s.trees, [tree(1)]);
    }

    #[test]
    fn a_connection_is_kept_once_and_connections_are_bounded() {
        let mut s = snap();
        assert!(s.apply(&Event::Connection(conn(0))).facts_changed);
        assert!(!s.apply(&Event::Connection(conn(0))).facts_changed);
        s.apply(&Event::Connection(conn(1)));
        assert_eq!(s.connections, [conn(0), conn(1)]);
        let bounds = Bounds { connections: 1, ..Bounds::DEFAULT };
        s.apply_within(&Event::Connection(conn(2)), &bounds);
        assert_eq!(s.connections, [conn(2)]);
    }

    #[test]
    fn communicators_are_upserted_and_fill_the_jobs_facts() {
        let mut s = snap();
        s.apply(&Event::Communicator(comm(0, "a", CommState::Initializing)));
        s.apply(&Event::Communicator(comm(1, "b", CommState::Ready)));
        let out = s.apply(&Event::Communicator(comm(0, "a", CommState::Ready)));
        assert!(out.facts_changed);
        let states: Vec<_> = s.communicators.iter().map(|c| (c.rank, c.state)).collect();
        assert_eq!(states, [(Some(0), CommState::Ready), (Some(1), CommState::Ready)]);
        assert_eq!((s.nranks, s.nnodes), (Some(4), Some(2)));
        assert_eq!(s.nccl_version.as_deref(), Some("2.28.0"), "the first version reported stays");
        assert_eq!(s.hosts, ["a", "b"]);
        let bounds = Bounds { communicators: 1, hosts: 1, ..Bounds::DEFAULT };
        s.apply_within(&Event::Communicator(comm(2, "c", CommState::Ready)), &bounds);
        assert_eq!((s.communicators.len(), s.hosts.clone()), (1, vec!["c".to_string()]));
    }

    #[test]
    fn decisions_and_warnings_append_within_their_bounds() {
        let mut s = snap();
        let bounds = Bounds::histories(3);
        let mut evicted = 0;
        for i in 0..5 {
            evicted += s.apply_within(&Event::Decision(decision(i)), &bounds).evicted;
            evicted += s.apply_within(&Event::Warning(warning(&i.to_string())), &bounds).evicted;
        }
        assert_eq!(s.decisions.iter().map(|d| d.bytes).collect::<Vec<_>>(), [2, 3, 4]);
        assert_eq!(s.warnings.iter().map(|w| w.text.as_str()).collect::<Vec<_>>(), ["2", "3", "4"]);
        assert_eq!(evicted, 4);
    }

    #[test]
    fn findings_of_one_code_about_two_subjects_both_show_and_a_repeat_replaces() {
        let mut s = snap();
        s.apply(&Event::Finding(finding("no_gdrdma", "rank 0: NIC too far")));
        s.apply(&Event::Finding(finding("no_gdrdma", "rank 1: NIC too far")));
        let again = Finding {
            evidence: vec![crate::LineRef { file: "a.log".into(), line: 3, text: "x".into() }],
            ..finding("no_gdrdma", "rank 0: NIC too far")
        };
        assert!(s.apply(&Event::Finding(again.clone())).facts_changed);
        assert_eq!(s.findings.len(), 2);
        assert_eq!(s.findings[0], again);
        let bounds = Bounds { findings: 2, ..Bounds::DEFAULT };
        s.apply_within(&Event::Finding(finding("other", "")), &bounds);
        assert_eq!(s.findings.iter().map(|f| f.code.as_str()).collect::<Vec<_>>(), ["no_gdrdma", "other"]);
    }

    fn facts(rank: u32, next: u32) -> InitFacts {
        let mut tuning = crate::TuningTable::new();
        let cell = crate::TuningCell { lat_us: 5.0 + rank as f64, bw_gbps: 2.0 };
        tuning.entry(Collective::AllReduce).or_default().entry(Algorithm::Ring).or_default().insert(Protocol::Ll, cell);
        InitFacts {
            comm: Some("0x1".into()),
            rank,
            collscope_version: Some(format!("0.{rank}")),
            network: Some("Socket".into()),
            topology: None,
            graphs: vec![],
            channels: ChannelCounts { coll: Some(2 + rank), p2p: Some(2), ..Default::default() },
            rings: vec![crate::Ring {
                channel: 0,
                order: (0..=rank).collect(),
                truncated: false,
                neighbours: vec![(next, rank, next)],
            }],
            trees: vec![crate::Tree { channel: 0, rank, up: -1, down: vec![next as i32, -1, -1] }],
            tuning,
        }
    }

    #[test]
    fn init_facts_merge_rings_by_channel_upsert_trees_and_fill_the_tables() {
        let mut s = snap();
        assert!(s.apply(&Event::InitFacts(Box::new(facts(0, 1)))).facts_changed);
        s.apply(&Event::InitFacts(Box::new(facts(1, 0))));
        s.apply(&Event::InitFacts(Box::new(facts(1, 0))));
        assert_eq!(s.rings.len(), 1);
        assert_eq!(s.rings[0].order, [0, 1], "the longest order");
        assert_eq!(s.rings[0].neighbours, [(1, 0, 1), (0, 1, 0)], "each rank's neighbours once");
        let trees: Vec<_> = s.trees.iter().map(|t| (t.channel, t.rank)).collect();
        assert_eq!(trees, [(0, 0), (0, 1)]);
        assert_eq!((s.channels.coll, s.channels.p2p, s.channels.nvls), (Some(3), Some(2), None));
        let cell = s.tuning[&Collective::AllReduce][&Algorithm::Ring][&Protocol::Ll];
        assert_eq!(cell.lat_us, 6.0, "the latest cell");
        assert_eq!(s.collscope_version.as_deref(), Some("0.0"), "the first version reported stays");
        assert_eq!(s.network.as_deref(), Some("Socket"));
    }

    fn kernel(rank: u32, channel: u32, calls: u64) -> KernelChannel {
        KernelChannel { comm: Some("0x1".into()), rank, channel, calls, gpu_seconds: calls as f64 * 1e-3 }
    }

    #[test]
    fn kernel_channels_keep_each_channels_latest_totals_within_their_bound() {
        let mut s = snap();
        s.apply(&Event::KernelChannel(kernel(0, 0, 2)));
        s.apply(&Event::KernelChannel(kernel(0, 1, 1)));
        s.apply(&Event::KernelChannel(kernel(1, 0, 1)));
        let out = s.apply(&Event::KernelChannel(kernel(0, 0, 5)));
        assert_eq!(out, Applied::default(), "totals are not facts and evict nothing");
        s.apply(&Event::KernelChannel(kernel(0, 0, 3)));
        let seen: Vec<_> = s.kernel_channels.iter().map(|k| (k.rank, k.channel, k.calls)).collect();
        assert_eq!(seen, [(0, 0, 5), (0, 1, 1), (1, 0, 1)], "upserted; a late, smaller total changes nothing");
        assert_eq!(s.kernel_channel(&kernel(0, 0, 0)).map(|k| k.gpu_seconds), Some(5e-3));
        let other = KernelChannel { comm: Some("0x2".into()), ..kernel(0, 0, 1) };
        assert!(s.kernel_channel(&other).is_none(), "another communicator's channel 0");
        for ch in 0..MAX_KERNEL_CHANNELS as u32 + 10 {
            s.apply(&Event::KernelChannel(kernel(9, ch, 1)));
        }
        assert!(s.kernel_channels.len() <= MAX_KERNEL_CHANNELS);
        assert_eq!(s.kernel_channels.last().map(|k| k.channel), Some(MAX_KERNEL_CHANNELS as u32 + 9));
    }

    #[test]
    fn the_profilers_counters_replace_the_last_ones() {
        let mut s = snap();
        assert!(s.profiler.is_none());
        let c = crate::ProfilerCounters { dropped_records: 3, proxy_sleep_seconds: 0.5, ..Default::default() };
        assert_eq!(s.apply(&Event::Profiler(c.clone())), Applied::default());
        let later = crate::ProfilerCounters { dropped_records: 4, disabled: true, ..c };
        s.apply(&Event::Profiler(later.clone()));
        assert_eq!(s.profiler, Some(later));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["profiler"]["dropped_records"], 4);
        assert_eq!(serde_json::from_value::<Snapshot>(json).unwrap(), s);
    }

    #[test]
    fn the_slack_cut_keeps_at_most_the_bound() {
        assert_eq!(excess(4096, 4096), 0);
        assert_eq!(excess(4097, 4096), 4097 - (4096 - 256));
        assert_eq!(excess(4, 3), 1);
        assert_eq!(excess(2, 0), 1);
    }
}
