//! What the runtime keeps for telemetry: the connections it made and a bounded ring of recent operations.

use crate::model::{Connection, OpRecord};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Operations kept per communicator.
pub const OP_RING: usize = 1024;

#[derive(Debug, Default)]
pub struct Records {
    ops: Mutex<VecDeque<OpRecord>>,
    connections: Mutex<Vec<Connection>>,
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

    pub fn connections(&self) -> Vec<Connection> {
        self.connections.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
