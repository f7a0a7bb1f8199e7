//! Operation records and proxy progress, as the runtime records them for telemetry and the TUI.

use super::names::{Algorithm, Collective, DataType, Protocol, RedOp};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpState {
    Enqueued,
    Started,
    Completed,
    Failed,
}

/// One collective or point-to-point call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpRecord {
    /// Shared: a live source names the same communicator on each of its calls, thousands a second.
    pub comm: Option<Arc<str>>,
    pub rank: u32,
    /// Per-communicator sequence number (NCCL's opCount).
    pub seq: u64,
    pub coll: Collective,
    pub count: u64,
    pub datatype: DataType,
    pub op: Option<RedOp>,
    pub root: Option<i32>,
    pub peer: Option<i32>,
    pub bytes: u64,
    pub algo: Option<Algorithm>,
    pub proto: Option<Protocol>,
    pub n_channels: Option<u32>,
    pub state: OpState,
    /// Microseconds since the UNIX epoch.
    pub enqueued_us: Option<u64>,
    pub started_us: Option<u64>,
    pub completed_us: Option<u64>,
    pub duration_us: Option<f64>,
    pub algbw_gbps: Option<f64>,
    pub busbw_gbps: Option<f64>,
}

impl OpRecord {
    /// A call of `count` elements that began at `started_us` (enqueued then too) and has no outcome yet.
    pub fn started(rank: u32, seq: u64, coll: Collective, datatype: DataType, count: u64, started_us: u64) -> Self {
        OpRecord {
            comm: None,
            rank,
            seq,
            coll,
            count,
            datatype,
            op: None,
            root: None,
            peer: None,
            bytes: count * datatype.size() as u64,
            algo: None,
            proto: None,
            n_channels: None,
            state: OpState::Started,
            enqueued_us: Some(started_us),
            started_us: Some(started_us),
            completed_us: None,
            duration_us: None,
            algbw_gbps: None,
            busbw_gbps: None,
        }
    }

    /// Ends the call at `completed_us` after `secs` of work: its duration and, when that is positive, its
    /// bandwidths (nccl-tests' algbw, and busbw for a communicator of `nranks` when known).
    pub fn set_end(&mut self, completed_us: u64, secs: f64, nranks: Option<u32>) {
        self.completed_us = Some(completed_us);
        self.duration_us = Some(secs * 1e6);
        if secs > 0.0 {
            let algbw = self.bytes as f64 / secs / 1e9;
            self.algbw_gbps = Some(algbw);
            self.busbw_gbps = nranks.map(|n| algbw * self.coll.bus_bw_factor(n.max(1)));
        }
    }
}

/// One channel's GPU time, summed over the calls that ran on it (NCCL's profiler KernelCh events: the
/// channel's work starts and stops on the GPU's globaltimer). Totals since the communicator was created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelChannel {
    pub comm: Option<String>,
    pub rank: u32,
    pub channel: u32,
    /// Calls whose work on this channel started and stopped with GPU timestamps.
    pub calls: u64,
    pub gpu_seconds: f64,
}

/// Where a proxy step waits (NCCL's proxy progress states, as the profiler plugin names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyWait {
    /// Sender waits for the GPU/kernel to fill the step.
    WaitingForData,
    /// Sender waits for the receiver's clear-to-send / credit.
    WaitingForPeer,
    /// Send posted, waiting for the network to finish it.
    WaitingForSendCompletion,
    /// Receive posted, waiting for data to arrive.
    WaitingForRecv,
    /// Data arrived, waiting for the flush to make it visible.
    WaitingForFlush,
    /// Receiver waits for the GPU to consume a step before its buffer is reused (NCCL 2.28.9's profiler state
    /// `ncclProfilerProxyStepRecvGPUWait`, `src/include/plugin/profiler/profiler_v4.h`).
    RecvGpuWait,
}

impl ProxyWait {
    /// Every wait state, in the order a step passes through them.
    pub const ALL: [ProxyWait; 6] = [
        ProxyWait::WaitingForData,
        ProxyWait::WaitingForPeer,
        ProxyWait::WaitingForSendCompletion,
        ProxyWait::WaitingForRecv,
        ProxyWait::WaitingForFlush,
        ProxyWait::RecvGpuWait,
    ];

    /// Its place in [`ProxyWait::ALL`].
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// One proxy sub-operation on one channel and peer: steps `posted`, `transmitted`, `done` out of `n_steps`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProxyOp {
    pub rank: u32,
    pub seq: u64,
    pub channel: u32,
    pub peer: u32,
    pub send: bool,
    pub n_steps: u64,
    pub posted: u64,
    pub transmitted: u64,
    pub done: u64,
    /// Seconds spent in each wait state.
    pub waits: Vec<(ProxyWait, f64)>,
    /// Wall-clock microseconds (UNIX epoch) of its first step's first state and of its latest change, where
    /// the source has them (the runtime; not NCCL's profiler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_us: Option<u64>,
}

impl ProxyOp {
    /// Whether `other` ran on the same connection (rank, channel, peer, direction).
    pub fn same_connection(&self, other: &ProxyOp) -> bool {
        (self.rank, self.channel, self.peer, self.send) == (other.rank, other.channel, other.peer, other.send)
    }
}

/// Finished proxy sub-operations of one connection, summed: how a source that sees every operation at NCCL's
/// rate (the profiler plugin) reports them, one tally per connection a drain instead of an event each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProxyTally {
    /// The newest of them: the connection's row.
    pub last: ProxyOp,
    /// How many operations `sum` covers, `last` among them.
    pub ops: u64,
    /// Their steps and wait seconds added up, under `last`'s rank, seq, channel, peer and direction.
    pub sum: ProxyOp,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wait_state_is_listed_once_at_its_index() {
        for (i, w) in ProxyWait::ALL.into_iter().enumerate() {
            assert_eq!(w.index(), i, "{w:?}");
        }
    }

    #[test]
    fn a_connection_is_its_rank_channel_peer_and_direction() {
        let op = ProxyOp {
            rank: 1,
            seq: 4,
            channel: 0,
            peer: 2,
            send: false,
            n_steps: 2,
            posted: 2,
            transmitted: 2,
            done: 2,
            waits: vec![(ProxyWait::WaitingForRecv, 0.5)],
            started_us: None,
            updated_us: None,
        };
        assert!(op.same_connection(&ProxyOp { seq: 9, waits: vec![], ..op.clone() }));
        assert!(!op.same_connection(&ProxyOp { send: true, ..op.clone() }));
        assert!(!op.same_connection(&ProxyOp { peer: 3, ..op.clone() }));
    }
}
