//! Profiler ABI v4: NCCL 2.27 calls it natively, 2.28+ through an adapter (NCCL 2.30.7
//! `src/include/plugin/profiler/profiler_v4.h`, `src/plugin/profiler/profiler_v4.cc`). Differs from v5: a one-byte
//! `type`, no API events, `init` takes the comm hash after the name, and a collective's `parentObj` is its group.

use super::{DebugLogger, KernelCh, NcclResult, NetPlugin, ProxyOp, ProxyStep};
use std::ffi::{c_char, c_int, c_void};

/// `ncclProfilerEventDescr_v4_t`.
pub type Descr = super::Descr<u8, Union>;

#[repr(C)]
#[derive(Clone, Copy)]
pub union Union {
    pub coll: Coll,
    pub p2p: P2p,
    pub proxy_op: ProxyOp,
    pub proxy_step: ProxyStep,
    pub kernel_ch: KernelCh,
    pub net_plugin: NetPlugin,
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
}

/// `ncclProfiler_v4_t`.
#[repr(C)]
pub struct Profiler {
    pub name: *const c_char,
    pub init: unsafe extern "C" fn(
        context: *mut *mut c_void,
        e_activation_mask: *mut c_int,
        comm_name: *const c_char,
        comm_hash: u64,
        n_nodes: c_int,
        nranks: c_int,
        rank: c_int,
        logfn: DebugLogger,
    ) -> NcclResult,
    pub start_event:
        unsafe extern "C" fn(context: *mut c_void, e_handle: *mut *mut c_void, e_descr: *mut Descr) -> NcclResult,
    pub stop_event: unsafe extern "C" fn(e_handle: *mut c_void) -> NcclResult,
    pub record_event_state:
        unsafe extern "C" fn(e_handle: *mut c_void, e_state: c_int, e_state_args: *mut super::StateArgs) -> NcclResult,
    pub finalize: unsafe extern "C" fn(context: *mut c_void) -> NcclResult,
}

// SAFETY: the struct is immutable and its pointers are to 'static data and functions.
unsafe impl Sync for Profiler {}
