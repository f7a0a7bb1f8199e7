//! The entry points every ABI version's plugin struct points at: each hands the version-free [`Start`]/[`Update`]
//! to [`crate::plugin`], which catches panics.

use super::{start, update, Descr, Members, NcclResult, StateArgs};
use crate::event::Start;
use std::ffi::{c_int, c_void};

/// `startEvent` of every version, over its descriptor.
pub(super) unsafe extern "C" fn start_event<T: Copy + Into<u64>, U: Members>(
    context: *mut c_void,
    handle: *mut *mut c_void,
    d: *mut Descr<T, U>,
) -> NcclResult {
    // SAFETY: NCCL calls this entry with its own `context`, `handle` and descriptor, which `plugin::start` and
    // `start` ask for.
    unsafe {
        crate::plugin::start(context, handle, || match d.as_ref() {
            Some(d) => start(d.type_.into(), d.parent_obj, d.rank, &d.u),
            None => Start::Ignored,
        })
    }
}

/// `stopEvent` of every version.
pub(super) unsafe extern "C" fn stop_event(handle: *mut c_void) -> NcclResult {
    // SAFETY: NCCL passes a handle this plugin returned, as `plugin::stop` asks.
    unsafe { crate::plugin::stop(handle) }
}

/// `recordEventState` of every version (their state arguments share one layout).
pub(super) unsafe extern "C" fn record_event_state(
    handle: *mut c_void,
    state: c_int,
    args: *mut StateArgs,
) -> NcclResult {
    // SAFETY: NCCL passes a handle this plugin returned and its own state arguments, as `plugin::record` and `update`
    // ask.
    unsafe { crate::plugin::record(handle, state, || update(state, args)) }
}

/// `finalize` of every version.
pub(super) unsafe extern "C" fn finalize(context: *mut c_void) -> NcclResult {
    crate::plugin::finalize(context)
}
