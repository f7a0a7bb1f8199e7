//! `libcollscope_profiler.so`: an NCCL profiler plugin (`NCCL_PROFILER_PLUGIN=.../libcollscope_profiler.so`) that
//! turns NCCL's profiler events into collscope's model: calls (`OpRecord`, with algorithm, protocol, channels,
//! bytes and durations), proxy operations (`ProxyOp`, step counts and wait states, with their `ChannelTraffic`),
//! per-channel GPU time (`KernelChannel`), and its own counters (`Profiler`).
//!
//! It exports `ncclProfiler_v6`, `_v5` and `_v4` ([`abi`]); NCCL takes the newest it knows. Events become pooled
//! objects and fixed-size records in per-communicator rings ([`machine`](crate) keeps the state machine), with no
//! allocation and no lock on NCCL's threads; a drain thread turns the records into model events for a [`Sink`].
//! A panic never reaches NCCL: the plugin disables itself and NCCL carries on.
//!
//! The rings, trees and connections (which NCCL's events do not carry) come from NCCL's debug file, followed by
//! the drain thread with collscope's log reader ([`debuglog`](crate)).
//!
//! At the first `init` it starts collscope's telemetry (`collscope_telemetry::Telemetry`, its own thread) fed by
//! the plugin's [`feed`](crate) (calls as completed-call events, counted once), and leaves this rank's URL in a
//! rendezvous folder so `/api/v1/job` reaches the other ranks; the server stops at the last `finalize`.
//!
//! Environment: `NCCL_PROFILE_EVENT_MASK` (NCCL's variable; default [`DEFAULT_MASK`]), `COLLSCOPE_PROFILER_DUMP`
//! (append the output to this file, one JSON object a line), `COLLSCOPE_PROFILER_METRICS` (`0`: no server),
//! `COLLSCOPE_METRICS_ADDR` (+ local rank) and the rest of telemetry's settings, `COLLSCOPE_RENDEZVOUS_DIR`; NCCL's
//! `NCCL_DEBUG` and `NCCL_DEBUG_FILE` (the debug file read). `collscope_profiler_counters` is collscope's own C
//! symbol (see `include/collscope_profiler.h`), not part of NCCL's API.

pub mod abi;
mod clock;
mod debuglog;
mod event;
mod feed;
mod machine;
mod names;
mod output;
mod plugin;
mod pool;
mod record;
mod rendezvous;
mod settings;
mod sink;

pub use output::Sink;
pub use plugin::{counters, Counters};
pub use settings::DEFAULT_MASK;
pub use sink::{DumpError, JsonlSink};

use std::ffi::{c_int, CStr};

/// The name NCCL prints when it loads the plugin (`PROFILER/Plugin: Loaded collscope (v6)`).
pub(crate) const PLUGIN_NAME: &CStr = c"collscope";

/// collscope's own query: fills at most `size` bytes of `*out` with [`Counters`] (so a caller built against an
/// older, shorter struct still works). Returns 0, or -1 when `out` is NULL.
///
/// # Safety
/// `out` is NULL or valid for `size` bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn collscope_profiler_counters(out: *mut Counters, size: usize) -> c_int {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        if out.is_null() {
            return -1;
        }
        let Ok(c) = std::panic::catch_unwind(counters) else { return -1 };
        let n = size.min(std::mem::size_of::<Counters>());
        std::ptr::copy_nonoverlapping((&c as *const Counters).cast::<u8>(), out.cast::<u8>(), n);
        0
    }
}
