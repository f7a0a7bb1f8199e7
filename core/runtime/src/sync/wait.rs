//! Every wait in the runtime: spin briefly, yield a little, then sleep until a condition holds, the timeout
//! (`COLLSCOPE_TIMEOUT_S`) passes, or someone aborts the communicator (a dead peer, a user's abort).
//!
//! Waits on a connection counter sleep on a futex over that counter ([`Bell`]), so a rank sharing its core with
//! others (more ranks than cores) hands the core over instead of spinning, and the writer wakes it at once.

use crate::error::{Result, RuntimeError};
use collscope_debug::env::{Env, EnvError};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Default for `COLLSCOPE_TIMEOUT_S`: PyTorch's for NCCL process groups, 10 minutes
/// (`kProcessGroupNCCLDefaultTimeout`, torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp), after which its watchdog
/// aborts the communicator; NCCL itself never times a collective out. So a rank paused by a debugger, a long
/// garbage collection or a checkpoint write does not end the job, while `/api/v1/job` names it within seconds
/// (`COLLSCOPE_NOT_ARRIVED_S`).
pub const DEFAULT_TIMEOUT_S: i64 = 600;

/// `COLLSCOPE_TIMEOUT_S` from `env`: how long any wait of bootstrap or a collective lasts before it fails.
pub fn timeout_from_env(env: &Env) -> Result<Duration, EnvError> {
    env.seconds("COLLSCOPE_TIMEOUT_S", DEFAULT_TIMEOUT_S)
}

/// How long a wait keeps its core before it sleeps: spins, then yields for at least `yield_for`, then sleeps on
/// a futex ([`patience_for`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patience {
    pub spins: u32,
    pub yield_for: Duration,
}

impl Patience {
    /// A core per rank: spin long enough to catch a peer on another core, then yield for 1 ms. A sleeper pays
    /// the futex wake and its rescheduling (tens of us on a VM); when that is longer than the yields, two ranks
    /// waiting on each other fall into sleeping in turn and stay there. Measured on 2 cores, 2 rank processes,
    /// AllReduce 8 B-512 B, 100000 calls a run: with 50 us of yields runs gave 1.0 to 43 us a call, with 1 ms
    /// 1.0 to 1.7 us.
    pub const ALONE: Patience = Patience { spins: 256, yield_for: Duration::from_millis(1) };
    /// More ranks than cores: no spins, as the peer a wait needs is then usually waiting for this very core,
    /// and 50 us of yields. Measured on 2 cores, 8 B AllReduce, medians: 4 rank processes 12.2 us with 32 spins,
    /// 8.2 us with none; 8 processes 40.8 -> 22.5 us; after 16 yields alone calls took either 7-8 or 17-27 us (a
    /// wait past the yields slept), yielding for 50 us too, 7.3-12 us; 8 ranks at 4-16 MiB unchanged.
    pub const CROWDED: Patience = Patience { spins: 0, yield_for: Duration::from_micros(50) };
}

/// The cores the ranks of one host may run on together, given each one's: each rank's own affinity will not do,
/// as a rank pinned to its core sees one.
pub fn cores_of(local: &[&[u32]]) -> usize {
    let cores: std::collections::BTreeSet<u32> = local.iter().flat_map(|cpus| cpus.iter().copied()).collect();
    if cores.is_empty() {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        cores.len()
    }
}

/// Whole ranks a core for the ranks of one host, given the cores each may run on (7 ranks on 2 cores run 3 a
/// core; fewer ranks than cores, 0).
pub fn ranks_per_core(local: &[&[u32]]) -> usize {
    local.len() / cores_of(local)
}

