//! What the runtime keeps for telemetry: the connections it made, a bounded ring of recent operations and
//! running totals of calls and traffic. Telemetry reads it whenever it likes (the process's recorder lists
//! every communicator's records); the data path never waits for telemetry.

use super::stats::CallStats;
use crate::model::{Connection, Event, OpRecord, ProxyOp};
use crate::recorder;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Operations kept per communicator.
pub const OP_RING: usize = 1024;

pub struct Records {
    /// Unique in the process, so a reader can tell these records from those of an earlier communicator.
    id: u64,
    rank: u32,
    /// The communicator's name, given to the operations as they are handed out.
    name: Option<String>,
    pub stats: CallStats,
    ops: Mutex<VecDeque<OpRecord>>,
    connections: Mutex<Vec<Connection>>,
    /// Proxy sub-operations of NET connections, most recent last.
    proxy: Mutex<VecDeque<ProxyOp>>,
    /// Sequence number of the operation the rank is running (0 before the first).
    current_seq: AtomicU64,
}

/// Operations a reader had not seen yet, and how many it missed because the ring had moved past them.
#[derive(Debug, Default)]
pub struct NewOps {
    pub ops: Vec<OpRecord>,
    pub missed: u64,
}

impl Records {
    pub fn new(rank: u32, nchannels: usize, name: Option<String>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Records {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            rank,
            name,
            stats: CallStats::new(nchannels),
            ops: Mutex::default(),
            connections: Mutex::default(),
            proxy: Mutex::default(),
            current_seq: AtomicU64::new(0),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    pub fn push_op(&self, op: OpRecord) {
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        if ops.len() == OP_RING {
            ops.pop_front();
        }
        ops.push_back(op);
    }

    pub fn push_connection(&self, c: Connection) {
        recorder::record(|| Event::Connection(c.clone()));
        self.connections.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }

    /// The most recent operations, oldest first.
    pub fn ops(&self) -> Vec<OpRecord> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|o| self.named(o)).collect()
    }

    fn named(&self, op: &OpRecord) -> OpRecord {
        OpRecord { comm: self.name.clone(), ..op.clone() }
    }

    /// The kept operations numbered after `seq`, oldest first.
    pub fn ops_after(&self, seq: u64) -> NewOps {
        let ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = ops.partition_point(|o| o.seq <= seq);
        let missed = ops.get(fresh).map_or(0, |o| o.seq.saturating_sub(seq + 1));
        NewOps { ops: ops.range(fresh..).map(|o| self.named(o)).collect(), missed }
    }

    /// Marks `seq` as the operation in progress, so proxy threads can attribute their steps to it.
    pub fn begin_op(&self, seq: u64) {
        let prev = self.current_seq.swap(seq, Ordering::AcqRel);
        if prev != 0 && prev != seq && recorder::enabled() {
            self.report_proxy(prev);
        }
    }

    /// Hands telemetry the proxy sub-operations of `seq`, once the next operation has begun (the proxy
    /// thread has no moment of its own at which a sub-operation is final).
    fn report_proxy(&self, seq: u64) {
        let ops = self.proxy.lock().unwrap_or_else(|p| p.into_inner());
        for o in ops.iter().rev().take_while(|o| o.seq >= seq).filter(|o| o.seq == seq) {
            recorder::record(|| Event::Proxy(o.clone()));
        }
    }

    pub fn current_seq(&self) -> u64 {
        self.current_seq.load(Ordering::Acquire)
    }

    /// Updates the proxy record of (seq, channel, peer, direction) in place, or starts it.
    pub fn update_proxy(&self, key: &ProxyOp, f: impl FnOnce(&mut ProxyOp)) {
        let mut ops = self.proxy.lock().unwrap_or_else(|p| p.into_inner());
        let same =
            |o: &ProxyOp| o.seq == key.seq && o.channel == key.channel && o.peer == key.peer && o.send == key.send;
        if let Some(o) = ops.iter_mut().rev().find(|o| same(o)) {
            f(o);
            return;
        }
        if ops.len() == OP_RING {
            ops.pop_front();
        }
        let mut o = key.clone();
        f(&mut o);
        ops.push_back(o);
    }

    /// The most recent proxy sub-operations, oldest first.
    pub fn proxy_ops(&self) -> Vec<ProxyOp> {
        self.proxy.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    pub fn connections(&self) -> Vec<Connection> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
