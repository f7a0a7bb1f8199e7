//! The records the hot path writes: fixed-size copies of finished events, each communicator's bounded ring of
//! them (full: the record is dropped and counted) and the counters of what the hot path saw. Plain data, below
//! both the state machine that fills them and the output that drains them.

use collscope_model::{Algorithm, Collective, DataType, Protocol};
use crossbeam_queue::ArrayQueue;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Proxy wait states in the order of a [`ProxyRec`]'s `waits`: NCCL's ProxyStep states SendGPUWait,
/// SendPeerWait_v4, SendWait, RecvWait, RecvFlushWait, RecvGPUWait.
pub(crate) const WAITS: usize = 6;
/// RecvGPUWait's place (the receiver waits for the GPU to consume a step): a wait like the others in the model,
/// and also summed for `collscope_profiler_counters`, whose C struct keeps its field.
pub(crate) const RECV_GPU_WAIT: usize = 5;

/// A ring record: fixed size, no heap, copied out of the event objects.
#[derive(Clone, Copy)]
pub(crate) enum Raw {
    /// A call's stopEvent: NCCL has enqueued it.
    Enqueued(TaskRec),
    /// The call's last child stopped (or, without KernelCh events, its stopEvent came and no child runs).
    Completed(TaskRec),
    Proxy(ProxyRec),
}

#[derive(Clone, Copy)]
pub(crate) struct TaskRec {
    pub seq: u64,
    pub rank: i32,
    pub coll: Collective,
    pub datatype: DataType,
    pub count: u64,
    pub root: Option<i32>,
    pub peer: Option<i32>,
    pub algo: Option<Algorithm>,
    pub proto: Option<Protocol>,
    pub n_channels: Option<u8>,
    /// The call's startEvent.
    pub enqueued_ns: u64,
    /// Its first child's start, else its startEvent.
    pub started_ns: u64,
    pub completed_ns: u64,
    /// First channel start to last channel stop on the GPU's globaltimer; 0 when no KernelCh had timestamps.
    pub gpu_ns: u64,
}

#[derive(Clone, Copy)]
pub(crate) struct ProxyRec {
    /// The call's sequence number; 0 for a PXN operation run here for another process's call.
    pub seq: u64,
    pub rank: i32,
    pub channel: u8,
    pub peer: i32,
    pub send: bool,
    pub n_steps: i32,
    pub posted: u32,
    pub transmitted: u32,
    pub done: u32,
    pub bytes: u64,
    pub waits_ns: [u64; WAITS],
    pub first_step_ns: u64,
    pub last_step_ns: u64,
}

/// What the hot path counts. Each counter is written by few threads and read only when drained or queried.
#[derive(Default)]
pub(crate) struct Stats {
    pub proxy_ops: AtomicU64,
    /// No free event object: NCCL got a NULL handle.
    pub dropped_events: AtomicU64,
    /// The ring was full: the record is lost, the event was handled.
    pub dropped_records: AtomicU64,
    /// A child whose call has no handle, was dropped, or is already complete.
    pub orphans: AtomicU64,
    /// A call the model cannot name (Gather, Scatter, PutSignal, ...).
    pub unsupported: AtomicU64,
    /// A handle stopped twice or used after its event ended.
    pub misuse: AtomicU64,
    pub recv_gpu_wait_ns: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

/// A ring and its counters: one per communicator, one for PXN operations of other processes.
pub(crate) struct Outbox {
    ring: ArrayQueue<Raw>,
    pub stats: Stats,
}

impl Outbox {
    pub(crate) fn new(capacity: usize) -> Self {
        Outbox { ring: ArrayQueue::new(capacity.max(1)), stats: Stats::default() }
    }

    pub(crate) fn emit(&self, r: Raw) {
        if self.ring.push(r).is_err() {
            bump(&self.stats.dropped_records);
        }
    }

    pub(crate) fn pop(&self) -> Option<Raw> {
        self.ring.pop()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}
