//! The plugin's v4 (NCCL 2.27 calls it natively, 2.28+ through an adapter): its union's members and its symbol.

use super::entry::{finalize, record_event_state, start_event, stop_event};
use super::{members, DebugLogger, NcclResult};
use crate::plugin::{self, CommInit};
use std::ffi::{c_char, c_int, c_void};

pub use collscope_profiler_abi::v4::*;

// NCCL 2.27 fills a p2p's `nChannels`; the v4 adapter of 2.28+ does not copy it, but 2.28+ loads v5/v6 first.
members!(Union);

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
    // SAFETY: NCCL calls `init` with its `context` and `mask` pointers and a NUL-terminated name (or NULL), as
    // `plugin::init` asks.
    unsafe { plugin::init(context, mask, CommInit { comm_id: comm_hash, comm_name, n_nodes, nranks, rank, logfn }) }
}

/// The symbol NCCL 2.27 looks up.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclProfiler_v4: Profiler = Profiler {
    name: crate::PLUGIN_NAME.as_ptr(),
    init,
    start_event: start_event::<u8, Union>,
    stop_event,
    record_event_state,
    finalize,
};
