//! The plugin's v5 (NCCL 2.28): its union's members, `init` (v6's too) and its symbol.

use super::entry::{finalize, record_event_state, start_event, stop_event};
use super::{members, DebugLogger, NcclResult};
use crate::plugin::{self, CommInit};
use std::ffi::{c_char, c_int, c_void};

pub use collscope_profiler_abi::v5::*;

members!(Union);

/// `init` of v5 and v6.
#[allow(clippy::too_many_arguments)] // NCCL's signature
pub(super) unsafe extern "C" fn init(
    context: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    comm_name: *const c_char,
    n_nodes: c_int,
    nranks: c_int,
    rank: c_int,
    logfn: DebugLogger,
) -> NcclResult {
    // SAFETY: NCCL calls `init` with its `context` and `mask` pointers and a NUL-terminated name (or NULL), as
    // `plugin::init` asks.
    unsafe { plugin::init(context, mask, CommInit { comm_id, comm_name, n_nodes, nranks, rank, logfn }) }
}

/// The symbol NCCL 2.28 looks up.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclProfiler_v5: Profiler<Descr> = Profiler {
    name: crate::PLUGIN_NAME.as_ptr(),
    init,
    start_event: start_event::<u64, Union>,
    stop_event,
    record_event_state,
    finalize,
};
