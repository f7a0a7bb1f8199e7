//! One counter read per timestamp on the hot path; wall-clock microseconds (what the model records) are computed
//! off it when records are drained.
//!
//! The counter is the TSC where it is invariant (scaled by `quanta` from a calibration at the first read), else
//! CLOCK_MONOTONIC: a step records three or four stamps, and on a VM's vDSO a monotonic read costs about twice a
//! TSC read (the C driver's bench: 57 against 35 ns per event).

use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

struct Clock {
    counter: quanta::Clock,
    base: u64,
    epoch_us: u64,
}

static CLOCK: LazyLock<Clock> = LazyLock::new(|| {
    let counter = quanta::Clock::new();
    let base = counter.raw();
    let epoch_us = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64);
    Clock { counter, base, epoch_us }
});

/// Calibrates the counter (up to 200 ms, once): `init` calls it, so no event pays for it.
pub(crate) fn calibrate() {
    LazyLock::force(&CLOCK);
}

/// Nanoseconds since the plugin first read the clock, never 0 (0 marks "not yet" in event objects).
pub(crate) fn now_ns() -> u64 {
    let c = &*CLOCK;
    c.counter.delta_as_nanos(c.base, c.counter.raw()) + 1
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
