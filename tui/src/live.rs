//! What the TUI knows right now: the latest snapshot from the source, live traffic, and the state of the link to
//! the source. Sources send [`Update`]s; the UI thread applies them.

use crate::proxy_waits::ProxyWaits;
use crate::traffic::{EdgeKey, EdgeTraffic, Traffic};
use collscope_model::{ChannelTraffic, Direction, Event, JobView, Snapshot, Source};
use std::collections::BTreeSet;
use std::time::Instant;

/// The link to the source.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkState {
    Connecting,
    /// Reading or receiving; `following` when more may still arrive.
    Live {
        following: bool,
    },
    /// The source went away; the last snapshot stays on screen while it retries.
    Disconnected {
        reason: String,
        retry_in_s: u64,
    },
    /// A finite source (log without `--follow`) was read to its end.
    Ended,
    /// A recording played back: the moment shown of its `length_s`, both in whole tenths of a second (at its
    /// end they are equal).
    Replay {
        at_s: f64,
        length_s: f64,
        paused: bool,
    },
    /// The live process said it was ending: `clean` when the job finished, not when a rank failed.
    Finished {
        clean: bool,
    },
}

/// One thing a source reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// A whole new picture (a log re-read, `/api/v1/snapshot`).
    Snapshot(Box<Snapshot>),
    /// One live event from the events stream.
    Event(Box<Event>),
    Link(LinkState),
    /// The source starts its picture over (a replay sought back): what was shown so far is dropped.
    Restart,
    /// The whole job (`/api/v1/job` of a live process): every rank's summary and the job-level findings.
    Job(Box<JobView>),
    /// Another rank's snapshot, fetched because it is the one shown.
    RankSnapshot {
        rank: u32,
        snapshot: Box<Snapshot>,
    },
    /// The source's own clock, in seconds: a replay's place in its recording, sent before the updates recorded
    /// at that moment. Rates are then taken on it (a sample at each whole second of it), not on the wall clock.
    Clock(f64),
    /// Something the user should know that is not a fact of the job (a recording that stopped, what the
    /// ranks' dumps came to).
    Notice(String),
}

#[derive(Debug, Clone)]
pub struct Live {
    pub snapshot: Snapshot,
    /// Bytes per edge as its sender reported them, with rates: the totals of the snapshot shown.
    pub traffic: Traffic,
    /// Bytes per edge as its receiver reported them (the snapshot shown).
    pub received: Traffic,
    /// Every rank's edges as the job view last summarised them (the sender's and the receiver's counts), with
    /// rates between job views: the edges of ranks other than the one shown.
    job_sent: Traffic,
    job_received: Traffic,
    /// Where the shown rank's proxy steps waited, since this view began watching it and recently.
    pub waits: ProxyWaits,
    pub link: LinkState,
    /// What the source is, for the title bar ("log x.log", "http://...").
    pub source_label: String,
    /// Bumped on every change, so the UI redraws only when something changed.
    pub generation: u64,
    /// The whole job, when the source serves it.
    pub job: Option<JobView>,
    /// The rank whose snapshot the views show when it is not the connected one's.
    pub shown_rank: Option<u32>,
    /// The connected process's snapshot, kept up to date while another rank's is shown.
    home: Option<Snapshot>,
    /// The clock another rank's rates are taken on, as its snapshots arrive.
    clock: Instant,
    /// The source's own clock ([`Update::Clock`]), when it has one, and when its next rate sample is due.
    source_clock: Option<SourceClock>,
    /// The last [`Update::Notice`].
    pub notice: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct SourceClock {
    now: f64,
    next_sample: Option<f64>,
}

impl Live {
    pub fn new(source_label: impl Into<String>) -> Self {
        Live {
            snapshot: Snapshot::new(Source::Runtime),
            traffic: Traffic::default(),
            received: Traffic::default(),
            job_sent: Traffic::default(),
            job_received: Traffic::default(),
            waits: ProxyWaits::default(),
            link: LinkState::Connecting,
            source_label: source_label.into(),
            generation: 0,
            job: None,
            shown_rank: None,
            home: None,
            clock: Instant::now(),
            source_clock: None,
            notice: None,
        }
    }

