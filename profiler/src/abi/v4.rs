//! Profiler ABI v4: NCCL 2.27 calls it natively, 2.28+ through an adapter (NCCL 2.30.7
//! `src/include/plugin/profiler/profiler_v4.h`, `src/plugin/profiler/profiler_v4.cc`). Differs from v5: a one-byte
//! `type`, no API events, `init` takes the comm hash after the name, and a collective's `parentObj` is its group.

use super::{
    finalize, record_event_state, stop_event, CollView, DebugLogger, KernelCh, Members, NcclResult, NetPlugin, P2pView,
    ProxyOp, ProxyStep,
};
use crate::plugin::{self, CommInit};
use std::ffi::{c_char, c_int, c_void};

/// `ncclProfilerEventDescr_v4_t`.
#[repr(C)]
pub struct Descr {
    pub type_: u8,
    pub parent_obj: *mut c_void,
    pub rank: c_int,
    pub u: Union,
}

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

impl Members for Union {
    unsafe fn coll(&self) -> CollView {
        let c = &self.coll;
        CollView {
            func: c.func,
            count: c.count,
            root: c.root,
            datatype: c.datatype,
            n_channels: c.n_channels,
            algo: c.algo,
            proto: c.proto,
        }
    }
    unsafe fn p2p(&self) -> P2pView {
        // NCCL 2.27 fills `nChannels`; the v4 adapter of 2.28+ does not copy it, but 2.28+ loads v5/v6 first.
        let p = &self.p2p;
        P2pView { func: p.func, datatype: p.datatype, count: p.count, peer: p.peer, n_channels: Some(p.n_channels) }
    }
    unsafe fn proxy_op(&self) -> ProxyOp {
        self.proxy_op
    }
    unsafe fn proxy_step(&self) -> ProxyStep {
        self.proxy_step
    }
    unsafe fn kernel_ch(&self) -> KernelCh {
        self.kernel_ch
    }
}

#[allow(clippy::too_many_arguments)] // NCCL's signature
unsafe extern "C" fn init(
    context: *mut *mut c_void,
    mask: *mut c_int,
    comm_name: *const c_char,
    comm_hash: u64,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: DebugLogger,
) -> NcclResult {
    plugin::init(context, mask, CommInit { comm_id: comm_hash, comm_name, n_nodes, nranks, rank, logfn })
}

unsafe extern "C" fn start_event(context: *mut c_void, handle: *mut *mut c_void, d: *mut Descr) -> NcclResult {
    plugin::start(context, handle, || match d.as_ref() {
        Some(d) => super::start(u64::from(d.type_), d.parent_obj, d.rank, &d.u),
        None => crate::event::Start::Ignored,
    })
}

/// The symbol NCCL 2.27 looks up.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclProfiler_v4: Profiler =
    Profiler { name: crate::PLUGIN_NAME.as_ptr(), init, start_event, stop_event, record_event_state, finalize };
