//! NCCL's profiler plugin ABI, one file per version as NCCL keeps its headers. Written from NCCL 2.30.7
//! `src/include/plugin/nccl_profiler.h` (event bits, states) and `src/include/plugin/profiler/profiler_v{4,5,6}.h`
//! (descriptors, state arguments, the plugin struct); `tests/nccl_profiler.h` holds the same layouts in C and a
//! test compares every offset. Each version file turns its descriptor into [`Start`] and exports its
//! `ncclProfiler_vN` symbol; everything after that is version-free.

mod entry;
pub mod v4;
pub mod v5;
pub mod v6;

use crate::event::{ProxyOpStart, Start, TaskStart, Update};
use crate::names;
use std::ffi::{c_char, c_int, c_ulong, c_void, CStr};

/// `ncclResult_t` (NCCL 2.30.7 `src/nccl.h.in`).
pub type NcclResult = c_int;
pub const NCCL_SUCCESS: NcclResult = 0;
pub const NCCL_SYSTEM_ERROR: NcclResult = 2;
pub const NCCL_INTERNAL_ERROR: NcclResult = 3;
pub const NCCL_INVALID_USAGE: NcclResult = 5;

/// `ncclDebugLogger_t` (`src/include/nccl_common.h`): level, subsystem flags, file, line, printf format.
pub type DebugLogger = Option<
    unsafe extern "C" fn(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, fmt: *const c_char, ...),
>;
/// `ncclDebugLogLevel` and `ncclDebugLogSubSys` values the plugin logs with (`src/include/nccl_common.h`).
pub const NCCL_LOG_WARN: c_int = 2;
pub const NCCL_LOG_INFO: c_int = 3;
pub const NCCL_INIT: c_ulong = 0x1;
pub const NCCL_PROFILE: c_ulong = 0x4000;

/// Event type bits of the activation mask (`nccl_profiler.h`: `ncclProfileGroup` ..).
pub mod kind {
    pub const GROUP: u64 = 1 << 0;
    pub const COLL: u64 = 1 << 1;
    pub const P2P: u64 = 1 << 2;
    pub const PROXY_OP: u64 = 1 << 3;
    pub const PROXY_STEP: u64 = 1 << 4;
    pub const PROXY_CTRL: u64 = 1 << 5;
    pub const KERNEL_CH: u64 = 1 << 6;
    pub const NET_PLUGIN: u64 = 1 << 7;
    pub const GROUP_API: u64 = 1 << 8;
    pub const COLL_API: u64 = 1 << 9;
    pub const P2P_API: u64 = 1 << 10;
    pub const KERNEL_LAUNCH: u64 = 1 << 11;
    /// Copy-engine collectives (v6).
    pub const CE_COLL: u64 = 1 << 12;
    pub const CE_SYNC: u64 = 1 << 13;
    pub const CE_BATCH: u64 = 1 << 14;
}

/// `ncclProfilerEventState_t` values the plugin acts on (`nccl_profiler.h`).
pub mod state {
    use std::ffi::c_int;
    pub const PROXY_OP_IN_PROGRESS_V4: c_int = 19;
    pub const PROXY_STEP_SEND_GPU_WAIT: c_int = 8;
    pub const PROXY_STEP_SEND_PEER_WAIT_V4: c_int = 20;
    pub const PROXY_STEP_SEND_WAIT: c_int = 9;
    pub const PROXY_STEP_RECV_WAIT: c_int = 10;
    pub const PROXY_STEP_RECV_FLUSH_WAIT: c_int = 11;
    pub const PROXY_STEP_RECV_GPU_WAIT: c_int = 12;
    pub const PROXY_CTRL_IDLE: c_int = 13;
    pub const PROXY_CTRL_ACTIVE: c_int = 14;
    pub const PROXY_CTRL_SLEEP: c_int = 15;
    pub const PROXY_CTRL_WAKEUP: c_int = 16;
    pub const PROXY_CTRL_APPEND: c_int = 17;
    pub const PROXY_CTRL_APPEND_END: c_int = 18;
    pub const KERNEL_CH_STOP: c_int = 22;
}

/// `ncclProfilerEventStateArgs_v4_t`; v5 declares the same union and v6 typedefs v5's.
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgs {
    pub proxy_step: StateProxyStep,
    pub proxy_ctrl: StateProxyCtrl,
    pub net_plugin: StateNetPlugin,
    pub kernel_ch: StateKernelCh,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct StateProxyStep {
    pub trans_size: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct StateProxyCtrl {
    pub appended_proxy_ops: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct StateNetPlugin {
    pub data: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct StateKernelCh {
    pub p_timer: u64,
}

/// The part of `args` that `state` carries; NCCL passes NULL for states without arguments (GroupApi).
///
/// # Safety
/// `args` is NULL or points to a live `StateArgs`.
pub(crate) unsafe fn update(state: c_int, args: *const StateArgs) -> Update {
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

/// The `proxyOp`, `proxyStep`, `kernelCh` and `netPlugin` members, alike in v4, v5 and v6.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyOp {
    /// `ncclPid_t` (`pid_t` on Linux): the process that posted the operation (PXN runs other processes' ops).
    pub pid: libc::pid_t,
    pub channel_id: u8,
    pub peer: c_int,
    pub n_steps: c_int,
    pub chunk_size: c_int,
    pub is_send: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyStep {
    pub step: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelCh {
    pub channel_id: u8,
    /// Start timestamp from the GPU's globaltimer (ns).
    pub p_timer: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetPlugin {
    pub id: i64,
    pub data: *mut c_void,
}

/// A NUL-terminated name NCCL passes (static strings in NCCL 2.30.7 `src/collectives.cc`); NULL reads as empty.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string.
unsafe fn bytes<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        &[]
    } else {
        CStr::from_ptr(p).to_bytes()
    }
}

/// `ncclProfilerEventDescr_vN_t`: the header every version shares and its union (`type` is one byte in v4, eight
/// from v5 on).
#[repr(C)]
pub struct Descr<T, U> {
    pub type_: T,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: U,
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
            unsafe fn p2p(&self) -> $crate::abi::TaskView {
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
            unsafe fn proxy_op(&self) -> $crate::abi::ProxyOp {
                self.proxy_op
            }
            unsafe fn proxy_step(&self) -> $crate::abi::ProxyStep {
                self.proxy_step
            }
            unsafe fn kernel_ch(&self) -> $crate::abi::KernelCh {
                self.kernel_ch
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

/// The event kinds every version shares, from one descriptor's header and its union.
///
/// # Safety
/// `m` is the union of a descriptor of type `type_` as NCCL filled it; its strings are NULL or NUL-terminated.
unsafe fn start(type_: u64, parent: *mut c_void, rank: c_int, m: &impl Members) -> Start {
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