    pub fn with_snapshot(source_label: impl Into<String>, snapshot: Snapshot) -> Self {
        let mut live = Live::new(source_label);
        live.snapshot = snapshot;
        live.take_waits();
        live.link = LinkState::Ended;
        live
    }

    pub fn apply(&mut self, update: Update) {
        self.generation += 1;
        match update {
            Update::Snapshot(s) => {
                *self.home_mut() = *s;
                if self.home.is_none() {
                    self.take_totals();
                    self.take_waits();
                }
                self.add_job_findings();
            }
            Update::Event(e) => self.apply_event(*e),
            Update::Link(link) => self.link = link,
            Update::Restart => {
                let label = std::mem::take(&mut self.source_label);
                // A source with its own clock keeps it: the picture starts over, its clock goes on from there.
                let source_clock = self.source_clock.map(|c| SourceClock { next_sample: None, ..c });
                *self = Live {
                    link: self.link.clone(),
                    generation: self.generation,
                    source_clock,
                    notice: self.notice.take(),
                    ..Live::new(label)
                };
            }
            Update::Clock(now) => {
                // Not drawn: only a rate sample changes what is shown (and counts itself).
                self.generation -= 1;
                let next = self.source_clock.and_then(|c| c.next_sample);
                self.source_clock = Some(SourceClock { now, next_sample: next });
                if next.is_none_or(|at| now >= at) {
                    // At the whole second passed: the source sends its clock before the updates of each moment,
                    // so nothing that came after that second has been applied yet.
                    let second = now.floor();
                    self.take_sample(second);
                    self.source_clock = Some(SourceClock { now, next_sample: Some(second + 1.0) });
                }
            }
            Update::Notice(text) => self.notice = Some(text),
            Update::Job(job) => {
                self.remove_job_findings();
                let mut counted = (BTreeSet::new(), BTreeSet::new());
                for t in job.ranks.iter().flat_map(|r| &r.edges.traffic) {
                    let (edges, key) = edge(&mut self.job_sent, &mut self.job_received, t);
                    edges.set_total(key, t.bytes, t.in_place_bytes);
                    if t.direction == Direction::Recv { &mut counted.1 } else { &mut counted.0 }.insert(key);
                }
                // A rank the job view no longer counts (it stopped answering) has no rate, not its last one.
                self.job_sent.retain(|k| counted.0.contains(k));
                self.job_received.retain(|k| counted.1.contains(k));
                let now = self.now();
                self.job_sent.sample(now);
                self.job_received.sample(now);
                self.job = Some(*job);
                self.add_job_findings();
            }
            Update::RankSnapshot { rank, snapshot } => {
                if self.shown_rank == Some(rank) {
                    self.snapshot = *snapshot;
                    // Its rates are its totals' growth between two of its snapshots.
                    self.take_totals();
                    self.take_waits();
                    let now = self.now();
                    self.traffic.sample(now);
                    self.waits.sample(now);
                    self.add_job_findings();
                }
            }
        }
    }

    /// How the job ended, once the connected process said it was ending: `Some(clean)`. The job view and the
    /// snapshots shown are then its last ones.
    pub fn ended(&self) -> Option<bool> {
        match self.link {
            LinkState::Finished { clean } => Some(clean),
            _ => None,
        }
    }

    /// The connected process's snapshot, whichever rank's is shown.
    pub fn home(&self) -> &Snapshot {
        self.home.as_ref().unwrap_or(&self.snapshot)
    }

