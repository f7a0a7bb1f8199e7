//! NCCL's profiler plugin ABI, one file per version as NCCL keeps its headers: both sides of it use this crate,
//! as NCCL and its plugins share NCCL's headers (the plugin `collscope-profiler` exports the structs, the runtime
//! loads any plugin through them). Written from NCCL 2.30.7 `src/include/plugin/nccl_profiler.h` (event bits,
//! states) and `src/include/plugin/profiler/profiler_v{4,5,6}.h` (descriptors, state arguments, the plugin
//! struct); `plugins/profiler/tests/nccl_profiler.h` holds the same layouts in C and a test compares every offset. The
//! socket network's NetPlugin data is [`net_socket_v1`].

pub mod net_socket_v1;
pub mod v4;
pub mod v5;
pub mod v6;

use std::ffi::{c_char, c_int, c_ulong, c_void};

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
/// `ncclDebugLogLevel` and `ncclDebugLogSubSys` values (`src/include/nccl_common.h`).
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

/// `ncclProfilerEventState_t` (`nccl_profiler.h`).
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
    pub const NET_PLUGIN_UPDATE: c_int = 21;
    pub const KERNEL_CH_STOP: c_int = 22;
    pub const GROUP_START_API_STOP: c_int = 23;
    pub const GROUP_END_API_START: c_int = 24;
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

/// `ncclProfilerEventDescr_vN_t`: the header every version shares and its union (`type` is one byte in v4, eight
/// from v5 on).
#[repr(C)]
pub struct Descr<T, U> {
    pub type_: T,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: U,
}

/// The plugin struct's symbol of each version, newest first (NCCL 2.29+ `src/plugin/profiler.cc` looks them up
/// in this order; 2.28 starts at v5).
pub const SYMBOLS: [&str; 3] = ["ncclProfiler_v6", "ncclProfiler_v5", "ncclProfiler_v4"];
