//! Shared memory segments, the memory SHM connections and registered windows live in, allocated when created.
//! A connection's is named `/collscope-<pid>-<random>` until its peer mapped it; a segment whose creator died
//! before that is removed by the next process that sweeps (the SHM transport's first use), and every name a
//! process still holds goes when it ends ([`unlink_own_segments`]). A window's has no name at all: peers open it
//! through its creator's descriptor.

use crate::error::{Result, RuntimeError};
use crate::socket::nonce_u64;
use collscope_debug::{nccl_info, Subsys};
use memmap2::MmapMut;
use nix::errno::Errno;
use nix::fcntl::{fallocate, open, FallocateFlags, OFlag};
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::Mode;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{PoisonError, RwLock};

/// Prefix of every segment collscope creates.
pub const SHM_PREFIX: &str = "collscope-";
/// Where POSIX shared memory names live (`shm_open`'s directory on Linux).
const SHM_DIR: &str = "/dev/shm";

pub(crate) fn shm_err(name: &str, op: &'static str, e: impl Into<std::io::Error>) -> RuntimeError {
    RuntimeError::Shm { name: name.to_string(), op, source: e.into() }
}

/// Unlinks the name when dropped (if nobody did yet).
pub(crate) struct ShmName(String);

impl ShmName {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl Drop for ShmName {
    fn drop(&mut self) {
        let _ = shm_unlink(self.0.as_str());
    }
}

/// Names of collscope segments in /dev/shm with the pid of their creator.
fn segments() -> Vec<(String, i32)> {
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix(SHM_PREFIX)?.split('-').next()?.parse().ok()?;
            Some((name, pid))
        })
        .collect()
}

/// Removes `/dev/shm/collscope-<pid>-*` segments whose creating process no longer exists.
pub fn sweep_stale_segments() {
    for (name, pid) in segments() {
        let gone =
            matches!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None), Err(nix::errno::Errno::ESRCH));
        if gone && shm_unlink(format!("/{name}").as_str()).is_ok() {
            nccl_info!(Subsys::SHM, "Removed stale shared memory segment /dev/shm/{name} of dead process {pid}");
        }
    }
}

/// Whether this process has removed its segments' names for good (it is ending). Creating a named segment holds
/// the read side, removing them all the write side, so no segment is named behind the removal's back: a rank
/// ended by a signal while another of its threads connects leaves nothing in /dev/shm.
static ENDING: RwLock<bool> = RwLock::new(false);

/// Removes every segment this process created that is still named, for exit paths that skip destructors
/// (`std::process::exit` after a peer failure, a signal), and names no new one after. Mappings stay valid;
/// only the names go.
pub fn unlink_own_segments() {
    let mut ending = ENDING.write().unwrap_or_else(PoisonError::into_inner);
    *ending = true;
    let me = std::process::id() as i32;
    for (name, _) in segments().into_iter().filter(|(_, pid)| *pid == me) {
        let _ = shm_unlink(format!("/{name}").as_str());
    }
}

fn map(file: &File, name: &str, len: usize) -> Result<MmapMut> {
    // SAFETY: the segment is shared only with the peers it is for, which order their accesses (head/tail).
    unsafe { MmapMut::map_mut(file) }.map_err(|e| shm_err(name, "mmap", e)).and_then(|m| {
        if m.len() < len {
            Err(shm_err(name, "size check", std::io::Error::other(format!("{} bytes, need {len}", m.len()))))
        } else {
            Ok(m)
        }
    })
}

/// Gives `file` its `len` bytes and maps them. They are allocated now, as NCCL 2.28.9 does (`src/misc/shmutils.cc`,
/// `fallocate`): a /dev/shm too small for them is an error here, where only growing the file would let the first
/// touch of a missing page kill the process.
fn allocate(file: &File, name: &str, len: usize) -> Result<MmapMut> {
    let bytes = i64::try_from(len).map_err(|_| shm_err(name, "fallocate", std::io::Error::other("too large")))?;
    loop {
        match fallocate(file.as_raw_fd(), FallocateFlags::empty(), 0, bytes) {
            Err(Errno::EINTR) => continue,
            r => break r.map_err(|e| shm_err(name, "fallocate", e))?,
        }
    }
    map(file, name, len)
}

/// A new segment of `len` zeroed bytes, mapped, named `/collscope-<pid>-<random>` until the returned name drops.
pub(crate) fn create_segment(len: usize) -> Result<(MmapMut, ShmName)> {
    let name = format!("/{SHM_PREFIX}{}-{:016x}", std::process::id(), nonce_u64());
    // Held until the name exists, so `unlink_own_segments` cannot run in between.
    let ending = ENDING.read().unwrap_or_else(PoisonError::into_inner);
    if *ending {
        return Err(shm_err(&name, "shm_open", std::io::Error::other("this process is ending")));
    }
    let fd = shm_open(name.as_str(), OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR, Mode::S_IRUSR | Mode::S_IWUSR)
        .map_err(|e| shm_err(&name, "shm_open", e))?;
    drop(ending);
    let guard = ShmName(name.clone());
    Ok((allocate(&File::from(fd), &name, len)?, guard))
}

/// A new segment of `len` zeroed bytes with no name (a temporary file in /dev/shm), mapped: nothing is left of
/// it however its process ends. Peers open it through the creator's descriptor ([`open_peer_segment`]).
pub(crate) fn create_unnamed(len: usize) -> Result<(MmapMut, File)> {
    // O_EXCL: the file can never be linked into /dev/shm, so it never has a name to leave behind.
    let fd = open(SHM_DIR, OFlag::O_TMPFILE | OFlag::O_EXCL | OFlag::O_RDWR, Mode::S_IRUSR | Mode::S_IWUSR)
        .map_err(|e| shm_err(SHM_DIR, "open O_TMPFILE", e))?;
    // SAFETY: `open` returned a new descriptor this function owns.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok((allocate(&file, SHM_DIR, len)?, file))
}

/// Maps the unnamed segment that process `pid` holds open as descriptor `fd` ([`create_unnamed`]), of at least
/// `len` bytes, through /proc: a process of the same user may open another's open files there.
pub(crate) fn open_peer_segment(pid: u32, fd: i32, len: usize) -> Result<MmapMut> {
    let path = format!("/proc/{pid}/fd/{fd}");
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).map_err(|e| shm_err(&path, "open", e))?;
    map(&file, &path, len)
}

/// Maps the segment another process created under `name` (one of collscope's), of at least `len` bytes.
pub(crate) fn open_segment(name: &str, len: usize) -> Result<MmapMut> {
    if !(name.starts_with('/') && name[1..].starts_with(SHM_PREFIX)) {
        return Err(RuntimeError::Transport { transport: "SHM", msg: format!("malformed segment name {name:?}") });
    }
    let fd = shm_open(name, OFlag::O_RDWR, Mode::empty()).map_err(|e| shm_err(name, "shm_open", e))?;
    map(&File::from(fd), name, len)
}