    /// Shows `rank`'s snapshot (its source fetches it), or the connected process's again with `None`; returns
    /// the rank shown. Once the job ended no rank's snapshot can be fetched any more, so the one shown stays
    /// (with its last numbers) rather than an empty one that would never fill.
    pub fn show_rank(&mut self, rank: Option<u32>) -> Option<u32> {
        if rank == self.shown_rank || self.ended().is_some() {
            return self.shown_rank;
        }
        self.generation += 1;
        self.remove_job_findings();
        let home =
            self.home.take().unwrap_or_else(|| std::mem::replace(&mut self.snapshot, Snapshot::new(Source::Runtime)));
        match rank {
            None => self.snapshot = home,
            Some(_) => {
                // Until the rank's own arrives: empty but for the job's ranks, so the switcher still steps.
                self.snapshot = Snapshot { endpoints: home.endpoints.clone(), ..Snapshot::new(Source::Runtime) };
                self.home = Some(home);
            }
        }
        self.shown_rank = rank;
        // Every number is the shown rank's: its edges start over from its own totals.
        self.traffic.clear();
        self.received.clear();
        self.waits.clear();
        if rank.is_none() {
            self.take_totals();
            self.take_waits();
        }
        self.add_job_findings();
        rank
    }

    /// Sets every edge from the traffic totals of the snapshot shown.
    fn take_totals(&mut self) {
        for t in &self.snapshot.traffic {
            let (edges, key) = edge(&mut self.traffic, &mut self.received, t);
            edges.set_total(key, t.bytes, t.in_place_bytes);
        }
    }

    /// Takes the proxy rows of the snapshot shown as reports (those already taken add nothing).
    fn take_waits(&mut self) {
        for p in &self.snapshot.proxy {
            self.waits.observe(p);
        }
    }

    /// The connected process's snapshot, wherever it is kept now.
    fn home_mut(&mut self) -> &mut Snapshot {
        self.home.as_mut().unwrap_or(&mut self.snapshot)
    }

    /// The job-level findings are shown with the rank's own (the Findings view reads the snapshot), and every
    /// rank's connections and tree places with its own (the edge views read the snapshot's edges).
    fn add_job_findings(&mut self) {
        if let Some(job) = &self.job {
            for f in &job.findings {
                if !self.snapshot.findings.contains(f) {
                    self.snapshot.findings.push(f.clone());
                }
            }
            for r in &job.ranks {
                self.snapshot.merge_rank_edges(&r.edges);
            }
        }
    }

    /// What the sender counted on `key`: the shown snapshot's own count, else the job view's.
    pub fn sent_on(&self, key: EdgeKey) -> Option<&EdgeTraffic> {
        self.traffic.get(key).or_else(|| self.job_sent.get(key))
    }

    /// What the receiver counted on `key`: the shown snapshot's own count, else the job view's.
    pub fn received_on(&self, key: EdgeKey) -> Option<&EdgeTraffic> {
        self.received.get(key).or_else(|| self.job_received.get(key))
    }

    fn remove_job_findings(&mut self) {
        if let Some(job) = &self.job {
            self.snapshot.findings.retain(|f| !job.findings.contains(f));
        }
    }

    /// Folds one event into the connected process's snapshot (the model's one fold); while that snapshot is
    /// shown, traffic moves its edge to the end's new total and proxy reports add to its waits.
    fn apply_event(&mut self, event: Event) {
        // `Event::Snapshot`: the source fetches the new snapshot and sends it as `Update::Snapshot`.
        self.home_mut().apply(&event);
        if self.home.is_some() {
            return;
        }
        match &event {
            Event::Traffic(t) => {
                if let Some(total) = self.snapshot.traffic_total(t) {
                    let (edges, key) = edge(&mut self.traffic, &mut self.received, total);
                    edges.set_total(key, total.bytes, total.in_place_bytes);
                }
            }
            Event::Proxy(p) => self.waits.observe(p),
            Event::ProxyTally(t) => self.waits.tally(t),
            _ => {}
        }
    }

    /// Seconds on the clock rates are taken on: the source's own, else this view's.
    fn now(&self) -> f64 {
        self.source_clock.map_or_else(|| self.clock.elapsed().as_secs_f64(), |c| c.now)
    }

