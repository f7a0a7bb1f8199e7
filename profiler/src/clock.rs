//! One monotonic read per timestamp on the hot path; wall-clock microseconds (what the model records) are
//! computed off it when records are drained.

use std::sync::LazyLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

struct Clock {
    base: Instant,
    epoch_us: u64,
}

static CLOCK: LazyLock<Clock> = LazyLock::new(|| Clock {
    base: Instant::now(),
    epoch_us: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64),
});

/// Nanoseconds since the plugin first read the clock, never 0 (0 marks "not yet" in event objects).
pub(crate) fn now_ns() -> u64 {
    CLOCK.base.elapsed().as_nanos() as u64 + 1
}

/// Microseconds since the UNIX epoch at `ns` (a value of [`now_ns`]).
pub(crate) fn epoch_us(ns: u64) -> u64 {
    CLOCK.epoch_us + ns / 1000
}

/// This process's id, as NCCL stamps it on the proxy operations it posts (`ncclOsGetPid()`).
pub(crate) fn pid() -> libc::pid_t {
    static PID: LazyLock<libc::pid_t> = LazyLock::new(|| std::process::id() as libc::pid_t);
    *PID
}
