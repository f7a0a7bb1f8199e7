//! Every wait in the runtime: spin briefly, then yield, until a condition holds, the timeout
//! (`COLLSCOPE_TIMEOUT_S`) passes, or someone aborts the communicator (a dead peer, a user's abort).

use super::error::{Result, RuntimeError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Spins before the first yield: long enough to catch a peer on another core, short enough to leave the
/// core to ranks sharing it.
const SPINS: u32 = 256;

/// Shared by a communicator and whoever may need to stop it (rtnet's keep-alive, a signal handler).
#[derive(Debug, Clone, Default)]
pub struct AbortHandle {
    flag: Arc<AtomicBool>,
    reason: Arc<Mutex<Option<String>>>,
}

impl AbortHandle {
    /// Makes every current and future wait of the communicator fail with `reason` (the first reason wins).
    pub fn abort(&self, reason: impl Into<String>) {
        let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_none() {
            *r = Some(reason.into());
        }
        self.flag.store(true, Ordering::Release);
    }

    pub fn is_aborted(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    pub fn reason(&self) -> Option<String> {
        self.reason.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// How long to wait and whom to ask whether to stop.
#[derive(Debug, Clone)]
pub struct Waiter {
    pub rank: u32,
    pub timeout: Duration,
    pub abort: AbortHandle,
}

impl Waiter {
    /// Waits until `ready()` is true. `what` is only called to describe a failure.
    pub fn wait(&self, mut ready: impl FnMut() -> bool, what: impl FnOnce() -> String) -> Result<()> {
        for _ in 0..SPINS {
            if ready() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        let start = Instant::now();
        let mut rounds = 0u32;
        loop {
            if ready() {
                return Ok(());
            }
            std::thread::yield_now();
            rounds = rounds.wrapping_add(1);
            if rounds.is_multiple_of(64) {
                if self.abort.is_aborted() {
                    return Err(RuntimeError::Aborted {
                        rank: self.rank,
                        what: what(),
                        reason: self.abort.reason().unwrap_or_default(),
                    });
                }
                let waited = start.elapsed();
                if waited >= self.timeout {
                    return Err(RuntimeError::Timeout { rank: self.rank, secs: self.timeout.as_secs(), what: what() });
                }
                // After a while nobody is coming soon: stop burning the core.
                if waited > Duration::from_millis(20) {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_ends_a_wait_with_the_reason() {
        let w = Waiter { rank: 3, timeout: Duration::from_secs(30), abort: AbortHandle::default() };
        let h = w.abort.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            h.abort("rank 1 died");
        });
        let e = w.wait(|| false, || "data from rank 1".into()).unwrap_err().to_string();
        t.join().unwrap();
        assert!(e.contains("rank 3") && e.contains("rank 1 died") && e.contains("data from rank 1"), "{e}");
    }

    #[test]
    fn timeout_names_the_wait() {
        let w = Waiter { rank: 0, timeout: Duration::from_millis(10), abort: AbortHandle::default() };
        let e = w.wait(|| false, || "credit from rank 2".into()).unwrap_err();
        assert!(matches!(e, RuntimeError::Timeout { .. }) && e.to_string().contains("credit from rank 2"));
        assert!(w.wait(|| true, String::new).is_ok());
    }
}
