//! Profiler ABI v6: NCCL 2.29 and 2.30 (NCCL 2.30.7 `src/include/plugin/profiler/profiler_v6.h`, unchanged in
//! layout since 2.29.2). The v5 union plus copy-engine collective events; the functions and state arguments are
//! v5's. The plugin does not ask for CE events (NCCL starts them only when the mask has their bits).

use super::entry::{finalize, record_event_state, start_event, stop_event};
use super::v5;
use super::{KernelCh, Members, ProxyOp, ProxyStep, TaskView};
use std::ffi::{c_char, c_int, c_void};

/// `ncclProfilerEventDescr_v6_t`.
pub type Descr = super::Descr<u64, Union>;

/// v5's members (the same types, so the same layout) and the CE ones.
#[repr(C)]
#[derive(Clone, Copy)]
pub union Union {
    pub v5: v5::Union,
    pub ce_coll: CeColl,
    pub ce_coll_sync: CeCollSync,
    pub ce_coll_batch: CeCollBatch,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeColl {
    pub seq_number: u64,
    pub func: *const c_char,
    pub send_buff: *const c_void,
    pub recv_buff: *mut c_void,
    pub count: usize,
    pub root: c_int,
    pub datatype: *const c_char,
    pub sync_strategy: *const c_char,
    pub intra_batch_sync: u8,
    pub batch_size: u32,
    pub num_batches: u32,
    pub ce_seq_num: u32,
    pub stream: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeCollSync {
    pub is_complete: u8,
    pub n_ranks: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct CeCollBatch {
    pub num_ops: c_int,
    pub total_bytes: usize,
    pub use_intra_sync: u8,
}

impl Members for Union {
    unsafe fn coll(&self) -> TaskView {
        self.v5.coll()
    }
    unsafe fn p2p(&self) -> TaskView {
        self.v5.p2p()
    }
    unsafe fn proxy_op(&self) -> ProxyOp {
        self.v5.proxy_op()
    }
    unsafe fn proxy_step(&self) -> ProxyStep {
        self.v5.proxy_step()
    }
    unsafe fn kernel_ch(&self) -> KernelCh {
        self.v5.kernel_ch()
    }
}

/// The symbol NCCL 2.29+ looks up first.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclProfiler_v6: v5::Profiler<Descr> = v5::Profiler {
    name: crate::PLUGIN_NAME.as_ptr(),
    init: v5::init,
    start_event: start_event::<u64, Union>,
    stop_event,
    record_event_state,
    finalize,
};
