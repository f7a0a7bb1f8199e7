//! Profiler ABI v6: NCCL 2.29 and 2.30 (NCCL 2.30.7 `src/include/plugin/profiler/profiler_v6.h`, unchanged in
//! layout since 2.29.2). The v5 union plus copy-engine collective events; the functions and state arguments are
//! v5's (`v5::Profiler<v6::Descr>`).

use super::v5;
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
