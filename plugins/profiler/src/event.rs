//! What the state machine consumes: NCCL's descriptors and state arguments with the ABI version taken off.

use collscope_model::{Algorithm, Collective, DataType, Protocol};
use std::ffi::{c_int, c_void};

/// One `startEvent`.
pub(crate) enum Start {
    /// A collective (`Coll`) or point-to-point call (`P2p`).
    Task(TaskStart),
    ProxyOp(ProxyOpStart),
    /// `parent` is the proxy operation's handle.
    ProxyStep {
        parent: *mut c_void,
        step: c_int,
    },
    /// `parent` is the call's handle; `p_timer` the GPU globaltimer (ns) when the channel's work started.
    KernelCh {
        parent: *mut c_void,
        channel: u8,
        p_timer: u64,
    },
    ProxyCtrl,
    /// An event the plugin keeps nothing of: Group (calls carry their own times), the API and KernelLaunch events,
    /// NetPlugin, copy-engine calls. NCCL takes a NULL handle as a dropped event and never stops it
    /// (NCCL 2.30.7 `src/plugin/profiler.cc` checks every handle before `stopEvent`).
    Ignored,
}

pub(crate) struct TaskStart {
    pub rank: c_int,
    /// None for what the model cannot name (Gather, Scatter, PutSignal, ..).
    pub coll: Option<Collective>,
    pub datatype: Option<DataType>,
    pub count: u64,
    pub root: Option<c_int>,
    pub peer: Option<c_int>,
    pub algo: Option<Algorithm>,
    pub proto: Option<Protocol>,
    pub n_channels: Option<u8>,
}

pub(crate) struct ProxyOpStart {
    /// The call's handle, or a pointer into another process when `pid` is not this process (PXN).
    pub parent: *mut c_void,
    pub pid: libc::pid_t,
    pub rank: c_int,
    pub channel: u8,
    pub peer: c_int,
    pub n_steps: c_int,
    pub is_send: bool,
}

/// The arguments of one `recordEventState`, as far as its state has any.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Update {
    /// ProxyStep states: bytes of the step (`sub->transSize`).
    pub trans_size: u64,
    /// ProxyCtrl AppendEnd: proxy operations appended.
    pub appended: c_int,
    /// KernelChStop: the GPU globaltimer (ns) when the channel's work stopped.
    pub p_timer: u64,
}
