//! The plugin's v6 (NCCL 2.29+): v5's members and functions over v6's descriptor, and its symbol. The plugin does
//! not ask for CE events (NCCL starts them only when the mask has their bits).

use super::entry::{finalize, record_event_state, start_event, stop_event};
use super::v5;
use super::{KernelCh, Members, ProxyOp, ProxyStep, TaskView};

pub use collscope_profiler_abi::v6::*;

impl Members for Union {
    unsafe fn coll(&self) -> TaskView {
        // SAFETY: v6's union starts with v5's, and the caller's contract (`Members`) is passed on.
        unsafe { self.v5.coll() }
    }
    unsafe fn p2p(&self) -> TaskView {
        // SAFETY: as for `coll`.
        unsafe { self.v5.p2p() }
    }
    unsafe fn proxy_op(&self) -> ProxyOp {
        // SAFETY: as for `coll`.
        unsafe { self.v5.proxy_op() }
    }
    unsafe fn proxy_step(&self) -> ProxyStep {
        // SAFETY: as for `coll`.
        unsafe { self.v5.proxy_step() }
    }
    unsafe fn kernel_ch(&self) -> KernelCh {
        // SAFETY: as for `coll`.
        unsafe { self.v5.kernel_ch() }
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
