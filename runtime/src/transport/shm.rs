//! SHM between processes on one host (NCCL 2.28.9 `src/transport/shm.cc`): the receiver creates a POSIX shared
//! memory segment holding the connection, the sender maps it and unlinks the name at once, so once both sides
//! mapped it nothing is left in /dev/shm. Names carry the creator's pid and a random value; a segment whose
//! creator died before its peer mapped it is removed by the next process that starts the transport, and by
//! the creator's own drop otherwise.

use super::{record, ConnSpec, Established, PeerInfo, Pending, Transport};
use crate::error::{Result, RuntimeError};
use crate::socket::nonce_u64;
use crate::transport::conn::ConnMem;
use collscope_debug::Subsys;
use collscope_debug::{nccl_info, nccl_trace};
use collscope_model as model;
use collscope_model::lines::ConnLine;
use memmap2::MmapMut;
use nix::fcntl::OFlag;
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::Mode;
use std::fs::File;
use std::sync::{Arc, Once, PoisonError, RwLock};

/// Prefix of every segment collscope creates.
pub const SHM_PREFIX: &str = "collscope-";

pub struct ShmTransport;

impl ShmTransport {
    pub fn new() -> Self {
        static SWEEP: Once = Once::new();
        SWEEP.call_once(sweep_stale_segments);
        ShmTransport
    }
}

impl Default for ShmTransport {
    fn default() -> Self {
        Self::new()
    }
}

fn shm_err(name: &str, op: &'static str, e: impl Into<std::io::Error>) -> RuntimeError {
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
    let Ok(dir) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
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
    // SAFETY: the segment is private to the two connected ranks, which coordinate through head/tail.
    unsafe { MmapMut::map_mut(file) }.map_err(|e| shm_err(name, "mmap", e)).and_then(|m| {
        if m.len() < len {
            Err(shm_err(name, "size check", std::io::Error::other(format!("{} bytes, need {len}", m.len()))))
        } else {
            Ok(m)
        }
    })
}

struct ShmSend {
    record: model::Connection,
    line: String,
    sizes: crate::transport::conn::BufSizes,
}

struct ShmRecv {
    mem: Arc<ConnMem>,
    record: model::Connection,
}

impl Transport for ShmTransport {
    fn kind(&self) -> model::Transport {
        model::Transport::Shm
    }

    fn can_connect(&self, me: &PeerInfo, peer: &PeerInfo) -> bool {
        me.host_hash == peer.host_hash
    }

    fn send_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)> {
        let record = record(spec, spec.me.rank, spec.peer.rank, model::Transport::Shm, "direct/direct");
        // NCCL's SHM line has no connIndex (`src/transport/shm.cc`).
        let line = ConnLine { conn: &record, conn_index: None, devs: (spec.me.dev, spec.peer.dev) }.to_string();
        Ok((Box::new(ShmSend { record, line, sizes: spec.sizes }), Vec::new()))
    }

    fn recv_setup(&self, spec: &ConnSpec) -> Result<(Box<dyn Pending>, Vec<u8>)> {
        let (map, guard) = create_segment(spec.sizes.region_bytes())?;
        let name = guard.as_str().to_string();
        let mem = ConnMem::from_map(map, spec.sizes, Some(Box::new(guard)));
        let record = record(spec, spec.peer.rank, spec.me.rank, model::Transport::Shm, "direct/direct");
        Ok((Box::new(ShmRecv { mem: Arc::new(mem), record }), name.into_bytes()))
    }
}

/// A new segment of `len` zeroed bytes, mapped, named `/collscope-<pid>-<random>` until the returned name drops.
pub(crate) fn create_segment(len: usize) -> Result<(MmapMut, ShmName)> {
    let name = format!("/{SHM_PREFIX}{}-{:016x}", std::process::id(), nonce_u64());
    let ending = ENDING.read().unwrap_or_else(PoisonError::into_inner);
    if *ending {
        return Err(shm_err(&name, "shm_open", std::io::Error::other("this process is ending")));
    }
    let fd = shm_open(name.as_str(), OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR, Mode::S_IRUSR | Mode::S_IWUSR)
        .map_err(|e| shm_err(&name, "shm_open", e))?;
    drop(ending);
    let guard = ShmName(name.clone());
    let file = File::from(fd);
    file.set_len(len as u64).map_err(|e| shm_err(&name, "ftruncate", e))?;
    Ok((map(&file, &name, len)?, guard))
}

/// Maps the segment another process created under `name` (one of collscope's), of at least `len` bytes.
pub(crate) fn open_segment(name: &str, len: usize) -> Result<MmapMut> {
    if !(name.starts_with('/') && name[1..].starts_with(SHM_PREFIX)) {
        return Err(RuntimeError::Transport { transport: "SHM", msg: format!("malformed segment name {name:?}") });
    }
    let fd = shm_open(name, OFlag::O_RDWR, Mode::empty()).map_err(|e| shm_err(name, "shm_open", e))?;
    map(&File::from(fd), name, len)
}

impl Pending for ShmSend {
    fn connect(self: Box<Self>, peer_handle: &[u8]) -> Result<Established> {
        let name = std::str::from_utf8(peer_handle)
            .map_err(|_| RuntimeError::Transport { transport: "SHM", msg: "malformed segment name".into() })?;
        let m = open_segment(name, self.sizes.region_bytes())?;
        // Both sides have it mapped now: the name is no longer needed.
        shm_unlink(name).map_err(|e| shm_err(name, "shm_unlink", e))?;
        nccl_trace!(Subsys::SHM, "Mapped and unlinked shared memory segment {name}");
        let mem = ConnMem::from_map(m, self.sizes, None);
        Ok(Established { mem: Arc::new(mem), record: self.record, line: Some(self.line), guard: None })
    }
}

impl Pending for ShmRecv {
    fn connect(self: Box<Self>, _peer_handle: &[u8]) -> Result<Established> {
        Ok(Established { mem: self.mem, record: self.record, line: None, guard: None })
    }
}
