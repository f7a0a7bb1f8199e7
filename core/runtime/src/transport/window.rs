//! Host buffers in shared memory that the ranks of a communicator register together, so SHM peers move
//! Simple steps as P2P threads do: the receiver reads a step in the sender's buffer, and the rank that completes
//! a ring chunk writes it into its successor's (NCCL 2.28.9 `ncclMemAlloc` with the collective
//! `ncclCommWindowRegister`/`ncclCommWindowDeregister`, `src/nccl.h.in`, which nccl-tests' `-R 2` uses).
//!
//! A step is still posted as an address in the poster's process; each process maps its SHM peers' registered
//! buffers (through their owners' descriptors in /proc: they have no name to leave behind) and finds where those
//! bytes lie in its own address space ([`WindowList::here`]).

use super::segment::{create_unnamed, open_peer_segment};
use crate::error::Result;
use collscope_kernels::Element;
use memmap2::MmapMut;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::{Arc, PoisonError, RwLock};

/// A mapped segment and, for the one its process created, its file: the descriptor peers open it through.
struct Segment {
    ptr: *mut u8,
    len: usize,
    _map: MmapMut,
    file: Option<File>,
}

// SAFETY: the segment is plain memory; what reads and writes it is ordered by the connections' head/tail
// protocol, as for any user buffer.
unsafe impl Send for Segment {}
// SAFETY: as for `Send`: the segment is plain memory, ordered by the connections' head/tail protocol.
unsafe impl Sync for Segment {}

/// Host memory peers on the same host can map: allocate buffers here and register them with a communicator
/// ([`crate::Comm::register`]) so SHM moves them without staging copies. Zeroed when allocated.
pub struct SharedBuf {
    seg: Arc<Segment>,
}

impl SharedBuf {
    /// `len` zeroed bytes, page aligned. The segment has no name, so nothing of it outlives its process.
    pub fn new(len: usize) -> Result<Self> {
        // A mapping cannot be empty; an empty buffer still gets a page.
        let (mut map, file) = create_unnamed(len.max(1))?;
        let ptr = map.as_mut_ptr();
        Ok(SharedBuf { seg: Arc::new(Segment { ptr, len, _map: map, file: Some(file) }) })
    }

    pub fn len(&self) -> usize {
        self.seg.len
    }

    pub fn is_empty(&self) -> bool {
        self.seg.len == 0
    }

    /// The descriptor peers open the segment through ([`WindowList::add_peer`]).
    pub(crate) fn fd(&self) -> i32 {
        self.seg.file.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }

    pub(crate) fn base(&self) -> u64 {
        self.seg.ptr as u64
    }

    /// The whole buffer as elements of `T` (every bit pattern is a value of each [`Element`]).
    pub fn as_slice<T: Element>(&self) -> &[T] {
        // SAFETY: page aligned, `len` bytes mapped for the segment's life, which `self` holds.
        unsafe { std::slice::from_raw_parts(self.seg.ptr as *const T, self.seg.len / size_of::<T>()) }
    }

    pub fn as_mut_slice<T: Element>(&mut self) -> &mut [T] {
        // SAFETY: as `as_slice`; `&mut self` makes this the only view through this handle.
        unsafe { std::slice::from_raw_parts_mut(self.seg.ptr as *mut T, self.seg.len / size_of::<T>()) }
    }
}

/// One registered buffer as this process sees it.
struct Window {
    /// The registration that made it (the communicator's count of registrations).
    id: u64,
    /// Where it lies in its owner's process.
    base: u64,
    len: u64,
    /// Keeps the mapping (here) alive while the window is listed.
    seg: Arc<Segment>,
}

/// One rank's registered buffers as this process sees them.
#[derive(Default)]
pub struct WindowList(RwLock<Vec<Window>>);

impl WindowList {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<Window>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Window>> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where the `len` bytes at `addr` in the owner's process lie in this one, if one window holds them all.
    pub fn here(&self, addr: u64, len: u64) -> Option<*mut u8> {
        self.read()
            .iter()
            .find(|w| addr >= w.base && addr.saturating_add(len) <= w.base + w.len)
            .map(|w| w.seg.ptr.wrapping_add((addr - w.base) as usize))
    }

    /// Where the `len` bytes at `at` in this process lie in the owner's, if one window holds them all.
    pub fn owners(&self, at: *const u8, len: u64) -> Option<u64> {
        let at = at as u64;
        self.read().iter().find_map(|w| {
            let here = w.seg.ptr as u64;
            (at >= here && at.saturating_add(len) <= here + w.len).then(|| w.base + (at - here))
        })
    }

    /// This process's own `buf`, registered as `id`.
    pub(crate) fn add_own(&self, id: u64, buf: &SharedBuf) {
        let w = Window { id, base: buf.base(), len: buf.len() as u64, seg: buf.seg.clone() };
        self.write().push(w);
    }

    /// A peer's buffer registered as `id`, `len` bytes at `base` in the peer's process `pid`, which holds it open
    /// as descriptor `fd`; mapped here.
    pub(crate) fn add_peer(&self, id: u64, (pid, fd): (u32, i32), base: u64, len: u64) -> Result<()> {
        let mut map = open_peer_segment(pid, fd, len.max(1) as usize)?;
        let seg = Segment { ptr: map.as_mut_ptr(), len: len as usize, _map: map, file: None };
        let w = Window { id, base, len, seg: Arc::new(seg) };
        self.write().push(w);
        Ok(())
    }

    /// Drops the window of registration `id` (and this process's mapping of it, if a peer's).
    pub(crate) fn remove(&self, id: u64) {
        self.write().retain(|w| w.id != id);
    }
}

/// The windows a connection translates through: this process's own and its peer's.
#[derive(Clone)]
pub struct ConnWindows {
    pub own: Arc<WindowList>,
    pub peer: Arc<WindowList>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_larger_than_dev_shm_holds_is_an_error_naming_its_segment() {
        let e = SharedBuf::new(1 << 52).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("fallocate") && e.contains("/dev/shm"), "{e}");
    }

    #[test]
    fn a_peers_window_translates_both_ways_and_only_inside_it() {
        let mut buf = SharedBuf::new(4096).unwrap();
        buf.as_mut_slice::<u32>()[10] = 7;
        // The same process stands in for the peer: a second mapping of the segment, as another process makes.
        let peer = WindowList::default();
        peer.add_peer(3, (std::process::id(), buf.fd()), buf.base(), 4096).unwrap();
        let here = peer.here(buf.base() + 40, 4).unwrap();
        assert_ne!(here as u64, buf.base(), "a mapping of its own");
        // SAFETY: `here` maps 4 bytes of the peer's 4096-byte buffer at offset 40 (checked by `here`), 4-byte aligned
        // as the mapping is page-aligned.
        assert_eq!(unsafe { *(here as *const u32) }, 7);
        assert_eq!(peer.owners(here, 4), Some(buf.base() + 40));
        assert_eq!(peer.here(buf.base() + 4094, 4), None, "runs past the window");
        assert_eq!(peer.here(buf.base() - 8, 4), None);
        peer.remove(3);
        assert_eq!(peer.here(buf.base() + 40, 4), None);
    }
}
