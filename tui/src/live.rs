//! What the TUI knows right now: the latest snapshot from the source, live traffic, and the state of the link to
//! the source. Sources send [`Update`]s; the UI thread applies them.

use crate::traffic::{EdgeKey, Traffic};
use collscope_core::model::{OpRecord, ProxyOp, Snapshot, Source};

/// How many operations the live log keeps.
pub const MAX_OPS: usize = 2000;

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
    /// A finite source (log without `--follow`, replay) was read to its end.
    Ended,
}

/// One thing a source reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// A whole new picture (a log re-read, `/api/v1/snapshot`).
    Snapshot(Box<Snapshot>),
    /// An operation started or finished.
    Op(Box<OpRecord>),
    /// Proxy progress of one sub-operation.
    Proxy(ProxyOp),
    /// Cumulative bytes over one edge.
    EdgeBytes {
        key: EdgeKey,
        bytes: u64,
    },
    Link(LinkState),
}

#[derive(Debug, Clone)]
pub struct Live {
    pub snapshot: Snapshot,
    pub traffic: Traffic,
    pub link: LinkState,
    /// What the source is, for the title bar ("log x.log", "http://...").
    pub source_label: String,
    /// Bumped on every change, so the UI redraws only when something changed.
    pub generation: u64,
}

impl Live {
    pub fn new(source_label: impl Into<String>) -> Self {
        Live {
            snapshot: Snapshot::new(Source::Runtime),
            traffic: Traffic::default(),
            link: LinkState::Connecting,
            source_label: source_label.into(),
            generation: 0,
        }
    }

    pub fn with_snapshot(source_label: impl Into<String>, snapshot: Snapshot) -> Self {
        let mut live = Live::new(source_label);
        live.snapshot = snapshot;
        live.link = LinkState::Ended;
        live
    }

    pub fn apply(&mut self, update: Update) {
        self.generation += 1;
        match update {
            Update::Snapshot(s) => self.snapshot = *s,
            Update::Op(op) => upsert_op(&mut self.snapshot.ops, *op),
            Update::Proxy(p) => upsert_proxy(&mut self.snapshot.proxy, p),
            Update::EdgeBytes { key, bytes } => self.traffic.set_total(key, bytes),
            Update::Link(link) => self.link = link,
        }
    }

    /// Takes a traffic rate sample (the UI calls it once a second).
    pub fn sample(&mut self, now: f64) {
        if !self.traffic.is_empty() {
            self.traffic.sample(now);
            self.generation += 1;
        }
    }
}

/// Replaces the record of the same (comm, rank, seq), else appends; keeps the newest [`MAX_OPS`].
fn upsert_op(ops: &mut Vec<OpRecord>, op: OpRecord) {
    let same = |o: &OpRecord| o.seq == op.seq && o.rank == op.rank && o.comm == op.comm && o.coll == op.coll;
    if let Some(existing) = ops.iter_mut().rev().take(64).find(|o| same(o)) {
        *existing = op;
    } else {
        ops.push(op);
        if ops.len() > MAX_OPS {
            ops.drain(..ops.len() - MAX_OPS);
        }
    }
}

/// Proxy progress is kept per (rank, channel, peer, direction): the latest sub-operation replaces the previous.
fn upsert_proxy(proxy: &mut Vec<ProxyOp>, p: ProxyOp) {
    match proxy.iter_mut().find(|o| o.rank == p.rank && o.channel == p.channel && o.peer == p.peer && o.send == p.send)
    {
        Some(existing) => *existing = p,
        None => proxy.push(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::op as record;
    use collscope_core::model::{Algorithm, Collective, OpState, Protocol};

    fn op(seq: u64, state: OpState) -> OpRecord {
        record(seq, Collective::AllReduce, 4096, Algorithm::Ring, Protocol::Simple, state)
    }

    #[test]
    fn an_op_update_replaces_the_same_call_and_appends_new_ones() {
        let mut live = Live::new("test");
        live.apply(Update::Op(Box::new(op(1, OpState::Started))));
        live.apply(Update::Op(Box::new(op(1, OpState::Completed))));
        live.apply(Update::Op(Box::new(op(2, OpState::Started))));
        let states: Vec<_> = live.snapshot.ops.iter().map(|o| (o.seq, o.state)).collect();
        assert_eq!(states, vec![(1, OpState::Completed), (2, OpState::Started)]);
        assert_eq!(live.generation, 3);
    }

    #[test]
    fn the_op_log_is_bounded() {
        let mut live = Live::new("test");
        for seq in 0..(MAX_OPS as u64 + 10) {
            live.apply(Update::Op(Box::new(op(seq, OpState::Completed))));
        }
        assert_eq!(live.snapshot.ops.len(), MAX_OPS);
        assert_eq!(live.snapshot.ops[0].seq, 10);
    }
}