/// How patient waits are for the ranks of one host, given the cores each may run on: whether they outnumber
/// the cores they may run on together.
pub fn patience_for(local: &[&[u32]]) -> Patience {
    if local.len() > cores_of(local) {
        Patience::CROWDED
    } else {
        Patience::ALONE
    }
}
/// Yields before sleeping on a [`Bell`], whatever `yield_for` says: a peer that was just descheduled usually
/// posts within a few.
const YIELDS: u32 = 16;
/// Longest single futex sleep, so abort and timeout are still noticed without a wake.
const PARK: Duration = Duration::from_millis(2);

/// A counter a waiter can sleep on: `word` changes whenever the condition may have become true, and the writer,
/// after changing it, wakes sleepers counted in `sleepers` ([`Bell::ring`]). Both live in connection memory,
/// which may be shared between processes, so the futex is a shared (not process-private) one.
#[derive(Clone, Copy)]
pub struct Bell<'a> {
    pub word: &'a AtomicU64,
    pub sleepers: &'a AtomicU32,
}

impl Bell<'_> {
    /// Wakes whoever sleeps on the word; call after storing the new value. A system call only when someone
    /// sleeps: the fence orders the store before the check, pairing with the sleeper's count-then-check.
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            futex::wake(self.word);
        }
    }

    /// Sleeps while the word still holds `seen` (the kernel checks atomically), at most `max`.
    fn sleep(&self, seen: u64, max: Duration) {
        futex::wait(self.word, seen, max);
    }
}

#[cfg(target_os = "linux")]
mod futex {
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    /// The futex word: the low 32 bits of the counter, which change with every increment.
    fn low_half(word: &AtomicU64) -> *const u32 {
        let p = word.as_ptr() as *const u32;
        if cfg!(target_endian = "little") {
            p
        } else {
            p.wrapping_add(1)
        }
    }

    pub(super) fn wait(word: &AtomicU64, seen: u64, max: Duration) {
        let ts = libc::timespec { tv_sec: max.as_secs() as libc::time_t, tv_nsec: max.subsec_nanos() as _ };
        // SAFETY: the address is a live, aligned u32 inside the counter; the kernel only reads it. An early or
        // spurious return is harmless: the caller re-checks its condition.
        unsafe {
            libc::syscall(libc::SYS_futex, low_half(word), libc::FUTEX_WAIT, seen as u32, &ts as *const libc::timespec);
        }
    }

