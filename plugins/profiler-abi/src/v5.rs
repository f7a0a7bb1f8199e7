//! Profiler ABI v5: NCCL 2.28 (NCCL 2.30.7 `src/include/plugin/profiler/profiler_v5.h`, unchanged in layout since
//! 2.28.3). Adds the API events (GroupApi, CollApi, P2pApi, KernelLaunch), a 64-bit `type`, and `parentGroup` on
//! collectives and p2p calls (their `parentObj` is now the API event).

use super::{DebugLogger, KernelCh, NcclResult, NetPlugin, ProxyOp, ProxyStep};
use std::ffi::{c_char, c_int, c_void};

/// `ncclProfilerEventDescr_v5_t`.
pub type Descr = super::Descr<u64, Union>;

#[repr(C)]
#[derive(Clone, Copy)]
pub union Union {
    pub group_api: GroupApi,
    pub coll_api: CollApi,
    pub p2p_api: P2pApi,
    pub kernel_launch: KernelLaunch,
    pub coll: Coll,
    pub p2p: P2p,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelCh,
    pub net_plugin: NetPlugin,
}

/// C `bool` fields are read as bytes: a Rust `bool` may not hold what C puts there.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GroupApi {
    pub graph_captured: u8,
    pub group_depth: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApi {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub root: c_int,
    pub stream: *mut c_void,
    pub graph_captured: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApi {
    pub func: *const c_char,
    pub count: usize,
    pub datatype: *const c_char,
    pub stream: *mut c_void,
    pub graph_captured: u8,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelLaunch {
    pub stream: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct Coll {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub n_channels: u8,
    pub n_warps: u8,
    pub algo: *const c_char,
    pub proto: *const c_char,
    pub parent_group: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2p {
    pub func: *const c_char,
    pub buff: *mut c_void,
    pub datatype: *const c_char,
    pub count: usize,
    pub peer: c_int,
    pub n_channels: u8,
    pub parent_group: *mut c_void,
}

/// `ncclProfiler_v5_t`; v6 has the same functions over its own descriptor.
#[repr(C)]
pub struct Profiler<D> {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(
        context: *mut *mut c_void,
        comm_id: u64,
        e_activation_mask: *mut c_int,
        comm_name: *const c_char,
        n_nodes: c_int,
        nranks: c_int,
        rank: c_int,
        logfn: DebugLogger,
    ) -> NcclResult,
    pub start_event:
        unsafe extern "C" fn(context: *mut c_void, e_handle: *mut *mut c_void, e_descr: *mut D) -> NcclResult,
    pub stop_event: unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult,
    pub record_event_state:
        unsafe extern "C" fn(e_handle: *mut c_void, e_state: c_int, e_state_args: *mut super::StateArgs) -> NcclResult,
    pub finalize: unsafe extern "C" fn(context: *mut c_void) -> NcclResult,
}

// SAFETY: the struct is immutable and its pointers are to 'static data and functions.
unsafe impl<D> Sync for Profiler<D> {}
