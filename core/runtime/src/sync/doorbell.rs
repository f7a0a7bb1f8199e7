//! How a rank wakes its proxy thread. A proxy with nothing to move sleeps in `poll` on the sockets it waits for
//! and on this bell's eventfd; a rank that posts a step (or frees a slot) on a NET connection rings the bell, as
//! does a NET/Socket helper thread that finished a transfer. A ring costs a system call only while the proxy
//! sleeps (or is about to). NCCL's proxy spins instead; on a host with fewer cores than busy threads that
//! spinning takes the core a rank needs.

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::time::Duration;

/// A descriptor and what to wait for on it (`POLLIN` or `POLLOUT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdWait {
    pub fd: RawFd,
    pub writable: bool,
}

/// What tells the proxy that a network request can move again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The descriptor becomes ready.
    Fd(FdWait),
    /// Whoever moves it rings the proxy's bell.
    Bell,
    /// Nothing: the proxy has to look again soon.
    Poll,
}

pub struct Doorbell {
    fd: EventFd,
    sleeping: AtomicBool,
}

impl std::fmt::Debug for Doorbell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Doorbell(sleeping {})", self.sleeping.load(Ordering::Relaxed))
    }
}

impl Doorbell {
    pub fn new() -> std::io::Result<Doorbell> {
        let fd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
        Ok(Doorbell { fd, sleeping: AtomicBool::new(false) })
    }

    /// Wakes the proxy if it sleeps; call after publishing what it should see. The fence orders that store
    /// before the check, pairing with [`Doorbell::arm`]'s flag-then-look.
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            let _ = self.fd.write(1);
        }
    }

    /// Counts the proxy as about to sleep: from here on a ring writes the eventfd. Arm before the proxy's
    /// last look at its connections, so a ring between that look and [`Doorbell::sleep`] is not lost.
    pub fn arm(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
        // The proxy's next loads (counters, task states) must not move before the store.
        fence(Ordering::SeqCst);
    }

    /// Stops counting the proxy as sleeping (it found work after arming).
    pub fn disarm(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }

    /// After [`Doorbell::arm`]: sleeps until a descriptor in `fds` is ready, the bell rings, or `max` passes.
    pub fn sleep(&self, fds: &[FdWait], max: Duration) {
        let mut set: Vec<PollFd> = fds
            .iter()
            .map(|w| {
                // SAFETY: the descriptors belong to connections the caller holds for the whole call.
                let fd = unsafe { BorrowedFd::borrow_raw(w.fd) };
                PollFd::new(fd, if w.writable { PollFlags::POLLOUT } else { PollFlags::POLLIN })
            })
            .chain(std::iter::once(PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)))
            .collect();
        let ms = max.as_millis().clamp(1, i32::MAX as u128) as i32;
        let _ = poll(&mut set, PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX));
        self.disarm();
        // Clear the count; a failed read just means nobody rang.
        let _ = self.fd.read();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_ring_wakes_a_sleeper_and_a_ready_socket_does_too() {
        let bell = Arc::new(Doorbell::new().unwrap());
        let b = bell.clone();
        let t = std::thread::spawn(move || {
            let start = Instant::now();
            b.arm();
            b.sleep(&[], Duration::from_secs(20));
            start.elapsed()
        });
        while !bell.sleeping.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        bell.ring();
        assert!(t.join().unwrap() < Duration::from_secs(10), "the ring did not wake the sleeper");

        // Not sleeping: a ring is free and leaves nothing behind for the next sleep to trip over.
        bell.ring();
        let start = Instant::now();
        bell.arm();
        bell.sleep(&[], Duration::from_millis(30));
        assert!(start.elapsed() >= Duration::from_millis(25));

        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut b, b"x").unwrap();
        let start = Instant::now();
        use std::os::fd::AsRawFd;
        bell.arm();
        bell.sleep(&[FdWait { fd: a.as_raw_fd(), writable: false }], Duration::from_secs(20));
        assert!(start.elapsed() < Duration::from_secs(10), "a readable socket did not end the sleep");
        // A ring after arming, before the sleep (the proxy was still looking), ends the sleep at once.
        bell.arm();
        bell.ring();
        let start = Instant::now();
        bell.sleep(&[], Duration::from_secs(20));
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
