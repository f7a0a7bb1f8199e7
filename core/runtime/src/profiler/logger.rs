//! The logger NCCL hands a plugin at `init`: the C shim (`logger.c`) formats the plugin's printf-style message,
//! this prints it as one of NCCL's lines at the plugin's level and subsystem.

use collscope_debug::{logger, Level, Subsys};
use collscope_profiler_abi::DebugLogger;
use std::ffi::{c_char, c_int, c_ulong, CStr};

extern "C" {
    fn collscope_plugin_logger(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, fmt: *const c_char, ...);
}

/// What `init` passes as the plugin's `logfn`.
pub(super) fn for_plugins() -> DebugLogger {
    Some(collscope_plugin_logger)
}

/// Called by the shim with the formatted message. NCCL's levels (`ncclDebugLogLevel`): 2 WARN, 3 INFO, 5 TRACE;
/// others (VERSION, ABORT) are printed as INFO would be.
///
/// # Safety
/// `file` and `msg` are NULL or NUL-terminated.
#[no_mangle]
unsafe extern "C" fn collscope_plugin_log_line(
    level: c_int,
    flags: c_ulong,
    file: *const c_char,
    line: c_int,
    msg: *const c_char,
) {
    // SAFETY: the caller keeps this function's `# Safety` contract, which is all its unsafe operations rely on.
    unsafe {
        let text =
            |p: *const c_char| if p.is_null() { Default::default() } else { CStr::from_ptr(p).to_string_lossy() };
        let level = match level {
            2 => Level::Warn,
            5 => Level::Trace,
            _ => Level::Info,
        };
        // A panic must not unwind into the plugin's C frames. (`c_ulong` is 32 bits on some targets.)
        #[allow(clippy::unnecessary_cast)]
        let _ = std::panic::catch_unwind(|| {
            logger().log(level, Subsys(flags as u64), (&text(file), line.max(0) as u32), &text(msg))
        });
    }
}