    pub(super) fn wake(word: &AtomicU64) {
        // SAFETY: as in `wait`; waking has no effect on memory.
        unsafe {
            libc::syscall(libc::SYS_futex, low_half(word), libc::FUTEX_WAKE, i32::MAX);
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod futex {
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    pub fn wait(_word: &AtomicU64, _seen: u64, max: Duration) {
        std::thread::sleep(max.min(Duration::from_micros(50)));
    }

    pub fn wake(_word: &AtomicU64) {}
}

/// Shared by a communicator and whoever may need to stop it (rtnet's keep-alive, a signal handler).
#[derive(Debug, Clone, Default)]
pub struct AbortHandle {
    flag: Arc<AtomicBool>,
    reason: Arc<Mutex<Reason>>,
    /// A watchdog of the peers is attached ([`AbortHandle::watched`]).
    watched: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
struct Reason {
    text: Option<String>,
    /// Only what this rank saw of a peer ([`AbortHandle::abort_seen`]), which a watchdog's finding replaces.
    seen: bool,
}

/// How long a failed wait gives an attached watchdog to name the rank that died, when what the wait saw was
/// only a peer closing a connection.
const WATCHDOG_GRACE: Duration = Duration::from_millis(500);

impl AbortHandle {
    /// Makes every current and future wait of the communicator fail with `reason` (the first reason wins, but
    /// replaces one that was only seen).
    pub fn abort(&self, reason: impl Into<String>) {
        self.set(reason.into(), false);
    }

    /// As [`AbortHandle::abort`], for what this rank saw of a peer that may not be the cause: a peer that closed a
    /// connection died, or aborted because a third rank did (and closed its connections to this rank first). A
    /// watchdog's finding (any later [`AbortHandle::abort`]) replaces this reason.
    pub fn abort_seen(&self, reason: impl Into<String>) {
        self.set(reason.into(), true);
    }

    fn set(&self, text: String, seen: bool) {
        let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        if r.text.is_none() || (r.seen && !seen) {
            *r = Reason { text: Some(text), seen };
        }
        self.flag.store(true, Ordering::Release);
    }

    /// A watchdog of the peers now aborts the communicator when one dies: [`AbortHandle::reason`] gives it a
    /// moment to name that rank.
    pub fn watched(&self) {
        self.watched.store(true, Ordering::Release);
    }

    pub fn is_aborted(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Why the communicator was aborted. When that was only seen of a peer and a watchdog is attached, waits up
    /// to [`WATCHDOG_GRACE`] for the watchdog's finding, so every rank names the rank that died rather than a
    /// survivor that closed its connections first.
    pub fn reason(&self) -> Option<String> {
        let start = Instant::now();
        loop {
            let r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            let settled = !r.seen || !self.watched.load(Ordering::Acquire) || start.elapsed() >= WATCHDOG_GRACE;
            if settled {
                return r.text.clone();
            }
            drop(r);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// How long to wait and whom to ask whether to stop.
#[derive(Debug, Clone)]
pub struct Waiter {
    pub rank: u32,
    pub timeout: Duration,
    pub abort: AbortHandle,
    /// Spins and yields before sleeping ([`patience_for`]).
    pub patience: Patience,
}

impl Waiter {
    /// Waits until `ready()` is true, yielding then napping between checks. `what` is only called to describe
    /// a failure. For waits on several connections at once; a wait on one counter uses [`Waiter::wait_on`].
    #[inline]
    pub fn wait(&self, mut ready: impl FnMut() -> bool, what: impl FnOnce() -> String) -> Result<()> {
        // Most waits find their condition already true (credit on a connection, a step that arrived): checked
        // here, inline, they cost no call.
        if ready() {
            return Ok(());
        }
        self.wait_inner(None, ready, what)
    }

    /// Waits until `ready()` is true, sleeping on `bell` once spinning and yielding did not see it: `ready`
    /// must become true only after `bell.word` changed.
    #[inline]
    pub fn wait_on(&self, bell: Bell, mut ready: impl FnMut() -> bool, what: impl FnOnce() -> String) -> Result<()> {
        if ready() {
            return Ok(());
        }
        self.wait_inner(Some(bell), ready, what)
    }

    fn wait_inner(
        &self,
        bell: Option<Bell>,
        mut ready: impl FnMut() -> bool,
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        for _ in 0..self.patience.spins {
            if ready() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        let start = Instant::now();
        let mut rounds = 0u32;
        let mut sleeping = false;
        loop {
            if ready() {
                return Ok(());
            }
            if !sleeping && bell.is_some() && rounds >= YIELDS {
                sleeping = start.elapsed() >= self.patience.yield_for;
            }
            match bell {
                Some(b) if sleeping => {
                    // Count ourselves before the last check, so a writer either sees us or we see its value.
                    b.sleepers.fetch_add(1, Ordering::SeqCst);
                    let seen = b.word.load(Ordering::SeqCst);
                    if !ready() {
                        b.sleep(seen, PARK);
                    }
                    b.sleepers.fetch_sub(1, Ordering::Relaxed);
                }
                _ => std::thread::yield_now(),
            }
            rounds = rounds.wrapping_add(1);
            if sleeping || rounds.is_multiple_of(64) {
                // What arrived before the abort (a peer's last step, then its clean close) is still taken.
                if ready() {
                    return Ok(());
                }
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
                if bell.is_none() && waited > Duration::from_millis(20) {
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
    fn ranks_spin_unless_they_outnumber_the_cores_they_share() {
        // Pinned one per core: each sees a single core, together they have one each.
        assert_eq!(patience_for(&[&[0], &[1]]), Patience::ALONE);
        assert_eq!(patience_for(&[&[0], &[0]]), Patience::CROWDED);
        assert_eq!(patience_for(&[&[0, 1], &[0, 1]]), Patience::ALONE);
        assert_eq!(patience_for(&[&[0, 1], &[0, 1], &[0, 1]]), Patience::CROWDED);
    }

    #[test]
    fn ranks_a_core_are_whole_ranks_over_the_cores_they_share() {
        assert_eq!(ranks_per_core(&[&[0], &[1]]), 1);
        assert_eq!(ranks_per_core(&[&[0, 1][..]; 7]), 3);
        assert_eq!(ranks_per_core(&[&[0], &[0], &[1], &[1]]), 2);
        assert_eq!(ranks_per_core(&[&[0, 1, 2, 3][..]; 2]), 0);
    }

    #[test]
    fn a_watchdogs_finding_replaces_what_a_rank_only_saw_of_a_peer() {
        // No watchdog: what was seen stands, at once.
        let h = AbortHandle::default();
        h.abort_seen("rank 0 closed its connection");
        h.abort_seen("rank 1 closed its connection");
        assert_eq!(h.reason().as_deref(), Some("rank 0 closed its connection"));
        // A watchdog that names the dead rank shortly after: every failed wait reports that.
        let h = AbortHandle::default();
        h.watched();
        h.abort_seen("rank 0 closed its connection");
        let w = h.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            w.abort("rank 2 died");
            w.abort("rank 0 died");
        });
        assert_eq!(h.reason().as_deref(), Some("rank 2 died"));
        t.join().unwrap();
        // A watchdog that finds nothing: what was seen, after the grace.
        let h = AbortHandle::default();
        h.watched();
        h.abort_seen("rank 0 closed its connection");
        let start = Instant::now();
        assert_eq!(h.reason().as_deref(), Some("rank 0 closed its connection"));
        assert!(start.elapsed() >= WATCHDOG_GRACE);
    }

    #[test]
    fn abort_ends_a_wait_with_the_reason() {
        let w = Waiter {
            rank: 3,
            timeout: Duration::from_secs(30),
            abort: AbortHandle::default(),
            patience: Patience::ALONE,
        };
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
        let w = Waiter {
            rank: 0,
            timeout: Duration::from_millis(10),
            abort: AbortHandle::default(),
            patience: Patience::ALONE,
        };
        let e = w.wait(|| false, || "credit from rank 2".into()).unwrap_err();
        assert!(matches!(e, RuntimeError::Timeout { .. }) && e.to_string().contains("credit from rank 2"));
        assert!(w.wait(|| true, String::new).is_ok());
    }

    #[test]
    fn a_sleeper_on_a_bell_is_woken_by_the_ring_and_still_honours_abort() {
        let (word, sleepers) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU32::new(0)));
        let w = Waiter {
            rank: 0,
            timeout: Duration::from_secs(30),
            abort: AbortHandle::default(),
            patience: Patience::ALONE,
        };
        let (w2, word2, sleepers2) = (w.clone(), word.clone(), sleepers.clone());
        let t = std::thread::spawn(move || {
            let bell = Bell { word: &word2, sleepers: &sleepers2 };
            w2.wait_on(bell, || word2.load(Ordering::Acquire) >= 1, String::new)
        });
        // The waiter gets past spinning and yielding and counts itself as a sleeper.
        while sleepers.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        word.store(1, Ordering::Release);
        Bell { word: &word, sleepers: &sleepers }.ring();
        assert!(t.join().unwrap().is_ok());
        assert_eq!(sleepers.load(Ordering::SeqCst), 0, "the waiter no longer counts itself");

        let h = w.abort.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            h.abort("peer gone");
        });
        let e = w.wait_on(Bell { word: &word, sleepers: &sleepers }, || false, || "credit".into()).unwrap_err();
        t.join().unwrap();
        assert!(e.to_string().contains("peer gone"), "{e}");
    }
}
