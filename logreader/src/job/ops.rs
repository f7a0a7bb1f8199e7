//! Calls and the decisions taken for them: an op history per communicator (the latest calls, with a count of
//! those let go), decisions deduplicated, and decision lines that name no collective kept as printed.

use super::*;
use crate::message::{CollLine, DecisionLine};
use collscope_model::{DataType, Decision, OpRecord, OpState, RedOp, UnnamedDecision};
use std::collections::VecDeque;
use std::sync::Arc;

/// Calls kept per communicator: enough to see where a hung job stopped and what came before.
pub(super) const OP_HISTORY: usize = 64;
/// Communicators with a history; calls on more are counted as dropped.
const MAX_HISTORIES: usize = 4096;

#[derive(Default, Clone)]
pub(super) struct OpHistories {
    by_comm: FastMap<u64, usize>,
    histories: Vec<VecDeque<OpRecord>>,
    pub dropped: u64,
}

impl OpHistories {
    fn push(&mut self, key: u64, op: OpRecord) {
        let i = match self.by_comm.get(&key) {
            Some(&i) => i,
            None if self.histories.len() < MAX_HISTORIES => {
                self.histories.push(VecDeque::new());
                self.by_comm.insert(key, self.histories.len() - 1);
                self.histories.len() - 1
            }
            None => {
                self.dropped += 1;
                return;
            }
        };
        let h = &mut self.histories[i];
        // The same call again (a log pasted twice, output captured twice) is not a new call.
        if h.iter().any(|o| o.seq == op.seq && o.coll == op.coll && o.count == op.count && o.rank == op.rank) {
            return;
        }
        if h.len() == OP_HISTORY {
            h.pop_front();
            self.dropped += 1;
        }
        h.push_back(op);
    }

    fn last_mut(&mut self, key: u64) -> Option<&mut OpRecord> {
        self.histories.get_mut(*self.by_comm.get(&key)?)?.back_mut()
    }

    /// Every kept call, communicator by communicator in the order they first appeared.
    pub(super) fn records(&self) -> Vec<OpRecord> {
        self.histories.iter().flatten().cloned().collect()
    }
}

impl Job {
    pub(super) fn coll(&mut self, key: &ProcKey, rank: Option<u32>, stream: StreamKey, c: CollLine) {
        if let Some(n) = c.nranks {
            self.printed_nranks(n, "[nranks=N] of COLL lines");
        }
        let comm_key = c.comm.as_deref().map(|comm| Self::comm_rank_key(key, comm));
        let rank = c.global_rank.or(rank).or_else(|| comm_key.and_then(|k| self.comm_rank.get(&k).copied()));
        if let Some(r) = rank {
            self.learn_rank(key, r);
        }
        let s = self.streams.entry(stream).or_default();
        s.last_coll = Some(c.coll);
        s.last_op = None;
        let (Some(rank), Some(datatype)) = (rank, c.datatype.and_then(DataType::from_id)) else { return };
        let op_key = comm_key.unwrap_or_else(|| Self::comm_rank_key(key, ""));
        s.last_op = Some(op_key);
        let bytes = c.count.saturating_mul(datatype.size() as u64);
        self.ops.push(
            op_key,
            OpRecord {
                comm: c.comm.map(Arc::from),
                rank,
                seq: c.op_count,
                coll: c.coll,
                count: c.count,
                datatype,
                op: c.op.and_then(RedOp::from_id),
                root: c.root,
                peer: None,
                bytes,
                algo: None,
                proto: None,
                n_channels: None,
                state: OpState::Enqueued,
                enqueued_us: None,
                started_us: None,
                completed_us: None,
                duration_us: None,
                algbw_gbps: None,
                busbw_gbps: None,
            },
        );
        self.facts.stats.dropped_ops = self.ops.dropped;
    }

    /// A decision line: the collective it names, or the one its thread's last COLL line named; attached to that
    /// call when the sizes agree.
    pub(super) fn decision(&mut self, stream: StreamKey, rank: Option<u32>, d: DecisionLine) {
        let s = self.streams.entry(stream).or_default();
        let (last_coll, last_op) = (s.last_coll, s.last_op);
        if let Some(op) = last_op.and_then(|k| self.ops.last_mut(k)) {
            if d.coll.is_none_or(|c| c == op.coll) && (op.bytes == d.bytes || d.coll.is_none()) {
                op.algo = Some(d.algo);
                op.proto = Some(d.proto);
                op.n_channels = d.n_channels.or(op.n_channels);
            }
        }
        let Some(coll) = d.coll.or(last_coll) else {
            let key = (d.bytes, d.algo.id() as u8, d.proto.id() as u8, rank);
            if self.facts.unnamed_decisions.len() < MAX_DECISIONS && self.unnamed_seen.insert(key) {
                let u = UnnamedDecision { bytes: d.bytes, algo: d.algo, proto: d.proto, time_us: d.time_us, rank };
                self.facts.unnamed_decisions.push(u);
            }
            return;
        };
        let key = (coll, d.bytes, d.algo.id() as u8, d.proto.id() as u8, rank);
        if let Some(&i) = self.decision_index.get(&key) {
            // The same choice printed again (INFO and TRACE): keep what each adds.
            let known = &mut self.snap.decisions[i];
            known.time_us = known.time_us.or(d.time_us);
            if known.n_channels == 0 {
                known.n_channels = d.n_channels.unwrap_or(0);
            }
        } else if self.snap.decisions.len() < MAX_DECISIONS {
            self.decision_index.insert(key, self.snap.decisions.len());
            self.snap.decisions.push(Decision {
                coll,
                bytes: d.bytes,
                algo: d.algo,
                proto: d.proto,
                n_channels: d.n_channels.unwrap_or(0),
                time_us: d.time_us,
                runner_up: None,
                reason: None,
                datatype: None,
                rank,
            });
        }
    }
}
