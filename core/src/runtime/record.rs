//! What the runtime keeps for telemetry: the connections it made and a bounded ring of recent operations.

use crate::model::{Connection, OpRecord, ProxyOp};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Operations kept per communicator.
pub const OP_RING: usize = 1024;

#[derive(Debug, Default)]
pub struct Records {
    ops: Mutex<VecDeque<OpRecord>>,
    connections: Mutex<Vec<Connection>>,
    /// Proxy sub-operations of NET connections, most recent last.
    proxy: Mutex<VecDeque<ProxyOp>>,
    /// Sequence number of the operation the rank is running (0 before the first).
    current_seq: AtomicU64,
}

impl Records {
    pub fn push_op(&self, op: OpRecord) {
        let mut ops = self.ops.lock().unwrap_or_else(|p| p.into_inner());
        if ops.len() == OP_RING {
            ops.pop_front();
        }
        ops.push_back(op);
    }

    pub fn push_connection(&self, c: Connection) {
        self.connections.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }

    /// The most recent operations, oldest first.
    pub fn ops(&self) -> Vec<OpRecord> {
        self.ops.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned().collect()
    }

    /// Marks `seq` as the operation in progress, so proxy threads can attribute their steps to it.
    pub fn begin_op(&self, seq: u64) {
        self.current_seq.store(seq, Ordering::Release);
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