    /// Takes a traffic rate sample of the connected process's edges and a sample of its proxy waits (the UI
    /// calls it once a second, on the wall clock); another rank's are sampled as its snapshots arrive. A source
    /// with its own clock is sampled on that one instead ([`Update::Clock`]).
    pub fn sample(&mut self, now: f64) {
        if self.source_clock.is_none() {
            self.take_sample(now);
        }
    }

    fn take_sample(&mut self, now: f64) {
        if self.home.is_none() {
            let before = self.waits.recent();
            self.waits.sample(now);
            if !self.traffic.is_empty() || self.waits.recent() != before {
                self.traffic.sample(now);
                self.generation += 1;
            }
        }
    }
}

/// The edge a channel end's traffic is on, among the sender's counts (`sent`) or the receiver's (`received`):
/// both ends report a transfer.
fn edge<'a>(sent: &'a mut Traffic, received: &'a mut Traffic, t: &ChannelTraffic) -> (&'a mut Traffic, EdgeKey) {
    if t.direction == Direction::Recv {
        (received, EdgeKey { channel: t.channel, src: t.peer, dst: t.rank })
    } else {
        (sent, EdgeKey { channel: t.channel, src: t.rank, dst: t.peer })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::op as record;

    /// What `rank` counted on channel 0 towards `peer` over SHM, half of it in place.
    fn end(rank: u32, peer: u32, direction: Direction, bytes: u64) -> ChannelTraffic {
        ChannelTraffic {
            rank,
            channel: 0,
            peer,
            direction,
            transport: Some(collscope_model::Transport::Shm),
            bytes,
            in_place_bytes: Some(bytes / 2),
            seconds: 0.1,
        }
    }
    use collscope_model::{Algorithm, Collective, OpRecord, OpState, Protocol};

    fn op(seq: u64, state: OpState) -> OpRecord {
        record(seq, Collective::AllReduce, 4096, Algorithm::Ring, Protocol::Simple, state)
    }

    #[test]
    fn an_op_update_replaces_the_same_call_and_appends_new_ones() {
        let mut live = Live::new("test");
        live.apply(Update::Event(Box::new(Event::OpEnqueued(op(1, OpState::Enqueued)))));
        live.apply(Update::Event(Box::new(Event::OpCompleted(op(1, OpState::Completed)))));
        live.apply(Update::Event(Box::new(Event::OpEnqueued(op(2, OpState::Enqueued)))));
        let states: Vec<_> = live.snapshot.ops.iter().map(|o| (o.seq, o.state)).collect();
        assert_eq!(states, vec![(1, OpState::Completed), (2, OpState::Enqueued)]);
        assert_eq!(live.generation, 3);
    }

    #[test]
    fn the_op_log_is_bounded() {
        let mut live = Live::new("test");
        let max = collscope_model::fold::MAX_OPS as u64;
        for seq in 0..max + 10 {
            live.apply(Update::Event(Box::new(Event::OpCompleted(op(seq, OpState::Completed)))));
        }
        assert!(live.snapshot.ops.len() <= max as usize, "{} calls kept", live.snapshot.ops.len());
        assert!(live.snapshot.ops[0].seq >= 10, "the oldest went");
        assert_eq!(live.snapshot.ops.back().unwrap().seq, max + 9, "the newest stay");
    }

    #[test]
    fn traffic_counts_the_senders_reports_and_connections_are_not_duplicated() {
        use collscope_model::{ChannelTraffic, Transport};
        let mut live = Live::new("test");
        let t = |direction, bytes| {
            Update::Event(Box::new(Event::Traffic(ChannelTraffic {
                rank: 3,
                channel: 0,
                peer: 4,
                direction,
                transport: Some(Transport::Net),
                bytes,
                in_place_bytes: None,
                seconds: 0.1,
            })))
        };
        live.apply(t(Direction::Send, 1000));
        live.apply(t(Direction::Send, 500));
        live.apply(t(Direction::Recv, 7777));
        assert_eq!(live.traffic.get(EdgeKey { channel: 0, src: 3, dst: 4 }).unwrap().bytes, 1500);
        // The receiver's report counts apart, on the same edge (from the sender 4 to the receiver 3).
        assert_eq!(live.received.get(EdgeKey { channel: 0, src: 4, dst: 3 }).unwrap().bytes, 7777);
        let c = crate::fixture::snapshot().connections[0].clone();
        live.apply(Update::Event(Box::new(Event::Connection(c.clone()))));
        live.apply(Update::Event(Box::new(Event::Connection(c))));
        assert_eq!(live.snapshot.connections.len(), 1);
    }

    #[test]
    fn another_ranks_edges_come_from_its_own_snapshots_totals() {
        let e01 = EdgeKey { channel: 0, src: 0, dst: 1 };
        let (e23, e12) = (EdgeKey { channel: 0, src: 2, dst: 3 }, EdgeKey { channel: 0, src: 1, dst: 2 });
        let mut live = Live::new("test");
        live.apply(Update::Event(Box::new(Event::Traffic(end(0, 1, Direction::Send, 1000)))));
        assert_eq!(live.traffic.get(e01).unwrap().bytes, 1000);
        live.show_rank(Some(2));
        assert!(live.traffic.is_empty() && live.received.is_empty(), "rank 0's edges are not rank 2's");
        let rank2 = |sent, received| {
            let mut s = Snapshot::new(Source::Runtime);
            s.traffic = vec![end(2, 3, Direction::Send, sent), end(2, 1, Direction::Recv, received)];
            Update::RankSnapshot { rank: 2, snapshot: Box::new(s) }
        };
        live.apply(rank2(5000, 4000));
        // The connected rank's traffic goes on into its own snapshot only.
        live.apply(Update::Event(Box::new(Event::Traffic(end(0, 1, Direction::Send, 1000)))));
        std::thread::sleep(std::time::Duration::from_millis(20));
        live.apply(rank2(9000, 8000));
        live.sample(100.0);
        assert!(live.traffic.get(e01).is_none());
        let sent = live.traffic.get(e23).unwrap();
        assert_eq!((sent.bytes, sent.in_place), (9000, Some(4500)));
        assert!(sent.rate > 0.0 && sent.history.len() == 1, "{sent:?}");
        assert_eq!(live.received.get(e12).unwrap().bytes, 8000);
        // Back to the connected rank: its totals, all of them.
        live.show_rank(None);
        assert!(live.traffic.get(e23).is_none() && live.received.is_empty());
        assert_eq!(live.traffic.get(e01).unwrap().bytes, 2000);
    }

    /// Once the job ended, `>` cannot fetch another rank's snapshot: the one shown stays, with its numbers,
    /// instead of an empty one that would never fill.
    #[test]
    fn after_the_end_the_snapshot_shown_stays() {
        let mut live = crate::fixture::live();
        let before = live.snapshot.clone();
        assert!(!before.rings.is_empty() || !before.connections.is_empty(), "the fixture shows something");
        live.apply(Update::Link(LinkState::Finished { clean: true }));
        assert_eq!(live.ended(), Some(true));
        assert_eq!(live.show_rank(Some(2)), None, "the connected rank stays shown");
        assert_eq!(live.snapshot, before);
        assert_eq!(live.shown_rank, None);
        // While live, `>` shows the rank asked for.
        let mut live = crate::fixture::live();
        assert_eq!(live.show_rank(Some(2)), Some(2));
        assert_eq!(live.ended(), None);
    }

    /// The job view carries every rank's edges: their connections and tree places join the shown snapshot's, and
    /// their counts give the edges the shown rank does not count a rate, from one job view to the next.
    #[test]
    fn the_job_views_edges_fill_the_edges_the_shown_rank_does_not_count() {
        use collscope_model::{Connection, RankEdges, RankSummary, Transport, Tree};
        let conn = |src, dst| Connection::new(0, src, dst, Direction::Both, Transport::Shm);
        let job = |sent23: u64| {
            let endpoint = collscope_model::RankEndpoint {
                rank: 2,
                host: "h".into(),
                url: "http://h:1".into(),
                pid: None,
                started: None,
            };
            let mut rank2 = RankSummary::unreachable(&endpoint, String::new());
            rank2.edges = RankEdges {
                connections: vec![conn(2, 3)],
                trees: vec![Tree { channel: 0, rank: 2, up: 1, down: vec![3] }],
                traffic: vec![end(2, 3, Direction::Send, sent23), end(2, 1, Direction::Recv, 2 * sent23)],
            };
            Update::Job(Box::new(JobView { ranks: vec![rank2], findings: vec![], ..Default::default() }))
        };
        let mut live = Live::new("test");
        live.apply(Update::Event(Box::new(Event::Connection(conn(0, 1)))));
        live.apply(Update::Event(Box::new(Event::Traffic(end(0, 1, Direction::Send, 1000)))));
        live.apply(job(1000));
        std::thread::sleep(std::time::Duration::from_millis(20));
        live.apply(job(5000));
        assert_eq!(live.snapshot.connections, [conn(0, 1), conn(2, 3)]);
        assert_eq!(live.snapshot.trees.len(), 1);
        let e23 = EdgeKey { channel: 0, src: 2, dst: 3 };
        let sent = live.sent_on(e23).unwrap();
        assert!(sent.bytes == 5000 && sent.rate > 0.0, "{sent:?}");
        assert_eq!(live.received_on(EdgeKey { channel: 0, src: 1, dst: 2 }).unwrap().bytes, 10000);
        // The shown rank's own count comes first.
        assert_eq!(live.sent_on(EdgeKey { channel: 0, src: 0, dst: 1 }).unwrap().bytes, 1000);
        // A fresh snapshot of the connected process keeps the job's edges beside its own.
        live.apply(Update::Snapshot(Box::new(Snapshot::new(Source::Runtime))));
        assert_eq!(live.snapshot.connections, [conn(2, 3)]);
        // Rank 2 no longer summarised (it stopped answering): its edges have no rate, not their last one.
        live.apply(Update::Job(Box::default()));
        assert!(live.sent_on(e23).is_none());
    }

    #[test]
    fn proxy_waits_are_the_shown_ranks_own_and_a_snapshot_reread_adds_nothing() {
        use collscope_model::{ProxyOp, ProxyWait};
        let op = |rank, seq, secs| ProxyOp {
            rank,
            seq,
            waits: vec![(ProxyWait::WaitingForRecv, secs)],
            ..ProxyOp::default()
        };
        let recv = |live: &Live| live.waits.total()[ProxyWait::WaitingForRecv.index()];
        let mut live = Live::new("test");
        live.apply(Update::Event(Box::new(Event::Proxy(op(0, 1, 0.5)))));
        live.apply(Update::Event(Box::new(Event::Proxy(op(0, 2, 0.25)))));
        // The process's snapshot holds the connection's latest call, already counted.
        live.apply(Update::Snapshot(Box::new(live.snapshot.clone())));
        assert_eq!(recv(&live), 0.75);
        live.show_rank(Some(2));
        assert_eq!(recv(&live), 0.0, "rank 0's waits are not rank 2's");
        let mut s = Snapshot::new(Source::Runtime);
        s.proxy = vec![op(2, 7, 2.0)];
        live.apply(Update::RankSnapshot { rank: 2, snapshot: Box::new(s) });
        live.apply(Update::Event(Box::new(Event::Proxy(op(0, 3, 1.0)))));
        assert_eq!(recv(&live), 2.0);
        live.show_rank(None);
        assert_eq!(recv(&live), 1.0, "back on rank 0, it starts over from its snapshot's rows: the latest call");
    }
}
