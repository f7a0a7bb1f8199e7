//! The plugin's side of NCCL's profiler ABI, whose types are `collscope-profiler-abi`'s (re-exported here). Each
//! version file turns its descriptor into [`Start`] and exports its `ncclProfiler_vN` symbol; everything after
//! that is version-free.

mod entry;
pub mod v4;
pub mod v5;
pub mod v6;

use crate::event::{ProxyOpStart, Start, TaskStart, Update};
use crate::names;
use std::ffi::{c_char, c_int, c_void, CStr};

pub use collscope_profiler_abi::*;

/// The part of `args` that `state` carries; NCCL passes NULL for states without arguments (GroupApi).
///
/// # Safety
/// `args` is NULL or points to a live `StateArgs`.
pub(crate) unsafe fn update(state: c_int, args: *const StateArgs) -> Update {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on. The
    // union's member read is the one NCCL fills for `state`.
    unsafe {
        let Some(a) = args.as_ref() else { return Update::default() };
        match state {
            state::PROXY_STEP_SEND_GPU_WAIT..=state::PROXY_STEP_RECV_GPU_WAIT | state::PROXY_STEP_SEND_PEER_WAIT_V4 => {
                Update { trans_size: a.proxy_step.trans_size as u64, ..Update::default() }
            }
            state::PROXY_CTRL_IDLE..=state::PROXY_CTRL_APPEND_END => {
                Update { appended: a.proxy_ctrl.appended_proxy_ops, ..Update::default() }
            }
            state::KERNEL_CH_STOP => Update { p_timer: a.kernel_ch.p_timer, ..Update::default() },
            _ => Update::default(),
        }
    }
}

/// A NUL-terminated name NCCL passes (static strings in NCCL 2.30.7 `src/collectives.cc`); NULL reads as empty.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn bytes<'a>(p: *const c_char) -> &'a [u8] {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        if p.is_null() {
            &[]
        } else {
            CStr::from_ptr(p).to_bytes()
        }
    }
}

/// A version's descriptor union, read one member at a time: NCCL fills only the member its `type` names (the v4
/// adapter of NCCL 2.28+ leaves the rest of its stack copy uninitialised), so no other member may be read.
pub(crate) trait Members {
    /// # Safety
    /// The descriptor is a collective.
    unsafe fn coll(&self) -> TaskView;
    /// # Safety
    /// The descriptor is a point-to-point call.
    unsafe fn p2p(&self) -> TaskView;
    /// # Safety
    /// The descriptor is a proxy operation.
    unsafe fn proxy_op(&self) -> ProxyOp;
    /// # Safety
    /// The descriptor is a proxy step.
    unsafe fn proxy_step(&self) -> ProxyStep;
    /// # Safety
    /// The descriptor is a kernel channel.
    unsafe fn kernel_ch(&self) -> KernelCh;
}

/// [`Members`] of a union with the member names v4 and v5 share (`coll`, `p2p`, `proxy_op`, ..).
macro_rules! members {
    ($u:ty) => {
        impl $crate::abi::Members for $u {
            unsafe fn coll(&self) -> $crate::abi::TaskView {
                // SAFETY: the caller's contract (`Members`): the descriptor's type is a collective, so NCCL filled
                // `coll`.
                unsafe {
                    let c = &self.coll;
                    $crate::abi::TaskView {
                        func: c.func,
                        datatype: c.datatype,
                        count: c.count,
                        root: Some(c.root),
                        peer: None,
                        algo: c.algo,
                        proto: c.proto,
                        n_channels: Some(c.n_channels),
                    }
                }
            }
            unsafe fn p2p(&self) -> $crate::abi::TaskView {
                // SAFETY: the caller's contract (`Members`): the descriptor's type is point-to-point, so NCCL filled
                // `p2p`.
                unsafe {
                    let p = &self.p2p;
                    $crate::abi::TaskView {
                        func: p.func,
                        datatype: p.datatype,
                        count: p.count,
                        root: None,
                        peer: Some(p.peer),
                        algo: std::ptr::null(),
                        proto: std::ptr::null(),
                        n_channels: Some(p.n_channels),
                    }
                }
            }
            unsafe fn proxy_op(&self) -> $crate::abi::ProxyOp {
                // SAFETY: the caller's contract (`Members`): NCCL filled `proxy_op`.
                unsafe { self.proxy_op }
            }
            unsafe fn proxy_step(&self) -> $crate::abi::ProxyStep {
                // SAFETY: the caller's contract (`Members`): NCCL filled `proxy_step`.
                unsafe { self.proxy_step }
            }
            unsafe fn kernel_ch(&self) -> $crate::abi::KernelCh {
                // SAFETY: the caller's contract (`Members`): NCCL filled `kernel_ch`.
                unsafe { self.kernel_ch }
            }
        }
    };
}
pub(crate) use members;

/// What a `coll` or `p2p` member says that the model keeps (names NULL where the member has none).
pub(crate) struct TaskView {
    pub func: *const c_char,
    pub datatype: *const c_char,
    pub count: usize,
    pub root: Option<c_int>,
    pub peer: Option<c_int>,
    pub algo: *const c_char,
    pub proto: *const c_char,
    pub n_channels: Option<u8>,
}

/// # Safety
/// The view's strings are NULL or NUL-terminated.
unsafe fn task(rank: c_int, v: TaskView) -> TaskStart {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        TaskStart {
            rank,
            coll: names::collective(bytes(v.func)),
            datatype: names::datatype(bytes(v.datatype)),
            count: v.count as u64,
            root: v.root,
            peer: v.peer,
            algo: names::algorithm(bytes(v.algo)),
            proto: names::protocol(bytes(v.proto)),
            n_channels: v.n_channels,
        }
    }
}

/// The event kinds every version shares, from one descriptor's header and its union.
///
/// # Safety
/// `m` is the union of a descriptor of type `type_` as NCCL filled it; its strings are NULL or NUL-terminated.
unsafe fn start(type_: u64, parent: *mut c_void, rank: c_int, m: &impl Members) -> Start {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on. Each
    // arm reads the member of the union that `type_` names.
    unsafe {
        match type_ {
            kind::COLL => Start::Task(task(rank, m.coll())),
            kind::P2P => Start::Task(task(rank, m.p2p())),
            kind::PROXY_OP => {
                let o = m.proxy_op();
                Start::ProxyOp(ProxyOpStart {
                    parent,
                    pid: o.pid,
                    rank,
                    channel: o.channel_id,
                    peer: o.peer,
                    n_steps: o.n_steps,
                    is_send: o.is_send != 0,
                })
            }
            kind::PROXY_STEP => Start::ProxyStep { parent, step: m.proxy_step().step },
            kind::KERNEL_CH => {
                let k = m.kernel_ch();
                Start::KernelCh { parent, channel: k.channel_id, p_timer: k.p_timer }
            }
            kind::PROXY_CTRL => Start::ProxyCtrl,
            _ => Start::Ignored,
        }
    }
}
